// slotd operator console: handler releases and staged rollouts. The handlers page's cluster
// section (every release, which is current, what each process loaded) and one handler's page
// (`#/handlers/NAME`): its releases with each process's word, and its rollouts with the stage
// in force, the checks of the last judgement (the candidate's figures beside the incumbent's),
// why it moved, every step, and the moves a person may make. Uses core.js.
"use strict";

/** A sha256, shortened, whole in its title. */
function shortSha(s) { return s ? el("code", { title: s }, String(s).slice(0, 12) + "…") : "—"; }

/** The processes' words on a release, counted: "4 loaded · 1 failed". */
function wordsOf(processes) {
  const by = new Map();
  for (const p of processes || []) by.set(p.state, (by.get(p.state) || 0) + 1);
  return by.size ? [...by].map(([state, n]) => el("span", { class: "word", "data-word": state }, badge(state), " " + n)) : el("span", { class: "muted" }, "no process yet");
}

/** The cluster's releases, for the handlers page. */
function releasesCard(list) {
  const releases = list.releases || [];
  const running = new Map((list.rollouts || []).filter((x) => x.state === "running" || x.state === "paused").map((x) => [x.candidate, x]));
  return el("section", { class: "card releases" }, el("h2", {}, "Releases (every process)"),
    releases.length ? el("table", {},
      el("thead", {}, el("tr", {}, ["handler", "version", "", "published", "by", "processes", "sha256"].map((h) => el("th", {}, h)))),
      el("tbody", {}, releases.map((x) => el("tr", { "data-release": x.sha256 },
        el("td", {}, el("a", { href: "#/handlers/" + q(x.name) }, x.name)), el("td", {}, x.version),
        el("td", {}, x.current ? badge("current") : running.has(x.sha256) ? el("span", { class: "badge running" }, "rolling out") : x.withdrawn_at ? badge("withdrawn") : ""),
        el("td", {}, dateTime(x.published_at)), el("td", {}, x.published_by), el("td", {}, wordsOf(x.processes)), el("td", {}, shortSha(x.sha256))))))
      : el("p", { class: "empty" }, "Nothing published yet."));
}

/** A share as a percentage. */
function pct(x) { return (100 * (x || 0)).toFixed(1) + " %"; }

/** One check's figures: shares for the share checks, mean milliseconds for durations. */
function checkValue(check, side) {
  if (check.signal !== "job duration") return pct(check[side]);
  return check[side] ? duration(check[side]) : el("span", { class: "muted" }, "no job timed");
}

/** The stages as a bar: passed, in force (with the rollout's state) and ahead. */
function stageBar(ro) {
  const ended = ro.state === "promoted" || ro.state === "rolled_back";
  return el("div", { class: "stages" }, (ro.stages || []).map((share, i) => {
    const at = i === ro.stage;
    const cls = i < ro.stage || (at && ro.state === "promoted") ? "passed" : at ? ro.state : ended ? "skipped" : "ahead";
    return el("span", { class: "stage " + cls, "data-stage": i }, share + " %");
  }));
}

