// slotd operator console: pools (live slot timeline), tasks, handlers, webhook deliveries.
//
// Rules this file keeps:
// - Every value from the API reaches the page as text: elements are built with `el()`, which
//   sets strings through text nodes, never `innerHTML` (a task type or a provider's error
//   message is attacker-controlled).
// - Routes live in the URL hash (`#/tasks/ID`), so the back button and shared links work and
//   the server serves the page only at `/`.
// - Writes (cancel, retry) send a JSON content type: the loopback default refuses other
//   writes from a browser (see local_guard.rs).
"use strict";

const REFRESH_MS = 2000;
const STATUSES = ["pending", "submitted", "succeeded", "finalizing", "completed", "failed", "cancelled"];
const SVG_NS = "http://www.w3.org/2000/svg";

// ---- DOM building: text only ---------------------------------------------------------------

/** An element with attributes and children; strings and numbers become text nodes. */
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

/** An SVG element, likewise. */
function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

function setAttrs(node, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "onclick" || k === "onsubmit" || k === "onchange") node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
}

function append(node, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    node.appendChild(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

function replace(node, ...children) {
  node.replaceChildren();
  append(node, children);
}

// ---- API ---------------------------------------------------------------------------------

const keyInput = document.getElementById("key");
keyInput.value = localStorage.getItem("slotd-key") || "";
keyInput.addEventListener("change", () => {
  localStorage.setItem("slotd-key", keyInput.value);
  me = null;
  render();
});

// A key typed into another tab of the console applies here too.
window.addEventListener("storage", (e) => {
  if (e.key !== "slotd-key") return;
  keyInput.value = e.newValue || "";
  me = null;
  render();
});

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (keyInput.value) h.Authorization = "Bearer " + keyInput.value;
  return h;
}

class ApiError extends Error {
  constructor(path, status, detail) {
    super(path + ": " + (detail || "HTTP " + status));
    this.status = status;
  }
}

async function api(path, options) {
  const r = await fetch(path, Object.assign({ cache: "no-store" }, options || {}, { headers: headers(options && options.headers) }));
  if (!r.ok) {
    const p = await r.json().catch(() => ({}));
    throw new ApiError(path, r.status, p.detail);
  }
  return r.json();
}

/** A write the loopback rules accept: JSON body, JSON content type. */
function post(path) {
  return api(path, { method: "POST", headers: { "Content-Type": "application/json" }, body: "{}" });
}

function showError(e) {
  const box = document.getElementById("error");
  if (!e) { box.hidden = true; box.textContent = ""; return; }
  box.hidden = false;
  box.textContent = e.status === 401 ? "This slotd needs an API key: type it in the box above. (" + e.message + ")" : e.message;
}

let me = null;
async function whoAmI() {
  if (!me) {
    me = await api("/v1/me");
    replace(document.getElementById("who"), "tenant ", me.tenant, me.admin ? " · admin" : "");
  }
  return me;
}

// ---- formatting ----------------------------------------------------------------------------

const q = encodeURIComponent;
function time(ms) { return ms ? new Date(ms).toLocaleTimeString() : "—"; }
function dateTime(ms) { return ms ? new Date(ms).toLocaleString() : "—"; }
function duration(ms) {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return (ms / 60000).toFixed(1) + " min";
}
function bytes(n) {
  if (n === null || n === undefined || n === "") return "—";
  const v = Number(n);
  if (!isFinite(v)) return String(n);
  if (v < 1024) return v + " B";
  if (v < 1048576) return (v / 1024).toFixed(1) + " KiB";
  return (v / 1048576).toFixed(1) + " MiB";
}
function badge(status) { return el("span", { class: "badge " + String(status || "").replace(/[^a-z_]/g, "") }, status || "—"); }
function progress(done, total) {
  const bar = el("span", { class: "progress" }, el("span"));
  bar.firstChild.style.width = (total ? Math.round(100 * done / total) : 0) + "%";
  return [bar, done + "/" + total];
}
function taskLink(id) { return el("a", { href: "#/tasks/" + q(id) }, el("code", {}, id)); }
function errorText(e) {
  if (!e) return null;
  if (typeof e === "string") {
    try { e = JSON.parse(e); } catch (_) { return e; }
  }
  if (typeof e !== "object") return String(e);
  return (e.code ? "[" + e.code + "] " : "") + (e.message || JSON.stringify(e));
}
/** A stable hue per task, so one task's bars share a color; from green through blue to
 *  pink, never the orange of an over-capacity refusal. */
function hue(s) {
  let h = 0;
  for (const c of String(s)) h = (h * 31 + c.charCodeAt(0)) % 210;
  return 120 + h;
}

// ---- routing -------------------------------------------------------------------------------

function route() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query || "");
  return { page: parts[0] || "pools", id: parts[1], params };
}

