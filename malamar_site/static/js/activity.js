/* Live agent activity: keeps run timelines, "now doing" lines and card indicators current
   from `run.trace` events (live.js dispatches them on <body> as `malamar:run.trace`).

   Hooks in the HTML (server-rendered by components/run_timeline.html and run.html):
   - [data-runs-task=ID] / [data-runs-chat=ID]   a timeline that should show new runs of ID
   - [data-run-id=RUN][data-last-seq=N]          one run; traces up to N are already rendered
   - [data-run-live=RUN]                         the list live trace lines are appended to
   - [data-run-current=RUN], [data-task-current=ID], [data-chat-current=ID]
                                                 text = the latest action ("Running `pytest`")
   - [data-run-text=RUN]                         the agent's words while it writes them
   Everything is written with textContent: agent output never becomes markup here. */
(function () {
  "use strict";

  const MAX_LIVE_TEXT = 1500;
  const adding = new Set(); // runs whose fragment is on its way to their timelines
  const all = (name, value) => (value ? Array.from(document.querySelectorAll(`[${name}="${CSS.escape(value)}"]`)) : []);
  const runUrl = (runId) => `/runs/${encodeURIComponent(runId)}/`;

  // The run's fragment from the server (htmx): in place of each copy on the page (the run
  // ended or stalled, or lines were missed), or at the end of each timeline that should show a
  // run it lacks (its "no runs yet" note hides by CSS).
  function replaceRun(runId) {
    all("data-run-id", runId).forEach((run) =>
      window.htmx.ajax("GET", runUrl(runId), { source: run, target: run, swap: "outerHTML" }),
    );
  }

  function addRun(data) {
    const timelines = [...all("data-runs-task", data.task_id), ...all("data-runs-chat", data.chat_id)];
    if (!timelines.length || adding.has(data.run_id)) return;
    adding.add(data.run_id);
    const added = timelines.map((timeline) =>
      window.htmx.ajax("GET", runUrl(data.run_id), { source: timeline, target: timeline, swap: "beforeend" }),
    );
    Promise.allSettled(added).then(() => adding.delete(data.run_id));
  }

  // Appends the trace lines newer than the run shows; false when some are missing (a gap).
  function appendItems(run, data) {
    const lastSeq = Number(run.dataset.lastSeq || 0);
    const items = (data.items || []).filter((item) => Number(item.seq) > lastSeq);
    if (!items.length) return true;
    if (Number(items[0].seq) > lastSeq + 1) return false;
    const list = run.querySelector(`[data-run-live="${CSS.escape(data.run_id)}"]`);
    items.forEach((item) => {
      const line = document.createElement("li");
      const kind = item.kind || "action";
      line.className = `trace trace--live trace--${kind} trace--${item.action_kind || kind}`;
      const text = line.appendChild(document.createElement("p"));
      text.className = "trace__main trace__text";
      text.textContent = item.text || "";
      if (list) list.appendChild(line);
    });
    run.dataset.lastSeq = String(items[items.length - 1].seq);
    const typing = items.some((item) => item.kind === "text") && run.querySelector(`[data-run-text="${CSS.escape(data.run_id)}"]`);
    if (typing) {
      typing.textContent = "";
      typing.hidden = true;
    }
    return true;
  }

  // The latest action of each running task's run: a board or popup fragment rendered before
  // that trace committed can land after it and would show an older action.
  const latestAction = new Map(); // task id → { run, text }
  const show = (el, text) => {
    el.textContent = text;
    el.title = text;
  };

  document.body.addEventListener("malamar:run.trace", (event) => {
    const data = event.detail || {};
    if (!data.run_id) return;
    if (data.status && data.status !== "running") return replaceRun(data.run_id); // ended: grouped, collapsed
    const text = data.current_action;
    if (text) {
      if (data.task_id) latestAction.set(data.task_id, { run: data.run_id, text });
      all("data-run-current", data.run_id)
        .concat(all("data-task-current", data.task_id), all("data-chat-current", data.chat_id))
        .forEach((el) => show(el, text));
    }
    const runs = all("data-run-id", data.run_id);
    if (!runs.length) return addRun(data);
    if (!runs.map((run) => appendItems(run, data)).every(Boolean)) replaceRun(data.run_id);
    if (data.text_delta) {
      all("data-run-text", data.run_id).forEach((typing) => {
        typing.textContent = (typing.textContent + data.text_delta).slice(-MAX_LIVE_TEXT);
        typing.hidden = false;
      });
    }
  });

  // A swapped-in card or popup of the same run keeps the newest action this page has seen.
  document.body.addEventListener("htmx:afterSettle", (event) => {
    if (!event.target.querySelectorAll) return;
    event.target.querySelectorAll("[data-task-current][data-current-run]").forEach((el) => {
      const latest = latestAction.get(el.getAttribute("data-task-current"));
      if (latest && latest.run === el.getAttribute("data-current-run") && el.textContent !== latest.text) show(el, latest.text);
    });
  });

  // A run that printed nothing for a while says so (live.js toasts it).
  document.body.addEventListener("malamar:run.stalled", (event) => event.detail.run_id && replaceRun(event.detail.run_id));
})();
