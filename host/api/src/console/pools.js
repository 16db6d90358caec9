// slotd operator console, part 2 of 3: the pools page (limits, units by status, the live slot
// timeline as an SVG Gantt chart, throughput and provider latency) and the routes page (each
// route's policy, units waiting on it, and per target its state, room and refusals). Uses
// core.js.
"use strict";

const WINDOWS = [1, 2, 5, 10, 30, 60];

async function poolsPage(view, r, first, current) {
  const minutes = WINDOWS.includes(Number(r.params.get("minutes"))) ? Number(r.params.get("minutes")) : 2;
  const all = await api("/v1/pools");
  // A route's units wait in the pseudo-pool `route:NAME` (no slots, no timeline): they are
  // counted on the routes page, and named here in one line.
  const pools = all.filter((p) => !isRoutePool(p.name));
  const waiting = all.filter((p) => isRoutePool(p.name));
  const timelines = await Promise.all(pools.map((p) =>
    api("/v1/pools/" + q(p.name) + "/timeline?minutes=" + minutes).catch(() => null)));
  if (!current()) return;
  const picker = el("select", { id: "window", onchange: (e) => go("pools", { minutes: e.target.value }) },
    WINDOWS.map((m) => el("option", { value: m, selected: m === minutes }, "last " + m + " min")));
  replace(view,
    el("div", { class: "row" }, el("h1", { class: "grow" }, "Pools"), el("label", { class: "muted" }, "Timeline window ", picker)),
    waiting.length ? el("p", { class: "muted", id: "route-waiting" }, "Waiting on routes (bound to a pool when one of its targets has room): ",
      waiting.map((p, i) => [i ? ", " : "", el("a", { href: "#/routes" }, p.name.slice(ROUTE_POOL.length)), " ", (p.units || {}).pending ?? 0, " pending"])) : null,
    pools.length ? pools.map((p, i) => poolCard(p, timelines[i])) : el("p", { class: "empty" }, "No pools yet: load a handler or configure [pools]."));
}

/** Where a route's units wait until a target binds them (docs/routes.md). */
const ROUTE_POOL = "route:";
function isRoutePool(name) { return String(name).startsWith(ROUTE_POOL); }

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
  for (const a of p.accounts || []) {
    if (a.state === "drained" && a.drained) {
      notes.push(el("div", { class: "notice" }, "Account " + a.name + " is drained (" + a.drained.code + "): " + a.drained.reason + ". No new submits go to it; its running jobs finish. Next probe " + new Date(a.drained.next_probe_at).toLocaleTimeString() + "."));
    }
  }
  if (p.closed_until) {
    const c = p.closure;
    notes.push(el("div", { class: "notice", "data-closed-until": p.closed_until },
      "Quota reached: nothing is submitted on this pool until " + new Date(p.closed_until).toLocaleTimeString() +
      (c ? " (" + c.code + ", " + c.basis + "): " + c.reason : "") + ". Pending units wait; none spends its retry budget."));
  }
  const quotaStats = (p.quotas || []).map((qv) =>
    el("span", { class: "stat", "data-quota": qv.dimension },
      el("b", { class: qv.remaining === 0 ? "warn" : "" }, qv.used + " / " + qv.limit),
      el("span", {}, qv.dimension + " (" + qv.window + ")" +
        (qv.source === "discovered" ? ", published by the provider" : "") +
        (qv.remaining === 0 && qv.resets_at ? ", room at " + new Date(qv.resets_at).toLocaleTimeString() : ""))));
  if (p.spend) {
    const sv = p.spend;
    quotaStats.push(el("span", { class: "stat", "data-spend": "pool" },
      el("b", { class: sv.remaining <= 0 ? "warn" : "" }, fmtCost(sv.used) + " / " + fmtCost(sv.limit)),
      el("span", {}, "spend per " + sv.period + (sv.remaining <= 0 ? ", until " + new Date(sv.resets_at).toLocaleString() : ""))));
  }
  const quotas = quotaStats.length ? el("div", { class: "row" }, quotaStats) : null;
  const accounts = (p.accounts || []).length ? el("div", { class: "row" }, p.accounts.map((a) =>
    el("span", { class: "stat", "data-account": a.name },
      el("b", { class: a.state === "drained" ? "warn" : "" }, (a.used ?? "?") + " / " + a.effective_max_slots),
      el("span", {}, "account " + a.name + (a.state === "drained" ? " (drained)" : ""))))) : null;
  // A provider account the pool shares with others: its share and what it borrowed.
  const shared = (p.shared_accounts || []).length ? el("div", { class: "row" }, p.shared_accounts.map((s) =>
    el("span", { class: "stat", "data-shared": s.account },
      el("b", { class: s.waiting && s.room === 0 ? "warn" : "" }, s.held + " / " + s.max),
      el("span", {}, "share of provider account " + s.account + " (min " + s.min + (s.borrowed ? ", " + s.borrowed + " borrowed" : "") +
        "; the account " + s.used + " / " + s.max_slots + (s.waiting ? "; waiting, " + s.room + " free for it" : "") + ")")))) : null;
  if (p.lease) notes.push(el("div", { class: "muted" }, "Lease: " + (p.lease.holder ? "held by " + p.lease.holder : "no holder") + ", " + p.lease.unheld_ms_total + " ms unheld in total."));
  return el("section", { class: "card pool", "data-pool": p.name },
    el("div", { class: "row" }, el("h2", { class: "grow" }, p.name),
      el("span", { class: "muted" }, (p.task_types || []).join(", "), p.handlers && p.handlers.length ? " · " + p.handlers.join(", ") : "")),
    stats, quotas, accounts, shared, notes, chips,
    t ? el("div", { class: "charts" },
      el("div", {}, el("div", { class: "chart-title" }, el("span", {}, "Slot timeline (one row per slot lane)"), el("span", {}, "last " + t.minutes + " min")),
        gantt(t, max), legend()),
      el("div", {}, el("div", { class: "chart-title" }, el("span", {}, "Throughput (jobs ended / min)")), throughputChart(t)),
      el("div", {}, el("div", { class: "chart-title" }, el("span", {}, "Provider latency p50 / p95")), latencyChart(t)))
      : el("p", { class: "muted" }, "No timeline for this pool."));
}

