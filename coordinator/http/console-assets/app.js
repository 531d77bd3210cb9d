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
  if (options.idempotencyKey !== undefined) headers["idempotency-key"] = options.idempotencyKey;
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
    const e = new Error(errorText(res, data?.error, options.labels));
    e.code = data?.error?.code;
    e.status = res.status;
    throw e;
  }
  return data;
}

/**
 * Sends a request that makes executions (a command, a job's trigger, a retry) at most once,
 * however often it is clicked: its button is disabled until the answer comes, and it carries an
 * `Idempotency-Key` (docs/api.md). A request whose answer never came (the network failed, or the
 * coordinator answered 5xx) may have made them; the next click with the same form sends the same
 * body with the same key, so the coordinator answers what it made then rather than making more.
 * `unanswered` holds the request without an answer per `slot` (the command form, a job's or an
 * execution's button), with `form`, what was typed when it was made.
 */
const unanswered = new Map();
async function sendOnce(button, slot, form, makeBody, path, options = {}) {
  if (button.disabled) return undefined;
  const last = unanswered.get(slot);
  const again = last !== undefined && last.form === form;
  const attempt = again ? last : { form, body: makeBody(), key: newKey() };
  unanswered.set(slot, attempt);
  button.disabled = true;
  try {
    const r = await api(path, {
      ...options,
      method: "POST",
      body: attempt.body,
      idempotencyKey: attempt.key,
    });
    unanswered.delete(slot);
    return { r, again };
  } catch (e) {
    // A 4xx is an answer: nothing was made, and the next click is a new request.
    if (e.status !== undefined && e.status < 500) unanswered.delete(slot);
    if (e.status === undefined && e instanceof TypeError) {
      throw new Error(
        `no answer from the coordinator (${e.message}): it may have made this already; the same click again sends the same request with its Idempotency-Key, so it is made at most once`,
      );
    }
    throw e;
  } finally {
    button.disabled = false;
  }
}

function newKey() {
  if (typeof crypto.randomUUID === "function") return `console-${crypto.randomUUID()}`;
  const bytes = crypto.getRandomValues(new Uint8Array(16));
  return `console-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

// ---------------------------------------------------------------- errors

/**
 * The one place an API error becomes what the operator reads. The API names each problem by its
 * request path (`body.trigger.tz`), which the operator never typed: a field the view labels is
 * named by its label ("Time zone: …"), any other by its path inside the request (`trigger.tz: …`).
 */
function errorText(res, err, labels = {}) {
  const issues = Array.isArray(err?.issues)
    ? err.issues.map((i) => `${fieldName(i.path, labels)}: ${i.message}`).join("; ")
    : "";
  const message = err?.message ? stripRequestPaths(String(err.message)) : "";
  return `${res.status} ${err?.code ?? ""}: ${issues || message || res.statusText}`;
}

/** An issue's path without its `body.`/`query.`/`params.` part, or the label a view gave it. */
function fieldName(path, labels) {
  const dotted = Array.isArray(path) ? path.join(".") : String(path ?? "");
  const bare = dotted.replace(/^(body|query|params)(\.|$)/, "");
  if (labels[bare]) return labels[bare];
  // A problem inside a labelled field (one tag of "Agent tags"): the label and the rest.
  const inside = Object.keys(labels).find((k) => bare.startsWith(`${k}.`));
  if (inside) return `${labels[inside]} (${bare.slice(inside.length + 1)})`;
  return bare || "request";
}

/** The same for paths inside a message's text ("invalid request\nbody.shards: …"). */
function stripRequestPaths(text) {
  return text.replace(/(^|[\s(])(?:body|query|params)\.(?=[\w[])/g, "$1");
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

/**
 * A table in a box of its own that scrolls sideways when the table is wider than the screen (a
 * phone); downwards it grows with its rows and the page scrolls, so no row is ever cut off.
 */
function table(headers, rows, rowAttrs = () => "") {
  return `<div class="table-box"><table><thead><tr>${headers.map((x) => `<th>${h(x)}</th>`).join("")}</tr></thead>
    <tbody>${rows.map((r, i) => `<tr ${rowAttrs(i)}>${r.join("")}</tr>`).join("") || `<tr><td colspan="${headers.length}" class="muted">none</td></tr>`}</tbody></table></div>`;
}

const td = (v, cls = "") => `<td class="${cls}">${v}</td>`;

const jobHref = (id) => `#/jobs/${encodeURIComponent(id)}`;
const jobLink = (id) => `<a href="${h(jobHref(id))}">${h(id)}</a>`;
const executionLink = (id) => `<a href="#/executions/${h(encodeURIComponent(id))}">${h(id)}</a>`;

/** A duration in milliseconds as people write it: 500 ms, 30 s, 5 min, 2 h. */
function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 1000 || ms % 1000 !== 0) return `${ms} ms`;
  if (ms % 3_600_000 === 0) return `${ms / 3_600_000} h`;
  if (ms % 60_000 === 0) return `${ms / 60_000} min`;
  return `${ms / 1000} s`;
}

/** A UTC instant in an IANA zone, as a person there reads it. */
function zoned(ms, tz) {
  return new Date(ms).toLocaleString("en-GB", {
    timeZone: tz,
    dateStyle: "medium",
    timeStyle: "long",
  });
}

const EXECUTION_HEADERS = [
  "execution",
  "job / command",
  "handler",
  "state",
  "agent",
  "round",
  "fire at",
  "finished",
];

