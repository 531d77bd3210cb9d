// The ax web console: plain ES modules, no build step. It is a client of the coordinator's HTTP
// API (docs/api.md) and keeps no state of its own beyond the view and the API token.

const view = document.getElementById("view");
const statusLine = document.getElementById("status");
const tokenInput = document.getElementById("token");
// sessionStorage, not localStorage or a cookie: the token goes when the tab closes, and it is only
// ever sent as an Authorization header, which no other site's page can make this browser send.
tokenInput.value = sessionStorage.getItem("ax.token") ?? "";
tokenInput.addEventListener("change", () => {
  const token = tokenInput.value.trim();
  // A second change event for the same token (the field losing focus later) must not re-render:
  // that would wipe whatever the operator is typing in a form.
  if (token === (sessionStorage.getItem("ax.token") ?? "")) return;
  sessionStorage.setItem("ax.token", token);
  render();
});

/** The live-refresh timer of the current view; a new view stops the old one's. */
let refresh;
let renderSeq = 0;

const OPEN_STATES = new Set(["PENDING", "DISPATCHED", "SCHEDULED", "RUNNING", "RETRY_WAITING"]);

function say(text, kind = "") {
  statusLine.textContent = text;
  statusLine.className = kind;
}

async function api(path, options = {}) {
  const headers = { accept: "application/json" };
  const token = tokenInput.value.trim();
  if (token) headers.authorization = `Bearer ${token}`;
  if (options.body !== undefined) headers["content-type"] = "application/json";
  const res = await fetch(path, {
    method: options.method ?? "GET",
    headers,
    body: options.body === undefined ? undefined : JSON.stringify(options.body),
  });
  if (res.status === 204) return null;
  const data = await res.json().catch(() => null);
  if (res.status === 401) {
    tokenInput.focus();
    throw new Error(
      token
        ? "401: the coordinator does not know this token (or it was revoked); paste another in the Token field above."
        : "401: the API needs a token. Paste the admin token (the file ax-secrets/admin.token beside the coordinator's store) or one made with ax token create into the Token field above.",
    );
  }
  if (!res.ok) {
    const err = data?.error;
    const issues = err?.issues?.map((i) => `${i.path}: ${i.message}`).join("; ");
    throw new Error(
      `${res.status} ${err?.code ?? ""}: ${issues || err?.message || res.statusText}`,
    );
  }
  return data;
}

/** Escapes text for HTML. */
function h(value) {
  return String(value ?? "").replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c],
  );
}

function time(ms) {
  if (ms === null || ms === undefined) return "–";
  const d = new Date(ms);
  return `${d.toISOString().slice(0, 10)} ${d.toISOString().slice(11, 23)}Z`;
}

function ago(ms) {
  if (!ms) return "–";
  const s = Math.round((Date.now() - ms) / 1000);
  return s < 0 ? `in ${-s}s` : `${s}s ago`;
}

function state(s) {
  return `<span class="state ${h(s)}">${h(s)}</span>`;
}

function table(headers, rows, rowAttrs = () => "") {
  return `<table><thead><tr>${headers.map((x) => `<th>${h(x)}</th>`).join("")}</tr></thead>
    <tbody>${rows.map((r, i) => `<tr ${rowAttrs(i)}>${r.join("")}</tr>`).join("") || `<tr><td colspan="${headers.length}" class="muted">none</td></tr>`}</tbody></table>`;
}

const td = (v, cls = "") => `<td class="${cls}">${v}</td>`;

function triggerText(t) {
  switch (t?.type) {
    case "cron":
      return `cron ${t.expr} (${t.tz})`;
    case "every":
      return `every ${t.everyMs} ms`;
    case "at":
      return `at ${time(t.at)}`;
    case "delay":
      return `delay ${t.delayMs} ms`;
    case "event":
      return `event ${t.name}`;
    case "after":
      return `after ${t.job} ${t.states.join("/")}`;
    default:
      return t?.type ?? "";
  }
}

// ---------------------------------------------------------------- views