function go(page, params) {
  const s = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) if (v) s.set(k, v);
  const qs = s.toString();
  location.hash = "#/" + page + (qs ? "?" + qs : "");
}

let generation = 0;
let timer = null;

/** Render the route's page, then refresh it every REFRESH_MS while it stays current. */
async function render() {
  const gen = ++generation;
  clearTimeout(timer);
  const r = route();
  for (const a of document.querySelectorAll("header nav a")) {
    a.classList.toggle("active", a.dataset.page === r.page);
  }
  const view = document.getElementById("view");
  const pages = { pools: poolsPage, tasks: r.id ? taskPage : tasksPage, handlers: handlersPage, webhooks: webhooksPage };
  const page = pages[r.page] || notFoundPage;
  let first = true;
  const tick = async () => {
    if (gen !== generation) return;
    try {
      await whoAmI();
      const again = await page(view, r, first, () => gen === generation);
      first = false;
      if (gen !== generation) return;
      showError(null);
      replace(document.getElementById("updated"), "updated " + new Date().toLocaleTimeString());
      if (again !== false) timer = setTimeout(tick, REFRESH_MS);
    } catch (e) {
      if (gen !== generation) return;
      showError(e);
      timer = setTimeout(tick, REFRESH_MS * 2);
    }
  };
  await tick();
}

window.addEventListener("hashchange", render);

function notFoundPage(view) {
  replace(view, el("h1", {}, "No such page"), el("p", {}, el("a", { href: "#/pools" }, "Back to the pools")));
  return false;
}

// ---- pools ---------------------------------------------------------------------------------

const WINDOWS = [1, 2, 5, 10, 30, 60];

async function poolsPage(view, r, first, current) {
  const minutes = WINDOWS.includes(Number(r.params.get("minutes"))) ? Number(r.params.get("minutes")) : 2;
  const pools = await api("/v1/pools");
  const timelines = await Promise.all(pools.map((p) =>
    api("/v1/pools/" + q(p.name) + "/timeline?minutes=" + minutes).catch(() => null)));
  if (!current()) return;
  const picker = el("select", { id: "window", onchange: (e) => go("pools", { minutes: e.target.value }) },
    WINDOWS.map((m) => el("option", { value: m, selected: m === minutes }, "last " + m + " min")));
  replace(view,
    el("div", { class: "row" }, el("h1", { class: "grow" }, "Pools"), el("label", { class: "muted" }, "Timeline window ", picker)),
    pools.length ? pools.map((p, i) => poolCard(p, timelines[i])) : el("p", { class: "empty" }, "No pools yet: load a handler or configure [pools]."));
}