function executionRow(e) {
  return [
    td(executionLink(e.id)),
    td(e.jobId ? jobLink(e.jobId) : h(`command → ${e.targetAgentId}`)),
    td(h(e.handler)),
    td(state(e.state)),
    td(h(e.agentId ?? "–")),
    td(h(e.round), "num"),
    td(time(e.fireAt)),
    td(time(e.finishedAt)),
  ];
}

/** Pause, resume and trigger buttons (`data-act`, `data-job`) under root; `done` after a change. */
function bindJobButtons(root, done) {
  for (const b of root.querySelectorAll("button[data-act][data-job]")) {
    b.addEventListener("click", async () => {
      const { act, job } = b.dataset;
      const path = `/api/jobs/${encodeURIComponent(job)}/${act}`;
      try {
        const r =
          act === "trigger"
            ? (await sendOnce(b, `trigger ${job}`, "", () => undefined, path))?.r
            : await api(path, { method: "POST" });
        if (r === undefined) return; // a click while the trigger before it waits for its answer
        if (act === "trigger") {
          const id = r.executionIds[0];
          say(`Triggered ${job}: execution ${id}`, "ok");
          location.hash = `#/executions/${encodeURIComponent(id)}`;
        } else {
          say(`${job} ${act}d`, "ok");
          done();
        }
      } catch (e) {
        say(e.message, "error");
      }
    });
  }
}

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

/** Agents a page of the fleet shows; `GET /api/agents` takes up to 1000. */
const FLEET_PAGE = 100;

const FLEET_HEADERS = [
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
];

/**
 * The fleet page's filters, read from the hash (`#/fleet?q=gw&status=offline&tag=site=north`), so
 * a reload or a shared link shows the same agents.
 */
function fleetFilters() {
  const query = new URLSearchParams(location.hash.split("?")[1] ?? "");
  return {
    q: query.get("q")?.trim() ?? "",
    status: query.get("status")?.trim() ?? "",
    tag: query.get("tag")?.trim() ?? "",
  };
}

/** The hash that shows the fleet with these filters. */
function fleetHash(filters) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(filters)) if (v) query.set(k, v);
  const text = query.toString();
  return text ? `#/fleet?${text}` : "#/fleet";
}

/** The options of a filter's select: "" reads "any"; `selected` is the one in force. */
function filterOptions(values, selected) {
  return values
    .map(
      (v) =>
        `<option value="${h(v)}"${v === selected ? " selected" : ""}>${h(v || "any")}</option>`,
    )
    .join("");
}

/**
 * Shows a listing under the filters `hash` says. The same filters again make no hashchange, so
 * the listing is redrawn from its first page here.
 */
function showFiltered(hash) {
  if (hash === location.hash) render();
  else location.hash = hash;
}

/**
 * A listing read a page at a time by cursor, with a button to the next page and one back, and
 * read again every 2 s while its view (render number `seq`) is shown. `fetchPage(cursor)` reads
 * a page (`{ nextCursor, … }`; cursor null: the first), `draw(page, n)` shows it as page `n`
 * (from 1). The cursor of every page from the first to the shown one is kept: next pushes, back
 * pops.
 */
async function pagedListing(seq, next, back, fetchPage, draw) {
  const cursors = [null];
  let nextCursor = null;
  let loads = 0;
  let loading = false;
  const load = async () => {
    const mine = ++loads;
    loading = true;
    try {
      const page = await fetchPage(cursors.at(-1));
      if (seq !== renderSeq || mine !== loads) return; // left the view, or a newer load began
      draw(page, cursors.length);
      nextCursor = page.nextCursor ?? null;
      back.disabled = cursors.length === 1;
      next.disabled = nextCursor === null;
    } finally {
      if (mine === loads) loading = false;
    }
  };
  next.addEventListener("click", () => {
    if (nextCursor === null) return;
    cursors.push(nextCursor);
    nextCursor = null; // a second click before the page comes must not skip one
    next.disabled = true;
    load().catch(showError);
  });
  back.addEventListener("click", () => {
    if (cursors.length === 1) return;
    cursors.pop();
    back.disabled = true;
    load().catch(showError);
  });
  await load();
  if (seq !== renderSeq) return; // another view's timer is not this one's to replace
  // A tick while a page is still coming is skipped: against a slow coordinator they must not pile up.
  live(async () => {
    if (!loading) await load();
  }, 2000);
}

/**
 * One page of the fleet, filtered by the coordinator: `{ items, nextCursor, total, counts }`. A
 * coordinator from before paging answers `{ items }` with every agent and ignores the filters:
 * that answer is filtered here and is the only page.
 */
async function fleetPage(filters, cursor) {
  const query = new URLSearchParams({ limit: String(FLEET_PAGE) });
  for (const [k, v] of Object.entries(filters)) if (v) query.set(k, v);
  if (cursor) query.set("cursor", cursor);
  const page = await api(`/api/agents?${query}`, {
    labels: { q: "search", status: "status", tag: "tag" },
  });
  if (page.counts !== undefined) return page;
  const items = page.items.filter(fleetMatcher(filters));
  const online = items.filter((a) => a.status === "online").length;
  return {
    items,
    nextCursor: null,
    total: items.length,
    counts: { online, offline: items.length - online },
  };
}

/** The filters as the API applies them: an id substring in any case, the status, every tag. */
function fleetMatcher({ q, status, tag }) {
  const needle = q.toLowerCase();
  const tags = tag
    .split(",")
    .map((pair) => pair.trim())
    .filter(Boolean)
    .map((pair) => {
      const at = pair.indexOf("=");
      return at < 0 ? [pair, ""] : [pair.slice(0, at).trim(), pair.slice(at + 1).trim()];
    });
  return (a) =>
    (!status || a.status === status) &&
    (!needle || String(a.agentId).toLowerCase().includes(needle)) &&
    tags.every(([k, v]) => a.tags?.[k] === v);
}

