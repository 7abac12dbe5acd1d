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
  const pending = new Set(); // runs whose fragment is being fetched
  const all = (name, value) => Array.from(document.querySelectorAll(`[${name}="${CSS.escape(value)}"]`));

  // The run's fragment, placed by `place` (fresh element → the elements it inserted).
  function fetchRun(runId, place) {
    if (pending.has(runId)) return;
    pending.add(runId);
    window
      .fetch(`/runs/${encodeURIComponent(runId)}/`, { headers: { "HX-Request": "true" } })
      .then((response) => (response.ok ? response.text() : Promise.reject(response.status)))
      .then((html) => {
        const holder = document.createElement("div");
        holder.innerHTML = html.trim();
        if (!holder.firstElementChild) return;
        place(holder.firstElementChild).forEach((inserted) => window.htmx && window.htmx.process(inserted));
        document.body.dispatchEvent(new CustomEvent("malamar:run-rendered", { detail: { run_id: runId } }));
      })
      .catch(() => {
        /* the run or its task may be gone: nothing to show */
      })
      .finally(() => pending.delete(runId));
  }

  function replaceRun(runId) {
    if (!all("data-run-id", runId).length) return;
    fetchRun(runId, (fresh) =>
      all("data-run-id", runId).map((old) => {
        const copy = fresh.cloneNode(true);
        old.replaceWith(copy);
        return copy;
      }),
    );
  }

  function addRun(data) {
    const containers = [
      ...(data.task_id ? all("data-runs-task", data.task_id) : []),
      ...(data.chat_id ? all("data-runs-chat", data.chat_id) : []),
    ];
    if (!containers.length) return;
    fetchRun(data.run_id, (fresh) =>
      containers
        .filter((container) => !container.querySelector(`[data-run-id="${CSS.escape(data.run_id)}"]`))
        .map((container) => {
          const empty = container.querySelector("[data-runs-empty]");
          if (empty) empty.remove();
          return container.appendChild(fresh.cloneNode(true));
        }),
    );
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
        .concat(data.task_id ? all("data-task-current", data.task_id) : [])
        .concat(data.chat_id ? all("data-chat-current", data.chat_id) : [])
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

  document.body.addEventListener("malamar:run.stalled", (event) => {
    const data = event.detail || {};
    const minutes = Math.max(1, Math.round((data.silent_seconds || 0) / 60));
    window.malamarToast({
      level: "warning",
      message: `${data.agent_name || "An agent"} has printed nothing for ${minutes} min`,
      detail: "The CLI may be stuck, for example without network. Cancel it or wait.",
      href: data.task_id || data.chat_id ? window.malamarItemLink(data) : "",
    });
    if (data.run_id) replaceRun(data.run_id);
  });
})();
