/* Chat tab: the chat popup's scroll and focus, optimistic sending, inline renaming, dropdown
   menus, the composer's send/stop state, and toasts for tasks created from a chat.

   The popup (#chat-dialog) holds #chat-head (title, agent, CLI), #chat-live (agent pills,
   messages, the pending answer) and #chat-composer; the first two refresh on the live events
   they declare (data-live, see live.js). CSP-ready: no eval, delegated listeners only. */
(function () {
  "use strict";

  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));
  const NEAR_BOTTOM_PX = 80;

  const chatDialog = () => document.getElementById("chat-dialog");

  /** The id of the chat shown in the open popup ("" when closed or a new-chat form). */
  function openChatId() {
    const dialog = chatDialog();
    if (!dialog || !dialog.open) return "";
    const popup = $("[data-chat-popup]", dialog);
    return popup ? popup.dataset.chatPopup : "";
  }

  // A reply that created tasks: a toast with a link that opens each one (not for the chat on
  // screen, whose action cards link to them).
  document.body.addEventListener("malamar:chat.message_added", (event) => {
    const data = event.detail || {};
    const tasks = Array.isArray(data.created_tasks) ? data.created_tasks : [];
    if (!window.malamarToast || !data.workspace_id || data.chat_id === openChatId()) return;
    tasks.forEach((task) => {
      if (!task || !task.task_id) return;
      window.malamarToast({
        level: "success",
        message: task.summary ? `Task created: ${task.summary}` : "Task created",
        detail: data.chat_title ? `From “${data.chat_title}”` : "",
        href: window.malamarItemLink({ workspace_id: data.workspace_id, task_id: task.task_id }),
      });
    });
  });

  /* ---------------------------------------------------------------- scroll and focus */

  let keep = null; // what to restore after #chat-live is swapped

  function scroller(root) {
    return root ? $("[data-chat-scroll]", root) : null;
  }

  function toBottom(root) {
    const box = scroller(root || document);
    if (box) box.scrollTop = box.scrollHeight;
  }

  document.addEventListener("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    if (!target || !event.detail.shouldSwap || target.id !== "chat-live") return;
    const box = scroller(target);
    const active = document.activeElement;
    keep = {
      top: box ? box.scrollTop : 0,
      bottom: box ? box.scrollHeight - box.scrollTop - box.clientHeight < NEAR_BOTTOM_PX : true,
      focusId: active && active.id && target.contains(active) ? active.id : "",
      count: $$("[data-chat-messages] > li", target).length,
    };
  });

  document.addEventListener("htmx:afterSettle", () => {
    const live = document.getElementById("chat-live");
    if (!live || !keep) return;
    const saved = keep;
    keep = null;
    const box = scroller(live);
    const grew = $$("[data-chat-messages] > li", live).length > saved.count;
    if (box) box.scrollTop = saved.bottom || (grew && sentRecently()) ? box.scrollHeight : saved.top;
    const lost = !document.activeElement || document.activeElement === document.body;
    if (saved.focusId && lost) {
      const again = document.getElementById(saved.focusId);
      if (again) again.focus({ preventScroll: true });
    }
    syncComposer();
  });

  /* ---------------------------------------------------------------- composer */

  let lastSentAt = 0;
  const sentRecently = () => Date.now() - lastSentAt < 15000;

  /** Send or stop: the composer follows the state of the last #chat-live the server sent. */
  function syncComposer() {
    const live = $("#chat-live [data-chat-state]");
    const form = document.getElementById("chat-composer");
    if (!live || !form || !form.closest("[data-chat-popup]")) return;
    ["busy", "stopping", "blocked"].forEach((name) =>
      form.toggleAttribute(`data-${name}`, live.hasAttribute(`data-${name}`)),
    );
    form.removeAttribute("data-sending");
    updateSendButton(form);
  }

  function updateSendButton(form) {
    const send = $("#chat-send", form);
    if (!send) return;
    send.disabled = ["data-busy", "data-blocked", "data-sending"].some((a) => form.hasAttribute(a));
  }

  function optimisticMessage(text) {
    const item = document.createElement("li");
    item.className = "chat-msg chat-msg--user is-pending";
    item.dataset.optimistic = "";
    const meta = document.createElement("div");
    meta.className = "chat-msg__meta";
    const author = document.createElement("span");
    author.className = "chat-msg__author";
    author.textContent = "You";
    const status = document.createElement("span");
    status.className = "chat-msg__time";
    status.textContent = "Sending…";
    meta.append(author, status);
    const bubble = document.createElement("div");
    bubble.className = "chat-msg__bubble";
    const body = document.createElement("div");
    body.className = "chat-msg__plain";
    body.textContent = text;
    bubble.append(body);
    item.append(meta, bubble);
    return item;
  }

  document.addEventListener("htmx:beforeRequest", (event) => {
    const form = event.detail.elt;
    if (!form || form.id !== "chat-composer") return;
    const input = $("[data-chat-input]", form);
    const text = input ? input.value.trim() : "";
    if (!text) return;
    const list = $("[data-chat-messages]");
    if (list) {
      $$("[data-chat-empty]", list).forEach((el) => el.remove());
      list.append(optimisticMessage(text));
      const box = list.closest("[data-chat-scroll]");
      if (box) box.scrollTop = box.scrollHeight;
    }
    lastSentAt = Date.now();
    input.value = ""; // the request already holds the text; an error puts it back
    form.setAttribute("data-sending", "");
    updateSendButton(form);
  });

  document.addEventListener("htmx:afterSwap", (event) => {
    const target = event.detail.target;
    if (!target) return;
    const form = document.getElementById("chat-composer");
    // A refused message comes back in the text box with its reason: drop the optimistic copy.
    if (form && $("[aria-invalid=true]", form)) {
      $$("[data-optimistic]").forEach((el) => el.remove());
      const input = $("[data-chat-input]", form);
      if (input) input.focus();
    }
  });

  document.addEventListener("htmx:afterRequest", (event) => {
    const elt = event.detail.elt;
    if (!elt) return;
    if (elt.id === "chat-upload") {
      elt.reset();
      const input = $("[data-chat-input]"); // next: say something about the files
      if (input) input.focus();
    }
    if (elt.id === "chat-composer" && !event.detail.successful) {
      $$("[data-optimistic]").forEach((el) => el.remove());
      elt.removeAttribute("data-sending");
      updateSendButton(elt);
    }
  });

  // Touch screens (the same query that hides the .kbd-hint keyboard hints).
  const coarse = window.matchMedia("(hover: none) and (pointer: coarse)");

  document.addEventListener("keydown", (event) => {
    const input = event.target.closest && event.target.closest("[data-chat-input]");
    if (!input || event.key !== "Enter" || event.shiftKey || event.isComposing) return;
    if (coarse.matches) return; // phones: Enter is a new line, the button sends
    event.preventDefault();
    const form = input.form;
    const send = form && $("#chat-send", form);
    if (!form || (send && send.disabled) || !input.value.trim()) return;
    form.requestSubmit();
  });

  /* ---------------------------------------------------------------- renaming */

  // While the title form is open (data-editing), live refreshes leave the head alone (live.js).
  function startEditing(head) {
    const heading = $(".chat-title__heading", head);
    const form = $(".chat-title-form", head);
    if (!heading || !form) return;
    form.setAttribute("data-editing", "");
    heading.hidden = true;
    form.hidden = false;
    const input = $("input[name=title]", form);
    if (input) {
      input.focus();
      input.select();
    }
  }

  function stopEditing(head) {
    const heading = $(".chat-title__heading", head);
    const form = $(".chat-title-form", head);
    if (!heading || !form) return;
    form.reset();
    $$(".field__error", form).forEach((el) => el.remove());
    $$("[aria-invalid]", form).forEach((el) => el.removeAttribute("aria-invalid"));
    form.removeAttribute("data-editing");
    form.hidden = true;
    heading.hidden = false;
    const button = $("[data-chat-title-edit]", head);
    if (button) button.focus(); // (live.js runs the refreshes that waited)
  }

  document.addEventListener("click", (event) => {
    const edit = event.target.closest("[data-chat-title-edit]");
    if (edit) {
      startEditing(edit.closest("#chat-head"));
      return;
    }
    const cancel = event.target.closest("[data-chat-title-cancel]");
    if (cancel) stopEditing(cancel.closest("#chat-head"));
  });

  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    const input = event.target.closest && event.target.closest(".chat-title-form input");
    if (input) {
      event.preventDefault();
      event.stopPropagation();
      stopEditing(input.closest("#chat-head"));
      return;
    }
    const menu = openMenu();
    if (menu) {
      event.preventDefault();
      closeMenus();
      const summary = $("summary", menu);
      if (summary) summary.focus();
    }
  });

  // Escape on the dialog: leave the title editor or a menu first, not the whole chat.
  document.addEventListener(
    "cancel",
    (event) => {
      if (event.target !== chatDialog()) return;
      const head = document.getElementById("chat-head");
      if (head && $(".chat-title-form[data-editing]", head)) {
        event.preventDefault();
        stopEditing(head);
      } else if (openMenu()) {
        event.preventDefault();
        closeMenus();
      }
    },
    true,
  );

  /* ---------------------------------------------------------------- dropdown menus */

  const openMenu = () => $("details[data-chat-menu][open]");

  function closeMenus(except) {
    $$("details[data-chat-menu][open]").forEach((menu) => {
      if (menu !== except) menu.open = false;
    });
  }

  document.addEventListener("click", (event) => {
    const menu = event.target.closest("details[data-chat-menu]");
    if (event.target.closest("[data-chat-menu] [role=menuitem]")) {
      closeMenus(); // the item's own request has already started
      return;
    }
    closeMenus(menu);
  });

  document.addEventListener(
    "toggle",
    (event) => {
      const menu = event.target;
      if (!(menu instanceof HTMLDetailsElement) || !menu.hasAttribute("data-chat-menu")) return;
      if (menu.open) {
        closeMenus(menu);
        const first = $("[role=menuitem]", menu);
        if (first) first.focus();
      }
    },
    true,
  );

  // Arrow keys move between a menu's items.
  document.addEventListener("keydown", (event) => {
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
    const item = event.target.closest && event.target.closest("[data-chat-menu] [role=menuitem]");
    if (!item) return;
    const items = $$("[role=menuitem]", item.closest("[data-chat-menu]"));
    const next = items[(items.indexOf(item) + (event.key === "ArrowDown" ? 1 : -1) + items.length) % items.length];
    event.preventDefault();
    if (next) next.focus();
  });

  /* ---------------------------------------------------------------- dialog and URL */

  document.addEventListener(
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
      window.setTimeout(() => {
        const body = document.getElementById("chat-dialog-body");
        if (body && !dialog.open) body.replaceChildren();
      }, 200);
    },
    true,
  );

  // A popup swapped in (opened from the list, a new chat, a reload): start at the newest message.
  function onLoad(root) {
    if (!root || !root.querySelector) return;
    const popup = root.matches && root.matches("[data-chat-popup], [data-chat-draft]") ? root : $("[data-chat-popup], [data-chat-draft]", root);
    if (!popup) return;
    window.requestAnimationFrame(() => toBottom(popup));
  }

  function start() {
    if (window.htmx) window.htmx.onLoad(onLoad);
    else onLoad(document);
    window.requestAnimationFrame(() => toBottom(document.getElementById("chat-dialog") || undefined));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