/**
 * What an agent's native addon must be built for (hello.target), in one word; "no target" for an
 * agent that reports none (it is offered no agent.update).
 */
function targetText(t) {
  if (!t) return "no target";
  return `${t.platform}-${t.arch}-${t.libc}${t.nodeAbi == null ? "" : `-abi${t.nodeAbi}`}`;
}

/**
 * A listing's pager: a back and a forward button (`#NAME-ID`, disabled until a page is drawn)
 * around the place in the listing (`#NAME-page`).
 */
function pagerHtml(name, [backId, backLabel], [forwardId, forwardLabel]) {
  return `<p class="pager"><button id="${name}-${backId}" disabled>${backLabel}</button>
    <span id="${name}-page"></span>
    <button id="${name}-${forwardId}" disabled>${forwardLabel}</button></p>`;
}

const agentLink = (id) => `<a href="#/fleet/${h(encodeURIComponent(id))}">${h(id)}</a>`;

function fleetRow(a) {
  return [
    td(agentLink(a.agentId)),
    td(state(a.status)),
    td(h(a.profile)),
    td(
      `${h(a.bundleVersion)} <span class="muted">${h(String(a.bundleSha256 ?? "").slice(0, 12))}</span>` +
        `<br /><span class="muted" data-target>${h(targetText(a.target))}</span>`,
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
  ];
}

/**
 * The fleet, a page at a time, with its counts by status. The form is drawn once; the live
 * refresh redraws only the counts, the page's rows (at most FLEET_PAGE) and the pager, so what
 * the operator is typing stays and the page they are on is the page refreshed.
 */
async function fleetView(seq) {
  const filters = fleetFilters();
  const statuses = ["", "online", "offline"];
  view.innerHTML = `<h2>Fleet <span class="muted">(live)</span></h2>
  <form class="filters" id="fleet-filters">
    <label>search <input name="q" type="search" placeholder="agent id" value="${h(filters.q)}" /></label>
    <label>status <select name="status">${filterOptions(statuses, filters.status)}</select></label>
    <label>tag <input name="tag" placeholder="site=north" value="${h(filters.tag)}" /></label>
    <button type="submit">Filter</button>
  </form>
  <p id="fleet-counts"></p>
  <div id="fleet-agents"></div>
  ${pagerHtml("fleet", ["previous", "Previous"], ["next", "Next"])}`;
  const previous = view.querySelector("#fleet-previous");
  const next = view.querySelector("#fleet-next");
  view.querySelector("#fleet-filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const f = ev.target;
    const hash = fleetHash({
      q: f.q.value.trim(),
      status: f.status.value,
      tag: f.tag.value.trim(),
    });
    showFiltered(hash);
  });
  await pagedListing(
    seq,
    next,
    previous,
    (cursor) => fleetPage(filters, cursor),
    (page, n) => drawFleetPage(page, n),
  );
}

/**
 * One agent: what its hello and heartbeats said, and its update history (`agent.update`
 * executions, newest first), refreshed live.
 */
async function agentView(seq, id) {
  const path = `/api/agents/${encodeURIComponent(id)}`;
  const load = async () => {
    const [a, updates] = await Promise.all([api(path), api(`${path}/updates?limit=50`)]);
    if (seq !== renderSeq) return;
    view.innerHTML = `<h2>Agent ${h(a.agentId)} ${state(a.status)} <span class="muted">(live)</span></h2>
    <div class="card"><dl class="facts">${[
      ["profile", h(a.profile)],
      [
        "version",
        `${h(a.bundleVersion)} <span class="muted">${h(String(a.bundleSha256 ?? ""))}</span>`,
      ],
      ["native target", h(targetText(a.target))],
      ["handlers", h((a.handlers ?? []).join(", "))],
      [
        "tags",
        h(
          Object.entries(a.tags ?? {})
            .map(([k, v]) => `${k}=${v}`)
            .join(", ") || "none",
        ),
      ],
      ["last seen", ago(a.lastSeenAt)],
    ]
      .map(([k, v]) => `<dt>${h(k)}</dt><dd>${v}</dd>`)
      .join("")}</dl></div>
    <h2>Updates</h2>
    <div id="agent-updates">${
      updates.items.length === 0
        ? '<p class="muted">No agent.update sent to this agent.</p>'
        : table(
            ["sent", "from", "to", "state", "rollout", "message"],
            updates.items.map((u) => [
              td(ago(u.createdAt)),
              td(h(u.fromVersion ?? "–")),
              td(h(u.version ?? "–")),
              td(
                `<a href="#/executions/${h(encodeURIComponent(u.executionId))}">${state(u.state)}</a>`,
              ),
              td(
                u.rolloutId
                  ? `<a href="#/rollouts/${h(encodeURIComponent(u.rolloutId))}">${h(u.rolloutId)}</a>`
                  : "–",
              ),
              td(h(u.message ?? "")),
            ]),
          )
    }</div>`;
  };
  await load();
  live(load, 2000);
}