/** A cost in the provider's unit: at most two decimals. */
function fmtCost(v) { return (Math.round((v || 0) * 100) / 100).toString(); }

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

// ---- routes --------------------------------------------------------------------------------

/** What each policy picks, among the targets that may take a unit and have room. */
const POLICIES = {
  ordered: "the first target, in the order configured",
  cheapest: "the lowest cost estimate",
  fastest: "the shortest expected duration",
  weights: "one drawn by weight",
};

async function routesPage(view, r, first, current) {
  const routes = await api("/v1/routes");
  if (!current()) return;
  replace(view, el("h1", {}, "Routes"),
    routes.length ? routes.map(routeCard)
      : el("p", { class: "empty" }, "No routes: a [routes.NAME] section lets several handlers serve one task type (docs/routes.md)."));
}

function total(counts) { return Object.values(counts || {}).reduce((a, n) => a + n, 0); }

function routeCard(rt) {
  const targets = rt.targets || [];
  const free = targets.filter((t) => t.state === "ready").reduce((a, t) => a + (t.free || 0), 0);
  const refusals = targets.reduce((a, t) => a + total(t.recent_refusals), 0);
  const weights = rt.policy === "weights";
  const heads = ["#", "target", weights ? "weight" : null, "state", "free slots", "pools (slots used / limit)", "recent refusals", "last refusal"];
  return el("section", { class: "card route", "data-route": rt.name },
    el("div", { class: "row" }, el("h2", { class: "grow" }, "Route ", el("code", {}, rt.name)),
      el("a", { href: "#/tasks?q=" + q(rt.name) }, "Its tasks →")),
    el("div", { class: "row" },
      el("span", { class: "stat", "data-stat": "policy" }, el("b", {}, rt.policy), el("span", {}, "policy: " + (POLICIES[rt.policy] || "?"))),
      el("span", { class: "stat", "data-stat": "pending" }, el("b", { class: rt.pending && !free ? "warn" : "" }, rt.pending), el("span", {}, "units waiting on it")),
      el("span", { class: "stat", "data-stat": "free" }, el("b", {}, free), el("span", {}, "free slots over its ready targets")),
      el("span", { class: "stat", "data-stat": "refusals" }, el("b", { class: refusals ? "warn" : "" }, refusals), el("span", {}, "recent refusals (units failed over)"))),
    el("table", { class: "targets" },
      el("thead", {}, el("tr", {}, heads.filter(Boolean).map((h) => el("th", {}, h)))),
      el("tbody", {}, targets.map((t, i) => el("tr", { "data-target": t.handler + "/" + t.model },
        el("td", {}, i + 1),
        el("td", {}, el("b", {}, t.handler), " / ", el("code", {}, t.model)),
        weights ? el("td", {}, t.weight ?? "—") : null,
        el("td", { class: "state" }, el("span", { class: "badge " + (t.state === "ready" ? "ready" : "warn") }, t.state)),
        el("td", { class: "free" }, t.free),
        el("td", {}, (t.pools || []).length ? t.pools.map((p) => el("div", { "data-pool": p.name },
          el("a", { href: "#/pools" }, p.name), " ", (p.used ?? "?") + " / " + p.effective_max_slots)) : el("span", { class: "muted" }, "none")),
        el("td", { class: "refusals" }, total(t.recent_refusals)
          ? el("div", { class: "chips" }, Object.entries(t.recent_refusals).map(([reason, n]) =>
            el("span", { class: "chip", "data-reason": reason }, reason, el("b", {}, n))))
          : el("span", { class: "muted" }, "none")),
        el("td", { class: "error-text last-refusal" }, t.last_refusal || ""))))),
    el("p", { class: "muted" }, "A target that refuses a unit before accepting its job (capacity, an exhausted account, a create the provider refused) sends it back to the route, " +
      "and another target takes it; a unit whose job may exist is never sent to a second provider. Counts read from the newest events."));
}
