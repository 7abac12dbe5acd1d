/* The review of an In Review task (README "Reviewing a task"): comments on lines of the
   Changes tab's diffs, kept as drafts in localStorage per task until a verdict of the composer
   sends them (the server renders everything else: verdicts, sent comments, their place). */
(function () {
  "use strict";

  const { $, $$, on } = window.malamar;
  const key = (taskId) => `malamar-review-${taskId}`;
  let picking = null; // lines being picked: {table, first, last}
  let focused = ""; // a line comment whose place in the diff was asked for: marked over refreshes
  let scrolling = false; // (brought into view by the first swap that shows it)
  const boxes = new WeakMap(); // a draft box → its lines (form.draft would find a field named "draft")

  function drafts(taskId) {
    try {
      return JSON.parse(window.localStorage.getItem(key(taskId)) || "[]");
    } catch (e) {
      return [];
    }
  }
  function saveDrafts(taskId, list) {
    if (list.length) window.localStorage.setItem(key(taskId), JSON.stringify(list));
    else window.localStorage.removeItem(key(taskId));
    show(taskId);
  }

  /* ---------------------------------------------------------------- where a row is */

  const cells = (row) => $$("td.diff__no", row).map((cell) => Number(cell.textContent) || 0);
  const sideOf = (row) => (row.classList.contains("diff__line--del") ? "old" : "new");
  const lineOf = (row, side) => cells(row)[side === "old" ? 0 : 1];

  // The draft rows after their lines, in every diff of this task's Changes tab on their run.
  function show(taskId) {
    const count = drafts(taskId).length;
    $$(`#task-detail[data-task-detail="${taskId}"] [data-review-pending]`).forEach((el) => {
      el.hidden = !count;
      el.textContent = `${count} comment${count === 1 ? "" : "s"} pending: sent with your verdict`;
    });
    const changes = $(`.changes[data-review-task="${taskId}"]`);
    if (!changes) return;
    $$(".diff__draft", changes).forEach((row) => row.remove());
    const template = $("template[data-review-draft]", changes);
    drafts(taskId).forEach((draft) => {
      if (draft.run_id !== changes.dataset.reviewRun) return;
      const file = $$(".change-file", changes).find((el) => el.dataset.changePath === draft.path);
      const row = file && $$("tr.diff__line", file).find((tr) => lineOf(tr, draft.side) === draft.end_line);
      if (!row || !template) return;
      const item = template.content.firstElementChild.cloneNode(true);
      $("[data-draft-where]", item).textContent =
        draft.line === draft.end_line ? `line ${draft.line}` : `lines ${draft.line}–${draft.end_line}`;
      $("[data-draft-body]", item).textContent = draft.body;
      $("[data-draft-delete]", item).dataset.draftDelete = draft.id;
      row.after(item);
    });
  }

  /* ---------------------------------------------------------------- picking lines */

  function mark(table, first, last) {
    const rows = $$("tr.diff__line", table);
    const [a, b] = [rows.indexOf(first), rows.indexOf(last)].sort((x, y) => x - y);
    rows.forEach((row, index) => row.classList.toggle("is-picked", index >= a && index <= b));
    picking = { table, first, last };
  }

  function openBox() {
    const { table, first } = picking;
    const changes = table.closest(".changes[data-review-task]");
    const side = sideOf(first);
    const rows = $$("tr.is-picked", table).filter((row) => lineOf(row, side));
    const lines = rows.map((row) => lineOf(row, side));
    const template = changes && $("template[data-review-box]", changes);
    if (!lines.length || !template) return;
    $$(".diff__box", changes).forEach((row) => row.remove());
    const box = template.content.firstElementChild.cloneNode(true);
    const form = $("form", box);
    const draft = {
      path: table.closest(".change-file").dataset.changePath,
      side,
      line: Math.min(...lines),
      end_line: Math.max(...lines),
      run_id: changes.dataset.reviewRun,
    };
    boxes.set(form, draft);
    const where = draft.line === draft.end_line ? `line ${draft.line}` : `lines ${draft.line}–${draft.end_line}`;
    $("[data-draft-where]", box).textContent = `${draft.path}, ${where}`;
    rows[rows.length - 1].after(box);
    $("textarea", box).focus();
  }

  const reviewRow = (event) => {
    const row = event.target.closest && event.target.closest(".changes[data-review-task] tr.diff__line");
    return row && !event.target.closest("a, button") ? row : null;
  };
  on("pointerdown", (event) => {
    const row = event.button === 0 && reviewRow(event);
    if (row) mark(row.closest("table"), row, row);
  });
  on("pointerover", (event) => {
    const row = event.buttons === 1 && picking && reviewRow(event);
    if (row && row.closest("table") === picking.table) mark(picking.table, picking.first, row);
  });
  on("pointerup", (event) => {
    const row = picking && reviewRow(event);
    if (row && !String(window.getSelection())) openBox();
    else if (row) $$(".is-picked").forEach((picked) => picked.classList.remove("is-picked")); // text selected to copy
  });

  on("keydown", (event) => {
    const table = event.target.matches && event.target.matches(".changes[data-review-task] table[tabindex]") && event.target;
    if (!table) return;
    const rows = $$("tr.diff__line", table);
    const current = picking && picking.table === table ? picking.last : null;
    if (event.key === "Enter" && current) {
      event.preventDefault();
      openBox();
    } else if (event.key === "ArrowDown" || event.key === "ArrowUp") {
      event.preventDefault();
      const step = event.key === "ArrowDown" ? 1 : -1;
      const next = rows[Math.min(rows.length - 1, Math.max(0, rows.indexOf(current) + step))];
      mark(table, event.shiftKey && current ? picking.first : next, next);
      next.scrollIntoView({ block: "nearest" });
    }
  });

  /* ---------------------------------------------------------------- the box, the drafts */

  // The box is an inline editor (data-editing: app.js adds it with Ctrl/Cmd+Enter, cancels it
  // with Escape; live.js holds the tab's refresh while it is open).
  on("submit", (event) => {
    const form = event.target;
    const draft = boxes.get(form);
    if (!draft) return;
    event.preventDefault();
    const body = $("textarea", form).value.trim();
    const taskId = form.closest(".changes").dataset.reviewTask;
    if (body) saveDrafts(taskId, [...drafts(taskId), { ...draft, body, id: `${Date.now()}` }]);
    form.closest("tr").remove();
    $$(".is-picked").forEach((row) => row.classList.remove("is-picked"));
  });

  on("click", (event) => {
    const target = event.target.closest ? event.target : null;
    const cancel = target && target.closest(".draft-box [data-edit-cancel]");
    const remove = target && target.closest("[data-draft-delete]");
    const changes = target && target.closest(".changes[data-review-task]");
    if (cancel) {
      cancel.closest("tr").remove();
      $$(".is-picked").forEach((row) => row.classList.remove("is-picked"));
    } else if (remove && changes) {
      const taskId = changes.dataset.reviewTask;
      saveDrafts(taskId, drafts(taskId).filter((draft) => draft.id !== remove.dataset.draftDelete));
    }
    const focus = target && target.closest("[data-review-focus]");
    if (focus) [focused, scrolling] = [focus.dataset.reviewFocus, true];
  });

  // A verdict takes the drafts along (and closes Approve's choice); once taken, they are gone.
  on("htmx:configRequest", (event) => {
    const taskId = event.detail.elt.dataset && event.detail.elt.dataset.reviewForm;
    if (taskId) $$("[popover]:popover-open", event.detail.elt).forEach((menu) => menu.hidePopover());
    const list = taskId && drafts(taskId);
    if (list && list.length) {
      event.detail.parameters.line_comments = JSON.stringify(
        list.map(({ path, side, line, end_line, run_id, body }) => ({ path, side, line, end_line, run_id, body })),
      );
    }
  });
  on("review:sent", (event) => {
    saveDrafts(event.detail.task_id, []);
    // The composer gives way to what follows the verdict (its refresh waits for a focused field).
    const active = document.activeElement;
    if (active && active.closest("[data-review-form]")) active.blur();
  });

  /* ---------------------------------------------------------------- after a swap */

  on("htmx:afterSettle", (event) => {
    const target = event.detail.target;
    const detail = target && target.closest && (target.closest("#task-detail") || $("#task-detail", target));
    if (!detail) return;
    show(detail.dataset.taskDetail);
    // (Marked again after each refresh of the Changes tab: a run's end reloads it.)
    const place = focused && $(`#diff-comment-${CSS.escape(focused)}`, target);
    if (place) {
      const file = place.closest("details");
      if (file) file.open = true;
      place.classList.add("is-focused");
      if (scrolling) place.scrollIntoView({ block: "center" });
      scrolling = false;
    }
  });
  const detail = $("#task-detail"); // a popup the page was rendered with
  if (detail) show(detail.dataset.taskDetail);
})();