/** The counts, the rows and the place in the fleet of one page (number `n`, from 1). */
function drawFleetPage({ items, total, counts }, n) {
  view.querySelector("#fleet-counts").innerHTML =
    `<span class="state online" data-count="online">${h(counts.online)}</span> online · ` +
    `<span class="state offline" data-count="offline">${h(counts.offline)}</span> offline · ` +
    `<b data-count="total">${h(total)}</b> total`;
  view.querySelector("#fleet-agents").innerHTML = table(
    FLEET_HEADERS,
    items.map(fleetRow),
    (i) => `data-agent="${h(items[i].agentId)}"`,
  );
  const first = (n - 1) * FLEET_PAGE;
  view.querySelector("#fleet-page").textContent = items.length
    ? `page ${n} · showing ${first + 1}–${first + items.length} of ${total}`
    : `page ${n} · none of ${total}`;
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
      td(`${jobLink(j.id)} <span class="muted">v${h(j.version)}</span>`),
      td(h(j.definition.handler)),
      td(h(triggerText(j.definition.trigger))),
      td(j.paused ? '<span class="state SKIPPED">paused</span>' : time(j.nextFireAt)),
      td(
        last[i]
          ? `<a href="#/executions/${h(encodeURIComponent(last[i].id))}">${state(last[i].state)}</a>`
          : "–",
      ),
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
  bindJobButtons(view, render);
  view.querySelector("#new-job").addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const def = JSON.parse(ev.target.definition.value);
      const job = await api("/api/jobs", { method: "POST", body: def });
      say(`Created job ${job.id} (version ${job.version})`, "ok");
      location.hash = jobHref(job.id);
    } catch (e) {
      say(e.message, "error");
    }
  });
}

/** The parts of a job definition an operator reads first, as label/value pairs. */
function definitionFacts(d) {
  const facts = [
    ["handler", h(d.handler)],
    ["trigger", h(triggerText(d.trigger))],
    ["params", `<code>${h(JSON.stringify(d.params ?? {}))}</code>`],
    ["routing", h(d.routing?.strategy ?? "")],
    [
      "agents",
      Object.keys(d.tags ?? {}).length
        ? h(
            Object.entries(d.tags)
              .map(([k, v]) => `${k}=${v}`)
              .join(", "),
          )
        : "any",
    ],
    ["shards", h(d.shards)],
    ["overlap", h(d.overlap?.policy ?? "")],
    ["misfire", h(d.misfire?.policy ?? "")],
    ["timeout", h(duration(d.timeout))],
    ["deadline", `${h(duration(d.deadline))} after the fire time`],
    [
      "retry",
      d.retry?.maxAttempts > 1
        ? h(
            `${d.retry.maxAttempts} attempts, backoff ${duration(d.retry.baseMs)} to ${duration(d.retry.capMs)}`,
          )
        : "none (1 attempt)",
    ],
    ["priority", h(d.priority)],
  ];
  if (d.group) facts.push(["group", h(d.group)]);
  if (d.concurrency) facts.push(["concurrency", h(d.concurrency)]);
  return facts;
}

/**
 * A job's own page: its definition (readable, and as stored), its versions and who made them,
 * its next fire times (in UTC and, for a cron trigger, in its zone) and its recent executions.
 */
async function jobView(seq, id) {
  const path = `/api/jobs/${encodeURIComponent(id)}`;
  // A deleted job has no definition or fire times, but its history and executions remain.
  const unlessDeleted = (fallback) => (e) => {
    if (e.code === "AX_JOB_NOT_FOUND") return fallback;
    throw e;
  };
  const [job, history, next, runs] = await Promise.all([
    api(path).catch(unlessDeleted(null)),
    api(`${path}/history`),
    api(`${path}/preview?n=10`).catch(unlessDeleted({ times: [] })),
    api(`/api/executions?job=${encodeURIComponent(id)}&limit=20`),
  ]);
  if (seq !== renderSeq) return;
  if (!job && history.items.length === 0) throw new Error(`404 AX_JOB_NOT_FOUND: no job "${id}"`);
  view.innerHTML = `${job ? jobDefinition(job, next) : deletedJob(id, history.items)}
  <h2>Versions and changes</h2>
  ${table(
    ["#", "at", "change", "version", "by"],
    history.items
      .slice()
      .reverse()
      .map((e) => [
        td(h(e.seq), "num"),
        td(time(e.at)),
        td(h(e.action)),
        td(e.version === null ? "–" : `v${h(e.version)}`, "num"),
        td(h(e.actor)),
      ]),
    () => `class="job-version"`,
  )}
  <h2>Recent executions <span class="muted">(live)</span></h2>
  <div id="job-executions">${jobExecutions(runs.items)}</div>
  <p><a href="#/executions" id="all-executions">All executions of ${h(id)}</a></p>`;
  bindJobButtons(view, render);
  view.querySelector("#all-executions").addEventListener("click", () => {
    for (const k of Object.keys(filters)) filters[k] = "";
    filters.job = id;
  });
  live(async () => {
    const r = await api(`/api/executions?job=${encodeURIComponent(id)}&limit=20`);
    const box = view.querySelector("#job-executions");
    if (box) box.innerHTML = jobExecutions(r.items);
  }, 2000);
}

/** The head of a job's page: its definition and buttons, then its next fire times. */
function jobDefinition(job, next) {
  const d = job.definition;
  const tz = d.trigger?.tz;
  return `<h2>Job ${h(job.id)} <span class="muted">v${h(job.version)}</span>
    ${job.paused ? '<span class="state SKIPPED">paused</span>' : ""}</h2>
  <div class="card" id="job-definition">
    <dl class="facts">${definitionFacts(d)
      .map(([k, v]) => `<dt>${h(k)}</dt><dd>${v}</dd>`)
      .join("")}</dl>
    <p class="muted">created ${time(job.createdAt)} · updated ${time(job.updatedAt)}${job.updatedBy ? ` by ${h(job.updatedBy)}` : ""}</p>
    <details><summary>Definition as JSON</summary><pre>${h(JSON.stringify(d, null, 2))}</pre></details>
    <p>
      <button data-act="${job.paused ? "resume" : "pause"}" data-job="${h(job.id)}">${job.paused ? "Resume" : "Pause"}</button>
      <button class="primary" data-act="trigger" data-job="${h(job.id)}">Trigger now</button>
    </p>
  </div>
  <h2>Next fire times</h2>
  ${
    next.times.length
      ? table(
          ["#", "UTC", ...(tz ? [`local (${tz})`] : [])],
          next.times.map((t, i) => [
            td(i + 1, "num"),
            td(time(t)),
            ...(tz ? [td(h(zoned(t, tz)))] : []),
          ]),
          () => `class="next-fire"`,
        )
      : `<p class="muted" id="no-fires">none (${h(triggerText(d.trigger))})</p>`
  }
  ${job.paused && next.times.length ? '<p class="muted">Paused: these times are skipped until it is resumed.</p>' : ""}`;
}

