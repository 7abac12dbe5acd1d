/* Chat tab: the chat popup's live regions, optimistic sending, inline renaming, dropdown
   menus, the composer's send/stop state, and toasts for tasks created from a chat.

   The popup (#chat-dialog) holds three server-rendered regions: #chat-head (title, agent,
   CLI), #chat-live (agent pills, messages, the pending answer) and #chat-composer. Live
   events for the open chat ask the first two to re-read themselves ("chat-refresh" on the
   element, debounced); swaps are whole-region and idempotent, so a replayed event is harmless.
   CSP-ready: no inline scripts, no eval, delegated listeners only. */
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

  /* ---------------------------------------------------------------- refreshing */

  let refreshTimer = null;

  function refreshPopup(delay) {
    window.clearTimeout(refreshTimer);
    refreshTimer = window.setTimeout(() => {
      if (!openChatId() || !window.htmx) return;
      // A head in rename mode keeps its editor: the swap is dropped when it lands (below).
      window.malamarRefresh("chat-head", "chat-refresh");
      window.malamarRefresh("chat-live", "chat-refresh");
    }, delay === undefined ? 120 : delay);
  }

  function onBody(type, handler) {
    // The page dispatches live events on <body>, without bubbling.
    document.body.addEventListener(type, handler);
  }

  // When each chat last had news: a popup that arrives just after (e.g. the answer to a
  // chat's first message came while the new-chat form was still being replaced) re-reads.
  const lastNews = new Map();

  function listenLive() {
    ["chat.message_added", "chat.updated", "chat.processing_started", "chat.processing_finished"].forEach(
      (type) =>
        onBody(`malamar:${type}`, (event) => {
          const data = event.detail || {};
          if (!data.chat_id) return;
          lastNews.set(data.chat_id, Date.now());
          if (data.chat_id === openChatId()) refreshPopup();
        }),
    );
    ["agents.changed", "cli.health_changed"].forEach((type) =>
      onBody(`malamar:${type}`, () => {
        if (openChatId()) refreshPopup(200);
      }),
    );
    // A refresh that found the open chat deleted (its chat.deleted event may come later).
    onBody("chats:gone", (event) => {
      const data = event.detail || {};
      if (!data.chat_id || data.chat_id !== openChatId() || data.chat_id === deleting) return;
      const dialog = chatDialog();
      if (dialog && dialog.open) dialog.close("deleted");
    });
    onBody("malamar:chat.deleted", (event) => {
      const data = event.detail || {};
      if (!data.chat_id || data.chat_id !== openChatId() || data.chat_id === deleting) return;
      const dialog = chatDialog();
      if (dialog && dialog.open) dialog.close("deleted");
      if (window.malamarToast) {
        window.malamarToast({ level: "info", message: "This chat was deleted", detail: data.chat_title || "" });
      }
    });
    // A reply that created tasks: a toast with a link that opens each one (not for the chat
    // on screen, whose action cards link to them).
    onBody("malamar:chat.message_added", (event) => {
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
  }

  // The chat this page is deleting itself (its own toast says so).
  let deleting = "";
  document.addEventListener("htmx:beforeRequest", (event) => {
    const elt = event.detail.elt;
    if (elt && elt.id === "chat-delete") deleting = openChatId();
  });

  // A change made in the popup (HX-Trigger from the server): re-read the other regions.
  document.addEventListener("chats:refresh", (event) => {
    const data = event.detail || {};
    if (!data.chat_id || data.chat_id === openChatId()) refreshPopup(30);
  });

  /* ---------------------------------------------------------------- lost HX-Trigger events */

  // htmx fires a response's HX-Trigger events on the element that sent the request. A live
  // refresh may have replaced that element meanwhile (e.g. the delete button, between the click
  // and the confirmation), and events on a detached element reach nobody: fire them on <body>.
  const TRIGGERS = ["malamar:toast", "malamar:dialog-close", "chats:refresh", "chats:list-refresh"];
  const delivery = new Map(); // request element -> were its HX-Trigger events delivered?

  document.addEventListener("htmx:beforeRequest", (event) => {
    const elt = event.detail.elt;
    if (elt && elt.closest && elt.closest("#chat-panel")) delivery.set(elt, false);
  });

  TRIGGERS.forEach((name) =>
    document.addEventListener(
      name,
      (event) => {
        if (delivery.has(event.target)) delivery.set(event.target, true);
      },
      true,
    ),
  );

  document.addEventListener("htmx:afterRequest", (event) => {
    const elt = event.detail.elt;
    if (!delivery.has(elt)) return;
    const delivered = delivery.get(elt);
    delivery.delete(elt);
    const xhr = event.detail.xhr;
    if (delivered || !xhr || elt.isConnected) return;
    const raw = xhr.getResponseHeader("HX-Trigger") || "";
    if (raw.charAt(0) !== "{") return;
    let triggers;
    try {
      triggers = JSON.parse(raw);
    } catch (e) {
      return;
    }
    Object.keys(triggers).forEach((name) => {
      if (!TRIGGERS.includes(name)) return;
      if (name === "malamar:dialog-close") {
        const dialog = chatDialog();
        if (dialog && dialog.open) dialog.close("done");
        return;
      }
      document.body.dispatchEvent(new CustomEvent(name, { detail: triggers[name], bubbles: true }));
    });
  });

  /* ---------------------------------------------------------------- scroll and focus */

  let keep = null; // what to restore after #chat-live is swapped
  const skippedRefresh = new Set(); // regions whose refresh waits for a menu to close

  function refreshSkipped() {
    if (skippedRefresh.has("chat-live")) refreshPopup(0);
    if (skippedRefresh.has("chat-list")) {
      document.body.dispatchEvent(new CustomEvent("chats:list-refresh", { bubbles: true }));
    }
    skippedRefresh.clear();
  }

  function scroller(root) {
    return root ? $("[data-chat-scroll]", root) : null;
  }

  function toBottom(root) {
    const box = scroller(root || document);
    if (box) box.scrollTop = box.scrollHeight;
  }

  document.addEventListener("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    if (!target || !event.detail.shouldSwap) return;
    if (target.id === "chat-head" && target.hasAttribute("data-editing")) {
      // Never replace the title while the user is typing one (a live refresh).
      const verb = String((event.detail.requestConfig || {}).verb || "").toLowerCase();
      if (verb === "get") event.detail.shouldSwap = false;
      return;
    }
    const isRead = String((event.detail.requestConfig || {}).verb || "").toLowerCase() === "get";
    const dialog = chatDialog();
    const region = target.id === "chat-live" || target.id === "chat-head";
    if (isRead && region && dialog && !dialog.open && dialog.contains(target)) {
      // A refresh that comes back after the popup closed must not open it again.
      event.detail.shouldSwap = false;
      return;
    }
    if (isRead && (target.id === "chat-live" || target.id === "chat-list")) {
      // A refresh would close the menu the user has open: do it when the menu closes.
      if ($("details[data-chat-menu][open]", target)) {
        event.detail.shouldSwap = false;
        skippedRefresh.add(target.id);
        return;
      }
    }
    if (target.id !== "chat-live") return;
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
    const live = document.getElementById("chat-live");
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

  // A live refresh of the chat's head must not end a rename the user is typing (the rename's
  // own answer still swaps).
  document.addEventListener("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    if (!target || target.id !== "chat-head" || !target.hasAttribute("data-editing")) return;
    const elt = event.detail.requestConfig && event.detail.requestConfig.elt;
    if (elt && elt.closest && elt.closest(".chat-title-form")) return;
    event.detail.shouldSwap = false;
  });

  function startEditing(head) {
    const heading = $(".chat-title__heading", head);
    const form = $(".chat-title-form", head);
    if (!heading || !form) return;
    head.setAttribute("data-editing", "");
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
    head.removeAttribute("data-editing");
    form.hidden = true;
    heading.hidden = false;
    const button = $("[data-chat-title-edit]", head);
    if (button) button.focus();
    refreshPopup(0); // pick up anything skipped meanwhile
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
      if (head && head.hasAttribute("data-editing")) {
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
      } else if (!openMenu()) {
        window.setTimeout(refreshSkipped, 0);
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
      window.clearTimeout(refreshTimer); // (refreshes already under way are not swapped in)
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
    const news = lastNews.get(popup.dataset.chatPopup || "");
    if (news && Date.now() - news < 10000) refreshPopup(50);
  }

  function start() {
    listenLive();
    if (window.htmx) window.htmx.onLoad(onLoad);
    else onLoad(document);
    window.requestAnimationFrame(() => toBottom(document.getElementById("chat-dialog") || undefined));
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
