/* Live agent activity: keeps run timelines, "now doing" lines and card indicators current
   from `run.trace` events (dispatched on <body> by app.js as `malamar:run.trace`).

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
  const pending = new Set(); // run fragments being fetched

  function all(selector) {
    return Array.from(document.querySelectorAll(selector));
  }

  function attr(name, value) {
    return `[${name}="${window.CSS && CSS.escape ? CSS.escape(value) : value}"]`;
  }

  function fetchRun(runId, place) {
    if (pending.has(runId)) return;
    pending.add(runId);
    window
      .fetch(`/runs/${encodeURIComponent(runId)}/`, { headers: { "HX-Request": "true" } })
      .then((response) => (response.ok ? response.text() : Promise.reject(response.status)))
      .then((html) => {
        const holder = document.createElement("div");
        holder.innerHTML = html.trim();
        const fresh = holder.firstElementChild;
        if (!fresh) return;
        place(fresh).forEach((inserted) => {
          if (window.htmx) window.htmx.process(inserted);
        });
        document.body.dispatchEvent(new CustomEvent("malamar:run-rendered", { detail: { run_id: runId } }));
      })
      .catch(() => {
        /* the run or its task may be gone: nothing to show */
      })
      .finally(() => pending.delete(runId));
  }

  function replaceRun(runId) {
    if (!document.querySelector(attr("data-run-id", runId))) return;
    fetchRun(runId, (fresh) =>
      all(attr("data-run-id", runId)).map((old) => {
        const copy = fresh.cloneNode(true);
        old.replaceWith(copy);
        return copy;
      }),
    );
  }

  function addRun(data) {
    const containers = [];
    if (data.task_id) containers.push(...all(attr("data-runs-task", data.task_id)));
    if (data.chat_id) containers.push(...all(attr("data-runs-chat", data.chat_id)));
    if (!containers.length) return;
    fetchRun(data.run_id, (fresh) =>
      containers
        .filter((container) => !container.querySelector(attr("data-run-id", data.run_id)))
        .map((container) => {
          const empty = container.querySelector("[data-runs-empty]");
          if (empty) empty.remove();
          return container.appendChild(fresh.cloneNode(true));
        }),
    );
  }

  function traceLine(item) {
    const li = document.createElement("li");
    const kind = item.action_kind || item.kind || "action";
    li.className = `trace trace--live trace--${item.kind || "action"} trace--${kind}`;
    const text = document.createElement("p");
    text.className = "trace__main trace__text";
    text.textContent = item.text || "";
    li.appendChild(text);
    return li;
  }

  function appendItems(run, data) {
    const lastSeq = Number(run.dataset.lastSeq || 0);
    const items = (data.items || []).filter((item) => Number(item.seq) > lastSeq);
    if (!items.length) return true;
    if (Number(items[0].seq) > lastSeq + 1) return false; // a gap: some lines were not sent
    const list = run.querySelector(attr("data-run-live", data.run_id));
    if (list) items.forEach((item) => list.appendChild(traceLine(item)));
    run.dataset.lastSeq = String(items[items.length - 1].seq);
    if (items.some((item) => item.kind === "text")) {
      const typing = run.querySelector(attr("data-run-text", data.run_id));
      if (typing) {
        typing.textContent = "";
        typing.hidden = true;
      }
    }
    return true;
  }

  function showTyping(data) {
    if (!data.text_delta) return;
    all(attr("data-run-text", data.run_id)).forEach((typing) => {
      typing.textContent = (typing.textContent + data.text_delta).slice(-MAX_LIVE_TEXT);
      typing.hidden = false;
    });
  }

  // The latest action of each running task's run: a board or popup fragment rendered before
  // that trace committed can land after it and would show an older action.
  const latestAction = new Map(); // task id → { run, text }

  function setCurrent(data) {
    const text = data.current_action;
    if (!text) return;
    if (data.task_id) latestAction.set(data.task_id, { run: data.run_id, text });
    const targets = all(attr("data-run-current", data.run_id));
    if (data.task_id) targets.push(...all(attr("data-task-current", data.task_id)));
    if (data.chat_id) targets.push(...all(attr("data-chat-current", data.chat_id)));
    targets.forEach((el) => {
      el.textContent = text;
      el.title = text;
    });
  }

  document.body.addEventListener("malamar:run.trace", (event) => {
    const data = event.detail || {};
    if (!data.run_id) return;
    if (data.status && data.status !== "running") {
      replaceRun(data.run_id); // ended: re-render grouped and collapsed
      return;
    }
    setCurrent(data);
    const runs = all(attr("data-run-id", data.run_id));
    if (!runs.length) {
      addRun(data);
      return;
    }
    let complete = true;
    runs.forEach((run) => {
      complete = appendItems(run, data) && complete;
    });
    if (!complete) replaceRun(data.run_id);
    showTyping(data);
  });

  // A swapped-in card or popup of the same run keeps the newest action this page has seen.
  document.body.addEventListener("htmx:afterSettle", (event) => {
    const root = event.target;
    if (!root || !root.querySelectorAll) return;
    root.querySelectorAll("[data-task-current][data-current-run]").forEach((el) => {
      const latest = latestAction.get(el.getAttribute("data-task-current"));
      if (latest && latest.run === el.getAttribute("data-current-run") && el.textContent !== latest.text) {
        el.textContent = latest.text;
        el.title = latest.text;
      }
    });
  });

  document.body.addEventListener("malamar:run.stalled", (event) => {
    const data = event.detail || {};
    const minutes = Math.max(1, Math.round((data.silent_seconds || 0) / 60));
    if (window.malamarToast) {
      const href = data.task_id || data.chat_id ? window.malamarItemLink(data) : "";
      window.malamarToast({
        level: "warning",
        message: `${data.agent_name || "An agent"} has printed nothing for ${minutes} min`,
        detail: "The CLI may be stuck, for example without network. Cancel it or wait.",
        href,
      });
    }
    if (data.run_id) replaceRun(data.run_id);
  });
})();