function rolloutCard(name, ro, versions) {
  const f = ro.figures || {};
  const version = (sha) => versions.get(sha) || String(sha).slice(0, 12);
  const act = (action) => async (e) => {
    e.target.disabled = true;
    try {
      await api("/v1/handlers/" + q(name) + "/rollout", { method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ action }) });
      showError(null);
      render();
    } catch (err) { showError(err); e.target.disabled = false; }
  };
  const open = ro.state === "running" || ro.state === "paused";
  const facts = [
    ["candidate", [version(ro.candidate), " ", shortSha(ro.candidate)]], ["incumbent", [version(ro.incumbent), " ", shortSha(ro.incumbent)]],
    ["stage", "stage " + (ro.stage + 1) + " of " + (ro.stages || []).length + " (" + ((ro.stages || [])[ro.stage] ?? "—") + " % of new units)"],
    ["judged after", ro.min_units + " of its units ended in a stage · margin " + pct(ro.margin)],
    ["started", dateTime(ro.started_at)], ["stage started", dateTime(ro.stage_started_at)],
  ];
  if (f.stage_ended !== undefined) facts.push(["ended in this stage", f.stage_ended + " of " + ro.min_units + " units"]);
  return el("section", { class: "card rollout", "data-rollout": ro.id, "data-state": ro.state },
    el("div", { class: "row" },
      el("h2", { class: "grow" }, "Rollout of ", version(ro.candidate)),
      badge(ro.state),
      open ? el("span", { class: "actions" },
        ro.state === "running" ? el("button", { "data-action": "pause", onclick: act("pause") }, "Pause") : el("button", { "data-action": "resume", onclick: act("resume") }, "Resume"),
        el("button", { "data-action": "promote", onclick: act("promote") }, "Promote"),
        el("button", { class: "danger", "data-action": "rollback", onclick: act("rollback") }, "Roll back")) : null),
    stageBar(ro),
    ro.reason ? el("p", { class: "reason" }, ro.reason) : null,
    el("dl", { class: "kv" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, v)])),
    (f.checks || []).length ? el("table", { class: "checks" },
      el("thead", {}, el("tr", {}, ["check", "candidate", "incumbent", "p", "result"].map((h) => el("th", {}, h)))),
      el("tbody", {}, f.checks.map((c) => el("tr", { "data-check": c.signal },
        el("td", {}, c.signal), el("td", {}, checkValue(c, "candidate")), el("td", {}, checkValue(c, "incumbent")),
        el("td", {}, Number(c.p).toFixed(4)), el("td", { title: c.said }, badge(c.result))))))
      : el("p", { class: "muted" }, "Not judged yet."),
    el("h3", {}, "Steps"),
    el("ol", { class: "steps" }, (ro.events || []).map((ev) => el("li", { "data-state": ev.state },
      el("span", { class: "muted" }, dateTime(ev.at) + " "), "stage " + (ev.stage + 1) + " ", badge(ev.state), " " + ev.reason))));
}

/** One handler's releases and rollouts. */
async function handlerPage(view, r, first, current) {
  const name = r.id;
  const data = await api("/v1/handlers/" + q(name) + "/releases");
  if (!current()) return;
  const releases = data.releases || [];
  const versions = new Map(releases.map((x) => [x.sha256, x.version]));
  const open = new Set([...view.querySelectorAll("details[data-release][open]")].map((d) => d.dataset.release));
  replace(view,
    el("p", {}, el("a", { href: "#/handlers" }, "← Handlers")),
    el("h1", {}, "Handler ", el("code", {}, name)),
    (data.rollouts || []).map((ro) => rolloutCard(name, ro, versions)),
    el("section", { class: "card" }, el("h2", {}, "Releases"),
      releases.length ? el("table", { class: "releases" },
        el("thead", {}, el("tr", {}, ["version", "", "contract", "published", "by", "takes over", "processes", "sha256"].map((h) => el("th", {}, h)))),
        el("tbody", {}, releases.map((x) => [
          el("tr", { "data-release": x.sha256 },
            el("td", {}, el("b", {}, x.version)), el("td", {}, x.current ? badge("current") : x.withdrawn_at ? badge("withdrawn") : ""),
            el("td", {}, x.contract), el("td", {}, dateTime(x.published_at)), el("td", {}, x.published_by),
            el("td", {}, x.takes_over ? "yes" : "no"), el("td", {}, wordsOf(x.processes)), el("td", {}, shortSha(x.sha256))),
          el("tr", {}, el("td", {}), el("td", { colspan: 7 },
            el("details", { "data-release": x.sha256, open: open.has(x.sha256) },
              el("summary", { class: "muted" }, (x.processes || []).length + " processes"),
              el("ul", { class: "words" }, (x.processes || []).map((p) => el("li", {},
                el("code", {}, p.process), " (" + p.role + ") ", badge(p.state), p.reason ? el("div", { class: "error-text" }, p.reason) : null)))))),
        ])))
        : el("p", { class: "empty" }, "No release of this handler.")));
}
