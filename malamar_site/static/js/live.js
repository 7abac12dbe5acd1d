/* Live updates: the event stream, the one refresh policy, and the news events bring (README
   "Live refreshes" says it all from a template's side).

   Stream: htmx's SSE extension connects #live-stream (base.html) and reopens it with back-off;
   each EventSource made here resumes after the newest event seen (Last-Event-ID: at first,
   where the page's data was read), drops replays and other workspaces' events, and announces
   the rest as "malamar:<type>" on <body>.

   Policy: a fragment declares the events that change it, and for which ids (data-live,
   data-live-<name>). Refreshes gather for FLUSH_MS; each declared fragment then fires "live"
   once, unless the person is busy in it (busy()): then its refresh waits, marked
   data-live-due, and runs when they are done. On a workspace's page, data-all-workspaces also hears the
   other workspaces' events (the "Needs you" count). */
(function () {
  "use strict";

  const FLUSH_MS = 100;
  const RECENT_MS = 10000;
  const body = document.body;
  const workspaceId = body.dataset.workspaceId || "";
  const types = (body.dataset.liveEvents || "").split(/\s+/).filter(Boolean);

  /* ---------------------------------------------------------------- the stream */

  const numericId = (raw) => Number((/(\d+)\s*$/.exec(raw || "") || [0, 0])[1]);
  let lastRaw = body.dataset.liveFrom || ""; // (core.middleware: every page has it)
  let lastSeen = numericId(lastRaw);
  let source = null;

  function receive(message) {
    const id = numericId(message.lastEventId);
    if (id && id <= lastSeen) return; // a replay already handled
    if (id) [lastSeen, lastRaw] = [id, message.lastEventId];
    const data = JSON.parse(message.data); // (an event's payload: core.events.publish() takes a dict)
    const elsewhere = workspaceId && data.workspace_id && data.workspace_id !== workspaceId; // (another workspace's)
    if (elsewhere) return dueFor(document.querySelectorAll("[data-live][data-all-workspaces]"), [{ type: message.type, data }]);
    announce(message.type, data);
    tell(data);
  }

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

  // (app.css shows "Reconnecting…" once the stream has been closed for a moment.)
  document.addEventListener("htmx:sseOpen", () => (body.dataset.liveState = "open"));
  document.addEventListener("htmx:sseError", () => (body.dataset.liveState = "closed"));
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
  window.htmx.onLoad((root) => {
    const fresh = recent.filter((event) => Date.now() - event.at < RECENT_MS);
    if (!fresh.length || !root.querySelectorAll) return;
    const regions = Array.from(root.querySelectorAll("[data-live]"));
    if (root.matches("[data-live]")) regions.push(root);
    dueFor(regions, fresh);
  });
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
      } else if (busy(region) || loading(region)) {
        region.setAttribute("data-live-due", "");
      } else {
        due.delete(region);
        region.removeAttribute("data-live-due");
        region.dispatchEvent(new CustomEvent("live")); // (not bubbling: nested fragments)
      }
    });
  }

  // A fragment with a request of its own on its way (a tab's load, a run picked in the Changes
  // tab) refreshes once that has landed, never queued behind it: a queued refresh would take the
  // place of a load queued there (hx-sync "queue last") and read the fragment as it was before.
  const REQUEST = ".htmx-request";
  const loading = (region) => region.matches(REQUEST) || Boolean(region.querySelector(REQUEST));

  // The person is busy in a fragment while it holds an open editor or menu, a row they drag,
  // the field they type in or their press; or while a change they sent from it (from its
  // popup, for a fragment of one) waits for its answer (htmx's own htmx-request class) or for
  // their confirmation: replacing the element that sent it would lose the answer's events
  // (closing the popup, a toast).
  const EDITING =
    "[data-editing]:not(dialog, details), dialog[data-editing][open], details[data-editing][open], " +
    "details[data-chat-menu][open], [data-menu]:popover-open, .is-dragging";
  const SENDING = ".htmx-request:is([hx-post], [hx-put], [hx-patch], [hx-delete])";
  const TYPING =
    "textarea, select, [contenteditable], " +
    "input:not([type=button], [type=submit], [type=reset], [type=checkbox], [type=radio])";

  // A press (a card being clicked) holds the refresh of what it is in until it is released: a
  // swap between the press and its release takes the element away and the click is lost. (At
  // most PRESS_MS: a release the page never hears does not stop the refreshes.)
  const PRESS_MS = 5000;
  let pressed = null;
  document.addEventListener("pointerdown", (event) => (pressed = { target: event.target, at: Date.now() }), true);
  ["pointerup", "pointercancel", "dragstart"].forEach((name) => document.addEventListener(name, () => (pressed = null), true));
  const pressing = (region) => Boolean(pressed) && Date.now() - pressed.at < PRESS_MS && region.contains(pressed.target);

  function busy(region) {
    if (pressing(region)) return true;
    const scope = region.closest("dialog") || region;
    if (scope.querySelector(SENDING) || document.querySelector("#confirm-dialog[open]")) return true;
    if (region.closest(EDITING) || region.querySelector(EDITING)) return true;
    const active = document.activeElement;
    return Boolean(active && active !== region && region.contains(active) && active.matches(TYPING));
  }

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
  ["focusout", "toggle", "close", "dragend", "pointerup", "pointercancel", "htmx:afterRequest", "htmx:afterSwap"].forEach((name) =>
    document.addEventListener(name, schedule, true),
  );

  /* ---------------------------------------------------------------- news */

  // The relay sends an event with the news it brings to a page (malamar_site/news.py words
  // them, with their links): a toast, unless it is `quiet` and this page's popup shows that
  // task or chat already; and a browser notification (`notify`) while this tab is hidden.
  const onScreen = (kind, id) =>
    Boolean(id) && Boolean(document.querySelector(`dialog[open] [data-${kind}="${CSS.escape(id)}"]`));

  function tell(data) {
    (Array.isArray(data.news) ? data.news : []).forEach((news) => {
      if (news.notify) notify(news.notify, news.href, `malamar-${data.task_id}`);
      if (news.quiet && (onScreen("task-detail", data.task_id) || onScreen("chat-popup", data.chat_id))) return;
      const at = news.at ? new Date(news.at).toLocaleString() : "";
      window.malamarToast({ ...news, detail: (news.detail || "").replace("{at}", at) });
    });
  }

  body.addEventListener("malamar:workspace.deleted", (event) => {
    if (!workspaceId || event.detail.workspace_id !== workspaceId) return;
    window.malamarToast({ level: "info", message: "This workspace was deleted", detail: event.detail.title });
    window.setTimeout(() => window.location.assign("/"), 1500);
  });

  // Browser notifications (opt-in: Settings' button asks for the permission).
  const permission = () => ("Notification" in window ? window.Notification.permission : "denied");
  function notify([title, detail], href, tag) {
    if (permission() !== "granted" || !document.hidden) return;
    const note = new window.Notification(title, { body: detail || "", tag });
    note.onclick = () => {
      window.focus();
      window.location.assign(href);
      note.close();
    };
  }
  const syncAskButtons = () =>
    document.querySelectorAll("[data-browser-notifications]").forEach((b) => (b.hidden = permission() !== "default"));
  document.addEventListener("click", (event) => {
    if (event.target.closest("[data-browser-notifications]")) window.Notification.requestPermission().then(syncAskButtons);
  });
  window.htmx.onLoad(syncAskButtons);
})();