function deletedJob(id, history) {
  const deleted = history.findLast((e) => e.action === "deleted");
  return `<h2>Job ${h(id)} <span class="state CANCELED">deleted</span></h2>
  <div class="card" id="job-deleted">Deleted${deleted ? ` ${time(deleted.at)} by ${h(deleted.actor)}` : ""}; its versions and executions remain.</div>`;
}

function jobExecutions(items) {
  return table(
    EXECUTION_HEADERS,
    items.map(executionRow),
    (i) => `data-execution="${h(items[i].id)}"`,
  );
}

const filters = { job: "", state: "", agent: "" };

async function executionsView(seq, cursor) {
  const q = new URLSearchParams({ limit: "50" });
  for (const [k, v] of Object.entries(filters)) if (v) q.set(k, v);
  if (cursor) q.set("cursor", cursor);
  const { items, nextCursor } = await api(`/api/executions?${q}`, {
    labels: { job: "job", state: "state", agent: "agent" },
  });
  if (seq !== renderSeq) return;
  view.innerHTML = `<h2>Executions ${cursor ? '<span class="muted">(older page; live updates paused)</span>' : '<span class="muted">(live)</span>'}</h2>
  <form class="filters" id="filters">
    <label>job <input name="job" value="${h(filters.job)}" /></label>
    <label>state <input name="state" placeholder="FAILED,TIMED_OUT" value="${h(filters.state)}" /></label>
    <label>agent <input name="agent" value="${h(filters.agent)}" /></label>
    <button type="submit">Filter</button>
  </form>
  ${table(EXECUTION_HEADERS, items.map(executionRow), (i) => `data-execution="${h(items[i].id)}"`)}
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
  // Several coordinators on one store: each entry names the one that wrote it.
  const by = (t) => t.detail?.coordinator ?? null;
  const coordinators = timeline.some((t) => by(t) !== null);
  const lastBy = [...timeline].reverse().find((t) => by(t) !== null);
  view.innerHTML = `<h2>Execution ${h(e.id)} ${state(e.state)}</h2>
  <div class="card">
    <div>${e.jobId ? `job ${jobLink(e.jobId)} v${h(e.jobVersion)}` : `command for ${h(e.targetAgentId)}`} · handler <b>${h(e.handler)}</b> · attempt ${h(e.attempt)}/${h(e.maxAttempts)} · round ${h(e.round)}</div>
    <div>fire at ${time(e.fireAt)} · deadline ${time(e.deadline)} · agent ${h(e.agentId ?? "–")}${lastBy ? ` · coordinator <b class="coordinator">${h(by(lastBy))}</b>` : ""}</div>
    <div>started ${time(e.startedAt)} · finished ${time(e.finishedAt)}${e.lateMs !== null ? ` · started ${h(Number(e.lateMs).toFixed(1))} ms late` : ""}</div>
    ${e.message ? `<div>message: ${h(e.message)}</div>` : ""}
    <p>${open ? `<button data-act="cancel">Cancel</button>` : ""}
       ${["FAILED", "TIMED_OUT", "EXPIRED", "CANCELED"].includes(e.state) ? `<button data-act="retry">Retry</button>` : ""}</p>
  </div>
  <h2>Timeline</h2>
  ${table(
    [
      "#",
      "at",
      "event",
      "from",
      "to",
      "round",
      "agent",
      ...(coordinators ? ["coordinator"] : []),
      "reason",
    ],
    timeline.map((t) => [
      td(h(t.seq), "num"),
      td(time(t.at)),
      td(h(t.event)),
      td(t.fromState ? state(t.fromState) : "–"),
      td(state(t.toState)),
      td(h(t.round), "num"),
      td(h(t.agentId ?? "–")),
      ...(coordinators ? [td(h(by(t) ?? "–"))] : []),
      td(h(t.reason ?? "")),
    ]),
    () => `class="timeline-entry"`,
  )}
  <h2>Params</h2><pre>${h(JSON.stringify(e.params, null, 2))}</pre>
  ${e.result ? `<h2>Result</h2><pre>${h(JSON.stringify(e.result, null, 2))}</pre>` : ""}`;
  for (const b of view.querySelectorAll("button[data-act]")) {
    b.addEventListener("click", async () => {
      const path = `/api/executions/${encodeURIComponent(id)}/${b.dataset.act}`;
      try {
        if (b.dataset.act === "retry") {
          // A retry makes an execution: once, as a command (sendOnce).
          const sent = await sendOnce(b, `retry ${id}`, "", () => undefined, path);
          if (sent !== undefined) location.hash = `#/executions/${sent.r.executionId}`;
        } else {
          await api(path, { method: "POST" });
          render();
        }
      } catch (err) {
        say(err.message, "error");
      }
    });
  }
  if (open) live(() => executionView(renderSeq, id), 1000);
}

// ---------------------------------------------------------------- rollouts