function poolCard(p, t) {
  const u = p.units || {};
  const max = p.max_slots;
  const eff = p.effective_max_slots;
  const used = p.used;
  const lowered = eff !== null && eff !== undefined && max !== null && eff < max;
  const stats = el("div", { class: "row" },
    el("span", { class: "stat" }, el("b", {}, (used ?? "?") + " / " + (eff ?? max ?? "?")), el("span", {}, "slots used / limit")),
    el("span", { class: "stat" }, el("b", {}, max ?? "—"), el("span", {}, "configured max")),
    el("span", { class: "stat" }, el("b", { class: lowered ? "warn" : "" }, eff ?? "—"), el("span", {}, "effective limit")),
    t ? el("span", { class: "stat" }, el("b", {}, duration(t.latency.p50_ms)), el("span", {}, "job p50 (window)")) : null,
    t ? el("span", { class: "stat" }, el("b", {}, duration(t.latency.p95_ms)), el("span", {}, "job p95 (window)")) : null,
    t ? el("span", { class: "stat" }, el("b", {}, sum(t.per_minute, "over_capacity")), el("span", {}, "over capacity (1303)")) : null,
    el("span", { class: "stat" }, el("b", {}, p.lease ? (p.lease.holder || "none") : "embedded"), el("span", {}, "lease holder")));
  const chips = el("div", { class: "chips" }, STATUSES.map((s) => el("span", { class: "chip" }, s, el("b", {}, u[s] ?? 0))));
  const notes = [];
  if (lowered) notes.push(el("div", { class: "notice" }, "The provider has shown less room than configured (over-capacity answers): the scheduler fills to " + eff + " of " + max + " for now."));
  if (p.lease) notes.push(el("div", { class: "muted" }, "Lease: " + (p.lease.holder ? "held by " + p.lease.holder : "no holder") + ", " + p.lease.unheld_ms_total + " ms unheld in total."));
  return el("section", { class: "card pool", "data-pool": p.name },
    el("div", { class: "row" }, el("h2", { class: "grow" }, p.name),
      el("span", { class: "muted" }, (p.task_types || []).join(", "), p.handlers && p.handlers.length ? " · " + p.handlers.join(", ") : "")),
    stats, notes, chips,
    t ? el("div", { class: "charts" },
      el("div", {}, el("div", { class: "chart-title" }, el("span", {}, "Slot timeline (one row per slot lane)"), el("span", {}, "last " + t.minutes + " min")),
        gantt(t, max), legend()),
      el("div", {}, el("div", { class: "chart-title" }, el("span", {}, "Throughput (jobs ended / min)")), throughputChart(t)),
      el("div", {}, el("div", { class: "chart-title" }, el("span", {}, "Provider latency p50 / p95")), latencyChart(t)))
      : el("p", { class: "muted" }, "No timeline for this pool."));
}

function sum(list, key) { return (list || []).reduce((a, m) => a + (m[key] || 0), 0); }

function legend() {
  return el("div", { class: "legend" },
    el("span", {}, "color: task"),
    el("span", {}, el("i", { class: "l-open" }), "holding a slot"),
    el("span", {}, el("i", { class: "l-ended" }), "job ended"),
    el("span", {}, el("i", { class: "l-over" }), "over capacity (1303)"),
    el("span", {}, el("i", { class: "l-ret" }), "back to pending"),
    el("span", {}, el("i", { class: "l-other" }), "another tenant's"));
}

