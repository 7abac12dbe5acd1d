/* Malamar page behaviour: dialogs and confirmations, toasts, times, keys and menus,
   swaps that keep the focus and the scroll, messages shown while they are sent, drag-and-drop,
   copy buttons and small form helpers (live.js keeps fragments live).
   CSP-ready: no inline scripts, no eval, no hx-on, delegated listeners only. */
(function () {
  "use strict";

  const TOAST_LIMIT = 3;
  const TOAST_MS = 5000;
  const TOAST_ROOM_PX = 240;
  const NEAR_END_PX = 80;
  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));
  const on = (type, handler, capture = false) => document.addEventListener(type, handler, capture);
  const closest = (event, selector) => (event.target.closest ? event.target.closest(selector) : null);
  const plainClick = (event) => event.button === 0 && !event.metaKey && !event.ctrlKey && !event.shiftKey && !event.altKey;
  window.malamar = { $, $$, on, closest, plainClick }; // (for tasks.js and review.js, loaded after)

  /* ------------------------------------------------------------------ dialogs */

  // A popup focuses its title ([data-autofocus]: not [autofocus], which htmx would also
  // focus on every refresh of that part, pulling the caret out of a field being typed in).
  function focusInitial(dialog) {
    const target =
      $("[aria-invalid=true]", dialog) ||
      $("[autofocus], [data-autofocus]", dialog) ||
      $("input:not([type=hidden]):not([readonly]):not([type=radio]), textarea, select", dialog) ||
      $("input[type=radio]:checked", dialog);
    if (target) target.focus();
  }

  function openDialog(dialog, opener) {
    if (!dialog) return;
    if (dialog.open && !dialog.matches(":modal")) dialog.close(); // (rendered open: reopened as a modal)
    if (dialog.open) return;
    dialog.returnFocus = opener || document.activeElement;
    dialog.showModal();
    placeToasts();
    focusInitial(dialog);
    // Fragments inside may refresh what they show (hx-trigger "... from:closest dialog").
    dialog.dispatchEvent(new CustomEvent("malamar:dialog-opened"));
  }

  on("click", (event) => {
    const opener = closest(event, "[data-dialog-open]");
    const closer = closest(event, "[data-dialog-close]");
    if (opener) {
      event.preventDefault();
      openDialog(document.getElementById(opener.dataset.dialogOpen), opener);
    } else if (closer && closer.closest("dialog")) closer.closest("dialog").close("cancel");
  });

  // A click on the backdrop (the dialog element itself, outside its panel) closes it.
  let pressTarget = null;
  on("pointerdown", (event) => (pressTarget = event.target));
  on("click", (event) => {
    const dialog = event.target;
    if (!(dialog instanceof HTMLDialogElement) || !dialog.open || pressTarget !== dialog) return;
    const box = dialog.getBoundingClientRect();
    const { clientX: x, clientY: y } = event;
    if (x < box.left || x > box.right || y < box.top || y > box.bottom) dialog.close("cancel");
  });

  on(
    "close",
    (event) => {
      const dialog = event.target;
      // (A dialog rendered open and reopened as a modal is open again: not a real close.)
      if (!(dialog instanceof HTMLDialogElement) || dialog.open) return;
      placeToasts();
      if (dialog.hasAttribute("data-reset-on-close")) {
        // Its forms start empty next time, even after a rejected attempt re-rendered one with
        // the typed values as its defaults.
        $$("input:not([type=hidden], [type=radio], [type=checkbox]), textarea", dialog).forEach((f) => (f.defaultValue = ""));
        $$("form", dialog).forEach((form) => form.reset());
        $$(".field__error, .form-error", dialog).forEach((el) => el.remove());
        $$("[aria-invalid]", dialog).forEach((el) => el.removeAttribute("aria-invalid"));
        $$(".field--invalid", dialog).forEach((el) => el.classList.remove("field--invalid"));
      }
      // A popup (content loaded into the dialog's slot) is forgotten: its part of the URL
      // (htmx pushed it on opening) and, once the closing animation is over, its content.
      const slot = $(".dialog__slot", dialog);
      if (slot) {
        const url = new URL(window.location.href);
        ["task", "chat", "start"].forEach((name) => url.searchParams.delete(name));
        if (url.href !== window.location.href) window.history.replaceState(window.history.state, "", url);
        window.setTimeout(() => !dialog.open && slot.replaceChildren(), 200);
      }
      const back = dialog.returnFocus;
      dialog.returnFocus = null;
      // Browsers restore focus themselves; help when the opener was re-rendered meanwhile.
      window.requestAnimationFrame(() => {
        if (document.activeElement && document.activeElement !== document.body) return;
        const again = back && (back.isConnected ? back : back.id && document.getElementById(back.id));
        if (again) again.focus();
      });
    },
    true,
  );

  // The server closes the dialog that holds the element which sent the request; or found what
  // a popup shows gone (its refresh after a delete elsewhere): the popup closes, saying so.
  ["malamar:dialog-close", "malamar:gone"].forEach((type) =>
    on(type, (event) => {
      const dialog = event.target.closest && event.target.closest("dialog[open]");
      if (dialog) dialog.close(type);
      if (dialog && event.detail.message) toast({ level: "info", message: event.detail.message });
    }),
  );

  /* ------------------------------------------------------------------ confirmations */

  // data-confirm (title), -text, -action (the confirming button), -dismiss (the other one).
  // While it is open live refreshes wait (live.js): the element that asked stays in place.
  on("htmx:confirm", (event) => {
    const elt = event.detail.elt;
    const dialog = document.getElementById("confirm-dialog");
    if (!elt || !elt.dataset || !elt.dataset.confirm || !dialog) return;
    event.preventDefault();
    $("#confirm-title", dialog).textContent = elt.dataset.confirm;
    $("#confirm-text", dialog).textContent = elt.dataset.confirmText || "";
    $("#confirm-ok", dialog).textContent = elt.dataset.confirmAction || "Delete";
    $("#confirm-dismiss", dialog).textContent = elt.dataset.confirmDismiss || "Cancel";
    dialog.returnValue = "";
    const done = () => dialog.returnValue === "confirm" && event.detail.issueRequest(true);
    dialog.addEventListener("close", done, { once: true });
    openDialog(dialog);
  });

  /* ------------------------------------------------------------------ toasts */

  const toasts = document.getElementById("toast-region");

  // A modal dialog makes everything outside it inert, toasts included: while one is open the
  // toast region lives inside the topmost (placed on each opening, closing and toast; put back
  // if a swap took it away), so a toast's link or close button still works. There it never
  // covers what the popup marks with data-toast-avoid (the chat's composer, the task's comment
  // box) nor a form dialog's buttons (its footer): it stacks just above it, or at the top when
  // there is no room there.
  function placeToasts() {
    if (!toasts) return;
    const home = $$("dialog[open]").filter((d) => d.matches(":modal")).pop() || document.body;
    if (toasts.parentElement !== home) home.append(toasts); // (moving it hides the popover)
    if (!toasts.matches(":popover-open")) toasts.showPopover();
    const avoid = home !== document.body && $("[data-toast-avoid], .dialog__footer", home);
    const rect = avoid && avoid.getClientRects().length ? avoid.getBoundingClientRect() : null;
    const height = document.documentElement.clientHeight;
    const place = !rect || rect.top >= height ? "" : rect.top < TOAST_ROOM_PX ? "top" : "above";
    toasts.toggleAttribute("data-place-top", place === "top");
    if (place === "above") toasts.style.setProperty("--toast-bottom", `${Math.round(height - rect.top + 8)}px`);
    else toasts.style.removeProperty("--toast-bottom"); // (CSSOM: CSP-safe)
  }

  // { level: success|error|info|warning, message, detail?, href? } (base.html #toast-template)
  function toast(options) {
    const template = document.getElementById("toast-template");
    if (!toasts || !template || !options || !options.message) return;
    placeToasts();
    const list = $(".toasts__list", toasts);
    const level = ["success", "error", "info", "warning"].includes(options.level) ? options.level : "info";
    const item = template.content.firstElementChild.cloneNode(true);
    item.classList.add(`toast--${level}`);
    item.setAttribute("role", level === "error" ? "alert" : "status");
    const icon = document.getElementById(`toast-icon-${level}`);
    if (icon) item.prepend(icon.content.cloneNode(true));
    const title = $(".toast__title", item);
    if (options.href) {
      const link = title.appendChild(document.createElement("a"));
      link.href = item.dataset.href = options.href;
      link.textContent = options.message;
    } else title.textContent = options.message;
    $(".toast__detail", item).textContent = options.detail || ""; // (app.css hides it empty)
    let timer = 0;
    const start = () => (timer = window.setTimeout(() => dismiss(item), TOAST_MS));
    const stop = () => window.clearTimeout(timer);
    ["mouseenter", "focusin"].forEach((type) => item.addEventListener(type, stop));
    ["mouseleave", "focusout"].forEach((type) => item.addEventListener(type, start));
    list.append(item);
    const shown = $$(".toast:not(.is-leaving)", list);
    shown.slice(0, Math.max(0, shown.length - TOAST_LIMIT)).forEach((old) => old.remove());
    start();
  }

  function dismiss(item) {
    if (!item.isConnected || item.classList.contains("is-leaving")) return;
    item.classList.add("is-leaving");
    window.setTimeout(() => item.remove(), 150);
  }

  // A click on a toast opens what it links to: in place when this page has its own link to it
  // (a card, a chat row: htmx opens the popup) or the popup's slot for it, else by loading the page.
  on("click", (event) => {
    const item = closest(event, "#toasts .toast");
    if (!item || closest(event, ".toast__close")) return item && dismiss(item);
    const href = item.dataset.href;
    if (!href || !plainClick(event)) return;
    event.preventDefault();
    const here = $(`a[hx-get][href="${CSS.escape(href)}"]`);
    if (here) here.click();
    else if (!openInSlot(href)) return void (window.location.href = href);
    item.remove();
  });

  // A popup of this page whose link is not on it (the task's card is filtered out, or the
  // board's refresh that brings it is still on its way): the slot that shows such popups
  // (data-opens: the query parameter naming one; data-opens-url: its URL for the id "ID")
  // loads it, as the link would have.
  function openInSlot(href) {
    const url = new URL(href, window.location.href);
    if (url.origin !== window.location.origin || url.pathname !== window.location.pathname) return false;
    const slot = $$("[data-opens]").find((s) => url.searchParams.get(s.dataset.opens));
    if (!slot || !window.htmx) return false;
    const id = encodeURIComponent(url.searchParams.get(slot.dataset.opens));
    const source = slot.dataset.opensUrl.replace(/\/ID\/$/, `/${id}/`);
    window.htmx.ajax("GET", source, { target: slot, swap: "innerHTML", push: url.pathname + url.search });
    return true;
  }

  window.malamarToast = toast;
  on("malamar:toast", (event) => toast(event.detail));

  on("htmx:responseError", (event) => {
    const xhr = event.detail.xhr;
    // The server already said what went wrong (e.g. 413 "too large"): its toast is enough.
    if (xhr && (xhr.getResponseHeader("HX-Trigger") || "").includes("malamar:toast")) return;
    const status = xhr ? xhr.status : 0;
    const message = { 404: "That item no longer exists.", 409: "That change is not possible right now." }[status];
    toast({ level: "error", message: message || "Something went wrong. Please try again.", detail: status ? `HTTP ${status}` : "" });
  });
  on("htmx:sendError", () =>
    toast({ level: "error", message: "Malamar is not reachable.", detail: "Is it still running?" }),
  );

  /* ------------------------------------------------------------------ times */

  const format = (options) => new Intl.DateTimeFormat(undefined, options);
  const FULL = format({ dateStyle: "medium", timeStyle: "short" });
  const DAY = format({ month: "short", day: "numeric" });
  const YEAR = format({ month: "short", day: "numeric", year: "numeric" });
  // Clock times (<time data-clock="time|minutes|weekday">, e.g. a retry or a quota's reset) in
  // the browser's time zone; the server renders them in UTC as a fallback.
  const CLOCK = {
    time: format({ hour: "2-digit", minute: "2-digit", second: "2-digit" }),
    minutes: format({ hour: "2-digit", minute: "2-digit" }),
    weekday: format({ weekday: "short", hour: "2-digit", minute: "2-digit" }),
  };
  const CLOCK_FULL = format({ dateStyle: "medium", timeStyle: "medium" });

  function relative(date, now) {
    const minutes = Math.floor((now - date) / 60000);
    const hours = Math.floor(minutes / 60);
    const days = Math.floor(hours / 24);
    if (minutes < 1) return "just now";
    if (minutes < 60) return `${minutes} min ago`;
    if (hours < 24) return hours === 1 ? "1 hour ago" : `${hours} hours ago`;
    if (days < 7) return days === 1 ? "1 day ago" : `${days} days ago`;
    return (date.getFullYear() === now.getFullYear() ? DAY : YEAR).format(date);
  }

  function updateTimes(root) {
    const now = new Date();
    $$("time[data-relative], time[data-clock]", root || document).forEach((el) => {
      const date = new Date(el.getAttribute("datetime"));
      if (Number.isNaN(date.getTime())) return;
      const clock = el.dataset.clock;
      el.textContent = clock ? (CLOCK[clock] || CLOCK.time).format(date) : (el.dataset.prefix || "") + relative(date, now);
      el.title = (clock ? CLOCK_FULL : FULL).format(date);
    });
  }

  /* ------------------------------------------------------------------ keys and menus */

  // Ctrl/Cmd+Enter sends the form being typed in; in the chat's box ([data-chat-input]) Enter
  // alone does, Shift+Enter is a new line (on touch screens, the query that hides the .kbd-hint
  // keyboard hints, Enter is a new line and the button sends). Escape cancels an inline edit
  // ([data-edit-cancel]) or closes a menu before it closes the popup around it.
  const coarse = window.matchMedia("(hover: none) and (pointer: coarse)");
  const OPEN_MENU = "details[data-chat-menu][open]";
  on("keydown", (event) => {
    const field = event.target.matches && event.target.matches("textarea, input") ? event.target : null;
    const enter = field && event.key === "Enter" && !event.isComposing;
    const chatEnter = enter && field.matches("[data-chat-input]") && !event.shiftKey && !coarse.matches;
    const editing = event.key === "Escape" && closest(event, "form[data-editing]");
    const cancel = editing && $("[data-edit-cancel]", editing);
    const menu = event.key === "Escape" && $(OPEN_MENU);
    if (enter && field.form && (event.ctrlKey || event.metaKey || chatEnter)) {
      event.preventDefault();
      if (!chatEnter || field.value.trim()) field.form.requestSubmit();
    } else if (cancel || menu) {
      event.preventDefault();
      event.stopPropagation();
      if (cancel) cancel.click();
      else closeMenus(null, $("summary", menu));
    }
  });

  // Dropdown menus (<details data-chat-menu>): one open at a time (a click on one closes the
  // others), closed by a click outside or on one of their items (its request has already
  // started); one that opens focuses its first item.
  function closeMenus(except, focus) {
    $$(OPEN_MENU).forEach((menu) => menu !== except && (menu.open = false));
    if (focus) focus.focus();
  }
  on("click", (event) =>
    closeMenus(closest(event, "[data-chat-menu] [role=menuitem]") ? null : closest(event, "details[data-chat-menu]")),
  );
  on("toggle", (event) => event.target.matches(OPEN_MENU) && $("[role=menuitem]", event.target).focus(), true);

  // Arrow keys, Home and End move between a menu's items and a tab list's tabs (a tab is
  // selected as it is reached: tasks.js).
  const ARROWS = { menuitem: ["ArrowUp", "ArrowDown"], tab: ["ArrowLeft", "ArrowRight"] };
  on("keydown", (event) => {
    const item = closest(event, "[role=menuitem], [role=tab]");
    const role = item && item.getAttribute("role");
    if (!role || ![...ARROWS[role], "Home", "End"].includes(event.key)) return;
    const items = $$(`[role=${role}]`, item.closest("[role=menu], [role=tablist]"));
    const step = ARROWS[role].indexOf(event.key) * 2 - 1; // back: -1, forth: 1
    const index = { Home: 0, End: items.length - 1 }[event.key] ?? (items.indexOf(item) + step + items.length) % items.length;
    event.preventDefault();
    items[index].focus();
    if (role === "tab") items[index].click();
  });

  /* ------------------------------------------------------------------ swaps */

  // Content swapped into a dialog's slot (a popup, the agent form) opens it, or takes the
  // focus in it as on opening; so does an invalid field a swap brings into an open one (only
  // then: a refusal's error left on screen does not pull the focus on every refresh).
  on("htmx:afterSwap", (event) => {
    if (toasts && !toasts.isConnected) placeToasts(); // (the swap took away the dialog it was in)
    const dialog = event.target.closest && event.target.closest("dialog");
    const slot = event.target.classList.contains("dialog__slot");
    const invalid = $("[aria-invalid=true]", event.target);
    if (dialog && slot && !dialog.open) openDialog(dialog, (event.detail.requestConfig || {}).elt);
    else if (dialog && slot) focusInitial(dialog);
    else if (dialog && dialog.open && invalid) invalid.focus();
  });

  // A swap keeps the person in place. Scroll: the boxes it replaces that have an id and
  // data-keep-scroll (the board sideways, each column, the chat's messages) stay where they
  // were scrolled; one scrolled to its end with data-scroll-end (the chat) follows the newest.
  // Focus: when a click, a submit or a live refresh re-renders the part that held the focus,
  // the element with the same id gets it back (htmx does that, and here, for a button that was
  // disabled while its request waited); one without an id, its twin in the new content (same
  // kind, link, request or label: a chat's row, a menu's button); else the fragment's fallback
  // (its heading), never <body>.
  const FOCUSABLE = "a[href], button, summary, input, select, textarea, [tabindex]";
  const TWIN_ATTRIBUTES = ["href", "hx-get", "hx-post", "hx-vals", "aria-label", "name", "value"];
  const twinKey = (el) => {
    const said = TWIN_ATTRIBUTES.map((name) => el.getAttribute(name) || "");
    const text = said.some(Boolean) ? "" : el.textContent.trim(); // (a row's text changes)
    return [el.tagName, ...said, text].join("\n");
  };
  let kept = null;
  on("htmx:beforeRequest", (event) => {
    const config = event.detail.requestConfig;
    const trigger = config && config.triggeringEvent;
    const active = document.activeElement;
    if (trigger && ["click", "submit"].includes(trigger.type) && active && active.id) config.focusedId = active.id;
  });
  on("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    if (!event.detail.shouldSwap || !target || !target.contains) return;
    const active = document.activeElement;
    const inside = target.contains(active);
    kept = {
      inside,
      twin: inside && active !== target && !active.id && active.matches(FOCUSABLE) ? twinKey(active) : null,
      boxes: $$("[data-keep-scroll][id]", target).map((box) => ({
        id: box.id,
        left: box.scrollLeft,
        top: box.hasAttribute("data-scroll-end") && box.scrollHeight - box.scrollTop - box.clientHeight < NEAR_END_PX ? Infinity : box.scrollTop,
      })),
    };
  });
  on("htmx:afterSettle", (event) => {
    const saved = kept || { boxes: [] };
    kept = null;
    saved.boxes.forEach(({ id, left, top }) => {
      const box = document.getElementById(id);
      if (!box) return;
      box.scrollLeft = left;
      box.scrollTop = Math.min(top, box.scrollHeight);
    });
    if (document.activeElement && document.activeElement !== document.body) return;
    const id = (event.detail.requestConfig || {}).focusedId;
    const same = id && document.getElementById(id);
    if (same && !same.closest("dialog:not([open])")) return same.focus();
    if (!saved.inside) return;
    const target = event.detail.target;
    const twin = saved.twin && target && target.isConnected && $$(FOCUSABLE, target).find((el) => twinKey(el) === saved.twin);
    if (twin) return twin.focus({ preventScroll: true }); // (where the swap kept the view)
    const fallback = $("[data-focus-fallback]", target && target.isConnected ? target : document) || $("[data-focus-fallback]");
    if (fallback) fallback.focus();
  });
  // A popup (or a refreshed part) starts with its [data-scroll-end] box at the newest content.
  const scrollToEnd = (root) =>
    [root, ...$$("[data-scroll-end]", root)].forEach((box) => box.matches && box.matches("[data-scroll-end]") && (box.scrollTop = box.scrollHeight));

  /* ------------------------------------------------------------------ sending */

  // A message or comment shows at once while it is sent: a form with data-pending (the id of
  // its <template>) adds it to the list data-pending-list names, with its text in
  // [data-pending-text]. The server's list replaces it; a refusal comes back as the form with
  // its error (the stand-in goes); a failure marks it "Not sent" and gives the text back. A
  // stand-in not sent stays over the list's refreshes (a live refresh that waited for the send
  // lands right after it), in its own task's or chat's list only, until the next send.
  const unsent = new Map(); // stand-in → the address its form posts to
  const formFor = (url) => $$("form[data-pending]").find((f) => f.getAttribute("hx-post") === url);
  on("htmx:afterSwap", () =>
    unsent.forEach((url, item) => {
      const list = !item.isConnected && formFor(url) && $(formFor(url).dataset.pendingList);
      if (list) list.insertBefore(item, $(":scope > [data-working]", list));
    }),
  );
  on("htmx:beforeRequest", (event) => {
    const form = event.detail.elt;
    const field = form.dataset && form.dataset.pending && $("textarea", form);
    const list = field && $(form.dataset.pendingList);
    const template = field && document.getElementById(form.dataset.pending);
    if (!list || !template || !field.value.trim()) return;
    unsent.forEach((url, old) => url === form.getAttribute("hx-post") && unsent.delete(old) && old.remove());
    const item = template.content.firstElementChild.cloneNode(true);
    $("[data-pending-text]", item).textContent = field.value.trim();
    list.insertBefore(item, $(":scope > [data-working]", list));
    item.scrollIntoView({ block: "nearest" });
    form.pending = { item, text: field.value };
    field.value = ""; // (the request already holds the text)
  });
  on("htmx:afterRequest", (event) => {
    const form = event.detail.elt;
    const pending = form && form.pending;
    if (!pending) return;
    form.pending = null;
    const answer = form.id && document.getElementById(form.id);
    if (answer && $("[aria-invalid=true]", answer)) pending.item.remove();
    if (event.detail.successful) return;
    pending.item.classList.add("is-failed");
    $("[data-pending-state]", pending.item).textContent = "Not sent";
    unsent.set(pending.item, form.getAttribute("hx-post"));
    const field = $("textarea", form);
    if (field && !field.value) field.value = pending.text;
  });

  /* ------------------------------------------------------------------ agent drag and drop */

  let dragged = null;
  let orderBefore = "";
  const ROW = "[data-sortable] > li[data-id]";
  const sortableIds = (list) => $$(":scope > li[data-id]", list).map((li) => li.dataset.id).join(",");

  on("dragstart", (event) => {
    const item = closest(event, ROW);
    if (!item) return;
    dragged = item;
    orderBefore = sortableIds(item.parentElement);
    item.classList.add("is-dragging"); // live.js: its list is not refreshed meanwhile
    event.dataTransfer.effectAllowed = "move";
    event.dataTransfer.setData("text/plain", item.dataset.id);
  });
  on("dragover", (event) => {
    const over = dragged && closest(event, ROW);
    if (!over || over.parentElement !== dragged.parentElement) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "move";
    if (over === dragged) return;
    const box = over.getBoundingClientRect();
    over.parentElement.insertBefore(dragged, event.clientY > box.top + box.height / 2 ? over.nextSibling : over);
  });
  on("drop", (event) => dragged && event.preventDefault());
  on("dragend", () => {
    if (!dragged) return;
    const list = dragged.parentElement;
    dragged.classList.remove("is-dragging");
    dragged = null;
    if (sortableIds(list) === orderBefore) return;
    $$(":scope > li [data-position]", list).forEach((el, index) => (el.textContent = String(index + 1)));
    const form = list.closest("form");
    if (form) form.requestSubmit();
  });

  /* ------------------------------------------------------------------ form helpers */

  // Environment variables: a row removed gives the focus to "Add variable" (the server renders
  // an added row: hx-get).
  on("click", (event) => {
    const remove = closest(event, "[data-env-remove]");
    const fieldset = remove && remove.closest("fieldset");
    if (!fieldset) return;
    remove.closest(".env__row").remove();
    $("[data-env-add]", fieldset).focus();
  });

  // A masked secret is replaced, not edited: select it all on focus.
  on("focusin", (event) => event.target.matches && event.target.matches("input[data-masked]") && event.target.select());

  // The chat's uploaded files are sent: the picker empties, the message box asks about them.
  on("htmx:afterRequest", (event) => {
    if (event.detail.elt.id !== "chat-upload") return;
    event.detail.elt.reset();
    const input = $("[data-chat-input]");
    if (input) input.focus();
  });

  /* ------------------------------------------------------------------ copying */

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    const area = document.body.appendChild(document.createElement("textarea"));
    area.value = text;
    area.className = "visually-hidden";
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok ? Promise.resolve() : Promise.reject(new Error("copy failed"));
  }

  // A button that copies a value it carries (a branch name, a working directory), or the code
  // block it sits in (the markdown filter adds one to each); a toast says it is done.
  on("click", (event) => {
    const carrier = closest(event, "[data-copy-text]");
    const button = closest(event, ".code-block__copy");
    const pre = button && $("pre", button.parentElement);
    if (!carrier && !pre) return;
    const text = carrier ? carrier.dataset.copyText : pre.innerText;
    copyText(text).then(
      () => toast({ level: "success", message: "Copied", detail: carrier ? text : "" }),
      () => toast({ level: "error", message: "Could not copy to the clipboard" }),
    );
  });

  /* ------------------------------------------------------------------ start */

  function onLoad(root) {
    updateTimes(root);
    scrollToEnd(root);
  }

  function start() {
    placeToasts();
    window.htmx.onLoad(onLoad); // (the page, then each fragment swapped in)
    window.setInterval(() => updateTimes(document), 30000);
    on("visibilitychange", () => !document.hidden && updateTimes(document));
    $$("dialog[data-open-on-load]").forEach((dialog) => openDialog(dialog));
    $$("#flash-messages li").forEach((li) =>
      toast({ level: li.dataset.level === "error" ? "error" : "success", message: li.textContent }),
    );
  }

  if (document.readyState === "loading") on("DOMContentLoaded", start);
  else start();
})();