/** Rollouts a page of the list shows. */
const ROLLOUT_PAGE = 50;

const ROLLOUT_STATES = ["CREATED", "IN_PROGRESS", "PAUSED", "ABORTED", "COMPLETED"];
const FINAL_ROLLOUT_STATES = new Set(["ABORTED", "COMPLETED"]);

/** The buttons of a rollout, each shown only in the states the API allows it from (else 409). */
const ROLLOUT_ACTIONS = [
  {
    act: "pause",
    label: "Pause",
    done: "paused",
    from: (s) => s === "IN_PROGRESS" || s === "CREATED",
  },
  {
    act: "resume",
    label: "Resume",
    done: "resumed",
    from: (s) => s === "PAUSED" || s === "CREATED",
  },
  { act: "abort", label: "Abort", done: "aborted", from: (s) => !FINAL_ROLLOUT_STATES.has(s) },
];

const ROLLOUT_HEADERS = [
  "rollout",
  "state",
  "wave",
  "reached / matching",
  "succeeded",
  "failed",
  "created",
];

const rolloutHref = (id) => `#/rollouts/${encodeURIComponent(id)}`;
const rolloutLink = (id) => `<a href="${h(rolloutHref(id))}">${h(id)}</a>`;

/** The current wave, from 1, of how many, and its cumulative percent: "2 of 3 (10%)". */
function waveText(r) {
  const waves = r.waves ?? [];
  // Past the last wave once every one is done: the last is where it ended.
  const i = Math.max(0, Math.min(r.wave ?? 0, waves.length - 1));
  const w = waves[i];
  return `${i + 1} of ${waves.length || 1}${w ? ` (${w.percent}%)` : ""}`;
}

function rolloutRow(r) {
  const p = r.progress ?? {};
  return [
    td(rolloutLink(r.id)),
    td(state(r.state)),
    td(h(waveText(r))),
    td(`${h(p.reached ?? 0)} / ${h(p.matching ?? 0)}`, "num"),
    td(h(p.succeeded ?? 0), "num"),
    td(h(p.failed ?? 0), "num"),
    td(time(r.createdAt)),
  ];
}

/** The list's state filter, read from the hash (`#/rollouts?state=PAUSED`) like the fleet's. */
function rolloutsFilter() {
  return new URLSearchParams(location.hash.split("?")[1] ?? "").get("state")?.trim() ?? "";
}

/**
 * Rollouts, newest first, a page at a time (Older follows `nextCursor`, Newer goes back), with
 * the current page refreshed live; the form is drawn once, as on the fleet page.
 */
async function rolloutsView(seq) {
  const filter = rolloutsFilter();
  view.innerHTML = `<h2>Rollouts <span class="muted">(live)</span></h2>
  <form class="filters" id="rollout-filters">
    <label>state <select name="state">${filterOptions(["", ...ROLLOUT_STATES], filter)}</select></label>
    <button type="submit">Filter</button>
  </form>
  <div id="rollout-list"></div>
  ${pagerHtml("rollouts", ["newer", "Newer"], ["older", "Older"])}`;
  const newer = view.querySelector("#rollouts-newer");
  const older = view.querySelector("#rollouts-older");
  view.querySelector("#rollout-filters").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const s = ev.target.state.value;
    const hash = s ? `#/rollouts?${new URLSearchParams({ state: s })}` : "#/rollouts";
    showFiltered(hash);
  });
  await pagedListing(
    seq,
    older,
    newer,
    (cursor) => {
      const query = new URLSearchParams({ limit: String(ROLLOUT_PAGE) });
      if (filter) query.set("state", filter);
      if (cursor) query.set("cursor", cursor);
      return api(`/api/rollouts?${query}`, { labels: { state: "state" } });
    },
    (page, n) => {
      const items = page.items;
      view.querySelector("#rollout-list").innerHTML = table(
        ROLLOUT_HEADERS,
        items.map(rolloutRow),
        (i) => `data-rollout="${h(items[i].id)}"`,
      );
      view.querySelector("#rollouts-page").textContent = `page ${n}`;
    },
  );
}

/** A selector as an operator reads it: every part an agent must match, joined by "and". */
function selectorText(s = {}) {
  const parts = [];
  const tags = Object.entries(s.tags ?? {});
  if (tags.length) parts.push(`tags ${tags.map(([k, v]) => `${k}=${v}`).join(", ")}`);
  if (s.agentIds?.length) parts.push(`agent ${s.agentIds.join(" or ")}`);
  if (s.profile) parts.push(`profile ${s.profile}`);
  if (s.agentVersion) parts.push(`version ${s.agentVersion}`);
  return parts.join(" and ") || "–";
}

function rateText(rate) {
  if (rate?.perMinute !== undefined) return `at most ${rate.perMinute} agents a minute`;
  const e = rate?.exponential;
  if (e) {
    return `${e.basePerMinute} agents a minute, ×${e.factor} every ${e.stepSuccesses} successes${
      e.maxPerMinute ? `, at most ${e.maxPerMinute} a minute` : ""
    }`;
  }
  return "–";
}

function wavesText(waves = []) {
  return waves
    .map((w) => `${w.percent}%${w.soak ? ` (soak ${duration(w.soak)})` : ""}`)
    .join(" → ");
}

function abortText(a) {
  if (!a) return "never (no abort criteria)";
  const on = (a.on ?? []).join(", ");
  return `when ≥ ${a.thresholdPercent}% of ended executions are ${on}, once at least ${a.minExecuted ?? 1} ended`;
}

