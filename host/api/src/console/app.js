// slotd operator console, the last part: routing (URL hashes, so the back button and shared
// links work) and the tasks, task, handlers and webhooks pages. Uses core.js, pools.js
// (which also holds the routes page) and releases.js (one handler's page, the releases).
"use strict";

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
  const pages = { pools: poolsPage, routes: routesPage, tasks: r.id ? taskPage : tasksPage, handlers: r.id ? handlerPage : handlersPage, webhooks: webhooksPage };
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
  // A routed task (docs/routes.md): which target served each unit, and what it cost.
  const routed = results.some((x) => x.route);
  const withCost = routed || results.some((x) => x.cost !== undefined && x.cost !== null);
  if (routed) facts.push(["served by", servedCounts(results)]);
  const heads = ["#", "status", "stage", "provider job", routed ? "served by" : null, withCost ? "cost" : null,
    "attempts", "artifact", "bytes", "sha256", "error"].filter(Boolean);
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
        el("thead", {}, el("tr", {}, heads.map((h) => el("th", {}, h)))),
        el("tbody", {}, units.map((u, k) => {
          const res = results.find((x) => x.index === u.index) || results[k] || {};
          const err = errorText(u.error);
          const evs = byUnit.get(u.id) || [];
          return [
            el("tr", { "data-unit": u.id },
              el("td", {}, u.index), el("td", {}, badge(u.status), u.cancel_requested_at ? el("span", { class: "badge warn" }, "cancel requested") : null),
              el("td", {}, u.stage), el("td", {}, el("code", {}, u.provider_job_id || "—")),
              routed ? el("td", { class: "served-by" }, servedBy(res.route)) : null,
              withCost ? el("td", { class: "cost" }, costOf(res)) : null,
              el("td", {}, u.attempts + " (submit " + u.submit_attempt + ", polls " + u.polls + ")"),
              el("td", {}, res.object_key ? el("code", {}, res.object_key) : "—"), el("td", {}, bytes(res.bytes)),
              el("td", {}, res.sha256 ? el("code", { title: res.sha256 }, String(res.sha256).slice(0, 16) + "…") : "—"),
              el("td", { class: "error-text unit-error" }, u.status === "completed" ? "" : err || "")),
            el("tr", {}, el("td", {}), el("td", { colspan: heads.length - 1 },
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

/** Units per target that served them, and those still waiting on the route. */
function servedCounts(results) {
  const by = new Map();
  for (const x of results) {
    if (!x.route) continue;
    const k = x.route.handler ? x.route.handler + "/" + x.route.model : "waiting on route " + x.route.route;
    by.set(k, (by.get(k) || 0) + 1);
  }
  return [...by].map(([k, n]) => k + ": " + n).join(" · ");
}

/** Why a target was left out of a shot when the task was planned (not a refusal at submit). */
const PLAN_REASONS = ["plan", "unavailable", "contract"];

/** A routed unit's target (handler / model, pool), the targets left out when it was planned
 *  and those that refused it before accepting its job (it failed over). */
function servedBy(rt) {
  if (!rt) return "—";
  const refused = rt.refused || [];
  return [
    rt.handler ? [el("b", {}, rt.handler), " / ", el("code", {}, rt.model), rt.pool ? el("div", { class: "muted" }, "pool " + rt.pool) : null]
      : el("span", { class: "muted" }, "waiting on route " + rt.route),
    refused.length ? el("ul", { class: "refused" }, refused.map((x) =>
      el("li", { "data-reason": x.reason, title: x.message }, PLAN_REASONS.includes(x.reason) ? "left out: " : "refused: ",
        x.handler + "/" + x.model + " (" + x.reason + ")", el("div", { class: "muted" }, x.message)))) : null,
  ];
}

/** The cost the provider reported, else the handler's estimate (marked so). */
function costOf(res) {
  if (res.cost !== undefined && res.cost !== null) return String(res.cost);
  if (res.cost_estimate !== undefined && res.cost_estimate !== null) return el("span", { class: "muted", title: "the handler's estimate" }, "~" + res.cost_estimate);
  return "—";
}

// ---- handlers ------------------------------------------------------------------------------

async function handlersPage(view, r, first, current) {
  const [active, all, history, releases] = await Promise.all([
    api("/v1/handlers"), api("/v1/handlers?all=true"), api("/v1/handlers/history?limit=100"),
    api("/v1/handlers/releases"),
  ]);
  if (!current()) return;
  const short = (s) => s ? el("code", { title: s }, String(s).slice(0, 12) + "…") : "—";
  const problems = all.filter((v) => v.state !== "active");
  replace(view, el("h1", {}, "Handlers"),
    el("section", { class: "card" }, el("h2", {}, "Serving now"),
      active.length ? el("table", {},
        el("thead", {}, el("tr", {}, ["name", "version", "contract", "features", "task types", "pools", "sha256", "loaded", "faults in a row"].map((h) => el("th", {}, h)))),
        el("tbody", {}, active.map((h) => el("tr", {},
          el("td", {}, el("a", { href: "#/handlers/" + q(h.name) }, el("b", {}, h.name)), el("div", { class: "muted mono" }, h.path)), el("td", {}, h.version), el("td", {}, h.contract),
          el("td", {}, Object.entries(h.features || {}).filter(([, on]) => on).map(([k]) => k).join(", ") || "—"),
          el("td", {}, (h.task_types || []).map((t) => t.name).join(", ")),
          el("td", {}, (h.pools || []).map((p) => p.name + " (default " + p.default_max_slots + ")").join(", ")),
          el("td", {}, short(h.sha256)), el("td", {}, dateTime(h.loaded_at)),
          el("td", {}, h.consecutive_faults ? el("span", { class: "badge warn" }, h.consecutive_faults) : "0")))))
        : el("p", { class: "empty" }, "No handler is loaded.")),
    releasesCard(releases),
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
