/* Malamar page behaviour: theme, dialogs, confirmations, toasts, times, agent drag-and-drop,
   copy buttons and small form helpers (live.js keeps fragments live).
   CSP-ready: no inline scripts, no eval, no hx-on, delegated listeners only. */
(function () {
  "use strict";

  const THEME_KEY = "malamar-theme";
  const TOAST_LIMIT = 3;
  const TOAST_MS = 5000;
  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));
  const on = (type, handler, capture = false) => document.addEventListener(type, handler, capture);

  /* ------------------------------------------------------------------ theme */

  function storedTheme() {
    try {
      return ["light", "dark"].find((theme) => theme === window.localStorage.getItem(THEME_KEY)) || null;
    } catch (e) {
      return null;
    }
  }

  function storeTheme(value) {
    try {
      if (value) window.localStorage.setItem(THEME_KEY, value);
      else window.localStorage.removeItem(THEME_KEY);
    } catch (e) {
      /* private mode: the choice lasts for this page only */
    }
  }

  const darkQuery = window.matchMedia("(prefers-color-scheme: dark)");
  function applyTheme(forced) {
    const theme = forced || storedTheme() || (darkQuery.matches ? "dark" : "light");
    document.documentElement.setAttribute("data-theme", theme);
    const label = `Switch to ${theme === "dark" ? "light" : "dark"} theme`;
    $$("[data-theme-toggle]").forEach((button) => {
      button.setAttribute("aria-label", label);
      button.title = label;
    });
    const choice = storedTheme() || "system";
    $$("[data-theme-choice] input[name=theme]").forEach((input) => (input.checked = input.value === choice));
  }

  on("click", (event) => {
    if (!event.target.closest("[data-theme-toggle]")) return;
    const next = document.documentElement.getAttribute("data-theme") === "dark" ? "light" : "dark";
    storeTheme(next);
    applyTheme(next);
  });
  on("change", (event) => {
    const input = event.target.closest("[data-theme-choice] input[name=theme]");
    if (!input) return;
    storeTheme(input.value === "system" ? null : input.value);
    applyTheme();
  });
  darkQuery.addEventListener("change", () => applyTheme());
  window.addEventListener("storage", (event) => event.key === THEME_KEY && applyTheme());

  /* ------------------------------------------------------------------ dialogs */

  function focusInitial(dialog) {
    const target =
      $("[aria-invalid=true]", dialog) ||
      $("[autofocus]", dialog) ||
      $("input:not([type=hidden]):not([readonly]):not([type=radio]), textarea, select", dialog) ||
      $("input[type=radio]:checked", dialog);
    if (target) target.focus();
  }

  function openDialog(dialog, opener) {
    if (!dialog) return;
    if (dialog.open && !dialog.matches(":modal")) dialog.close();
    if (dialog.open) return;
    dialog.returnFocus = opener || document.activeElement;
    dialog.showModal();
    focusInitial(dialog);
    // Fragments inside may refresh what they show (hx-trigger "... from:closest dialog").
    dialog.dispatchEvent(new CustomEvent("malamar:dialog-opened"));
  }

  on("click", (event) => {
    const opener = event.target.closest("[data-dialog-open]");
    const closer = event.target.closest("[data-dialog-close]");
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
      if (!(dialog instanceof HTMLDialogElement)) return;
      if (dialog.hasAttribute("data-reset-on-close")) {
        $$("form", dialog).forEach((form) => {
          form.reset();
          $$(".field__error, .form-error", form).forEach((el) => el.remove());
          $$("[aria-invalid]", form).forEach((el) => el.removeAttribute("aria-invalid"));
          $$(".field--invalid", form).forEach((el) => el.classList.remove("field--invalid"));
          syncConfirmMatch(form);
        });
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
  on("malamar:dialog-close", (event) => {
    const dialog = event.target.closest && event.target.closest("dialog[open]");
    if (dialog) dialog.close("done");
  });
  on("malamar:gone", (event) => {
    const dialog = event.target.closest && event.target.closest("dialog[open]");
    if (!dialog) return;
    dialog.close("gone");
    toast({ level: "info", message: event.detail.message });
  });

  /* ------------------------------------------------------------------ confirmations */

  // data-confirm (title), -text, -action (the confirming button), -dismiss (the other one).
  on("htmx:confirm", (event) => {
    const elt = event.detail.elt;
    const dialog = document.getElementById("confirm-dialog");
    if (!elt || !elt.dataset || !elt.dataset.confirm || !dialog) return;
    event.preventDefault();
    elt.setAttribute("data-in-flight", ""); // live.js: its fragment waits for the answer
    $("#confirm-title", dialog).textContent = elt.dataset.confirm;
    $("#confirm-text", dialog).textContent = elt.dataset.confirmText || "";
    $("#confirm-ok", dialog).textContent = elt.dataset.confirmAction || "Delete";
    $("#confirm-dismiss", dialog).textContent = elt.dataset.confirmDismiss || "Cancel";
    dialog.returnValue = "";
    const done = () => {
      elt.removeAttribute("data-in-flight");
      if (dialog.returnValue === "confirm") event.detail.issueRequest(true);
    };
    dialog.addEventListener("close", done, { once: true });
    openDialog(dialog);
  });

  // "Type the name to confirm": the submit button waits for an exact match.
  function syncConfirmMatch(root) {
    $$("[data-confirm-match]", root).forEach((input) => {
      const button = input.form && $("[data-confirm-submit]", input.form);
      if (button) button.disabled = input.value.trim() !== input.dataset.confirmMatch;
    });
  }
  on("input", (event) => event.target.matches("[data-confirm-match]") && syncConfirmMatch(event.target.form));

  /* ------------------------------------------------------------------ toasts */

  const region = () => document.getElementById("toast-region");
  const popover = (el) => typeof el.showPopover === "function";

  // A modal dialog makes everything outside it inert, toasts included: while one is open the
  // toast region lives inside the topmost, so a toast's link or close button still works.
  function placeToasts() {
    const toasts = region();
    if (!toasts) return;
    const home = $$("dialog[open]").filter((d) => d.matches(":modal")).pop() || document.body;
    if (toasts.parentElement !== home) {
      home.append(toasts); // moving it hides the popover: show it again
      if (popover(toasts) && !toasts.matches(":popover-open")) toasts.showPopover();
    }
    fitToasts();
  }
  new MutationObserver(placeToasts).observe(document.documentElement, {
    attributes: true,
    attributeFilter: ["open"],
    subtree: true,
  });

  // Before a swap removes the dialog that holds the toasts, take them out of it.
  on("htmx:beforeSwap", (event) => {
    const toasts = region();
    const target = event.detail.target;
    if (toasts && target && target !== toasts && target.contains(toasts)) {
      document.body.append(toasts);
      if (popover(toasts)) toasts.showPopover();
    }
  });

  // Toasts never cover what the open popup marks with data-toast-avoid (the chat's composer,
  // the task's comment box, with their Send buttons) nor a form dialog's buttons (its footer):
  // they stack just above it, or at the top when there is no room there.
  const TOAST_ROOM_PX = 240;
  let avoided = null;
  const avoidWatch = window.ResizeObserver ? new ResizeObserver(() => fitToasts()) : null;

  function fitToasts() {
    const toasts = region();
    if (!toasts) return;
    const home = toasts.parentElement;
    const avoid = home && home.matches("dialog") ? $("[data-toast-avoid], .dialog__footer", home) : null;
    if (avoidWatch && avoid !== avoided) {
      if (avoided) avoidWatch.unobserve(avoided);
      if (avoid) avoidWatch.observe(avoid);
      avoided = avoid;
    }
    const rect = avoid && avoid.getClientRects().length ? avoid.getBoundingClientRect() : null;
    const height = document.documentElement.clientHeight;
    const place = !rect || rect.top >= height ? "" : rect.top < TOAST_ROOM_PX ? "top" : "above";
    if (place === "top") toasts.dataset.place = "top";
    else delete toasts.dataset.place;
    if (place === "above") toasts.style.setProperty("--toast-bottom", `${Math.round(height - rect.top + 8)}px`);
    else toasts.style.removeProperty("--toast-bottom"); // (CSSOM: CSP-safe)
  }
  window.addEventListener("resize", () => fitToasts());

  function raiseToasts() {
    placeToasts();
    const toasts = region();
    if (!toasts || !popover(toasts)) return;
    // Re-showing moves the region above a modal dialog opened after it.
    if (toasts.matches(":popover-open")) {
      if (!$("dialog:modal")) return;
      toasts.hidePopover();
    }
    toasts.showPopover();
  }

  // { level: success|error|info|warning, message, detail?, href? } (base.html #toast-template)
  function toast(options) {
    const list = document.getElementById("toasts");
    const template = document.getElementById("toast-template");
    if (!list || !template || !options || !options.message) return;
    raiseToasts();
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
    if (options.detail) $(".toast__detail", item).textContent = options.detail;
    else $(".toast__detail", item).remove();
    $(".toast__close", item).addEventListener("click", (event) => {
      event.stopPropagation();
      dismiss(item);
    });
    item.addEventListener("click", (event) => {
      if (item.dataset.href && !event.target.closest("a")) window.location.href = item.dataset.href;
    });
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

  window.malamarToast = toast;
  on("malamar:toast", (event) => toast(event.detail));

  on("htmx:responseError", (event) => {
    const xhr = event.detail.xhr;
    // The server already said what went wrong (e.g. 413 "too large"): its toast is enough.
    if (xhr && (xhr.getResponseHeader("HX-Trigger") || "").includes("malamar:toast")) return;
    const status = xhr ? xhr.status : 0;
    const message = {
      404: "That item no longer exists.",
      409: "That change is not possible right now.",
    }[status];
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

  /* ------------------------------------------------------------------ agent drag and drop */

  let dragged = null;
  let orderBefore = "";
  const ROW = "[data-sortable] > li[data-id]";
  const sortableIds = (list) => $$(":scope > li[data-id]", list).map((li) => li.dataset.id).join(",");

  on("dragstart", (event) => {
    const item = event.target.closest && event.target.closest(ROW);
    if (!item) return;
    dragged = item;
    orderBefore = sortableIds(item.parentElement);
    item.classList.add("is-dragging"); // live.js: its list is not refreshed meanwhile
    event.dataTransfer.effectAllowed = "move";
    event.dataTransfer.setData("text/plain", item.dataset.id);
  });
  on("dragover", (event) => {
    const over = dragged && event.target.closest && event.target.closest(ROW);
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

  on("change", (event) => {
    const { name, value, form } = event.target;
    // Working directory: the path only matters in static mode.
    const block = name === "working_directory_mode" && form && $("[data-mode-static]", form);
    if (block) {
      block.hidden = value !== "static";
      const input = $("input", block);
      if (!block.hidden && input && !input.value) input.focus();
    }
    // Agent dialog: the model suggestions, effort choices and custom command fields follow the
    // chosen CLI (a hidden effort select is disabled so only the chosen CLI's one is posted).
    const settings = name === "cli_type" && form && $("[data-cli-settings]", form);
    if (!settings) return;
    $$("[data-cli-only]", settings).forEach((el) => {
      el.hidden = el.getAttribute("data-cli-only") !== value;
      $$("select[data-effort]", el).forEach((select) => {
        select.disabled = el.hidden;
        if (el.hidden) select.removeAttribute("id");
        else select.id = "id_reasoning_effort";
      });
    });
    const model = $("input[name=model]", settings);
    if (model) model.setAttribute("list", `agent-models-${value}`);
  });

  // Environment variables: add and remove rows.
  on("click", (event) => {
    const add = event.target.closest("[data-env-add]");
    const remove = event.target.closest("[data-env-remove]");
    const fieldset = (add || remove) && (add || remove).closest("fieldset");
    if (add) {
      const template = $("template[data-env-template]", fieldset);
      const rows = $("[data-env-rows]", fieldset);
      if (!template || !rows) return;
      rows.append(template.content.cloneNode(true));
      const inputs = $$("input", rows);
      if (inputs.length >= 2) inputs[inputs.length - 2].focus();
    } else if (remove) {
      const row = remove.closest(".env__row");
      if (row) row.remove();
      const addButton = fieldset && $("[data-env-add]", fieldset);
      if (addButton) addButton.focus();
    }
  });

  // A masked secret is replaced, not edited: select it all on focus.
  on("focusin", (event) => event.target.matches && event.target.matches("input[data-masked]") && event.target.select());

  /* ------------------------------------------------------------------ htmx glue */

  // Before a swap: note the dialog it lands in (an outerHTML swap detaches the old target)
  // and the focused element it removes.
  let swapDialog = null;
  let swapFillsSlot = false;
  let focusWasInside = false;
  let focusedInside = "";
  on("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    swapDialog = (target && target.closest && target.closest("dialog")) || null;
    swapFillsSlot = Boolean(target && target.classList && target.classList.contains("dialog__slot"));
    focusWasInside = Boolean(target && target.contains(document.activeElement));
    focusedInside = focusWasInside ? document.activeElement.id : "";
  });

  // Content swapped into a closed dialog's slot opens it (a late refresh of a part of a closed
  // dialog does not); errors swapped into an open one get focus.
  on("htmx:afterSwap", (event) => {
    const dialog = swapDialog;
    const opens = swapFillsSlot;
    swapDialog = null;
    swapFillsSlot = false;
    if (dialog && !dialog.open && opens) openDialog(dialog, (event.detail.requestConfig || {}).elt);
    else if (dialog && dialog.open && $("[aria-invalid=true]", dialog)) focusInitial(dialog);
  });

  // htmx focuses the [autofocus] element of every swapped fragment once it settles (after this
  // event). A fragment landing while the user types in a field elsewhere (a live refresh, or
  // the late answer to a button pressed a moment ago: the task popup's head autofocuses its
  // title) would pull the caret out mid-sentence, and the next keys, Ctrl+Enter included, go to
  // the title: the comment is silently never sent. Such a fragment gives up its autofocus.
  const TYPING =
    "textarea, select, [contenteditable], " +
    "input:not([type=button], [type=submit], [type=reset], [type=checkbox], [type=radio])";
  on("htmx:afterSwap", (event) => {
    const fragment = event.target;
    const active = document.activeElement;
    if (!fragment || !fragment.querySelectorAll || !active || !active.matches) return;
    if (!active.matches(TYPING) || fragment.contains(active)) return;
    fragment.removeAttribute("autofocus");
    $$("[autofocus]", fragment).forEach((element) => element.removeAttribute("autofocus"));
  });

  // Keep keyboard users in place: when a click, a submit or a live refresh re-renders the part
  // of the page that held focus (or disables the focused button while it waits), focus the
  // element with the same id afterwards, else the fragment's fallback (its heading), never <body>.
  on("htmx:beforeRequest", (event) => {
    const config = event.detail.requestConfig;
    const trigger = config && config.triggeringEvent;
    const active = document.activeElement;
    if (trigger && ["click", "submit"].includes(trigger.type) && active && active.id) config.focusedId = active.id;
  });
  on("htmx:afterSettle", (event) => {
    const lost = !document.activeElement || document.activeElement === document.body;
    const wasInside = focusWasInside;
    const id = (event.detail.requestConfig || {}).focusedId || focusedInside;
    focusWasInside = false;
    focusedInside = "";
    if (!lost) return;
    const same = id && document.getElementById(id);
    if (same && !same.closest("dialog:not([open])")) return same.focus();
    if (!wasInside) return;
    const target = event.detail.target;
    const fallback = $("[data-focus-fallback]", target && target.isConnected ? target : document) || $("[data-focus-fallback]");
    if (fallback) fallback.focus();
  });

  /* ------------------------------------------------------------------ copying */

  // Every code block in rendered markdown gets a copy button (added here, not in the HTML,
  // so the sanitiser never has to allow buttons; base.html #copy-button-template).
  function addCopyButtons(root) {
    const template = document.getElementById("copy-button-template");
    $$(".markdown pre", root && root.querySelectorAll ? root : document).forEach((pre) => {
      if (!template || pre.parentElement.classList.contains("code-block")) return;
      const wrapper = document.createElement("div");
      wrapper.className = "code-block";
      pre.replaceWith(wrapper);
      wrapper.append(pre, template.content.cloneNode(true));
    });
  }

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

  const copyFailed = () => toast({ level: "error", message: "Could not copy to the clipboard" });
  on("click", (event) => {
    // A button that copies a value it carries (a branch name, a working directory).
    const carrier = event.target.closest("[data-copy-text]");
    if (carrier) {
      const text = carrier.dataset.copyText;
      copyText(text).then(() => toast({ level: "success", message: "Copied", detail: text }), copyFailed);
    }
    const button = event.target.closest(".code-block__copy");
    if (!button) return;
    const pre = $("pre", button.parentElement);
    copyText(pre ? pre.innerText : "").then(() => {
      button.dataset.copied = "true";
      button.setAttribute("aria-label", "Copied");
      window.setTimeout(() => {
        delete button.dataset.copied;
        button.setAttribute("aria-label", "Copy code");
      }, 1500);
    }, copyFailed);
  });

  /* ------------------------------------------------------------------ start */

  function onLoad(root) {
    updateTimes(root);
    syncConfirmMatch(root);
    addCopyButtons(root);
  }

  function start() {
    applyTheme();
    raiseToasts();
    if (window.htmx) window.htmx.onLoad(onLoad);
    else onLoad(document);
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
