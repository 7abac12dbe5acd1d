// Browser notifications (opt-in): when this tab is hidden, a task that needs you (an error, or
// agents moving it to In Review) shows a system notification; clicking it opens the task.
(() => {
  "use strict";
  if (!("Notification" in window)) return;
  const body = document.body;
  const enableButtons = () => document.querySelectorAll("[data-browser-notifications]");

  const refreshButtons = () => {
    for (const button of enableButtons()) {
      button.hidden = Notification.permission === "granted" || Notification.permission === "denied";
    }
  };

  document.addEventListener("click", (event) => {
    const button = event.target.closest("[data-browser-notifications]");
    if (!button) return;
    Notification.requestPermission().then(refreshButtons);
  });
  document.addEventListener("htmx:afterSettle", refreshButtons);
  refreshButtons();

  const show = (title, detail, data) => {
    if (Notification.permission !== "granted" || !document.hidden) return;
    const note = new Notification(title, { body: detail || "", tag: `malamar-${data.task_id}` });
    note.onclick = () => {
      window.focus();
      window.location.assign(window.malamarItemLink(data));
      note.close();
    };
  };

  body.addEventListener("malamar:task.error_occurred", (event) => {
    const data = event.detail || {};
    show(`Error: ${data.task_summary || "a task"}`, data.error_message, data);
  });
  body.addEventListener("malamar:task.status_changed", (event) => {
    const data = event.detail || {};
    if (data.new_status === "in_review" && data.actor_type !== "user") {
      show(`Ready for review: ${data.task_summary || "a task"}`, "Agents need you", data);
    }
  });
})();