/** The facts of a rollout: its spec first, then when and by whom. */
function rolloutFacts(r) {
  const c = r.command ?? {};
  const facts = [
    ["selector", h(selectorText(r.selector))],
    ["handler", h(c.handler)],
    ["params", `<code>${h(JSON.stringify(c.params ?? {}))}</code>`],
    ["start", c.at ? time(c.at) : "as each agent is reached"],
    ["start within", h(duration(c.startWithin))],
    ["timeout", h(duration(c.timeout))],
    ["rate", h(rateText(r.rate))],
    ["waves", h(wavesText(r.waves))],
    ["abort", h(abortText(r.abort))],
  ];
  if (r.endsAt) facts.push(["ends at", time(r.endsAt)]);
  if (r.description) facts.unshift(["description", h(r.description)]);
  facts.push(
    ["created", `${time(r.createdAt)}${r.createdBy ? ` by ${h(r.createdBy)}` : ""}`],
    ["started", time(r.startedAt)],
    ["finished", time(r.finishedAt)],
  );
  if (r.reason) facts.push(["reason", h(r.reason)]);
  if (r.settled === false && FINAL_ROLLOUT_STATES.has(r.state)) {
    facts.push(["open executions", "being canceled"]);
  }
  return facts;
}

/** Counts of executions by state, each named in its state's colour. */
function byStateText(byState) {
  const entries = Object.entries(byState ?? {}).filter(([, n]) => n > 0);
  if (!entries.length) return '<span class="muted">none</span>';
  return entries
    .map(([s, n]) => `${state(s)} <b class="count" data-state="${h(s)}">${h(n)}</b>`)
    .join(" · ");
}

/** A bar of `of` agents, one part per execution state; the part not yet reached stays empty. */
function progressBar(byState, of) {
  const entries = Object.entries(byState ?? {}).filter(([, n]) => n > 0);
  const total = Math.max(
    Number(of) || 0,
    entries.reduce((sum, [, n]) => sum + n, 0),
    1,
  );
  const label = entries.map(([s, n]) => `${s} ${n}`).join(", ") || "none reached";
  return `<div class="bar" role="img" aria-label="${h(`${label} of ${of ?? 0}`)}">${entries
    .map(
      ([s, n]) =>
        `<span class="${h(s)}" style="width: ${((100 * n) / total).toFixed(2)}%" title="${h(`${s} ${n}`)}"></span>`,
    )
    .join("")}</div>`;
}

function rolloutProgress(r) {
  const p = r.progress ?? {};
  return `<p id="rollout-counts">reached <b data-count="reached">${h(p.reached ?? 0)}</b> of
    <b data-count="matching">${h(p.matching ?? 0)}</b> matching ·
    succeeded <b data-count="succeeded">${h(p.succeeded ?? 0)}</b> ·
    failed <b data-count="failed">${h(p.failed ?? 0)}</b> ·
    open <b data-count="open">${h(p.open ?? 0)}</b></p>
  ${progressBar(p.byState, p.matching)}
  <p id="rollout-states">${byStateText(p.byState)}</p>`;
}

/**
 * One row a wave: its cumulative percent and soak, its cap of agents, how many were reached and
 * their executions by state; the current wave says so, and until when it soaks once it is done.
 */
function rolloutWaves(r) {
  const waves = r.progress?.waves ?? r.waves ?? [];
  const final = FINAL_ROLLOUT_STATES.has(r.state);
  return table(
    ["wave", "percent", "soak", "cap", "reached", "executions", "progress", "soak until"],
    waves.map((w, i) => [
      td(`${i + 1}${i === r.wave && !final ? ' <span class="muted">current</span>' : ""}`),
      td(`${h(w.percent)}%`, "num"),
      td(w.soak ? h(duration(w.soak)) : "–"),
      td(h(w.cap ?? "–"), "num"),
      td(h(w.reached ?? 0), "num"),
      td(byStateText(w.byState)),
      td(progressBar(w.byState, w.cap)),
      td(i === r.wave && r.soakUntil ? time(r.soakUntil) : "–"),
    ]),
    (i) => `class="rollout-wave" data-wave="${i}"`,
  );
}

function rolloutTimeline(timeline) {
  return table(
    ["#", "at", "event", "from", "to", "by", "reason", "detail"],
    timeline.map((t) => [
      td(h(t.seq), "num"),
      td(time(t.at)),
      td(h(t.event)),
      td(t.fromState ? state(t.fromState) : "–"),
      td(state(t.toState)),
      td(h(t.actor ?? "–")),
      td(h(t.reason ?? "")),
      td(t.detail ? `<code>${h(JSON.stringify(t.detail))}</code>` : ""),
    ]),
    () => `class="timeline-entry"`,
  );
}

/**
 * Whether a rollout's page can stop asking: it is final and settled. An aborted one's counts still
 * change while the executions it left open are canceled; a coordinator that does not say whether
 * it settled is taken at its final state.
 */
function changesNoMore(r) {
  return FINAL_ROLLOUT_STATES.has(r.state) && r.settled !== false;
}

/**
 * A rollout's own page: its spec, its progress by state and by wave, its timeline, and the
 * buttons its state allows. It follows the rollout live until it is final and settled; the
 * reason field is drawn once, so a refresh never wipes what the operator is typing.
 */
