/* Live updates: the event stream and the one refresh policy (README "Live refreshes").

   Stream: htmx's SSE extension connects #live-stream (base.html) and reopens it with back-off;
   each EventSource made here resumes after the newest event seen (Last-Event-ID), drops
   replays and other workspaces' events, and announces the rest as "malamar:<type>" on <body>.

   Policy: a fragment declares the events that change it, and for which ids:
     <div id="task-head" hx-get="…" hx-trigger="live" hx-swap="innerHTML"
          hx-sync="this:queue last" data-live="task.updated task.deleted" data-live-task="ID">
   data-live-<name>="ids" skips an event whose payload names another <name>_id. Refreshes
   gather for FLUSH_MS; each declared fragment then fires "live" once (not one in a closed popup
   or a tab not loaded yet, [data-lazy]: they are read when they open). A fragment the person
   is busy in is never replaced (see busy()): its refresh waits, marked data-live-due, and
   runs when they are done. The check runs when the refresh is due and again when its answer
   lands, since the person may start typing while it is on its way. */
(function () {
  "use strict";

  const FLUSH_MS = 100;
  const RECENT_MS = 10000;
  const LAST_EVENT_KEY = "malamar-last-event";
  const body = document.body;
  const workspaceId = body.dataset.workspaceId || "";
  const types = (body.dataset.liveEvents || "").split(/\s+/).filter(Boolean);

  /* ---------------------------------------------------------------- the stream */

  const numericId = (raw) => Number((/(\d+)\s*$/.exec(raw || "") || [0, 0])[1]);

  function readLastEvent() {
    try {
      const saved = JSON.parse(window.sessionStorage.getItem(LAST_EVENT_KEY) || "null");
      // Replay what happened while the previous page was being left, not an old backlog.
      return saved && Date.now() - saved.at < 120000 ? saved.id : "";
    } catch (e) {
      return "";
    }
  }

  // Where this page's data was read (events committed since are replayed, none missed); else
  // where the previous page of this tab left the stream.
  let lastRaw = body.dataset.liveFrom || readLastEvent();
  let lastSeen = numericId(lastRaw);
  let source = null;
  let statusTimer = 0;

  function receive(message) {
    const id = numericId(message.lastEventId);
    if (id) {
      if (id <= lastSeen) return; // a replay already handled
      lastSeen = id;
      lastRaw = message.lastEventId;
      try {
        window.sessionStorage.setItem(LAST_EVENT_KEY, JSON.stringify({ id: lastRaw, at: Date.now() }));
      } catch (e) {
        /* private mode */
      }
    }
    let data = null;
    try {
      data = JSON.parse(message.data);
    } catch (e) {
      return;
    }
    if (!data || typeof data !== "object") return;
    if (workspaceId && data.workspace_id && data.workspace_id !== workspaceId) return;
    announce(message.type, data);
  }

  if (window.htmx) {
    window.htmx.createEventSource = (url) => {
      const opened = new EventSource(lastRaw ? `${url}?lastEventId=${encodeURIComponent(lastRaw)}` : url);
      types.forEach((type) => opened.addEventListener(type, receive));
      // A stream that cannot resume ends with "stream-error": close it, and the extension
      // opens a new one (from the newest event seen) as after any closed stream.
      opened.addEventListener("stream-error", () => {
        opened.close();
        opened.dispatchEvent(new Event("error"));
      });
      source = opened;
      return opened;
    };
  }

  function setConnected(connected) {
    body.dataset.liveState = connected ? "open" : "closed";
    const status = document.getElementById("live-status");
    window.clearTimeout(statusTimer);
    if (status && connected) status.hidden = true;
    else if (status) statusTimer = window.setTimeout(() => (status.hidden = false), 2500);
  }
  document.addEventListener("htmx:sseOpen", () => setConnected(true));
  document.addEventListener("htmx:sseError", () => setConnected(false));
  window.addEventListener("pagehide", () => source && source.close());

  /* ---------------------------------------------------------------- announcing */

  // An event, from the stream or from a response (HX-Trigger "malamar:live" {type}: a change
  // the stream does not announce, e.g. a CLI check asked for).
  function announce(type, data) {
    body.dispatchEvent(new CustomEvent(`malamar:${type}`, { detail: data }));
    recent.push({ at: Date.now(), type, data });
    while (recent.length && Date.now() - recent[0].at > RECENT_MS) recent.shift();
    dueFor(document.querySelectorAll("[data-live]"), [recent[recent.length - 1]]);
  }

  function dueFor(regions, events) {
    regions.forEach((region) => {
      if (events.some((event) => declares(region, event.type, event.data))) due.add(region);
    });
    schedule();
  }

  // A fragment that arrives just after an event it declares (a popup rendered while its chat's
  // reply was being committed) reads itself again.
  const recent = [];
  if (window.htmx) {
    window.htmx.onLoad((root) => {
      const fresh = recent.filter((event) => Date.now() - event.at < RECENT_MS);
      if (!fresh.length || !root.querySelectorAll) return;
      const regions = Array.from(root.querySelectorAll("[data-live]"));
      if (root.matches("[data-live]")) regions.push(root);
      dueFor(regions, fresh);
    });
  }
  document.addEventListener("malamar:live", (event) => announce(event.detail.type, event.detail));

  function declares(region, type, data) {
    if (!region.dataset.live.split(/\s+/).includes(type)) return false;
    return Object.keys(region.dataset).every((key) => {
      if (!/^live[A-Z]/.test(key) || key === "liveDue") return true;
      const value = data[`${key.slice(4).toLowerCase()}_id`];
      return !value || region.dataset[key].split(/\s+/).includes(String(value));
    });
  }

  /* ---------------------------------------------------------------- refreshing */

  const due = new Set(); // fragments whose refresh is due (or waits for the person)
  let timer = 0;

  function schedule() {
    if (!timer && due.size) timer = window.setTimeout(flush, FLUSH_MS);
  }

  function flush() {
    timer = 0;
    due.forEach((region) => {
      if (!region.isConnected || region.closest("dialog:not([open])") || region.hasAttribute("data-lazy")) {
        due.delete(region); // read afresh when it opens
      } else if (busy(region)) {
        region.setAttribute("data-live-due", "");
      } else {
        due.delete(region);
        region.removeAttribute("data-live-due");
        region.dispatchEvent(new CustomEvent("live")); // (not bubbling: nested fragments)
      }
    });
  }

  // The person is busy in a fragment while it holds an open editor or menu, a row they drag,
  // or the field they type in; or while a change they sent from it (from its popup, for a
  // fragment of one) waits for its answer or their confirmation: replacing the element that
  // sent it would lose the answer's events (closing the popup, a toast).
  const EDITING =
    "[data-editing]:not(dialog, details), dialog[data-editing][open], details[data-editing][open], " +
    "details[data-chat-menu][open], [data-menu]:popover-open, .is-dragging";
  const TYPING =
    "textarea, select, [contenteditable], " +
    "input:not([type=button], [type=submit], [type=reset], [type=checkbox], [type=radio])";

  function busy(region) {
    const scope = region.closest("dialog") || region;
    if (scope.querySelector("[data-in-flight]")) return true;
    if (region.closest(EDITING) || region.querySelector(EDITING)) return true;
    const active = document.activeElement;
    return Boolean(active && active !== region && region.contains(active) && active.matches(TYPING));
  }

  const isRead = (config) => String(config && config.verb).toLowerCase() === "get";
  document.addEventListener("htmx:beforeRequest", (event) => {
    const config = event.detail.requestConfig;
    if (config && config.elt && !isRead(config)) config.elt.setAttribute("data-in-flight", "");
  });
  document.addEventListener("htmx:afterRequest", (event) => {
    const config = event.detail.requestConfig;
    if (config && config.elt && !isRead(config)) config.elt.removeAttribute("data-in-flight");
  });

  // The answer of a refresh sent before the person got busy.
  document.addEventListener("htmx:beforeSwap", (event) => {
    const { target, requestConfig: config } = event.detail;
    const trigger = config && config.triggeringEvent;
    if (!target || !trigger || trigger.type !== "live" || !event.detail.shouldSwap) return;
    if (target.closest("dialog:not([open])")) event.detail.shouldSwap = false;
    else if (busy(target)) {
      event.detail.shouldSwap = false;
      target.setAttribute("data-live-due", "");
      due.add(target);
    }
  });

  // Whatever may end the person's business runs the refreshes that waited for it.
  ["focusout", "toggle", "close", "dragend", "htmx:afterRequest", "htmx:afterSwap"].forEach((name) =>
    document.addEventListener(name, schedule, true),
  );

  /* ---------------------------------------------------------------- toasts */

  // The one JavaScript copy of workspaces/links.py's format: the workspace page on the item's
  // tab (the other scripts call window.malamarItemLink).
  function itemLink(data) {
    if (!data.workspace_id) return "";
    const base = `/workspaces/${encodeURIComponent(data.workspace_id)}/`;
    let params = null;
    if (data.task_id) params = { tab: "tasks", task: data.task_id };
    else if (data.chat_id) params = { tab: "chat", chat: data.chat_id };
    return params ? `${base}?${new URLSearchParams(params)}` : base;
  }
  window.malamarItemLink = itemLink;

  const onScreen = (selector, id) =>
    Boolean(id) && Array.from(document.querySelectorAll(`dialog[open] [${selector}]`)).some(
      (popup) => popup.getAttribute(selector) === id,
    );

  // Which events deserve a toast, and which words (the rest only refresh fragments). A task
  // or chat open in a popup shows its own news.
  const TOASTS = {
    "task.error_occurred": (d) =>
      !onScreen("data-task-detail", d.task_id) && {
        level: "error",
        message: d.task_summary ? `Error in “${d.task_summary}”` : "An agent run failed",
        detail: d.error_message,
      },
    "task.status_changed": (d) =>
      d.new_status === "in_review" &&
      d.actor_type !== "user" && { level: "success", message: "Ready for your review", detail: d.task_summary },
    "task.unblocked": (d) => ({ level: "info", message: "No longer waiting: it can start", detail: d.task_summary }),
    "task.comment_added": (d) =>
      d.author_type === "agent" &&
      !onScreen("data-task-detail", d.task_id) && {
        level: "info",
        message: `${d.author_name || "An agent"} commented`,
        detail: d.task_summary,
      },
    // One toast per pause of a CLI, never one per waiting task (DESIGN "Usage limits").
    "cli.limited": (d) => ({
      level: "info",
      message: `${d.name || "A CLI"} is out of quota`,
      detail: d.until
        ? `Work that needs it waits until ${new Date(d.until).toLocaleString()}.`
        : "Work that needs it waits; Malamar checks again on a back-off.",
      link: false,
    }),
    "cli.resumed": (d) => ({
      level: "success",
      message: `${d.name || "A CLI"} works again`,
      detail: "The work that waited for it continues.",
      link: false,
    }),
    // A stopped reply says nothing; one waiting for a CLI out of quota says so in its toast.
    "chat.processing_finished": (d) =>
      !["stopped", "waiting"].includes(d.outcome) &&
      !onScreen("data-chat-popup", d.chat_id) && {
        level: d.outcome === "failed" ? "error" : "info",
        message: `${d.agent_name || "An agent"} ${d.outcome === "failed" ? "could not reply" : "replied"}`,
        detail: d.chat_title,
      },
  };

  Object.entries(TOASTS).forEach(([type, note]) =>
    body.addEventListener(`malamar:${type}`, (event) => {
      const toast = note(event.detail || {});
      if (!toast || !window.malamarToast) return;
      window.malamarToast({ ...toast, href: toast.link === false ? "" : itemLink(event.detail) });
    }),
  );

  body.addEventListener("malamar:workspace.deleted", (event) => {
    if (!workspaceId || event.detail.workspace_id !== workspaceId) return;
    window.malamarToast({ level: "info", message: "This workspace was deleted", detail: event.detail.title });
    window.setTimeout(() => window.location.assign("/"), 1500);
  });
})();
