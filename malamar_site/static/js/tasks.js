/* Malamar tasks tab: the board's expanded columns, scroll and dependency chains, the task popup
   (open from cards, toasts and the URL), popup tabs, optimistic comments and priority,
   inline-edit keyboard helpers. What refreshes on which live event is declared in the
   templates (data-live, see live.js). */
(function () {
  "use strict";

  const $ = (selector, root = document) => root.querySelector(selector);
  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));

  const panel = () => document.querySelector("[data-tasks-panel]");
  const taskDialog = () => document.getElementById("task-dialog");

  function openTaskId() {
    const dialog = taskDialog();
    return dialog && dialog.open ? dialog.dataset.taskId || "" : "";
  }

  /* ------------------------------------------------------------------ board */

  // A board refresh keeps the columns the user expanded with "Show all".
  document.addEventListener("htmx:configRequest", (event) => {
    if (!event.detail.elt || event.detail.elt.id !== "task-board") return;
    const expanded = $$("#task-board .kanban-col[data-show-all]").map((column) => column.dataset.status);
    if (expanded.length) event.detail.parameters.all = expanded.join(",");
  });

  // A refresh keeps the board where the user scrolled it: the board sideways (phones swipe
  // between columns) and each column's list (long columns scroll on their own).
  let scrolled = null;
  document.addEventListener("htmx:beforeSwap", (event) => {
    const target = event.detail.target;
    scrolled = null;
    if (!event.detail.shouldSwap || !target || !target.matches) return;
    if (!target.matches("#task-board, .kanban-col")) return;
    const kanban = $("#task-board .kanban");
    scrolled = { target, left: kanban ? kanban.scrollLeft : 0, lists: {} };
    $$(".kanban-col", document.getElementById("task-board") || document).forEach((column) => {
      const list = $(".kanban-col__list", column);
      if (list && list.scrollTop) scrolled.lists[column.id] = list.scrollTop;
    });
  });
  document.addEventListener("htmx:afterSwap", (event) => {
    const saved = scrolled;
    scrolled = null;
    if (!saved || saved.target !== event.detail.target) return;
    const kanban = $("#task-board .kanban");
    if (jumpingTo) scrollToColumn(jumpingTo); // the swap stopped a jump on its way
    else if (kanban && kanban.scrollLeft !== saved.left) kanban.scrollLeft = saved.left;
    Object.entries(saved.lists).forEach(([id, top]) => {
      const list = $(`#${CSS.escape(id)} .kanban-col__list`);
      if (list && list.scrollTop !== top) list.scrollTop = top;
    });
  });

  /* ------------------------------------------------------------------ dependency chains */

  // Hover or focus on a card lights up its chain: every card it waits for (data-blocked-by,
  // transitively) and every card that waits for it. Only the cards on the board take part.
  function chainOf(startId) {
    const blockers = new Map();
    const dependents = new Map();
    $$("#task-board .task-card-item[data-task-id]").forEach((item) => {
      const ids = (item.dataset.blockedBy || "").split(" ").filter(Boolean);
      blockers.set(item.dataset.taskId, ids);
      ids.forEach((id) => {
        if (!dependents.has(id)) dependents.set(id, []);
        dependents.get(id).push(item.dataset.taskId);
      });
    });
    const chain = new Set([startId]);
    [blockers, dependents].forEach((edges) => {
      const todo = [startId];
      while (todo.length) {
        (edges.get(todo.pop()) || []).forEach((next) => {
          if (!chain.has(next)) {
            chain.add(next);
            todo.push(next);
          }
        });
      }
    });
    return chain;
  }

  function clearChain() {
    $$("#task-board .task-card-item.is-chain").forEach((item) => item.classList.remove("is-chain"));
  }

  function showChain(event) {
    const item = event.target.closest && event.target.closest("#task-board .task-card-item");
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
    const item = event.target.closest && event.target.closest("#task-board .task-card-item");
    const next = event.relatedTarget;
    if (item && next && item.contains(next)) return; // still inside the same card
    clearChain();
  }

  document.addEventListener("mouseover", showChain);
  document.addEventListener("focusin", showChain);
  document.addEventListener("mouseout", hideChain);
  document.addEventListener("focusout", hideChain);

  /* ------------------------------------------------------------------ column jump */

  // Phones: the chips above the board bring a column into view and mark the column in view.
  const reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)");

  function syncColumnJump() {
    const board = document.getElementById("task-board");
    const kanban = board && $(".kanban", board);
    if (!kanban) return;
    const box = kanban.getBoundingClientRect();
    let current = null;
    let nearest = Infinity;
    $$("[data-column-jump]", board).forEach((chip) => {
      const column = document.getElementById(`col-${chip.dataset.columnJump}`);
      if (!column) return;
      const distance = Math.abs(column.getBoundingClientRect().left - box.left);
      if (distance < nearest) {
        nearest = distance;
        current = chip;
      }
    });
    $$("[data-column-jump]", board).forEach((chip) => {
      if (chip === current) chip.setAttribute("aria-current", "true");
      else chip.removeAttribute("aria-current");
    });
  }

  document.addEventListener("click", (event) => {
    const chip = event.target.closest && event.target.closest("[data-column-jump]");
    if (!chip || event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
    if (!scrollToColumn(chip.dataset.columnJump)) return;
    event.preventDefault();
    const title = $(".kanban-col__title", document.getElementById(`col-${chip.dataset.columnJump}`));
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
    column.scrollIntoView({
      behavior: reducedMotion.matches ? "auto" : "smooth",
      block: "nearest",
      inline: "start",
    });
    return true;
  }

  document.addEventListener(
    "scrollend",
    (event) => {
      if (event.target.classList && event.target.classList.contains("kanban")) jumpingTo = "";
    },
    true,
  );

  let jumpFrame = 0;
  document.addEventListener(
    "scroll",
    (event) => {
      if (!event.target.classList || !event.target.classList.contains("kanban")) return;
      window.cancelAnimationFrame(jumpFrame);
      jumpFrame = window.requestAnimationFrame(syncColumnJump);
    },
    { capture: true, passive: true },
  );
  document.addEventListener("htmx:afterSettle", syncColumnJump);

  /* ------------------------------------------------------------------ popup */

  function taskUrl(id) {
    const root = panel();
    return root ? root.dataset.taskUrl.replace("TASK_ID", encodeURIComponent(id)) : "";
  }

  function boardPath() {
    const root = panel();
    return root ? new URL(root.dataset.boardUrl, window.location.href).pathname : "";
  }

  function setUrl(id, mode) {
    const url = new URL(window.location.href);
    if (id) {
      url.searchParams.set("tab", "tasks");
      url.searchParams.set("task", id);
    } else {
      url.searchParams.delete("task");
    }
    if (url.href === window.location.href) return;
    const state = { malamarTask: id || null };
    if (mode === "push") window.history.pushState(state, "", url);
    else window.history.replaceState(state, "", url);
  }

  function openTask(id, { push = true } = {}) {
    const dialog = taskDialog();
    const url = taskUrl(id);
    if (!dialog || !url || !window.htmx) return false;
    if (dialog.open && dialog.dataset.taskId === id) return true;
    dialog.dataset.taskId = id;
    // app.js opens a closed dialog when content is swapped into it.
    window.htmx.ajax("GET", url, { source: "#task-dialog-body", target: "#task-dialog-body", swap: "innerHTML" });
    setUrl(id, push ? "push" : "replace");
    return true;
  }

  function closeTask() {
    const dialog = taskDialog();
    if (dialog && dialog.open) dialog.close("cancel");
  }

  // The create dialog starts empty next time, even after a rejected attempt re-rendered its
  // form with the typed values as defaults (app.js resets forms to their defaults on close).
  document.addEventListener(
    "close",
    (event) => {
      if (event.target.id !== "task-create-dialog" || event.target.open) return;
      $$("input:not([type=hidden]), textarea", event.target).forEach((field) => {
        field.defaultValue = "";
        field.value = "";
      });
    },
    true,
  );

  document.addEventListener(
    "close",
    (event) => {
      const dialog = event.target;
      if (!(dialog instanceof HTMLDialogElement) || dialog.id !== "task-dialog") return;
      // app.js closes a server-rendered open dialog to reopen it as a modal: not a real close.
      if (dialog.open) return;
      const id = dialog.dataset.taskId;
      delete dialog.dataset.taskId;
      const body = document.getElementById("task-dialog-body");
      if (body) body.replaceChildren();
      setUrl(null, "replace");
      // Focus goes back to the card when the one that opened the popup was re-rendered.
      window.requestAnimationFrame(() => {
        if (document.activeElement && document.activeElement !== document.body) return;
        const card = id && document.querySelector(`#task-card-${CSS.escape(id)} a`);
        if (card) card.focus();
      });
    },
    true,
  );

  // Cards: open the popup in place (a new tab / window keeps the plain link).
  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("a[data-task-open]");
    if (!link || event.defaultPrevented || event.button !== 0) return;
    if (event.metaKey || event.ctrlKey || event.shiftKey || event.altKey) return;
    if (openTask(link.dataset.taskOpen)) event.preventDefault();
  });

  // Toast (and other) links to a task of this workspace open the popup without a reload.
  function sameBoardTask(href) {
    if (!href || !panel()) return "";
    const url = new URL(href, window.location.href);
    if (url.origin !== window.location.origin || url.pathname !== boardPath()) return "";
    const tab = url.searchParams.get("tab");
    if (tab && tab !== "tasks") return "";
    return url.searchParams.get("task") || "";
  }

  document.addEventListener(
    "click",
    (event) => {
      if (event.button !== 0 || event.metaKey || event.ctrlKey || event.shiftKey) return;
      const target = event.target;
      if (!target.closest || target.closest(".toast__close")) return;
      const toast = target.closest(".toast[data-href]");
      const link = toast ? null : target.closest("a[data-task-link]");
      if (!toast && !link) return;
      const id = sameBoardTask(toast ? toast.dataset.href : link.href);
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
    if (id && id !== openTaskId()) openTask(id, { push: false });
    else if (!id && openTaskId()) closeTask();
  });

  /* ------------------------------------------------------------------ popup tabs */

  function selectTab(tab, focus) {
    const detail = tab.closest("#task-detail");
    if (!detail) return;
    $$("[data-task-tab]", detail).forEach((other) => {
      const on = other === tab;
      other.setAttribute("aria-selected", on ? "true" : "false");
      other.tabIndex = on ? 0 : -1;
      const tabPanel = document.getElementById(other.getAttribute("aria-controls"));
      if (tabPanel) tabPanel.hidden = !on;
    });
    const composer = $("[data-composer]", detail);
    if (composer) composer.hidden = tab.dataset.taskTab !== "comments";
    const lazy = { activity: "#task-activity", changes: "#task-changes" }[tab.dataset.taskTab];
    const content = lazy && $(lazy, detail);
    if (content && content.hasAttribute("data-lazy")) {
      content.removeAttribute("data-lazy");
      window.htmx.trigger(content, "tasks:load");
    }
    if (focus) tab.focus();
  }

  /* ------------------------------------------------------------------ changes tab */

  // "changed 3 files, +40 −12" on a run of the Activity tab: that run's changes. (After each
  // run the tab reloads the run its selector shows, queued behind a load in flight.)
  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("[data-changes-run]");
    const detail = link && link.closest("#task-detail");
    const changes = detail && $("#task-changes", detail);
    if (!changes || !window.htmx) return;
    event.preventDefault();
    changes.removeAttribute("data-lazy"); // loaded below, with the run
    selectTab($('[data-task-tab="changes"]', detail), false);
    const url = `${changes.getAttribute("hx-get")}?run=${encodeURIComponent(link.dataset.changesRun)}`;
    window.htmx.ajax("GET", url, { source: changes, target: changes, swap: "innerHTML" });
  });

  // A file in the list: open its diff and bring it into view.
  document.addEventListener("click", (event) => {
    const link = event.target.closest && event.target.closest("[data-change-jump]");
    const target = link && document.getElementById(link.getAttribute("href").slice(1));
    if (!target) return;
    event.preventDefault();
    target.open = true;
    target.scrollIntoView({ block: "start", behavior: reducedMotion.matches ? "auto" : "smooth" });
  });

  document.addEventListener("click", (event) => {
    const tab = event.target.closest && event.target.closest("[data-task-tab]");
    if (tab) selectTab(tab, false);
  });

  document.addEventListener("keydown", (event) => {
    const tab = event.target.closest && event.target.closest("[data-task-tab]");
    if (!tab || !["ArrowLeft", "ArrowRight", "Home", "End"].includes(event.key)) return;
    const tabs = $$("[data-task-tab]", tab.parentElement);
    const index = tabs.indexOf(tab);
    const next =
      event.key === "Home"
        ? tabs[0]
        : event.key === "End"
          ? tabs[tabs.length - 1]
          : tabs[(index + (event.key === "ArrowRight" ? 1 : -1) + tabs.length) % tabs.length];
    event.preventDefault();
    selectTab(next, true);
  });

  /* ------------------------------------------------------------------ comments */

  function pendingComment(text) {
    const item = document.createElement("li");
    item.className = "comment comment--user is-pending";
    item.dataset.pending = "";
    const head = document.createElement("div");
    head.className = "comment__head";
    const author = document.createElement("span");
    author.className = "comment__author";
    author.textContent = "User";
    const state = document.createElement("span");
    state.className = "comment__state";
    state.textContent = "Sending…";
    head.append(author, state);
    const body = document.createElement("div");
    body.className = "comment__body comment__body--plain";
    body.textContent = text;
    item.append(head, body);
    return item;
  }

  // Comments not (yet) taken by the server. A live refresh of the list may land while one is
  // being sent: put them back, so a refused comment stays visible, marked "Not sent".
  const unsent = new Set();
  document.addEventListener("htmx:afterSwap", (event) => {
    const list = document.getElementById("task-comments");
    if (!list || !unsent.size) return;
    // The answer to a comment's own request (it swaps before htmx:afterRequest) lists that
    // comment: it was taken, so its stand-in must not come back next to it.
    const form = event.detail.requestConfig && event.detail.requestConfig.elt;
    if (event.detail.target === list && form && form.pendingComment) {
      unsent.delete(form.pendingComment.item);
    }
    unsent.forEach((item) => {
      if (item.isConnected || item.dataset.taskId !== openTaskId()) return;
      list.insertBefore(item, $("[data-working]", list));
    });
  });

  document.addEventListener("htmx:beforeRequest", (event) => {
    const form = event.detail.elt;
    if (!form || !form.matches || !form.matches("[data-comment-form]")) return;
    const textarea = $("textarea", form);
    const text = textarea ? textarea.value : "";
    if (!text.trim()) return;
    const list = document.getElementById("task-comments");
    if (!list) return;
    $$("[data-comments-empty]", list).forEach((el) => el.remove());
    const item = pendingComment(text);
    item.dataset.taskId = openTaskId();
    unsent.add(item);
    const working = $("[data-working]", list);
    list.insertBefore(item, working);
    item.scrollIntoView({ block: "nearest" });
    form.pendingComment = { item, text };
    textarea.value = "";
  });

  document.addEventListener("htmx:afterRequest", (event) => {
    const form = event.detail.elt;
    if (!form || !form.matches || !form.matches("[data-comment-form]")) return;
    const pending = form.pendingComment;
    form.pendingComment = null;
    if (!pending) return;
    if (event.detail.successful) {
      unsent.clear(); // the server re-rendered the list with what it has
      return;
    }
    // Not sent: mark it and give the text back.
    pending.item.classList.add("is-failed");
    const state = $(".comment__state", pending.item);
    if (state) state.textContent = "Not sent";
    const textarea = $("textarea", form);
    if (textarea && !textarea.value) textarea.value = pending.text;
  });

  document.addEventListener("tasks:comment-rejected", () => {
    unsent.clear();
    $$("#task-comments [data-pending]").forEach((el) => el.remove());
  });

  // Ctrl/Cmd+Enter sends; Escape cancels an inline edit instead of closing the popup.
  document.addEventListener("keydown", (event) => {
    const target = event.target;
    if (!target.closest) return;
    if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
      const form = target.closest("[data-comment-form], form[data-editing]");
      if (form && target.matches("textarea, input")) {
        event.preventDefault();
        form.requestSubmit();
      }
      return;
    }
    if (event.key === "Escape") {
      const form = target.closest("form[data-editing]");
      const cancel = form && $("[data-edit-cancel]", form);
      if (cancel) {
        event.preventDefault();
        event.stopPropagation();
        cancel.click();
      }
    }
  });

  /* ------------------------------------------------------------------ priority */

  // Optimistic: the label flips at once; the server's answer (or a failure) sets it right.
  function flipPriority(button) {
    const pressed = button.getAttribute("aria-pressed") === "true";
    button.setAttribute("aria-pressed", pressed ? "false" : "true");
    const label = $("[data-priority-label]", button);
    if (label) label.textContent = pressed ? "Prioritize" : "Remove Priority";
  }

  document.addEventListener("htmx:beforeRequest", (event) => {
    const elt = event.detail.elt;
    if (elt && elt.matches && elt.matches("[data-priority-toggle]")) flipPriority(elt);
  });

  document.addEventListener("htmx:afterRequest", (event) => {
    const elt = event.detail.elt;
    if (elt && elt.matches && elt.matches("[data-priority-toggle]") && !event.detail.successful) {
      if (elt.isConnected) flipPriority(elt);
    }
  });
})();
