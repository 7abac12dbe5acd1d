/* Malamar page behaviour: theme, dialogs, confirmations, toasts, relative times, agent
   drag-and-drop and small form helpers (live.js keeps fragments live).

   CSP-ready: no inline scripts, no eval, no hx-on, delegated listeners only. */
(function () {
  "use strict";

  const THEME_KEY = "malamar-theme";
  const TOAST_LIMIT = 3;
  const TOAST_MS = 5000;

  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

  /* ------------------------------------------------------------------ theme */

  function storedTheme() {
    try {
      const value = window.localStorage.getItem(THEME_KEY);
      return value === "light" || value === "dark" ? value : null;
    } catch (e) {
      return null;
    }
  }

  function systemTheme() {
    return window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  }

  function storeTheme(value) {
    try {
      if (value) window.localStorage.setItem(THEME_KEY, value);
      else window.localStorage.removeItem(THEME_KEY);
    } catch (e) {
      /* private mode: the choice lasts for this page only */
    }
  }

  function applyTheme(forced) {
    const theme = forced || storedTheme() || systemTheme();
    document.documentElement.setAttribute("data-theme", theme);
    const next = theme === "dark" ? "light" : "dark";
    $$("[data-theme-toggle]").forEach((button) => {
      button.setAttribute("aria-label", `Switch to ${next} theme`);
      button.title = `Switch to ${next} theme`;
    });
    const choice = storedTheme() || "system";
    $$("[data-theme-choice] input[name=theme]").forEach((input) => {
      input.checked = input.value === choice;
    });
  }

  document.addEventListener("click", (event) => {
    if (!event.target.closest("[data-theme-toggle]")) return;
    const current = document.documentElement.getAttribute("data-theme");
    const next = current === "dark" ? "light" : "dark";
    storeTheme(next);
    applyTheme(next);
  });

  document.addEventListener("change", (event) => {
    const input = event.target.closest("[data-theme-choice] input[name=theme]");
    if (!input) return;
    storeTheme(input.value === "system" ? null : input.value);
    applyTheme();
  });

  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => applyTheme());
  window.addEventListener("storage", (event) => {
    if (event.key === THEME_KEY) applyTheme();
  });

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

  function resetDialogForm(dialog) {
    $$("form", dialog).forEach((form) => {
      form.reset();
      $$(".field__error, .form-error", form).forEach((el) => el.remove());
      $$("[aria-invalid]", form).forEach((el) => el.removeAttribute("aria-invalid"));
      $$(".field--invalid", form).forEach((el) => el.classList.remove("field--invalid"));
      syncConfirmMatch(form);
    });
  }

  document.addEventListener("click", (event) => {
    const opener = event.target.closest("[data-dialog-open]");
    if (opener) {
      event.preventDefault();
      openDialog(document.getElementById(opener.dataset.dialogOpen), opener);
      return;
    }
    const closer = event.target.closest("[data-dialog-close]");
    if (closer) {
      const dialog = closer.closest("dialog");
      if (dialog) dialog.close("cancel");
    }
  });

  // A click on the backdrop (the dialog element itself, outside its panel) closes it.
  let pressTarget = null;
  document.addEventListener("pointerdown", (event) => {
    pressTarget = event.target;
  });
  document.addEventListener("click", (event) => {
    const dialog = event.target;
    if (!(dialog instanceof HTMLDialogElement) || !dialog.open || pressTarget !== dialog) return;
    const box = dialog.getBoundingClientRect();
    const inside =
      event.clientX >= box.left &&
      event.clientX <= box.right &&
      event.clientY >= box.top &&
      event.clientY <= box.bottom;
    if (!inside) dialog.close("cancel");
  });

  document.addEventListener(
    "close",
    (event) => {
      const dialog = event.target;
      if (!(dialog instanceof HTMLDialogElement)) return;
      if (dialog.hasAttribute("data-reset-on-close")) resetDialogForm(dialog);
      const back = dialog.returnFocus;
      dialog.returnFocus = null;
      // Browsers restore focus themselves; help when the opener was re-rendered meanwhile.
      window.requestAnimationFrame(() => {
        if (document.activeElement && document.activeElement !== document.body) return;
        if (back && back.isConnected) back.focus();
        else if (back && back.id && document.getElementById(back.id)) {
          document.getElementById(back.id).focus();
        }
      });
    },
    true,
  );

  // Server asked to close the dialog that holds the element which sent the request; or found
  // that what a popup shows is gone (a refresh after a delete elsewhere): it closes, saying so.
  document.addEventListener("malamar:dialog-close", (event) => {
    const dialog = event.target.closest && event.target.closest("dialog");
    if (dialog && dialog.open) dialog.close("done");
  });
  document.addEventListener("malamar:gone", (event) => {
    const dialog = event.target.closest && event.target.closest("dialog");
    if (!dialog || !dialog.open) return;
    dialog.close("gone");
    toast({ level: "info", message: event.detail.message });
  });

  /* ------------------------------------------------------------------ confirmations */

  // `dismiss` names the button that changes nothing ("Keep running" next to "Cancel task").
  function confirmDialog(title, text, action, dismiss) {
    const dialog = document.getElementById("confirm-dialog");
    if (!dialog) return Promise.resolve(window.confirm(title));
    $("#confirm-title", dialog).textContent = title;
    $("#confirm-text", dialog).textContent = text || "";
    $("#confirm-ok", dialog).textContent = action || "Delete";
    $("#confirm-dismiss", dialog).textContent = dismiss || "Cancel";
    dialog.returnValue = "";
    return new Promise((resolve) => {
      dialog.addEventListener("close", () => resolve(dialog.returnValue === "confirm"), {
        once: true,
      });
      openDialog(dialog);
    });
  }

  document.addEventListener("htmx:confirm", (event) => {
    const elt = event.detail.elt;
    if (!elt || !elt.dataset || !elt.dataset.confirm) return;
    event.preventDefault();
    elt.setAttribute("data-in-flight", ""); // live.js: its fragment waits for the answer
    const { confirm, confirmText, confirmAction, confirmDismiss } = elt.dataset;
    confirmDialog(confirm, confirmText, confirmAction, confirmDismiss).then((ok) => {
      elt.removeAttribute("data-in-flight");
      if (ok) event.detail.issueRequest(true);
    });
  });

  // "Type the name to confirm": the submit button waits for an exact match.
  function syncConfirmMatch(root) {
    $$("[data-confirm-match]", root).forEach((input) => {
      const form = input.form;
      const button = form && $("[data-confirm-submit]", form);
      if (button) button.disabled = input.value.trim() !== input.dataset.confirmMatch;
    });
  }

  document.addEventListener("input", (event) => {
    if (event.target.matches("[data-confirm-match]")) syncConfirmMatch(event.target.form);
  });

  /* ------------------------------------------------------------------ toasts */

  // A modal dialog makes everything outside it inert, toasts included: while one is open the
  // toast region lives inside the topmost, so a toast's link or close button still works.
  function placeToasts() {
    const region = document.getElementById("toast-region");
    if (!region) return;
    const modals = Array.from(document.querySelectorAll("dialog[open]")).filter((d) =>
      d.matches(":modal"),
    );
    const home = modals.length ? modals[modals.length - 1] : document.body;
    if (region.parentElement === home) return fitToasts();
    home.append(region); // moving it hides the popover: show it again
    if (typeof region.showPopover === "function" && !region.matches(":popover-open")) {
      region.showPopover();
    }
    fitToasts();
  }

  new MutationObserver(() => placeToasts()).observe(document.documentElement, {
    attributes: true,
    attributeFilter: ["open"],
    subtree: true,
  });

  // Before a swap removes the dialog that holds the toasts, take them out of it.
  document.addEventListener("htmx:beforeSwap", (event) => {
    const region = document.getElementById("toast-region");
    const target = event.detail.target;
    if (region && target && target !== region && target.contains(region)) {
      document.body.append(region);
      if (typeof region.showPopover === "function") region.showPopover();
    }
  });

  // Toasts never cover what the open popup marks with data-toast-avoid (the chat's composer,
  // the task's comment box, with their Send buttons) nor a form dialog's buttons (its footer):
  // they stack just above it, or at the top when there is no room there.
  const AVOID = "[data-toast-avoid], .dialog__footer";
  const TOAST_ROOM_PX = 240;
  let avoided = null;
  const avoidWatch = window.ResizeObserver ? new ResizeObserver(() => fitToasts()) : null;

  function fitToasts() {
    const region = document.getElementById("toast-region");
    if (!region) return;
    const home = region.parentElement;
    const avoid = home && home.matches("dialog") ? home.querySelector(AVOID) : null;
    if (avoidWatch && avoid !== avoided) {
      if (avoided) avoidWatch.unobserve(avoided);
      if (avoid) avoidWatch.observe(avoid);
      avoided = avoid;
    }
    const rect = avoid && avoid.getClientRects().length ? avoid.getBoundingClientRect() : null;
    if (!rect || rect.top >= document.documentElement.clientHeight) {
      region.style.removeProperty("--toast-bottom");
      delete region.dataset.place;
    } else if (rect.top < TOAST_ROOM_PX) {
      region.style.removeProperty("--toast-bottom");
      region.dataset.place = "top";
    } else {
      delete region.dataset.place;
      const bottom = document.documentElement.clientHeight - rect.top + 8;
      region.style.setProperty("--toast-bottom", `${Math.round(bottom)}px`); // CSSOM: CSP-safe
    }
  }

  window.addEventListener("resize", () => fitToasts());

  function raiseToasts() {
    placeToasts();
    fitToasts();
    const region = document.getElementById("toast-region");
    if (!region || typeof region.showPopover !== "function") return;
    // Re-showing moves the region above a modal dialog opened after it.
    if (region.matches(":popover-open")) {
      if (!document.querySelector("dialog:modal")) return;
      region.hidePopover();
    }
    region.showPopover();
  }

  function toast(options) {
    const list = document.getElementById("toasts");
    if (!list || !options || !options.message) return;
    raiseToasts();
    const level = ["success", "error", "info", "warning"].includes(options.level) ? options.level : "info";
    const item = document.createElement("li");
    item.className = `toast toast--${level}`;
    item.setAttribute("role", level === "error" ? "alert" : "status");

    const icon = document.getElementById(`toast-icon-${level}`);
    if (icon) item.append(icon.content.cloneNode(true));

    const body = document.createElement("div");
    const title = document.createElement("p");
    title.className = "toast__title";
    if (options.href) {
      const link = document.createElement("a");
      link.href = options.href;
      link.textContent = options.message;
      title.append(link);
      item.dataset.href = options.href;
    } else {
      title.textContent = options.message;
    }
    body.append(title);
    if (options.detail) {
      const detail = document.createElement("p");
      detail.className = "toast__detail";
      detail.textContent = options.detail;
      body.append(detail);
    }
    item.append(body);

    const close = document.createElement("button");
    close.type = "button";
    close.className = "btn btn--ghost btn--icon toast__close";
    close.setAttribute("aria-label", "Dismiss notification");
    const closeIcon = document.getElementById("toast-icon-close");
    if (closeIcon) close.append(closeIcon.content.cloneNode(true));
    close.addEventListener("click", (event) => {
      event.stopPropagation();
      dismiss(item);
    });
    item.append(close);

    item.addEventListener("click", (event) => {
      if (item.dataset.href && !event.target.closest("a")) window.location.href = item.dataset.href;
    });

    let timer = null;
    const start = () => {
      timer = window.setTimeout(() => dismiss(item), TOAST_MS);
    };
    const stop = () => window.clearTimeout(timer);
    item.addEventListener("mouseenter", stop);
    item.addEventListener("mouseleave", start);
    item.addEventListener("focusin", stop);
    item.addEventListener("focusout", start);

    list.append(item);
    const live = $$(".toast:not(.is-leaving)", list);
    live.slice(0, Math.max(0, live.length - TOAST_LIMIT)).forEach((old) => old.remove());
    start();
  }

  function dismiss(item) {
    if (!item.isConnected || item.classList.contains("is-leaving")) return;
    item.classList.add("is-leaving");
    window.setTimeout(() => item.remove(), 150);
  }

  window.malamarToast = toast;
  document.addEventListener("malamar:toast", (event) => toast(event.detail));

  document.addEventListener("htmx:responseError", (event) => {
    const status = event.detail.xhr ? event.detail.xhr.status : 0;
    // The server already said what went wrong (e.g. 413 "too large"): its toast is enough.
    const trigger = event.detail.xhr ? event.detail.xhr.getResponseHeader("HX-Trigger") : "";
    if (trigger && trigger.includes("malamar:toast")) return;
    const message =
      status === 404
        ? "That item no longer exists."
        : status === 409
          ? "That change is not possible right now."
          : "Something went wrong. Please try again.";
    toast({ level: "error", message, detail: status ? `HTTP ${status}` : "" });
  });

  document.addEventListener("htmx:sendError", () => {
    toast({ level: "error", message: "Malamar is not reachable.", detail: "Is it still running?" });
  });

  /* ------------------------------------------------------------------ relative times */

  const fullFormat = new Intl.DateTimeFormat(undefined, { dateStyle: "medium", timeStyle: "short" });
  const dayFormat = new Intl.DateTimeFormat(undefined, { month: "short", day: "numeric" });
  const yearFormat = new Intl.DateTimeFormat(undefined, {
    month: "short",
    day: "numeric",
    year: "numeric",
  });

  function relative(date, now) {
    const seconds = (now - date) / 1000;
    if (seconds < 60) return "just now";
    const minutes = Math.floor(seconds / 60);
    if (minutes < 60) return `${minutes} min ago`;
    const hours = Math.floor(minutes / 60);
    if (hours < 24) return hours === 1 ? "1 hour ago" : `${hours} hours ago`;
    const days = Math.floor(hours / 24);
    if (days < 7) return days === 1 ? "1 day ago" : `${days} days ago`;
    return date.getFullYear() === now.getFullYear()
      ? dayFormat.format(date)
      : yearFormat.format(date);
  }

  function updateTimes(root) {
    const now = new Date();
    $$("time[data-relative]", root || document).forEach((el) => {
      const date = new Date(el.getAttribute("datetime"));
      if (Number.isNaN(date.getTime())) return;
      el.textContent = (el.dataset.prefix || "") + relative(date, now);
      el.title = fullFormat.format(date);
    });
  }

  /* ------------------------------------------------------------------ agent drag and drop */

  let dragged = null;
  let orderBefore = "";

  const sortableIds = (list) => $$(":scope > li[data-id]", list).map((li) => li.dataset.id);

  document.addEventListener("dragstart", (event) => {
    const item = event.target.closest && event.target.closest("[data-sortable] > li[data-id]");
    if (!item) return;
    dragged = item;
    orderBefore = sortableIds(item.parentElement).join(",");
    item.classList.add("is-dragging");
    event.dataTransfer.effectAllowed = "move";
    event.dataTransfer.setData("text/plain", item.dataset.id);
  });

  document.addEventListener("dragover", (event) => {
    if (!dragged) return;
    const list = dragged.parentElement;
    const over = event.target.closest && event.target.closest("[data-sortable] > li[data-id]");
    if (!over || over.parentElement !== list) return;
    event.preventDefault();
    event.dataTransfer.dropEffect = "move";
    if (over === dragged) return;
    const box = over.getBoundingClientRect();
    const after = event.clientY > box.top + box.height / 2;
    list.insertBefore(dragged, after ? over.nextSibling : over);
  });

  document.addEventListener("drop", (event) => {
    if (dragged) event.preventDefault();
  });

  document.addEventListener("dragend", () => {
    if (!dragged) return;
    const item = dragged;
    const list = item.parentElement;
    dragged = null;
    item.classList.remove("is-dragging");
    if (sortableIds(list).join(",") === orderBefore) return;
    $$(":scope > li [data-position]", list).forEach((el, index) => {
      el.textContent = String(index + 1);
    });
    const form = list.closest("form");
    if (form) form.requestSubmit();
  });

  /* ------------------------------------------------------------------ form helpers */

  // Working directory: the path only matters in static mode.
  document.addEventListener("change", (event) => {
    if (event.target.name !== "working_directory_mode") return;
    const form = event.target.form;
    const block = form && $("[data-mode-static]", form);
    if (!block) return;
    block.hidden = event.target.value !== "static";
    if (!block.hidden) {
      const input = $("input", block);
      if (input && !input.value) input.focus();
    }
  });

  // Agent dialog: the model suggestions, effort choices and custom command fields follow the
  // chosen CLI (a hidden effort select is disabled so only the chosen CLI's one is posted).
  document.addEventListener("change", (event) => {
    if (event.target.name !== "cli_type") return;
    const form = event.target.form;
    const settings = form && $("[data-cli-settings]", form);
    if (!settings) return;
    const cli = event.target.value;
    $$("[data-cli-only]", settings).forEach((el) => {
      el.hidden = el.getAttribute("data-cli-only") !== cli;
      $$("select[data-effort]", el).forEach((select) => {
        select.disabled = el.hidden;
        if (el.hidden) select.removeAttribute("id");
        else select.id = "id_reasoning_effort";
      });
    });
    const model = $("input[name=model]", settings);
    if (model) model.setAttribute("list", `agent-models-${cli}`);
  });

  // Environment variables: add and remove rows.
  document.addEventListener("click", (event) => {
    const add = event.target.closest("[data-env-add]");
    if (add) {
      const fieldset = add.closest("fieldset");
      const template = $("template[data-env-template]", fieldset);
      const rows = $("[data-env-rows]", fieldset);
      if (!template || !rows) return;
      rows.append(template.content.cloneNode(true));
      const inputs = $$("input", rows);
      if (inputs.length >= 2) inputs[inputs.length - 2].focus();
      return;
    }
    const remove = event.target.closest("[data-env-remove]");
    if (remove) {
      const row = remove.closest(".env__row");
      const fieldset = remove.closest("fieldset");
      if (row) row.remove();
      const addButton = fieldset && $("[data-env-add]", fieldset);
      if (addButton) addButton.focus();
    }
  });

  // A masked secret is replaced, not edited: select it all on focus.
  document.addEventListener("focusin", (event) => {
    if (event.target.matches && event.target.matches("input[data-masked]")) event.target.select();
  });

  /* ------------------------------------------------------------------ htmx glue */

  // Before a swap: note the dialog it lands in (an outerHTML swap detaches the old target)
  // and whether it is about to remove the focused element.
  let swapDialog = null;
  let swapFillsSlot = false;
  let focusWasInside = false;
  let focusedInside = ""; // the id of the focused element the swap removes
  document.addEventListener("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    swapDialog = (target && target.closest && target.closest("dialog")) || null;
    swapFillsSlot = Boolean(target && target.classList && target.classList.contains("dialog__slot"));
    focusWasInside = Boolean(target && target.contains(document.activeElement));
    focusedInside = focusWasInside ? document.activeElement.id : "";
  });

  // Content swapped into a closed dialog's slot opens it (a late refresh of a part of a closed
  // dialog does not); errors swapped into an open one get focus.
  document.addEventListener("htmx:afterSwap", (event) => {
    const dialog = swapDialog;
    const opens = swapFillsSlot;
    swapDialog = null;
    swapFillsSlot = false;
    if (!dialog) return;
    if (!dialog.open) {
      if (opens) openDialog(dialog, event.detail.requestConfig && event.detail.requestConfig.elt);
    } else if ($("[aria-invalid=true]", dialog)) focusInitial(dialog);
  });

  // htmx focuses the [autofocus] element of every swapped fragment once it settles (after this
  // event). A fragment landing while the user types in a field elsewhere (a live refresh, or
  // the late answer to a button pressed a moment ago: the task popup's head autofocuses its
  // title) would pull the caret out mid-sentence, and the next keys, Ctrl+Enter included, go to
  // the title: the comment is silently never sent. Such a fragment gives up its autofocus.
  const TYPING =
    "textarea, select, [contenteditable], " +
    "input:not([type=button], [type=submit], [type=reset], [type=checkbox], [type=radio])";
  document.addEventListener("htmx:afterSwap", (event) => {
    const fragment = event.target;
    const active = document.activeElement;
    if (!fragment || !fragment.querySelectorAll || !active || !active.matches) return;
    if (!active.matches(TYPING) || fragment.contains(active)) return;
    if (fragment.hasAttribute("autofocus")) fragment.removeAttribute("autofocus");
    $$("[autofocus]", fragment).forEach((element) => element.removeAttribute("autofocus"));
  });

  // Keep keyboard users in place: when a click, a submit or a live refresh re-renders the part
  // of the page that held focus (or disables the focused button while it waits), focus the
  // element with the same id afterwards, else the fragment's fallback (its heading), never <body>.
  document.addEventListener("htmx:beforeRequest", (event) => {
    const config = event.detail.requestConfig;
    const trigger = config && config.triggeringEvent;
    const active = document.activeElement;
    if (config && trigger && ["click", "submit"].includes(trigger.type) && active && active.id) {
      config.focusedId = active.id;
    }
  });
  document.addEventListener("htmx:afterSettle", (event) => {
    const lost = !document.activeElement || document.activeElement === document.body;
    const wasInside = focusWasInside;
    const id = (event.detail.requestConfig || {}).focusedId || focusedInside;
    focusWasInside = false;
    focusedInside = "";
    if (!lost) return;
    const same = id && document.getElementById(id);
    if (same && !same.closest("dialog:not([open])")) {
      same.focus();
      return;
    }
    if (!wasInside) return;
    const target = event.detail.target;
    const scope = target && target.isConnected ? target : document;
    const fallback = $("[data-focus-fallback]", scope) || $("[data-focus-fallback]");
    if (fallback) fallback.focus();
  });

  /* ------------------------------------------------------------------ code blocks */

  const COPY_ICON =
    '<svg width="14" height="14" viewBox="0 0 24 24" fill="none" stroke="currentColor" stroke-width="2" ' +
    'stroke-linecap="round" stroke-linejoin="round" aria-hidden="true"><rect width="14" height="14" x="8" y="8" ' +
    'rx="2"/><path d="M4 16c-1.1 0-2-.9-2-2V4c0-1.1.9-2 2-2h10c1.1 0 2 .9 2 2"/></svg>';

  // Every code block in rendered markdown gets a copy button (added here, not in the HTML,
  // so the sanitiser never has to allow buttons).
  function addCopyButtons(root) {
    const scope = root && root.querySelectorAll ? root : document;
    scope.querySelectorAll(".markdown pre").forEach((pre) => {
      if (pre.parentElement && pre.parentElement.classList.contains("code-block")) return;
      const wrapper = document.createElement("div");
      wrapper.className = "code-block";
      pre.replaceWith(wrapper);
      wrapper.appendChild(pre);
      const button = document.createElement("button");
      button.type = "button";
      button.className = "code-block__copy";
      button.setAttribute("aria-label", "Copy code");
      button.title = "Copy code";
      button.innerHTML = COPY_ICON;
      wrapper.appendChild(button);
    });
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    const area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "visually-hidden";
    document.body.appendChild(area);
    area.select();
    const ok = document.execCommand("copy");
    area.remove();
    return ok ? Promise.resolve() : Promise.reject(new Error("copy failed"));
  }

  // A button that copies a value it carries (e.g. the Changes tab's working directory).
  document.addEventListener("click", (event) => {
    const button = event.target.closest && event.target.closest("[data-copy-text]");
    if (!button) return;
    copyText(button.dataset.copyText).then(
      () => toast({ level: "success", message: "Copied", detail: button.dataset.copyText }),
      () => toast({ level: "error", message: "Could not copy to the clipboard" }),
    );
  });

  document.addEventListener("click", (event) => {
    const button = event.target.closest(".code-block__copy");
    if (!button) return;
    const pre = button.parentElement.querySelector("pre");
    copyText(pre ? pre.innerText : "").then(
      () => {
        button.dataset.copied = "true";
        button.setAttribute("aria-label", "Copied");
        window.setTimeout(() => {
          delete button.dataset.copied;
          button.setAttribute("aria-label", "Copy code");
        }, 1500);
      },
      () => toast({ level: "error", message: "Could not copy to the clipboard" }),
    );
  });

  function onLoad(root) {
    updateTimes(root);
    syncConfirmMatch(root);
    addCopyButtons(root);
  }

  /* ------------------------------------------------------------------ start */

  function start() {
    applyTheme();
    raiseToasts();
    if (window.htmx) window.htmx.onLoad(onLoad);
    else onLoad(document);
    window.setInterval(() => updateTimes(document), 30000);
    document.addEventListener("visibilitychange", () => {
      if (!document.hidden) updateTimes(document);
    });
    $$("dialog[data-open-on-load]").forEach((dialog) => openDialog(dialog));
    $$("#flash-messages li").forEach((li) =>
      toast({ level: li.dataset.level === "error" ? "error" : "success", message: li.textContent }),
    );
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", start);
  else start();
})();