async function fleetView(seq) {
  const { items } = await api("/api/agents");
  if (seq !== renderSeq) return;
  view.innerHTML = `<h2>Fleet <span class="muted">(${items.filter((a) => a.status === "online").length} of ${items.length} online)</span></h2>
  ${table(
    [
      "agent",
      "status",
      "profile",
      "version",
      "load",
      "in flight",
      "clock offset",
      "journal",
      "outbox",
      "last seen",
    ],
    items.map((a) => [
      td(h(a.agentId)),
      td(state(a.status)),
      td(h(a.profile)),
      td(
        `${h(a.bundleVersion)} <span class="muted">${h(String(a.bundleSha256 ?? "").slice(0, 12))}</span>`,
      ),
      td(Number(a.load ?? 0).toFixed(2), "num"),
      td(h(a.inFlight ?? 0), "num"),
      td(
        `${Number(a.clockOffsetMs ?? 0).toFixed(1)} ± ${Number(a.clockUncertaintyMs ?? 0).toFixed(1)} ms`,
        "num",
      ),
      td(h(a.journalDepth), "num"),
      td(h(a.outboxDepth), "num"),
      td(ago(a.lastSeenAt)),
    ]),
    (i) => `data-agent="${h(items[i].agentId)}"`,
  )}`;
}

async function jobsView(seq) {
  const items = [];
  for (let cursor = null; ; ) {
    const page = await api(
      `/api/jobs?limit=1000${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ""}`,
    );
    if (seq !== renderSeq) return; // left this view while paging
    items.push(...page.items);
    cursor = page.nextCursor;
    if (!cursor) break;
  }
  const last = await Promise.all(
    items.slice(0, 100).map((j) =>
      api(`/api/executions?job=${encodeURIComponent(j.id)}&limit=1`)
        .then((r) => r.items[0])
        .catch(() => undefined),
    ),
  );
  if (seq !== renderSeq) return;
  view.innerHTML = `<h2>Jobs</h2>
  ${table(
    ["job", "handler", "trigger", "next fire", "last outcome", "", ""],
    items.map((j, i) => [
      td(`${h(j.id)} <span class="muted">v${h(j.version)}</span>`),
      td(h(j.definition.handler)),
      td(h(triggerText(j.definition.trigger))),
      td(j.paused ? '<span class="state SKIPPED">paused</span>' : time(j.nextFireAt)),
      td(last[i] ? `<a href="#/executions/${h(last[i].id)}">${state(last[i].state)}</a>` : "–"),
      td(
        `<button data-act="${j.paused ? "resume" : "pause"}" data-job="${h(j.id)}">${j.paused ? "Resume" : "Pause"}</button>`,
      ),
      td(`<button class="primary" data-act="trigger" data-job="${h(j.id)}">Trigger now</button>`),
    ]),
    (i) => `data-job-row="${h(items[i].id)}"`,
  )}
  <form class="card" id="new-job">
    <h2>New job</h2>
    <p class="muted">A job definition as JSON (see docs/scheduling.md).</p>
    <textarea name="definition" spellcheck="false">${h(
      JSON.stringify(
        {
          id: "hello",
          handler: "echo",
          trigger: { type: "cron", expr: "*/10 * * * * *", tz: "UTC" },
          params: { message: "hello" },
        },
        null,
        2,
      ),
    )}</textarea>
    <button class="primary" type="submit">Create job</button>
  </form>`;
  for (const b of view.querySelectorAll("button[data-act]")) {
    b.addEventListener("click", async () => {
      const { act, job } = b.dataset;
      try {
        const r = await api(`/api/jobs/${encodeURIComponent(job)}/${act}`, { method: "POST" });
        if (act === "trigger") {
          const id = r.executionIds[0];
          say(`Triggered ${job}: execution ${id}`, "ok");
          location.hash = `#/executions/${id}`;
        } else {
          say(`${job} ${act}d`, "ok");
          render();
        }
      } catch (e) {
        say(e.message, "error");
      }
    });
  }
  view.querySelector("#new-job").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const def = JSON.parse(ev.target.definition.value);
      const job = await api("/api/jobs", { method: "POST", body: def });
      say(`Created job ${job.id} (version ${job.version})`, "ok");
      render();
    } catch (e) {
      say(e.message, "error");
    }
  });
}

const filters = { job: "", state: "", agent: "" };

