/* Malamar tasks tab: the board's column chips, dependency chains and card moves, the "Waits for"
   picker, the task popup's tabs. Cards open the popup with htmx (hx-get into its slot,
   hx-push-url); what refreshes on which live event is declared in the templates (data-live, see
   live.js).
   Moves: drag a card onto a column (this fills the #board-move form), or (keyboard, touch) its
   grip button's dialog (the server's); the server decides (tasks/moves.py), answering with the
   board, the reason it refused, or the merge-or-keep dialog. While a card is dragged, the
   columns it may go to (its column's data-moves) are lit. */
(function () {
  "use strict";

  const { $, $$, on, closest, plainClick } = window.malamar;
  const reducedMotion = window.matchMedia("(prefers-reduced-motion: reduce)");
  const smooth = () => (reducedMotion.matches ? "auto" : "smooth");
  const columnOf = (item) => item.closest(".kanban-col");
  const allowed = (item) => (columnOf(item).dataset.moves || "").split(" ");
  const columns = () => $$("#task-board .kanban-col");

  /* ------------------------------------------------------------------ board */

  // Hover or focus on a card lights up its chain: every card it waits for (data-blocked-by,
  // transitively) and every card that waits for it. Only the cards on the board take part.
  function chainOf(startId) {
    const waits = new Map(
      $$("#task-board .task-card-item[data-task-id]").map((card) => [
        card.dataset.taskId,
        (card.dataset.blockedBy || "").split(" ").filter(Boolean),
      ]),
    );
    const chain = new Set([startId]);
    const walk = (id, neighbours) =>
      neighbours(id).forEach((next) => {
        if (chain.has(next)) return;
        chain.add(next);
        walk(next, neighbours);
      });
    walk(startId, (id) => waits.get(id) || []); // what it waits for
    walk(startId, (id) => [...waits.keys()].filter((other) => waits.get(other).includes(id))); // what waits for it
    return chain;
  }

  function showChain(event) {
    const item = closest(event, "#task-board .task-card-item");
    const leaving = event.type === "mouseout" || event.type === "focusout";
    if (!item || (leaving && event.relatedTarget && item.contains(event.relatedTarget))) return;
    const chain = leaving ? new Set() : chainOf(item.dataset.taskId);
    $$("#task-board .task-card-item").forEach((card) =>
      card.classList.toggle("is-chain", chain.size > 1 && chain.has(card.dataset.taskId)),
    );
  }
  ["mouseover", "focusin", "mouseout", "focusout"].forEach((type) => on(type, showChain));

  // Phones: the chips above the board bring a column into view (its title takes the focus) and
  // mark the column in view as the board scrolls (a scroll event comes at most once a frame).
  const chipColumn = (chip) => document.getElementById(`col-${chip.dataset.columnJump}`);
  on("click", (event) => {
    const chip = closest(event, "[data-column-jump]");
    if (!chip || !plainClick(event)) return;
    event.preventDefault();
    chipColumn(chip).scrollIntoView({ behavior: smooth(), block: "nearest", inline: "start" });
    $(".kanban-col__title", chipColumn(chip)).focus({ preventScroll: true });
  });
  function markColumnInView(event) {
    const kanban = event.target.id === "kanban" && event.target; // (the columns' offsetParent)
    const chips = kanban ? $$("[data-column-jump]") : [];
    const offset = (chip) => Math.abs(chipColumn(chip).offsetLeft - kanban.scrollLeft);
    const current = chips.reduce((best, chip) => (offset(chip) < offset(best) ? chip : best), chips[0]);
    chips.forEach((chip) => (chip === current ? chip.setAttribute("aria-current", "true") : chip.removeAttribute("aria-current")));
  }
  on("scroll", markColumnInView, true);

  /* ------------------------------------------------------------------ drag and drop */

  let dragged = null;
  const LIT = ["is-drop-ok", "is-drop-no", "is-drop-target"];

  on("dragstart", (event) => {
    dragged = closest(event, "#task-board .task-card-item");
    if (!dragged) return;
    dragged.classList.add("is-dragging"); // live.js: the board is not refreshed meanwhile
    event.dataTransfer.effectAllowed = "move";
    event.dataTransfer.setData("text/plain", dragged.dataset.taskId);
    columns().forEach((column) => {
      if (column === columnOf(dragged)) return;
      column.classList.add(allowed(dragged).includes(column.dataset.status) ? "is-drop-ok" : "is-drop-no");
    });
  });
  on("dragover", (event) => {
    const column = dragged && closest(event, "#task-board .kanban-col");
    if (!column || column === columnOf(dragged)) return;
    event.preventDefault(); // a refused column takes the drop too: the server says why
    columns().forEach((other) => other.classList.toggle("is-drop-target", other === column));
  });
  on("drop", (event) => {
    const column = dragged && closest(event, "#task-board .kanban-col"); // (not its own: see dragover)
    const form = document.getElementById("board-move");
    if (!column || !form) return;
    event.preventDefault();
    form.elements.task.value = dragged.dataset.taskId;
    form.elements.status.value = column.dataset.status;
    form.requestSubmit();
  });
  on("dragend", () => {
    if (dragged) dragged.classList.remove("is-dragging");
    dragged = null;
    columns().forEach((column) => column.classList.remove(...LIT));
  });

  /* ------------------------------------------------------------------ "Waits for" picker */

  // Typing shows the tasks whose label holds the words (chosen ones stay); the count follows.
  on("input", (event) => {
    const search = closest(event, "[data-picker-search]");
    if (!search) return;
    const picker = search.closest("[data-picker]");
    const words = search.value.trim().toLowerCase();
    const options = $$("[data-picker-option]", picker);
    options.forEach((option) => {
      option.hidden = !option.querySelector("input").checked && !option.textContent.toLowerCase().includes(words);
    });
    picker.querySelector("[data-picker-empty]").hidden = options.some((option) => !option.hidden);
  });
  on("change", (event) => {
    const picker = closest(event, "[data-picker]");
    const count = picker && picker.querySelector("[data-picker-count]");
    if (count) count.textContent = `${$$("[data-picker-choice]:checked", picker).length} chosen`;
  });
  // Enter in the search keeps the dialog open (it would send the form around it).
  on("keydown", (event) => {
    if (event.key === "Enter" && event.target.matches && event.target.matches("[data-picker-search]")) event.preventDefault();
  });
  /* ------------------------------------------------------------------ popup tabs */

  function selectTab(tab) {
    const detail = tab.closest("#task-detail");
    $$("[data-task-tab]", detail).forEach((other) => {
      other.setAttribute("aria-selected", String(other === tab));
      other.tabIndex = other === tab ? 0 : -1;
      document.getElementById(other.getAttribute("aria-controls")).hidden = other !== tab;
    });
    const content = $(`#task-${tab.dataset.taskTab}[data-lazy]`, detail); // Activity, Changes
    if (content) {
      content.removeAttribute("data-lazy");
      window.htmx.trigger(content, "tasks:load");
    }
  }

  // The Changes tab at one run ("": the whole task), chosen in its selector or by a link. The
  // tab sends the load itself, with the run: queued behind a load in flight (hx-sync), it is
  // still sent once that one lands, where a request of the selector would be dropped with it
  // (htmx drops a queued request whose element a swap removed). (After each run the tab reloads
  // the run its selector shows: live.js sends it once no load is on its way.)
  function showRun(changes, run) {
    changes.removeAttribute("data-lazy"); // loaded here, with the run
    const values = { run }; // (over the run its selector shows)
    window.htmx.ajax("GET", changes.getAttribute("hx-get"), { source: changes, target: changes, swap: "innerHTML", values });
  }
  on("change", (event) => {
    const select = event.target.id === "task-changes-run" && event.target;
    if (select) showRun(select.closest("#task-changes"), select.value);
  });

  on("click", (event) => {
    const tab = closest(event, "[data-task-tab]");
    if (tab) selectTab(tab);
    // "changed 3 files, +40 −12" on a run of the Activity tab: that run's changes.
    const run = closest(event, "[data-changes-run]");
    const changes = run && run.closest("#task-detail") && $("#task-changes");
    if (changes) {
      event.preventDefault();
      showRun(changes, run.dataset.changesRun);
      selectTab($('[data-task-tab="changes"]'));
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
})();
