/* Chat tab: the chat popup's scroll, optimistic sending, the composer's send/stop state, inline
   renaming, dropdown menus, and toasts for tasks created from a chat.

   The popup (#chat-dialog) holds #chat-head (title, agent, CLI), #chat-live (agent pills,
   messages, the pending answer) and #chat-composer; the first two refresh on the live events
   they declare (data-live, see live.js). CSP-ready: no eval, delegated listeners only. */
(function () {
  "use strict";

  const NEAR_BOTTOM_PX = 80;
  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));
  const on = (type, handler, capture = false) => document.addEventListener(type, handler, capture);
  const closest = (event, selector) => (event.target.closest ? event.target.closest(selector) : null);
  const chatDialog = () => document.getElementById("chat-dialog");

  /** The id of the chat shown in the open popup ("" when closed or a new-chat form). */
  function openChatId() {
    const popup = $("#chat-dialog[open] [data-chat-popup]");
    return popup ? popup.dataset.chatPopup : "";
  }

  // A reply that created tasks: a toast with a link that opens each one (not for the chat on
  // screen, whose action cards link to them).
  document.body.addEventListener("malamar:chat.message_added", (event) => {
    const data = event.detail || {};
    if (!data.workspace_id || data.chat_id === openChatId()) return;
    (Array.isArray(data.created_tasks) ? data.created_tasks : []).forEach((task) => {
      if (!task || !task.task_id) return;
      window.malamarToast({
        level: "success",
        message: task.summary ? `Task created: ${task.summary}` : "Task created",
        detail: data.chat_title ? `From “${data.chat_title}”` : "",
        href: window.malamarItemLink({ workspace_id: data.workspace_id, task_id: task.task_id }),
      });
    });
  });

  /* ---------------------------------------------------------------- scroll */

  // A refresh of #chat-live keeps the messages where the person scrolled them, and follows
  // the newest when they were at the bottom or have just sent one.
  let keep = null;
  let lastSentAt = 0;
  const toBottom = (box) => box && (box.scrollTop = box.scrollHeight);
  const messageCount = (root) => $$("[data-chat-messages] > li", root).length;

  on("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    if (!target || !event.detail.shouldSwap || target.id !== "chat-live") return;
    const box = $("[data-chat-scroll]", target);
    const bottom = !box || box.scrollHeight - box.scrollTop - box.clientHeight < NEAR_BOTTOM_PX;
    keep = { top: box ? box.scrollTop : 0, bottom, count: messageCount(target) };
  });

  on("htmx:afterSettle", () => {
    const live = document.getElementById("chat-live");
    const saved = keep;
    if (!live || !saved) return;
    keep = null;
    const box = $("[data-chat-scroll]", live);
    const grew = messageCount(live) > saved.count && Date.now() - lastSentAt < 15000;
    if (box) box.scrollTop = saved.bottom || grew ? box.scrollHeight : saved.top;
    syncComposer();
  });

  /* ---------------------------------------------------------------- composer */

  /** Send or stop: the composer follows the state of the last #chat-live the server sent. */
  function syncComposer() {
    const state = $("#chat-live [data-chat-state]");
    const form = document.getElementById("chat-composer");
    if (!state || !form || !form.closest("[data-chat-popup]")) return;
    ["busy", "stopping", "blocked"].forEach((name) => form.toggleAttribute(`data-${name}`, state.hasAttribute(`data-${name}`)));
    form.removeAttribute("data-sending");
    updateSendButton(form);
  }

  function updateSendButton(form) {
    const send = $("#chat-send", form);
    if (send) send.disabled = ["data-busy", "data-blocked", "data-sending"].some((a) => form.hasAttribute(a));
  }

  // The message shows at once (panel.html #chat-message-pending), "Sending…".
  on("htmx:beforeRequest", (event) => {
    const form = event.detail.elt;
    const input = form && form.id === "chat-composer" && $("[data-chat-input]", form);
    if (!input || !input.value.trim()) return;
    const list = $("[data-chat-messages]");
    const template = document.getElementById("chat-message-pending");
    if (list && template) {
      $$("[data-chat-empty]", list).forEach((el) => el.remove());
      const item = list.appendChild(template.content.firstElementChild.cloneNode(true));
      $(".chat-msg__plain", item).textContent = input.value.trim();
      toBottom(list.closest("[data-chat-scroll]"));
    }
    lastSentAt = Date.now();
    input.value = ""; // the request already holds the text; an error puts it back
    form.setAttribute("data-sending", "");
    updateSendButton(form);
  });

  // A refused message comes back in the text box with its reason: drop the optimistic copy.
  on("htmx:afterSwap", () => {
    const form = document.getElementById("chat-composer");
    if (!form || !$("[aria-invalid=true]", form)) return;
    $$("[data-optimistic]").forEach((el) => el.remove());
    const input = $("[data-chat-input]", form);
    if (input) input.focus();
  });

  on("htmx:afterRequest", (event) => {
    const elt = event.detail.elt;
    if (elt && elt.id === "chat-upload") {
      elt.reset();
      const input = $("[data-chat-input]"); // next: say something about the files
      if (input) input.focus();
    }
    if (elt && elt.id === "chat-composer" && !event.detail.successful) {
      $$("[data-optimistic]").forEach((el) => el.remove());
      elt.removeAttribute("data-sending");
      updateSendButton(elt);
    }
  });

  // Enter sends, Shift+Enter is a new line; on touch screens (the query that hides the
  // .kbd-hint keyboard hints) Enter is a new line and the button sends.
  const coarse = window.matchMedia("(hover: none) and (pointer: coarse)");
  on("keydown", (event) => {
    const input = closest(event, "[data-chat-input]");
    if (!input || event.key !== "Enter" || event.shiftKey || event.isComposing || coarse.matches) return;
    event.preventDefault();
    const send = input.form && $("#chat-send", input.form);
    if (input.form && !(send && send.disabled) && input.value.trim()) input.form.requestSubmit();
  });

  /* ---------------------------------------------------------------- renaming */

  // While the title form is open (data-editing), live refreshes leave the head alone (live.js).
  function editTitle(head, editing) {
    const heading = $(".chat-title__heading", head);
    const form = $(".chat-title-form", head);
    if (!heading || !form) return;
    form.toggleAttribute("data-editing", editing);
    form.hidden = !editing;
    heading.hidden = editing;
    const input = $("input[name=title]", form);
    if (editing && input) {
      input.focus();
      input.select();
    } else if (!editing) {
      form.reset();
      $$(".field__error", form).forEach((el) => el.remove());
      $$("[aria-invalid]", form).forEach((el) => el.removeAttribute("aria-invalid"));
      const button = $("[data-chat-title-edit]", head);
      if (button) button.focus(); // (live.js runs the refreshes that waited)
    }
  }

  on("click", (event) => {
    const edit = closest(event, "[data-chat-title-edit]");
    const cancel = closest(event, "[data-chat-title-cancel]");
    if (edit || cancel) editTitle((edit || cancel).closest("#chat-head"), Boolean(edit));
  });

  // Escape leaves the title editor or a menu first, not the whole chat.
  function escape(event, from) {
    const editing = from && $(".chat-title-form[data-editing]", from);
    const menu = openMenu();
    if (!editing && !menu) return;
    event.preventDefault();
    event.stopPropagation();
    if (editing) return editTitle(document.getElementById("chat-head"), false);
    closeMenus();
    const summary = $("summary", menu);
    if (summary) summary.focus();
  }
  on("keydown", (event) => event.key === "Escape" && escape(event, closest(event, ".chat-title-form") && document.getElementById("chat-head")));
  on("cancel", (event) => event.target === chatDialog() && escape(event, document.getElementById("chat-head")), true);

  /* ---------------------------------------------------------------- dropdown menus */

  const openMenu = () => $("details[data-chat-menu][open]");
  const closeMenus = (except) => $$("details[data-chat-menu][open]").forEach((menu) => menu !== except && (menu.open = false));

  on("click", (event) => {
    // A menu item's own request has already started: every menu closes.
    closeMenus(closest(event, "[data-chat-menu] [role=menuitem]") ? null : closest(event, "details[data-chat-menu]"));
  });

  on(
    "toggle",
    (event) => {
      const menu = event.target;
      if (!(menu instanceof HTMLDetailsElement) || !menu.hasAttribute("data-chat-menu") || !menu.open) return;
      closeMenus(menu);
      const first = $("[role=menuitem]", menu);
      if (first) first.focus();
    },
    true,
  );

  // Arrow keys move between a menu's items.
  on("keydown", (event) => {
    const item = closest(event, "[data-chat-menu] [role=menuitem]");
    if (!item || (event.key !== "ArrowDown" && event.key !== "ArrowUp")) return;
    const items = $$("[role=menuitem]", item.closest("[data-chat-menu]"));
    event.preventDefault();
    items[(items.indexOf(item) + (event.key === "ArrowDown" ? 1 : -1) + items.length) % items.length].focus();
  });

  /* ---------------------------------------------------------------- dialog and URL */

  on(
    "close",
    (event) => {
      const dialog = event.target;
      if (dialog !== chatDialog()) return;
      const url = new URL(window.location.href);
      if (url.searchParams.has("chat") || url.searchParams.has("start")) {
        url.searchParams.delete("chat");
        url.searchParams.delete("start");
        window.history.replaceState(window.history.state, "", url.pathname + url.search + url.hash);
      }
      window.setTimeout(() => !dialog.open && document.getElementById("chat-dialog-body").replaceChildren(), 200);
    },
    true,
  );

  // A popup swapped in (opened from the list, a new chat, a reload): start at the newest message.
  function onLoad(root) {
    const popup = root && root.matches && (root.matches("[data-chat-popup], [data-chat-draft]") ? root : $("[data-chat-popup], [data-chat-draft]", root));
    if (popup) window.requestAnimationFrame(() => toBottom($("[data-chat-scroll]", popup)));
  }
  if (window.htmx) window.htmx.onLoad(onLoad);
})();