async function executionsView(seq, cursor) {
  const q = new URLSearchParams({ limit: "50" });
  for (const [k, v] of Object.entries(filters)) if (v) q.set(k, v);
  if (cursor) q.set("cursor", cursor);
  const { items, nextCursor } = await api(`/api/executions?${q}`);
  if (seq !== renderSeq) return;
  view.innerHTML = `<h2>Executions ${cursor ? '<span class="muted">(older page; live updates paused)</span>' : '<span class="muted">(live)</span>'}</h2>
  <form class="filters" id="filters">
    <label>job <input name="job" value="${h(filters.job)}" /></label>
    <label>state <input name="state" placeholder="FAILED,TIMED_OUT" value="${h(filters.state)}" /></label>
    <label>agent <input name="agent" value="${h(filters.agent)}" /></label>
    <button type="submit">Filter</button>
  </form>
  ${table(
    ["execution", "job / command", "handler", "state", "agent", "round", "fire at", "finished"],
    items.map((e) => [
      td(`<a href="#/executions/${h(e.id)}">${h(e.id)}</a>`),
      td(h(e.jobId ?? `command → ${e.targetAgentId}`)),
      td(h(e.handler)),
      td(state(e.state)),
      td(h(e.agentId ?? "–")),
      td(h(e.round), "num"),
      td(time(e.fireAt)),
      td(time(e.finishedAt)),
    ]),
    (i) => `data-execution="${h(items[i].id)}"`,
  )}
  ${nextCursor ? `<p><button id="older">Older</button></p>` : ""}`;
  view.querySelector("#filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    for (const k of Object.keys(filters)) filters[k] = ev.target[k].value.trim();
    render();
  });
  view.querySelector("#older")?.addEventListener("click", () => {
    clearInterval(refresh);
    executionsView(++renderSeq, nextCursor).catch(showError);
  });
  if (!cursor) live(() => executionsView(renderSeq), 1000);
}

async function executionView(seq, id) {
  const { execution: e, timeline } = await api(`/api/executions/${encodeURIComponent(id)}`);
  if (seq !== renderSeq) return;
  const open = OPEN_STATES.has(e.state);
  view.innerHTML = `<h2>Execution ${h(e.id)} ${state(e.state)}</h2>
  <div class="card">
    <div>${e.jobId ? `job <a href="#/jobs">${h(e.jobId)}</a> v${h(e.jobVersion)}` : `command for ${h(e.targetAgentId)}`} · handler <b>${h(e.handler)}</b> · attempt ${h(e.attempt)}/${h(e.maxAttempts)} · round ${h(e.round)}</div>
    <div>fire at ${time(e.fireAt)} · deadline ${time(e.deadline)} · agent ${h(e.agentId ?? "–")}</div>
    <div>started ${time(e.startedAt)} · finished ${time(e.finishedAt)}${e.lateMs !== null ? ` · started ${h(Number(e.lateMs).toFixed(1))} ms late` : ""}</div>
    ${e.message ? `<div>message: ${h(e.message)}</div>` : ""}
    <p>${open ? `<button data-act="cancel">Cancel</button>` : ""}
       ${["FAILED", "TIMED_OUT", "EXPIRED", "CANCELED"].includes(e.state) ? `<button data-act="retry">Retry</button>` : ""}</p>
  </div>
  <h2>Timeline</h2>
  ${table(
    ["#", "at", "event", "from", "to", "round", "agent", "reason"],
    timeline.map((t) => [
      td(h(t.seq), "num"),
      td(time(t.at)),
      td(h(t.event)),
      td(t.fromState ? state(t.fromState) : "–"),
      td(state(t.toState)),
      td(h(t.round), "num"),
      td(h(t.agentId ?? "–")),
      td(h(t.reason ?? "")),
    ]),
    () => `class="timeline-entry"`,
  )}
  <h2>Params</h2><pre>${h(JSON.stringify(e.params, null, 2))}</pre>
  ${e.result ? `<h2>Result</h2><pre>${h(JSON.stringify(e.result, null, 2))}</pre>` : ""}`;
  for (const b of view.querySelectorAll("button[data-act]")) {
    b.addEventListener("click", async () => {
      try {
        const r = await api(`/api/executions/${encodeURIComponent(id)}/${b.dataset.act}`, {
          method: "POST",
        });
        if (b.dataset.act === "retry") location.hash = `#/executions/${r.executionId}`;
        else render();
      } catch (err) {
        say(err.message, "error");
      }
    });
  }
  if (open) live(() => executionView(renderSeq, id), 1000);
}