/** The slot timeline: one row per lane, a bar per interval, now at the right edge. */
function gantt(t, max) {
  const W = 900, LEFT = 34, ROW = 16, GAP = 3, AXIS = 16;
  const lanes = Math.max(t.lanes, max || 0, 1);
  const H = lanes * (ROW + GAP) + AXIS;
  const span = Math.max(1, t.now_ms - t.since_ms);
  const x = (ms) => LEFT + (W - LEFT) * (ms - t.since_ms) / span;
  const root = svg("svg", { class: "timeline", viewBox: "0 0 " + W + " " + H, role: "img", "aria-label": "slot timeline of " + t.pool });
  for (let i = 0; i < lanes; i++) {
    const y = i * (ROW + GAP);
    root.appendChild(svg("rect", { class: "lane", x: LEFT, y, width: W - LEFT, height: ROW, rx: 2 }));
    root.appendChild(svg("text", { x: LEFT - 6, y: y + ROW - 4, "text-anchor": "end" }, "#" + (i + 1)));
  }
  const step = t.minutes <= 2 ? 15000 : t.minutes <= 10 ? 60000 : 300000;
  for (let ms = t.now_ms; ms >= t.since_ms; ms -= step) {
    const gx = x(ms);
    root.appendChild(svg("line", { class: "grid", x1: gx, x2: gx, y1: 0, y2: lanes * (ROW + GAP) }));
    const ago = Math.round((t.now_ms - ms) / 1000);
    const label = ago === 0 ? "now" : ago % 60 === 0 ? "-" + ago / 60 + "m" : "-" + ago + "s";
    root.appendChild(svg("text", { x: gx, y: H - 4, "text-anchor": ago === 0 ? "end" : "middle" }, label));
  }
  for (const i of t.intervals) {
    const end = i.end_ms ?? t.now_ms;
    const x0 = x(i.start_ms);
    const w = Math.max(2, x(end) - x0);
    const mine = i.task_id !== null;
    const cls = ["bar", i.end_ms === null ? "open" : "", i.outcome === "over_capacity" ? "over_capacity" : "",
      i.outcome === "returned" ? "returned" : "", mine ? "" : "other"].filter(Boolean).join(" ");
    const fill = mine ? "hsl(" + hue(i.task_id) + ", 65%, " + (i.end_ms === null ? "55%" : "72%") + ")" : "#9ca3af";
    const rect = svg("rect", { class: cls, x: x0, y: i.slot * (ROW + GAP) + 1, width: w, height: ROW - 2, rx: 2, fill },
      svg("title", {}, (mine ? "task " + i.task_id + "\nunit " + i.unit_id + (i.tenant ? "\ntenant " + i.tenant : "") : "another tenant's unit") +
        "\n" + time(i.start_ms) + " → " + (i.end_ms === null ? "now (holding)" : time(i.end_ms) + " (" + (i.outcome || "") + ")") +
        "\n" + duration(end - i.start_ms) + (i.clipped ? " (started before the window)" : "")));
    if (mine) {
      rect.style.cursor = "pointer";
      rect.addEventListener("click", () => { location.hash = "#/tasks/" + q(i.task_id); });
    }
    root.appendChild(rect);
  }
  return root;
}

