/* The board's card moves and the "Waits for" picker.
   Moves: drag a card onto a column, or (keyboard, touch) its grip button's dialog; both fill
   the #board-move form and the server decides (tasks/moves.py), answering with the board, the
   reason it refused, or the merge-or-keep dialog. While a card is dragged, the columns it may
   go to (its column's data-moves) are lit. */
(function () {
  "use strict";

  const $$ = (selector, root = document) => Array.from(root.querySelectorAll(selector));
  const on = (type, handler, capture = false) => document.addEventListener(type, handler, capture);
  const find = (event, selector) => (event.target.closest ? event.target.closest(selector) : null);
  const columnOf = (item) => item.closest(".kanban-col");
  const allowed = (item) => (columnOf(item).dataset.moves || "").split(" ");
  const columns = () => $$("#task-board .kanban-col");

  function move(item, status) {
    const form = document.getElementById("board-move");
    if (!form || status === columnOf(item).dataset.status) return;
    form.elements.task.value = item.dataset.taskId;
    form.elements.status.value = status;
    form.elements.all.value = columns().filter((c) => c.hasAttribute("data-show-all")).map((c) => c.dataset.status).join(",");
    form.requestSubmit();
  }

  /* ------------------------------------------------------------------ drag and drop */

  let dragged = null;
  const LIT = ["is-drop-ok", "is-drop-no", "is-drop-target"];

  on("dragstart", (event) => {
    dragged = find(event, "#task-board .task-card-item");
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
    const column = dragged && find(event, "#task-board .kanban-col");
    if (!column || column === columnOf(dragged)) return;
    event.preventDefault(); // a refused column takes the drop too: the server says why
    columns().forEach((other) => other.classList.toggle("is-drop-target", other === column));
  });
  on("drop", (event) => {
    const column = dragged && find(event, "#task-board .kanban-col");
    if (!column) return;
    event.preventDefault();
    move(dragged, column.dataset.status);
  });
  on("dragend", () => {
    if (dragged) dragged.classList.remove("is-dragging");
    dragged = null;
    columns().forEach((column) => column.classList.remove(...LIT));
  });

  /* ------------------------------------------------------------------ the move dialog */

  // Filled before app.js opens it (capture): the card's own column left out, the refused ones
  // marked, the focus on the first allowed one.
  let moving = null;
  on(
    "click",
    (event) => {
      const button = find(event, "[data-card-move]");
      const dialog = document.getElementById("task-move-dialog");
      if (!button || !dialog) return;
      moving = button.closest(".task-card-item");
      dialog.querySelector("[data-move-summary]").textContent = moving.querySelector(".task-card__summary").textContent;
      const choices = $$("[data-move-to]", dialog);
      choices.forEach((choice) => {
        choice.hidden = choice.dataset.moveTo === columnOf(moving).dataset.status;
        choice.classList.toggle("move-choice--refused", !allowed(moving).includes(choice.dataset.moveTo));
        choice.removeAttribute("autofocus");
      });
      const first = choices.find((c) => !c.hidden && allowed(moving).includes(c.dataset.moveTo)) || choices.find((c) => !c.hidden);
      first.setAttribute("autofocus", "");
    },
    true,
  );
  on("click", (event) => {
    const choice = find(event, "#task-move-dialog [data-move-to]");
    if (!choice || !moving) return;
    choice.closest("dialog").close("done");
    move(moving, choice.dataset.moveTo);
  });

  /* ------------------------------------------------------------------ "Waits for" picker */

  // Typing shows the tasks whose label holds the words (chosen ones stay); the count follows.
  on("input", (event) => {
    const search = find(event, "[data-picker-search]");
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
    const picker = find(event, "[data-picker]");
    const count = picker && picker.querySelector("[data-picker-count]");
    if (count) count.textContent = `${$$("[data-picker-choice]:checked", picker).length} chosen`;
  });
  // Enter in the search keeps the dialog open (it would send the form around it).
  on("keydown", (event) => {
    if (event.key === "Enter" && event.target.matches && event.target.matches("[data-picker-search]")) event.preventDefault();
  });
})();
