/* Malamar tasks tab: the board's expanded columns, scroll, column chips and dependency chains;
   the task popup (open from cards, toasts and the URL), its tabs, optimistic comments and
   priority, inline-edit keys. What refreshes on which live event is declared in the templates
   (data-live, see live.js). */
(function () {
  "use strict";

  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));
  const on = (type, handler, capture = false) => document.addEventListener(type, handler, capture);
  const closest = (event, selector) => (event.target.closest ? event.target.closest(selector) : null);
  const plainClick = (event) => event.button === 0 && !event.metaKey && !event.ctrlKey && !event.shiftKey;
  const panel = () => $("[data-tasks-panel]");
  const taskDialog = () => document.getElementById("task-dialog");
  const reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)");
  const smooth = () => (reducedMotion.matches ? "auto" : "smooth");

  function openTaskId() {
    const dialog = taskDialog();
    return dialog && dialog.open ? dialog.dataset.taskId || "" : "";
  }

  /* ------------------------------------------------------------------ board */

  // A board refresh keeps the columns the user expanded with "Show all".
  on("htmx:configRequest", (event) => {
    if (!event.detail.elt || event.detail.elt.id !== "task-board") return;
    const expanded = $$("#task-board .kanban-col[data-show-all]").map((column) => column.dataset.status);
    if (expanded.length) event.detail.parameters.all = expanded.join(",");
  });

  // A refresh keeps the board where the user scrolled it: the board sideways (phones swipe
  // between columns) and each column's list (long columns scroll on their own).
  let scrolled = null;
  on("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    scrolled = null;
    if (!event.detail.shouldSwap || !target || !target.matches || !target.matches("#task-board, .kanban-col")) return;
    const kanban = $("#task-board .kanban");
    scrolled = { target, left: kanban ? kanban.scrollLeft : 0, lists: {} };
    $$("#task-board .kanban-col").forEach((column) => {
      const list = $(".kanban-col__list", column);
      if (list && list.scrollTop) scrolled.lists[column.id] = list.scrollTop;
    });
  });
  on("htmx:afterSwap", (event) => {
    const saved = scrolled;
    scrolled = null;
    if (!saved || saved.target !== event.detail.target) return;
    const kanban = $("#task-board .kanban");
    if (jumpingTo) scrollToColumn(jumpingTo); // the swap stopped a jump on its way
    else if (kanban) kanban.scrollLeft = saved.left;
    Object.entries(saved.lists).forEach(([id, top]) => {
      const list = $(`#${CSS.escape(id)} .kanban-col__list`);
      if (list) list.scrollTop = top;
    });
  });

  // Hover or focus on a card lights up its chain: every card it waits for (data-blocked-by,
  // transitively) and every card that waits for it. Only the cards on the board take part.
  function chainOf(startId) {
    const edges = new Map(); // task → the tasks it waits for and those waiting for it
    const link = (a, b) => edges.set(a, [...(edges.get(a) || []), b]);
    $$("#task-board .task-card-item[data-task-id]").forEach((item) => {
      (item.dataset.blockedBy || "").split(" ").filter(Boolean).forEach((id) => {
        link(item.dataset.taskId, `>${id}`);
        link(id, `<${item.dataset.taskId}`);
      });
    });
    const chain = new Set([startId]);
    ["<", ">"].forEach((way) => {
      const todo = [startId];
      while (todo.length) {
        (edges.get(todo.pop()) || []).forEach((edge) => {
          const next = edge.slice(1);
          if (edge[0] !== way || chain.has(next)) return;
          chain.add(next);
          todo.push(next);
        });
      }
    });
    return chain;
  }

  const clearChain = () => $$("#task-board .is-chain").forEach((item) => item.classList.remove("is-chain"));
  function showChain(event) {
    const item = closest(event, "#task-board .task-card-item");
    if (!item) return;
    const chain = chainOf(item.dataset.taskId);
    clearChain();
    if (chain.size < 2) return; // a task on its own: nothing to light up
    chain.forEach((id) => {
      const card = document.getElementById(`task-card-${id}`);
      if (card) card.classList.add("is-chain");
    });
  }
  function hideChain(event) {
    const item = closest(event, "#task-board .task-card-item");
    if (!item || !event.relatedTarget || !item.contains(event.relatedTarget)) clearChain();
  }
  ["mouseover", "focusin"].forEach((type) => on(type, showChain));
  ["mouseout", "focusout"].forEach((type) => on(type, hideChain));

  // Phones: the chips above the board bring a column into view and mark the column in view.
  function syncColumnJump() {
    const kanban = $("#task-board .kanban");
    if (!kanban) return;
    const left = kanban.getBoundingClientRect().left;
    const chips = $$("#task-board [data-column-jump]");
    const distance = (chip) => {
      const column = document.getElementById(`col-${chip.dataset.columnJump}`);
      return column ? Math.abs(column.getBoundingClientRect().left - left) : Infinity;
    };
    const current = chips.reduce((best, chip) => (!best || distance(chip) < distance(best) ? chip : best), null);
    chips.forEach((chip) => (chip === current ? chip.setAttribute("aria-current", "true") : chip.removeAttribute("aria-current")));
  }

  on("click", (event) => {
    const chip = closest(event, "[data-column-jump]");
    if (!chip || !plainClick(event) || !scrollToColumn(chip.dataset.columnJump)) return;
    event.preventDefault();
    const title = $(`#col-${chip.dataset.columnJump} .kanban-col__title`);
    if (title) title.focus({ preventScroll: true });
  });

  // The column a jump is bringing into view, until the board stops scrolling.
  let jumpingTo = "";
  let jumpTimer = 0;
  function scrollToColumn(status) {
    const column = document.getElementById(`col-${status}`);
    if (!column) return false;
    jumpingTo = status;
    window.clearTimeout(jumpTimer);
    jumpTimer = window.setTimeout(() => (jumpingTo = ""), 1500); // no scrollend (Safari)
    column.scrollIntoView({ behavior: smooth(), block: "nearest", inline: "start" });
    return true;
  }

  const isKanban = (event) => event.target.classList && event.target.classList.contains("kanban");
  on("scrollend", (event) => isKanban(event) && (jumpingTo = ""), true);
  let jumpFrame = 0;
  document.addEventListener(
    "scroll",
    (event) => {
      if (!isKanban(event)) return;
      window.cancelAnimationFrame(jumpFrame);
      jumpFrame = window.requestAnimationFrame(syncColumnJump);
    },
    { capture: true, passive: true },
  );
  on("htmx:afterSettle", syncColumnJump);

  /* ------------------------------------------------------------------ popup */

  function setUrl(id, mode) {
    const url = new URL(window.location.href);
    if (id) {
      url.searchParams.set("tab", "tasks");
      url.searchParams.set("task", id);
    } else url.searchParams.delete("task");
    if (url.href === window.location.href) return;
    window.history[mode === "push" ? "pushState" : "replaceState"]({ malamarTask: id || null }, "", url);
  }

  function openTask(id, { push = true } = {}) {
    const dialog = taskDialog();
    const root = panel();
    if (!dialog || !root || !window.htmx) return false;
    if (dialog.open && dialog.dataset.taskId === id) return true;
    dialog.dataset.taskId = id;
    // app.js opens a closed dialog when content is swapped into its slot.
    const url = root.dataset.taskUrl.replace("TASK_ID", encodeURIComponent(id));
    window.htmx.ajax("GET", url, { source: "#task-dialog-body", target: "#task-dialog-body", swap: "innerHTML" });
    setUrl(id, push ? "push" : "replace");
    return true;
  }

  on(
    "close",
    (event) => {
      const dialog = event.target;
      // The create dialog starts empty next time, even after a rejected attempt re-rendered
      // its form with the typed values as defaults (app.js resets forms to their defaults).
      if (dialog.id === "task-create-dialog" && !dialog.open) {
        $$("input:not([type=hidden]), textarea", dialog).forEach((field) => (field.defaultValue = field.value = ""));
      }
      // (app.js closes a server-rendered open dialog to reopen it as a modal: not a real close.)
      if (dialog.id !== "task-dialog" || dialog.open) return;
      const id = dialog.dataset.taskId;
      delete dialog.dataset.taskId;
      document.getElementById("task-dialog-body").replaceChildren();
      setUrl(null, "replace");
      // Focus goes back to the card when the one that opened the popup was re-rendered.
      window.requestAnimationFrame(() => {
        if (document.activeElement && document.activeElement !== document.body) return;
        const card = id && $(`#task-card-${CSS.escape(id)} a`);
        if (card) card.focus();
      });
    },
    true,
  );

  // Cards: open the popup in place (a new tab / window keeps the plain link).
  on("click", (event) => {
    const link = closest(event, "a[data-task-open]");
    if (!link || event.defaultPrevented || !plainClick(event) || event.altKey) return;
    if (openTask(link.dataset.taskOpen)) event.preventDefault();
  });

  // Toast (and other) links to a task of this workspace open the popup without a reload.
  function sameBoardTask(href) {
    const url = new URL(href, window.location.href);
    const board = new URL(panel().dataset.boardUrl, window.location.href);
    const tab = url.searchParams.get("tab");
    if (url.origin !== board.origin || url.pathname !== board.pathname || (tab && tab !== "tasks")) return "";
    return url.searchParams.get("task") || "";
  }

  on(
    "click",
    (event) => {
      if (!plainClick(event) || !panel() || closest(event, ".toast__close")) return;
      const toast = closest(event, ".toast[data-href]");
      const link = toast ? null : closest(event, "a[data-task-link]");
      const id = (toast || link) && sameBoardTask(toast ? toast.dataset.href : link.href);
      if (!id || !openTask(id)) return;
      event.preventDefault();
      event.stopPropagation();
      if (toast) toast.remove();
    },
    true,
  );

  // Back / forward between an open popup and the board.
  window.addEventListener("popstate", (event) => {
    if (!panel() || (event.state && event.state.htmx)) return;
    const id = new URL(window.location.href).searchParams.get("task") || "";
    const dialog = taskDialog();
    if (id && id !== openTaskId()) openTask(id, { push: false });
    else if (!id && openTaskId()) dialog.close("cancel");
  });

  /* ------------------------------------------------------------------ popup tabs */

  function selectTab(tab, focus) {
    const detail = tab.closest("#task-detail");
    if (!detail) return;
    $$("[data-task-tab]", detail).forEach((other) => {
      other.setAttribute("aria-selected", String(other === tab));
      other.tabIndex = other === tab ? 0 : -1;
      const tabPanel = document.getElementById(other.getAttribute("aria-controls"));
      if (tabPanel) tabPanel.hidden = other !== tab;
    });
    const composer = $("[data-composer]", detail);
    if (composer) composer.hidden = tab.dataset.taskTab !== "comments";
    const content = $(`#task-${tab.dataset.taskTab}[data-lazy]`, detail); // Activity, Changes
    if (content) {
      content.removeAttribute("data-lazy");
      window.htmx.trigger(content, "tasks:load");
    }
    if (focus) tab.focus();
  }

  on("click", (event) => {
    const tab = closest(event, "[data-task-tab]");
    if (tab) selectTab(tab, false);
    // "changed 3 files, +40 −12" on a run of the Activity tab: that run's changes. (After each
    // run the tab reloads the run its selector shows, queued behind a load in flight.)
    const run = closest(event, "[data-changes-run]");
    const changes = run && run.closest("#task-detail") && $("#task-changes");
    if (changes && window.htmx) {
      event.preventDefault();
      changes.removeAttribute("data-lazy"); // loaded below, with the run
      selectTab($('[data-task-tab="changes"]'), false);
      const values = { run: run.dataset.changesRun }; // (over the run its selector shows)
      window.htmx.ajax("GET", changes.getAttribute("hx-get"), { source: changes, target: changes, swap: "innerHTML", values });
    }
    // A file in the Changes tab's list: open its diff and bring it into view.
    const jump = closest(event, "[data-change-jump]");
    const file = jump && document.getElementById(jump.getAttribute("href").slice(1));
    if (file) {
      event.preventDefault();
      file.open = true;
      file.scrollIntoView({ block: "start", behavior: smooth() });
    }
  });

  on("keydown", (event) => {
    const tab = closest(event, "[data-task-tab]");
    if (!tab || !["ArrowLeft", "ArrowRight", "Home", "End"].includes(event.key)) return;
    const tabs = $$("[data-task-tab]", tab.parentElement);
    const step = (tabs.indexOf(tab) + (event.key === "ArrowRight" ? 1 : -1) + tabs.length) % tabs.length;
    const index = { Home: 0, End: tabs.length - 1 }[event.key] ?? step;
    event.preventDefault();
    selectTab(tabs[index], true);
  });

  /* ------------------------------------------------------------------ comments */

  // Comments not (yet) taken by the server ("Sending…", then "Not sent" if refused): a refresh
  // of the list puts them back (board.html #task-comment-pending).
  const unsent = new Set();
  on("htmx:afterSwap", (event) => {
    const list = document.getElementById("task-comments");
    if (!list || !unsent.size) return;
    // The answer to a comment's own request (it swaps before htmx:afterRequest) lists that
    // comment: it was taken, so its stand-in must not come back next to it.
    const form = event.detail.requestConfig && event.detail.requestConfig.elt;
    if (event.detail.target === list && form && form.pendingComment) unsent.delete(form.pendingComment.item);
    unsent.forEach((item) => {
      if (!item.isConnected && item.dataset.taskId === openTaskId()) list.insertBefore(item, $("[data-working]", list));
    });
  });

  on("htmx:beforeRequest", (event) => {
    const form = event.detail.elt;
    const textarea = form && form.matches && form.matches("[data-comment-form]") && $("textarea", form);
    const list = document.getElementById("task-comments");
    const template = document.getElementById("task-comment-pending");
    if (!textarea || !textarea.value.trim() || !list || !template) return;
    $$("[data-comments-empty]", list).forEach((el) => el.remove());
    const item = template.content.firstElementChild.cloneNode(true);
    $(".comment__body", item).textContent = textarea.value;
    item.dataset.taskId = openTaskId();
    unsent.add(item);
    list.insertBefore(item, $("[data-working]", list));
    item.scrollIntoView({ block: "nearest" });
    form.pendingComment = { item, text: textarea.value };
    textarea.value = "";
  });

  on("htmx:afterRequest", (event) => {
    const form = event.detail.elt;
    const pending = form && form.pendingComment;
    if (!pending) return;
    form.pendingComment = null;
    if (event.detail.successful) return unsent.clear(); // the server re-rendered the list
    // Not sent: mark it and give the text back.
    pending.item.classList.add("is-failed");
    $(".comment__state", pending.item).textContent = "Not sent";
    const textarea = $("textarea", form);
    if (textarea && !textarea.value) textarea.value = pending.text;
  });

  on("tasks:comment-rejected", () => {
    unsent.clear();
    $$("#task-comments [data-pending]").forEach((el) => el.remove());
  });

  // Ctrl/Cmd+Enter sends; Escape cancels an inline edit instead of closing the popup.
  on("keydown", (event) => {
    const target = event.target;
    if (!target.closest) return;
    const send = event.key === "Enter" && (event.ctrlKey || event.metaKey);
    const form = send && target.matches("textarea, input") && target.closest("[data-comment-form], form[data-editing]");
    const editing = event.key === "Escape" && target.closest("form[data-editing]");
    const cancel = editing && $("[data-edit-cancel]", editing);
    if (form) {
      event.preventDefault();
      form.requestSubmit();
    } else if (cancel) {
      event.preventDefault();
      event.stopPropagation();
      cancel.click();
    }
  });

  /* ------------------------------------------------------------------ priority */

  // Optimistic: the label flips at once; the server's answer (or a failure) sets it right.
  function flipPriority(button) {
    const pressed = button.getAttribute("aria-pressed") === "true";
    button.setAttribute("aria-pressed", String(!pressed));
    const label = $("[data-priority-label]", button);
    if (label) label.textContent = pressed ? "Prioritize" : "Remove Priority";
  }
  const priority = (event) => event.detail.elt && event.detail.elt.matches && event.detail.elt.matches("[data-priority-toggle]");
  on("htmx:beforeRequest", (event) => priority(event) && flipPriority(event.detail.elt));
  on("htmx:afterRequest", (event) => {
    if (priority(event) && !event.detail.successful && event.detail.elt.isConnected) flipPriority(event.detail.elt);
  });
})();
