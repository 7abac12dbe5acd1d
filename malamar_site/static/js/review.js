/* The review of an In Review task (README "Reviewing a task"): picking lines of the Changes
   tab's diffs to comment on. The server keeps the drafts, renders them and the counts, and
   sends them with a verdict of the composer (and everything else: verdicts, sent comments). */
(function () {
  "use strict";

  const { $, $$, on, closest } = window.malamar;
  let picking = null; // lines being picked: {table, first, last}
  let focused = ""; // a line comment whose place in the diff was asked for: marked over refreshes
  let scrolling = false; // (brought into view by the first swap that shows it)

  /* ---------------------------------------------------------------- where a row is */

  const cells = (row) => $$("td.diff__no", row).map((cell) => Number(cell.textContent) || 0);
  const sideOf = (row) => (row.classList.contains("diff__line--del") ? "old" : "new");
  const lineOf = (row, side) => cells(row)[side === "old" ? 0 : 1];

  /* ---------------------------------------------------------------- picking lines */

  function mark(table, first, last) {
    const rows = $$("tr.diff__line", table);
    const [a, b] = [rows.indexOf(first), rows.indexOf(last)].sort((x, y) => x - y);
    rows.forEach((row, index) => row.classList.toggle("is-picked", index >= a && index <= b));
    picking = { table, first, last };
  }
  const unpick = () => $$(".is-picked").forEach((row) => row.classList.remove("is-picked"));

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
    const path = table.closest(".change-file").dataset.changePath;
    const [line, end] = [Math.min(...lines), Math.max(...lines)];
    $("form", box).setAttribute("hx-vals", JSON.stringify({ path, side, line, end_line: end })); // (posted with its text)
    const where = line === end ? `line ${line}` : `lines ${line}–${end}`;
    $("[data-draft-where]", box).textContent = `${path}, ${where}`;
    rows[rows.length - 1].after(box);
    window.htmx.process(box);
    $("textarea", box).focus();
  }

  const reviewRow = (event) => (closest(event, "a, button") ? null : closest(event, ".changes[data-review-task] tr.diff__line"));
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
    else if (row) unpick(); // text selected to copy
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

  /* ---------------------------------------------------------------- the box */

  // The box is an inline editor (data-editing: app.js adds it with Ctrl/Cmd+Enter, cancels it
  // with Escape; live.js holds the tab's refresh while it is open). Its draft comes back from
  // the server in its place (hx-post).
  on("submit", (event) => {
    if (event.target.matches(".draft-box")) unpick();
  });

  on("click", (event) => {
    const cancel = closest(event, ".draft-box [data-edit-cancel]");
    if (cancel) {
      cancel.closest("tr").remove();
      unpick();
    }
    const focus = closest(event, "[data-review-focus]");
    if (focus) [focused, scrolling] = [focus.dataset.reviewFocus, true];
  });

  // A verdict closes Approve's choice; then the composer gives way to what follows it (its
  // refresh waits for a focused field).
  on("htmx:configRequest", (event) => {
    const form = event.detail.elt;
    if (form.matches("[data-review-form]")) $$("[popover]:popover-open", form).forEach((menu) => menu.hidePopover());
  });
  on("review:sent", () => {
    const active = document.activeElement;
    if (active && active.closest("[data-review-form]")) active.blur();
  });

  /* ---------------------------------------------------------------- after a swap */

  on("htmx:afterSettle", (event) => {
    // (Marked again after each refresh of the Changes tab: a run's end reloads it.)
    const place = focused && $(`#diff-comment-${CSS.escape(focused)}`, event.detail.target);
    if (place) {
      const file = place.closest("details");
      if (file) file.open = true;
      place.classList.add("is-focused");
      if (scrolling) place.scrollIntoView({ block: "center" });
      scrolling = false;
    }
  });
})();