async function rolloutView(seq, id) {
  const path = `/api/rollouts/${encodeURIComponent(id)}`;
  const first = await api(path);
  if (seq !== renderSeq) return;
  view.innerHTML = `<h2 id="rollout-head"></h2>
  <div class="card">
    <dl class="facts" id="rollout-spec"></dl>
    <details><summary>Rollout as JSON</summary><pre id="rollout-json"></pre></details>
    <form class="filters" id="rollout-actions">
      <label>reason (for pause and abort) <input name="reason" maxlength="1024" /></label>
      <span id="rollout-buttons"></span>
    </form>
  </div>
  <h2>Progress</h2>
  <div class="card" id="rollout-progress"></div>
  <h2>Waves</h2>
  <div id="rollout-waves"></div>
  <h2>Timeline</h2>
  <div id="rollout-timeline"></div>`;
  const form = view.querySelector("#rollout-actions");
  let loads = 0;
  let loading = false;

  const draw = ({ rollout: r, timeline }) => {
    const final = FINAL_ROLLOUT_STATES.has(r.state);
    const done = changesNoMore(r);
    view.querySelector("#rollout-head").innerHTML =
      `Rollout ${h(r.id)} ${state(r.state)} <span class="muted">${done ? "" : "(live)"}</span>`;
    view.querySelector("#rollout-spec").innerHTML = rolloutFacts(r)
      .map(([k, v]) => `<dt>${h(k)}</dt><dd>${v}</dd>`)
      .join("");
    view.querySelector("#rollout-json").textContent = JSON.stringify(r, null, 2);
    view.querySelector("#rollout-buttons").innerHTML = ROLLOUT_ACTIONS.filter((a) =>
      a.from(r.state),
    )
      .map(
        (a) =>
          `<button type="button" data-act="${a.act}"${a.act === "abort" ? ' class="danger"' : ""}>${a.label}</button>`,
      )
      .join(" ");
    form.hidden = final;
    view.querySelector("#rollout-progress").innerHTML = rolloutProgress(r);
    view.querySelector("#rollout-waves").innerHTML = rolloutWaves(r);
    view.querySelector("#rollout-timeline").innerHTML = rolloutTimeline(timeline ?? []);
    if (done && seq === renderSeq) clearInterval(refresh);
  };

  const load = async () => {
    const mine = ++loads;
    loading = true;
    try {
      const data = await api(path);
      if (seq !== renderSeq || mine !== loads) return; // left the view, or a newer load began
      draw(data);
    } finally {
      if (mine === loads) loading = false;
    }
  };

  form.addEventListener("submit", (ev) => ev.preventDefault());
  view.querySelector("#rollout-buttons").addEventListener("click", async (ev) => {
    const b = ev.target.closest("button[data-act]");
    if (!b) return;
    const action = ROLLOUT_ACTIONS.find((a) => a.act === b.dataset.act);
    const reason = form.reason.value.trim();
    b.disabled = true;
    try {
      await api(`${path}/${action.act}`, {
        method: "POST",
        // The body is optional; resume takes no reason.
        body: reason && action.act !== "resume" ? { reason } : undefined,
        labels: { reason: "reason" },
      });
      form.reason.value = "";
      say(`${id} ${action.done}`, "ok");
    } catch (e) {
      say(e.message, "error");
    }
    // After a refusal too: the rollout may have moved on since this page last looked.
    await load().catch(showError);
  });

  draw(first);
  if (!changesNoMore(first.rollout)) {
    live(async () => {
      if (!loading) await load();
    }, 2000);
  }
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
    // The last command's executions are not this one's: a refused command must not look sent.
    view.querySelector("#sent").innerHTML = "";
    // What was typed: the same again after a request with no answer sends that request again.
    const typed = JSON.stringify(
      ["agentId", "tags", "handler", "params", "in", "deadline"].map((n) => f[n].value),
    );
    const makeBody = () => {
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
      return body;
    };
    const button = f.querySelector("button[type=submit]");
    try {
      const sent = await sendOnce(button, "command", typed, makeBody, "/api/commands", {
        labels: {
          agentId: "Agent id",
          "selector.tags": "Agent tags",
          handler: "Handler",
          params: "Params",
          at: "Start in",
          deadline: "Deadline",
        },
      });
      if (sent === undefined) return; // a click while the command before it waits for its answer
      const r = sent.r;
      say(
        sent.again
          ? `Sent to ${r.targets.length} agent(s) (the request whose answer was lost, sent again with its Idempotency-Key: made once)`
          : `Sent to ${r.targets.length} agent(s)`,
        "ok",
      );
      view.querySelector("#sent").innerHTML = table(
        ["agent", "execution"],
        r.targets.map((t) => [td(h(t.agentId)), td(executionLink(t.executionId))]),
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
        labels: { "trigger.expr": "Expression", "trigger.tz": "Time zone", n: "How many" },
      });
      say("", "");
      view.querySelector("#times").innerHTML = table(
        ["#", "UTC", `local (${h(f.tz.value.trim() || "UTC")})`],
        r.times.map((t, i) => [
          td(i + 1, "num"),
          td(time(t)),
          td(h(zoned(t, f.tz.value.trim() || "UTC"))),
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
  // A view's own query (the fleet's filters) follows a "?"; ids in a hash are encoded, so a "?"
  // is never part of one.
  const [, page = "fleet", id] = (location.hash.split("?")[0] ?? "").split("/");
  for (const a of document.querySelectorAll("nav a")) {
    a.classList.toggle("active", a.dataset.nav === page);
  }
  say("");
  const views = {
    fleet: () => (id ? agentView(seq, decodeURIComponent(id)) : fleetView(seq)),
    jobs: () => (id ? jobView(seq, decodeURIComponent(id)) : jobsView(seq)),
    executions: () =>
      id ? executionView(seq, decodeURIComponent(id)) : executionsView(seq, undefined),
    rollouts: () => (id ? rolloutView(seq, decodeURIComponent(id)) : rolloutsView(seq)),
    command: async () => commandView(),
    preview: async () => previewView(),
  };
  (views[page] ?? views.fleet)().catch(showError);
}

window.addEventListener("hashchange", render);
render();