function commandView() {
  view.innerHTML = `<h2>Send a device command</h2>
  <form class="card" id="command">
    <label>Agent id <input name="agentId" placeholder="gateway-01" /></label>
    <label>— or agents with tags <input name="tags" placeholder="site=north,floor=2" /></label>
    <label>Handler <input name="handler" value="echo" required /></label>
    <label>Params (JSON) <textarea name="params" spellcheck="false">{}</textarea></label>
    <label>Start in <input name="in" type="number" min="0" step="0.1" value="0" /> s</label>
    <label>Deadline: <input name="deadline" type="number" min="0.1" step="0.1" value="30" /> s after the start</label>
    <button class="primary" type="submit">Send</button>
  </form>
  <div id="sent"></div>`;
  view.querySelector("#command").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    try {
      const at = Date.now() + Number(f.in.value) * 1000;
      const body = {
        handler: f.handler.value.trim(),
        params: JSON.parse(f.params.value || "{}"),
        at,
        deadline: at + Number(f.deadline.value) * 1000,
      };
      if (f.agentId.value.trim()) body.agentId = f.agentId.value.trim();
      else {
        const tags = {};
        for (const pair of f.tags.value.split(",").filter(Boolean)) {
          const [k, v = ""] = pair.split("=");
          tags[k.trim()] = v.trim();
        }
        body.selector = { tags };
      }
      const r = await api("/api/commands", { method: "POST", body });
      say(`Sent to ${r.targets.length} agent(s)`, "ok");
      view.querySelector("#sent").innerHTML = table(
        ["agent", "execution"],
        r.targets.map((t) => [
          td(h(t.agentId)),
          td(`<a href="#/executions/${h(t.executionId)}">${h(t.executionId)}</a>`),
        ]),
      );
    } catch (e) {
      say(e.message, "error");
    }
  });
}

function previewView() {
  view.innerHTML = `<h2>Cron preview</h2>
  <form class="card" id="preview">
    <label>Expression (5 fields, or 6 with seconds first) <input name="expr" value="0 9 * * 1-5" required /></label>
    <label>Time zone (IANA) <input name="tz" value="UTC" /></label>
    <label>How many <input name="n" type="number" min="1" max="100" value="10" /></label>
    <button class="primary" type="submit">Preview</button>
  </form>
  <div id="times"></div>`;
  view.querySelector("#preview").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const f = ev.target;
    try {
      const r = await api("/api/preview", {
        method: "POST",
        body: {
          trigger: { type: "cron", expr: f.expr.value.trim(), tz: f.tz.value.trim() || "UTC" },
          n: Number(f.n.value),
        },
      });
      say("", "");
      view.querySelector("#times").innerHTML = table(
        ["#", "UTC", `local (${h(f.tz.value.trim() || "UTC")})`],
        r.times.map((t, i) => [
          td(i + 1, "num"),
          td(time(t)),
          td(
            h(
              new Date(t).toLocaleString("en-GB", {
                timeZone: f.tz.value.trim() || "UTC",
                dateStyle: "medium",
                timeStyle: "long",
              }),
            ),
          ),
        ]),
        () => `class="preview-time"`,
      );
    } catch (e) {
      say(e.message, "error");
    }
  });
}

// ---------------------------------------------------------------- routing

function live(fn, everyMs) {
  clearInterval(refresh);
  refresh = setInterval(() => fn().catch(showError), everyMs);
}

function showError(e) {
  say(e.message, "error");
}

function render() {
  clearInterval(refresh);
  const seq = ++renderSeq;
  const [, page = "fleet", id] = location.hash.split("/");
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.nav === page);
  }
  say("");
  const views = {
    fleet: () => fleetView(seq).then(() => live(() => fleetView(renderSeq), 2000)),
    jobs: () => jobsView(seq),
    executions: () =>
      id ? executionView(seq, decodeURIComponent(id)) : executionsView(seq, undefined),
    command: async () => commandView(),
    preview: async () => previewView(),
  };
  (views[page] ?? views.fleet)().catch(showError);
}

window.addEventListener("hashchange", render);
render();