function throughputChart(t) {
  const W = 260, H = 110, B = 16, L = 22;
  const data = t.per_minute || [];
  const top = Math.max(1, ...data.map((m) => m.ended + m.over_capacity));
  const bw = (W - L) / Math.max(1, data.length);
  const root = svg("svg", { class: "throughput", viewBox: "0 0 " + W + " " + H });
  if (!data.some((m) => m.ended || m.returned)) {
    root.appendChild(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no job ended in the window"));
    return root;
  }
  root.appendChild(svg("text", { x: L - 4, y: 10, "text-anchor": "end" }, top));
  root.appendChild(svg("text", { x: L - 4, y: H - B, "text-anchor": "end" }, 0));
  data.forEach((m, k) => {
    const h1 = (H - B - 4) * m.ended / top, h2 = (H - B - 4) * m.over_capacity / top;
    const bx = L + k * bw + 1;
    root.appendChild(svg("rect", { class: "t-ended", x: bx, y: H - B - h1, width: Math.max(1, bw - 2), height: h1 },
      svg("title", {}, time(m.start_ms) + ": " + m.ended + " ended, " + m.returned + " back to pending (" + m.over_capacity + " over capacity)")));
    if (h2 > 0) root.appendChild(svg("rect", { class: "t-over", x: bx, y: H - B - h1 - h2, width: Math.max(1, bw - 2), height: h2 }));
  });
  root.appendChild(svg("line", { class: "grid", x1: L, x2: W, y1: H - B, y2: H - B }));
  root.appendChild(svg("text", { x: L, y: H - 3 }, "-" + t.minutes + "m"));
  root.appendChild(svg("text", { x: W, y: H - 3, "text-anchor": "end" }, "now"));
  return root;
}

function latencyChart(t) {
  const W = 260, H = 110, B = 16, L = 34;
  const data = t.per_minute || [];
  const top = Math.max(1, ...data.map((m) => m.p95_ms || 0));
  const bw = (W - L) / Math.max(1, data.length);
  const line = (key) => data.map((m, k) => m[key] === null ? null : [L + k * bw + bw / 2, H - B - (H - B - 4) * m[key] / top])
    .filter(Boolean).map((p) => p.join(",")).join(" ");
  const root = svg("svg", { class: "latency", viewBox: "0 0 " + W + " " + H });
  if (!data.some((m) => m.p95_ms !== null)) {
    root.appendChild(svg("text", { x: W / 2, y: H / 2, "text-anchor": "middle" }, "no job ended in the window"));
    return root;
  }
  root.appendChild(svg("text", { x: L - 4, y: 10, "text-anchor": "end" }, duration(top)));
  root.appendChild(svg("line", { class: "grid", x1: L, x2: W, y1: H - B, y2: H - B }));
  for (const key of ["p50_ms", "p95_ms"]) {
    const pts = line(key);
    if (pts) root.appendChild(svg("polyline", { class: key.slice(0, 3), points: pts }));
    for (const [k, m] of data.entries()) {
      if (m[key] === null) continue;
      root.appendChild(svg("circle", { class: key.slice(0, 3), cx: L + k * bw + bw / 2, cy: H - B - (H - B - 4) * m[key] / top, r: 2 },
        svg("title", {}, time(m.start_ms) + " " + key.slice(0, 3) + ": " + duration(m[key]))));
    }
  }
  root.appendChild(svg("text", { x: L, y: H - 3 }, "p50 —  p95 - -"));
  root.appendChild(svg("text", { x: W, y: H - 3, "text-anchor": "end" }, "now"));
  return root;
}

// ---- tasks ---------------------------------------------------------------------------------

async function tasksPage(view, r, first, current) {
  const who = await whoAmI();
  const search = r.params.get("q") || "";
  const status = r.params.get("status") || "";
  const tenant = r.params.get("tenant") || "";
  const cursor = r.params.get("cursor") || "";
  const list = new URLSearchParams({ limit: "50" });
  if (status) list.set("status", status);
  if (tenant && who.admin) list.set("tenant", tenant);
  if (cursor) list.set("cursor", cursor);
  // The search box takes a task id or a task type: ask for both.
  const byType = new URLSearchParams(list);
  if (search) byType.set("type", search);
  const [page, exact] = await Promise.all([
    api("/v1/tasks?" + byType),
    search ? api("/v1/tasks/" + q(search)).catch(() => null) : null,
  ]);
  if (!current()) return;
  if (first || !view.querySelector("form.filters")) {
    const form = el("form", { class: "filters", onsubmit: (e) => {
      e.preventDefault();
      const f = new FormData(e.target);
      go("tasks", { q: f.get("q").trim(), status: f.get("status"), tenant: f.get("tenant") ? f.get("tenant").trim() : "" });
    } },
      el("label", {}, "Task id or type", el("input", { name: "q", value: search, placeholder: "e.g. video" })),
      el("label", {}, "Unit status", el("select", { name: "status" }, el("option", { value: "" }, "any"),
        STATUSES.map((s) => el("option", { value: s, selected: s === status }, s)))),
      who.admin ? el("label", {}, "Tenant", el("input", { name: "tenant", value: tenant, placeholder: "all tenants" })) : null,
      el("button", { class: "primary", type: "submit" }, "Search"),
      el("button", { type: "button", onclick: () => go("tasks", {}) }, "Clear"));
    replace(view, el("h1", {}, "Tasks"), form, el("div", { id: "task-list" }));
  }
  const rows = page.tasks.slice();
  if (exact && !rows.some((t) => t.task_id === exact.task_id)) rows.unshift(exact);
  const table = rows.length ? el("table", { class: "tasks" },
    el("thead", {}, el("tr", {}, el("th", {}, "task"), el("th", {}, "type"), who.admin ? el("th", {}, "tenant") : null,
      el("th", {}, "status"), el("th", {}, "progress"), el("th", {}, "message"), el("th", {}, "created"))),
    el("tbody", {}, rows.map((t) => el("tr", { "data-task": t.task_id },
      el("td", {}, taskLink(t.task_id)), el("td", {}, t.type), who.admin ? el("td", {}, t.tenant ?? "") : null,
      el("td", {}, badge(t.status), t.cancel_requested && t.status !== "cancelled" ? el("span", { class: "badge warn" }, "cancel requested") : null),
      el("td", {}, progress(t.completed, t.total)), el("td", { class: "msg" }, t.message), el("td", {}, dateTime(t.created_at))))))
    : el("p", { class: "empty" }, search ? "No task with that id or type." : "No tasks.");
  const more = page.next_cursor ? el("p", {}, el("a", { href: "#/tasks?" + new URLSearchParams(Object.assign(Object.fromEntries(r.params), { cursor: page.next_cursor })) }, "Older tasks →")) : null;
  replace(view.querySelector("#task-list"), table, more);
}

async function taskPage(view, r, first, current) {
  const id = r.id;
  const [task, events, hooks] = await Promise.all([
    api("/v1/tasks/" + q(id) + "?units=true"),
    api("/v1/tasks/" + q(id) + "/events"),
    api("/v1/tasks/" + q(id) + "/webhooks").catch(() => null),
  ]);
  if (!current()) return;
  const done = ["completed", "failed", "cancelled"].includes(task.status);
  const failed = (task.results || []).some((x) => x.status === "failed") || task.status === "failed";
  const act = (what) => async (e) => {
    e.target.disabled = true;
    try { await post("/v1/tasks/" + q(id) + "/" + what); showError(null); render(); } catch (err) { showError(err); e.target.disabled = false; }
  };
  const facts = [
    ["type", task.type], ["tenant", task.tenant], ["progress", progress(task.completed, task.total)], ["message", task.message],
    ["priority", task.priority], ["created", dateTime(task.created_at)], ["updated", dateTime(task.updated_at)],
  ];
  if (task.idempotency_key) facts.push(["idempotency key", task.idempotency_key]);
  if (task.cost !== undefined && task.cost !== null) facts.push(["cost", task.cost]);
  if (task.queue_position !== undefined && task.queue_position !== null) facts.push(["queue position", task.queue_position]);
  if (task.estimated_completion_at !== undefined && task.estimated_completion_at !== null) {
    const eta = typeof task.estimated_completion_at === "number" ? dateTime(task.estimated_completion_at) : String(task.estimated_completion_at);
    facts.push(["estimated completion", eta]);
  }
  const byUnit = new Map();
  for (const ev of events.events || []) {
    if (!byUnit.has(ev.unit_id)) byUnit.set(ev.unit_id, []);
    byUnit.get(ev.unit_id).push(ev);
  }
  const units = task.units || [];
  const results = task.results || [];
  const openUnits = new Set([...view.querySelectorAll("details[data-unit][open]")].map((d) => d.dataset.unit));
  replace(view,
    el("p", {}, el("a", { href: "#/tasks" }, "← Tasks")),
    el("section", { class: "card task", "data-task": task.task_id },
      el("div", { class: "row" },
        el("h1", { class: "grow" }, "Task ", el("code", {}, task.task_id)),
        el("span", { id: "task-status" }, badge(task.status),
          task.cancel_requested && task.status !== "cancelled" ? [" ", el("span", { class: "badge warn" }, "cancel requested")] : null),
        el("span", { class: "actions" },
          el("button", { id: "cancel", class: "danger", disabled: done || task.cancel_requested, onclick: act("cancel") }, "Cancel"),
          el("button", { id: "retry", disabled: !failed || task.cancel_requested, onclick: act("retry") }, "Retry failed units"))),
      el("dl", { class: "kv" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
      task.error ? el("div", {}, el("h3", {}, "Error"), el("div", { class: "error-text task-error" }, errorText(task.error))) : null),
    el("section", { class: "card" }, el("h2", {}, "Units (" + units.length + ")"),
      el("table", { class: "units" },
        el("thead", {}, el("tr", {}, ["#", "status", "stage", "provider job", "attempts", "artifact", "bytes", "sha256", "error"].map((h) => el("th", {}, h)))),
        el("tbody", {}, units.map((u, k) => {
          const res = results.find((x) => x.index === u.index) || results[k] || {};
          const err = errorText(u.error);
          const evs = byUnit.get(u.id) || [];
          return [
            el("tr", { "data-unit": u.id },
              el("td", {}, u.index), el("td", {}, badge(u.status), u.cancel_requested_at ? el("span", { class: "badge warn" }, "cancel requested") : null),
              el("td", {}, u.stage), el("td", {}, el("code", {}, u.provider_job_id || "—")),
              el("td", {}, u.attempts + " (submit " + u.submit_attempt + ", polls " + u.polls + ")"),
              el("td", {}, res.object_key ? el("code", {}, res.object_key) : "—"), el("td", {}, bytes(res.bytes)),
              el("td", {}, res.sha256 ? el("code", { title: res.sha256 }, String(res.sha256).slice(0, 16) + "…") : "—"),
              el("td", { class: "error-text unit-error" }, u.status === "completed" ? "" : err || "")),
            el("tr", {}, el("td", {}), el("td", { colspan: 8 },
              el("details", { "data-unit": u.id, open: openUnits.has(u.id) },
                el("summary", { class: "muted" }, evs.length + " events"),
                el("ul", { class: "events" }, evs.map((ev) => el("li", { class: "to-" + String(ev.to_status).replace(/[^a-z]/g, "") },
                  el("span", { class: "muted" }, time(ev.at) + " "), ev.from_status ? ev.from_status + " → " : "", el("b", {}, ev.to_status),
                  ev.stage ? " (" + ev.stage + ")" : "", ev.detail ? " — " + ev.detail : "",
                  ev.error ? el("div", { class: "error-text" }, errorText(ev.error)) : null)))))),
          ];
        })))),
    hooks && hooks.deliveries && hooks.deliveries.length ? el("section", { class: "card" }, el("h2", {}, "Webhook deliveries"),
      deliveriesTable(hooks.deliveries.map((d) => Object.assign({}, d, { attempts: d.attempts_made })), false)) : null);
  return !done;
}

// ---- handlers ------------------------------------------------------------------------------

async function handlersPage(view, r, first, current) {
  const [active, all, history] = await Promise.all([
    api("/v1/handlers"), api("/v1/handlers?all=true"), api("/v1/handlers/history?limit=100"),
  ]);
  if (!current()) return;
  const short = (s) => s ? el("code", { title: s }, String(s).slice(0, 12) + "…") : "—";
  const problems = all.filter((v) => v.state !== "active");
  replace(view, el("h1", {}, "Handlers"),
    el("section", { class: "card" }, el("h2", {}, "Serving now"),
      active.length ? el("table", {},
        el("thead", {}, el("tr", {}, ["name", "version", "contract", "features", "task types", "pools", "sha256", "loaded", "faults in a row"].map((h) => el("th", {}, h)))),
        el("tbody", {}, active.map((h) => el("tr", {},
          el("td", {}, el("b", {}, h.name), el("div", { class: "muted mono" }, h.path)), el("td", {}, h.version), el("td", {}, h.contract),
          el("td", {}, Object.entries(h.features || {}).filter(([, on]) => on).map(([k]) => k).join(", ") || "—"),
          el("td", {}, (h.task_types || []).map((t) => t.name).join(", ")),
          el("td", {}, (h.pools || []).map((p) => p.name + " (default " + p.default_max_slots + ")").join(", ")),
          el("td", {}, short(h.sha256)), el("td", {}, dateTime(h.loaded_at)),
          el("td", {}, h.consecutive_faults ? el("span", { class: "badge warn" }, h.consecutive_faults) : "0")))))
        : el("p", { class: "empty" }, "No handler is loaded.")),
    el("section", { class: "card" }, el("h2", {}, "Refused, quarantined and unloaded (this process)"),
      problems.length ? el("table", {},
        el("thead", {}, el("tr", {}, ["file", "name", "version", "state", "reason", "sha256", "changed"].map((h) => el("th", {}, h)))),
        el("tbody", {}, problems.map((v) => el("tr", {},
          el("td", { class: "mono" }, v.path), el("td", {}, v.name || "—"), el("td", {}, v.version || "—"), el("td", {}, badge(v.state)),
          el("td", { class: "error-text" }, v.reason || ""), el("td", {}, short(v.sha256)), el("td", {}, dateTime(v.changed_at))))))
        : el("p", { class: "empty" }, "None.")),
    el("section", { class: "card" }, el("h2", {}, "Version history (durable)"),
      history.length ? el("table", {},
        el("thead", {}, el("tr", {}, ["when", "name", "version", "state", "reason", "sha256", "file"].map((h) => el("th", {}, h)))),
        el("tbody", {}, history.map((v) => el("tr", {},
          el("td", {}, dateTime(v.at)), el("td", {}, v.name || "—"), el("td", {}, v.version || "—"), el("td", {}, badge(v.state)),
          el("td", { class: "error-text" }, v.reason || ""), el("td", {}, short(v.sha256)), el("td", { class: "mono" }, v.path)))))
        : el("p", { class: "empty" }, "No history yet.")));
}

// ---- webhooks ------------------------------------------------------------------------------

function deliveriesTable(list, withTask) {
  return el("table", { class: "deliveries" },
    el("thead", {}, el("tr", {}, [withTask ? "task" : null, withTask ? "tenant" : null, "created", "event", "url", "status", "attempts", "last answer", "next / delivered"]
      .filter(Boolean).map((h) => el("th", {}, h)))),
    el("tbody", {}, list.map((d) => el("tr", {},
      withTask ? el("td", {}, taskLink(d.task_id)) : null, withTask ? el("td", {}, d.tenant ?? "") : null,
      el("td", {}, dateTime(d.created_at)), el("td", {}, d.event), el("td", { class: "mono" }, d.url), el("td", {}, badge(d.status)),
      el("td", {}, Array.isArray(d.attempts) ? d.attempts.length : d.attempts),
      el("td", {}, d.last_status ? "HTTP " + d.last_status : "", d.last_error ? el("div", { class: "error-text" }, d.last_error) : null),
      el("td", {}, d.delivered_at ? "delivered " + dateTime(d.delivered_at) : d.status === "pending" ? "next " + dateTime(d.next_at) : "—")))));
}

async function webhooksPage(view, r, first, current) {
  const who = await whoAmI();
  const status = r.params.get("status") || "";
  const tenant = r.params.get("tenant") || "";
  const s = new URLSearchParams({ limit: "200" });
  if (status) s.set("status", status);
  if (tenant && who.admin) s.set("tenant", tenant);
  const page = await api("/v1/webhooks?" + s);
  if (!current()) return;
  const form = el("form", { class: "filters", onsubmit: (e) => {
    e.preventDefault();
    const f = new FormData(e.target);
    go("webhooks", { status: f.get("status"), tenant: f.get("tenant") ? f.get("tenant").trim() : "" });
  } },
    el("label", {}, "Status", el("select", { name: "status" }, el("option", { value: "" }, "any"),
      ["pending", "delivered", "failed"].map((x) => el("option", { value: x, selected: x === status }, x)))),
    who.admin ? el("label", {}, "Tenant", el("input", { name: "tenant", value: tenant, placeholder: "all tenants" })) : null,
    el("button", { class: "primary", type: "submit" }, "Filter"));
  if (first) replace(view, el("h1", {}, "Webhook deliveries"), form, el("div", { id: "deliveries" }));
  replace(view.querySelector("#deliveries") || view, el("section", { class: "card" },
    page.deliveries.length ? deliveriesTable(page.deliveries, true) : el("p", { class: "empty" }, "No deliveries.")));
}

render();
