//! Routes end to end (docs/routes.md): one `clip` route over the three real simulators (Kling,
//! Runway, Pika through fal) and the three built handlers, canonical shots planned by each
//! target, bound to one target at grant time, failing over when a target refuses before
//! accepting, never a second provider's job for a unit. Every unit's jobs are counted from the
//! simulators' own job lists; every test ends with `slotd check`.

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use slotd_core::config::{
    Config, HandlerConfig, PoolConfig, RouteConfig, RoutePolicy, RouteTarget, SchedulerConfig,
    Secret,
};
use slotd_sim::fal::{FalOptions, FalSimHandle};
use slotd_sim::kling::{SimHandle, SimOptions};
use slotd_sim::runway::{RunwayOptions, RunwaySimHandle};

use crate::support::*;

pub const ROUTE: &str = "clip";
pub const KLING_POOL: &str = "kling:video";
pub const RUNWAY_POOL: &str = "runway:gen4_turbo";
pub const FAL_MODEL: &str = "fal-ai/pika/v2.2/image-to-video";
pub const FAL_POOL: &str = "fal:fal-ai/pika/v2.2/image-to-video";

/// The three simulators.
pub struct Sims {
    pub kling: SimHandle,
    pub runway: RunwaySimHandle,
    pub fal: FalSimHandle,
}

impl Sims {
    pub async fn start(kling: SimOptions, runway: RunwayOptions, fal: FalOptions) -> Sims {
        Sims {
            kling: slotd_sim::kling::start(kling).await.expect("kling sim"),
            runway: slotd_sim::runway::spawn(runway).await.expect("runway sim"),
            fal: slotd_sim::fal::spawn(fal).await.expect("fal sim"),
        }
    }

    /// Fast simulators: Kling's account runs 20 at once, Runway's tier 3 five per model,
    /// fal's account eight.
    pub async fn fast(seed: u64) -> Sims {
        Sims::start(
            crate::kling::sim_options(seed),
            crate::runway::sim_options(seed),
            crate::fal::sim_options(),
        )
        .await
    }
}

/// The route's targets: Kling, Runway, fal, in the order `order` gives (indexes into that
/// list).
pub fn route(policy: RoutePolicy, order: [usize; 3]) -> RouteConfig {
    let all = [
        ("kling-video", "kling-v1-6"),
        ("runway-video", "gen4_turbo"),
        ("fal-video", FAL_MODEL),
    ];
    RouteConfig {
        policy,
        targets: order
            .iter()
            .map(|&i| RouteTarget {
                handler: all[i].0.into(),
                model: all[i].1.into(),
                weight: None,
            })
            .collect(),
    }
}

/// slotd with the three handlers against `sims`, pools Kling, Runway, fal of `slots`, and the
/// `clip` route.
pub fn config(dir: &Path, sims: &Sims, slots: (u32, u32, u32), route: RouteConfig) -> Config {
    let mut c = Config {
        database_url: format!("sqlite://{}", dir.join("slotd.db").display()),
        plugins_dir: plugins_with(
            dir,
            &[
                ("kling-video", built_plugin("kling-video")),
                ("runway-video", built_plugin("runway_video")),
                ("fal-video", built_plugin("fal_video")),
            ],
        ),
        object_store: format!("file://{}", dir.join("objects").display()),
        scheduler: SchedulerConfig::scaled_to(Duration::from_millis(50)),
        ..Config::default()
    };
    c.scheduler.min_rest = Duration::from_millis(2);
    c.limits.call_deadline = Duration::from_secs(2);
    let mut kling = HandlerConfig::default();
    kling
        .settings
        .insert("base_url".into(), sims.kling.base_url().to_string());
    kling.settings.insert("access_key".into(), "AK".into());
    kling.secrets.insert("secret_key".into(), Secret::new("SK"));
    kling.allowed_hosts.push(sims.kling.addr().to_string());
    c.handlers.insert("kling-video".into(), kling);
    c.handlers.insert(
        "runway-video".into(),
        crate::runway::handler_config(&sims.runway, slotd_sim::runway::API_KEY_DEFAULT),
    );
    c.handlers.insert(
        "fal-video".into(),
        crate::fal::handler_config(&sims.fal, slotd_sim::fal::KEY_DEFAULT),
    );
    for (pool, n) in [
        (KLING_POOL, slots.0),
        (RUNWAY_POOL, slots.1),
        (FAL_POOL, slots.2),
    ] {
        c.pools.insert(pool.into(), PoolConfig::slots(n));
    }
    c.routes.insert(ROUTE.into(), route);
    c
}

/// The prompt of shot `i` of [`shots`]`(tag, …)`.
pub fn prompt(tag: &str, i: u64) -> String {
    format!("{tag} shot {i}: a paper boat drifts down a gutter")
}

/// `n` canonical image-to-video shots, each prompt naming `tag` and the shot's index.
pub fn shots(tag: &str, n: usize) -> Value {
    let shots: Vec<Value> = (0..n)
        .map(|i| {
            json!({"prompt": prompt(tag, i as u64),
                   "image_url": format!("https://example.com/{tag}/{i}.png"),
                   "duration": 5, "aspect_ratio": "16:9"})
        })
        .collect();
    json!({ "shots": shots })
}

/// A running slotd (real loops, real clock) over the three simulators.
pub struct Run {
    /// `slotd check` when the run is dropped (first field: it runs before the rest drops).
    _check: CheckOnDrop,
    pub base: String,
    pub client: reqwest::Client,
    pub sims: Sims,
    pub services: slotd_server::services::Services,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    _dir: tempfile::TempDir,
}

impl Run {
    pub async fn start(sims: Sims, slots: (u32, u32, u32), route: RouteConfig) -> Run {
        Run::start_with(sims, slots, route, |_| {}).await
    }

    /// [`Run::start`] with a last adjustment of the config.
    pub async fn start_with(
        sims: Sims,
        slots: (u32, u32, u32),
        route: RouteConfig,
        adjust: impl FnOnce(&mut Config),
    ) -> Run {
        let dir = tempfile::TempDir::new().expect("tmp");
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let mut config = config(dir.path(), &sims, slots, route);
        adjust(&mut config);
        let services = slotd_server::app::build_with_clock(config, system_clock())
            .await
            .expect("build");
        for h in ["kling-video", "runway-video", "fal-video"] {
            let loaded = services.registry.by_name(h).expect("handler loaded");
            assert!(loaded.routable(), "{h} must serve routes");
        }
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(slotd_server::run_with(
            services.clone(),
            Some(listener),
            async move {
                rx.await.ok();
            },
        ));
        Run {
            base: format!("http://{addr}"),
            _check: CheckOnDrop::for_services(&services),
            client: reqwest::Client::new(),
            sims,
            services,
            stop: Some(tx),
            server: Some(server),
            _dir: dir,
        }
    }

    pub async fn submit(&self, payload: Value) -> String {
        post_task(
            &self.client,
            &self.base,
            ROUTE,
            json!({ "payload": payload }),
        )
        .await
    }

    pub async fn get(&self, path: &str) -> Value {
        get_json(&self.client, &format!("{}{path}", self.base))
            .await
            .unwrap_or_else(|| panic!("GET {path}"))
    }

    pub async fn wait_terminal(&self, ids: &[String], deadline: Duration) -> Vec<Value> {
        tasks_terminal(&self.client, &self.base, ids, deadline).await
    }

    /// `slotd check`, then stop.
    pub async fn stop(mut self) -> Sims {
        assert_services_check_clean(&self.services).await;
        if let Some(s) = self.stop.take() {
            s.send(()).ok();
        }
        if let Some(h) = self.server.take() {
            h.await.expect("join").expect("slotd stopped cleanly");
        }
        self.sims
    }
}

/// A task's units as `(unit id, prompt, job id)`, the prompt rebuilt from the shot's `tag`.
pub async fn unit_rows(run: &Run, task: &str, tag: &str) -> Vec<(String, String, Option<String>)> {
    let view = run.get(&format!("/v1/tasks/{task}?units=true")).await;
    view["units"]
        .as_array()
        .expect("units")
        .iter()
        .map(|u| {
            let i = u["index"].as_u64().expect("index");
            (
                u["id"].as_str().expect("id").to_string(),
                prompt(tag, i),
                u["provider_job_id"].as_str().map(str::to_string),
            )
        })
        .collect()
}

/// Every provider job the simulators created, by the unit it belongs to: Kling's by its
/// `external_task_id` (the unit's idempotency key), fal's by the job id the unit recorded or
/// else its prompt, Runway's by its `promptText` (Runway has no client id) or else the job id
/// the unit recorded. A job whose answer slotd never saw is so still found. A job no unit can
/// be found for is listed under `None`.
pub fn jobs_by_unit(
    sims: &Sims,
    units: &[(String, String, Option<String>)],
) -> HashMap<Option<String>, Vec<String>> {
    let by_prompt: HashMap<&str, &str> = units
        .iter()
        .map(|(u, p, _)| (p.as_str(), u.as_str()))
        .collect();
    let by_job: HashMap<&str, &str> = units
        .iter()
        .filter_map(|(u, _, j)| Some((j.as_deref()?, u.as_str())))
        .collect();
    let ids: HashSet<&str> = units.iter().map(|(u, _, _)| u.as_str()).collect();
    let mut out: HashMap<Option<String>, Vec<String>> = HashMap::new();
    for j in sims.kling.jobs() {
        let unit = j
            .external_task_id
            .as_deref()
            .and_then(|k| ids.iter().find(|u| k.starts_with(**u)))
            .map(|u| u.to_string());
        out.entry(unit)
            .or_default()
            .push(format!("kling {}", j.task_id));
    }
    for j in sims.runway.jobs() {
        let unit = j
            .prompt_text
            .as_deref()
            .and_then(|p| by_prompt.get(p))
            .or_else(|| by_job.get(j.task_id.as_str()))
            .map(|u| u.to_string());
        out.entry(unit)
            .or_default()
            .push(format!("runway {}", j.task_id));
    }
    for j in sims.fal.jobs() {
        let unit = by_job
            .get(j.request_id.as_str())
            .or_else(|| j.prompt.as_deref().and_then(|p| by_prompt.get(p)))
            .map(|u| u.to_string());
        out.entry(unit)
            .or_default()
            .push(format!("fal {}", j.request_id));
    }
    out
}

/// Each unit's `route` block in a task view's results: (handler, model).
pub fn served_by(views: &[Value]) -> Vec<(String, String)> {
    views
        .iter()
        .flat_map(|v| v["results"].as_array().cloned().unwrap_or_default())
        .map(|r| {
            (
                r["route"]["handler"].as_str().unwrap_or("").to_string(),
                r["route"]["model"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

/// 60 canonical shots over Kling (6 slots, resource packs for 10 creates), Runway (5) and fal
/// (4), policy `ordered`: Kling takes what it can until its packs run out (429/1102), then the
/// rest go elsewhere; every unit completes with exactly one provider job across the three
/// simulators.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_sixty_shots_fail_over_when_klings_packs_run_out_and_bill_once() {
    let mut kling = crate::kling::sim_options(26);
    kling.balance = Some(10.0);
    let sims = Sims::start(
        kling,
        crate::runway::sim_options(26),
        crate::fal::sim_options(),
    )
    .await;
    let run = Run::start(sims, (6, 5, 4), route(RoutePolicy::Ordered, [0, 1, 2])).await;
    let started = std::time::Instant::now();
    let ids = vec![
        run.submit(shots("a", 30)).await,
        run.submit(shots("b", 30)).await,
    ];
    let views = run.wait_terminal(&ids, Duration::from_secs(180)).await;
    for v in &views {
        assert_eq!(v["status"], "completed", "{v}");
    }
    // Who served what: Kling ten (its packs), the rest Runway and fal.
    let served = served_by(&views);
    assert_eq!(served.len(), 60);
    let count = |h: &str| served.iter().filter(|(x, _)| x == h).count();
    assert_eq!(count("kling-video"), 10, "{served:?}");
    assert_eq!(count("runway-video") + count("fal-video"), 50, "{served:?}");
    assert!(count("runway-video") > 0 && count("fal-video") > 0);
    // Exactly one accepted job per unit, counted from the simulators' job lists.
    let mut units = unit_rows(&run, &ids[0], "a").await;
    units.extend(unit_rows(&run, &ids[1], "b").await);
    let jobs = jobs_by_unit(&run.sims, &units);
    assert!(
        !jobs.contains_key(&None),
        "a job no unit recorded: {jobs:?}"
    );
    assert_eq!(jobs.len(), 60, "{jobs:?}");
    for (unit, js) in &jobs {
        assert_eq!(js.len(), 1, "unit {unit:?} has jobs {js:?}");
    }
    // Kling refused creates for its packs only for the units granted in the tick that found
    // them gone (at most its 6 slots), then on the drained account's probes, whose rest
    // doubles after each refusal: at most log2(run time / first rest) + 1 of them.
    let refused = run.sims.kling.stats().balance_refusals;
    assert!(refused >= 1, "the packs never ran out");
    let rest = run
        .services
        .config
        .scheduler
        .account_probe
        .as_millis()
        .max(1) as f64;
    let probes = (started.elapsed().as_millis() as f64 / rest)
        .log2()
        .ceil()
        .max(0.0) as u64
        + 1;
    assert!(
        refused <= 6 + probes,
        "Kling kept getting creates: {refused} refused, at most {} expected",
        6 + probes
    );
    // `GET /v1/routes` counts Kling's refusals and quotes the last.
    let routes = run.get("/v1/routes").await;
    let kling = &routes[0]["targets"][0];
    assert_eq!(kling["handler"], "kling-video", "{routes}");
    assert_eq!(
        kling["recent_refusals"]["account_exhausted"].as_u64(),
        Some(refused),
        "{routes}"
    );
    assert!(
        kling["last_refusal"]
            .as_str()
            .unwrap_or("")
            .contains("1102"),
        "{routes}"
    );
    assert_eq!(routes[0]["pending"], 0);
    // The failover is in the units' events.
    let events = run.get(&format!("/v1/tasks/{}/events", ids[0])).await;
    let text = events.to_string();
    assert!(
        text.contains("kling-video/kling-v1-6 refused it (account_exhausted"),
        "{text}"
    );
    run.stop().await;
}

/// `ordered` never uses the second target while the first has room; `cheapest` picks the
/// cheapest target while it has room and overflows when it has none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_ordered_fills_the_first_target_and_cheapest_the_cheapest() {
    // Ordered: 8 shots, Kling has 20 slots: every one on Kling.
    let run = Run::start(
        Sims::fast(27).await,
        (20, 5, 4),
        route(RoutePolicy::Ordered, [0, 1, 2]),
    )
    .await;
    let id = run.submit(shots("o", 8)).await;
    let views = run.wait_terminal(&[id], Duration::from_secs(120)).await;
    let served = served_by(&views);
    assert!(
        served.iter().all(|(h, _)| h == "kling-video"),
        "ordered used another target while Kling had room: {served:?}"
    );
    assert_eq!(run.sims.runway.jobs().len() + run.sims.fal.jobs().len(), 0);
    run.stop().await;

    // Cheapest: Kling std 5 s costs 1 unit, Runway 25 credits, fal $0.2: the estimates are in
    // each provider's own unit, so the route compares the numbers as given (docs/routes.md):
    // fal's 0.2 is cheapest. 12 shots on fal's 4 slots: 4 at a time on fal while it has room,
    // the rest overflow to the next cheapest (Kling).
    let run = Run::start(
        Sims::fast(28).await,
        (20, 5, 4),
        route(RoutePolicy::Cheapest, [0, 1, 2]),
    )
    .await;
    let id = run.submit(shots("c", 12)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    for v in &views {
        assert_eq!(v["status"], "completed", "{v}");
    }
    let served = served_by(&views);
    let on = |h: &str| served.iter().filter(|(x, _)| x == h).count();
    assert!(
        on("fal-video") >= 4,
        "cheapest did not fill fal: {served:?}"
    );
    assert_eq!(on("fal-video") + on("kling-video"), 12, "{served:?}");
    assert_eq!(
        on("runway-video"),
        0,
        "the dearest target was used: {served:?}"
    );
    let jobs = jobs_by_unit(&run.sims, &unit_rows(&run, &id, "c").await);
    assert!(jobs.values().all(|j| j.len() == 1), "{jobs:?}");
    run.stop().await;
}

/// A create answer the Runway simulator drops (the job exists, slotd never heard) keeps the
/// unit bound to Runway: it holds its slot for the model's longest run and then fails
/// `submission_unknown`, never created again, least of all at a second provider. Every job at
/// the three simulators is tied to its unit by what its request carried (Kling's
/// `external_task_id`, Runway's and fal's prompt), so an orphan Runway job counts: exactly one
/// job per unit in all, the orphans exactly the lost create answers and the failed units.
/// Runway is first in the route so it takes every shot it has room for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_a_lost_create_answer_never_leads_to_a_second_providers_job() {
    const SHOTS: usize = 20;
    let mut runway = crate::runway::sim_options(29);
    runway.lost_answer_rate = 0.3;
    let sims = Sims::start(
        crate::kling::sim_options(29),
        runway,
        crate::fal::sim_options(),
    )
    .await;
    // Runway first, so it takes every shot it has room for. Lost answers hit polls too; a
    // poll's transient error spends no retry (the job runs on at Runway), so at the default
    // budget only what became of each create decides how a unit ends.
    let run = Run::start_with(
        sims,
        (6, 5, 4),
        route(RoutePolicy::Ordered, [1, 0, 2]),
        |_| {},
    )
    .await;
    let id = run.submit(shots("l", SHOTS)).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(180))
        .await;
    let lost = run.sims.runway.stats().faults.lost_create_answers;
    assert!(
        lost > 0,
        "no create answer was lost; the test proves nothing"
    );
    // Every job at every simulator, by the unit its request names: none without one, no unit
    // at two providers, exactly one job per unit in all.
    let units = unit_rows(&run, &id, "l").await;
    assert_eq!(units.len(), SHOTS);
    let jobs = jobs_by_unit(&run.sims, &units);
    assert!(
        !jobs.contains_key(&None),
        "a job no unit's request names: {jobs:?}"
    );
    for (unit, js) in &jobs {
        let providers: HashSet<&str> = js.iter().filter_map(|j| j.split(' ').next()).collect();
        assert_eq!(providers.len(), 1, "unit {unit:?} has jobs {js:?}");
    }
    let at = |p: &str| {
        jobs.values()
            .flatten()
            .filter(|j| j.starts_with(&format!("{p} ")))
            .count()
    };
    let total: usize = jobs.values().map(Vec::len).sum();
    assert_eq!(
        (at("kling"), at("runway"), at("fal"), total),
        (
            run.sims.kling.jobs().len(),
            run.sims.runway.jobs().len(),
            run.sims.fal.jobs().len(),
            SHOTS
        ),
        "one job per unit across the three providers: {jobs:?}"
    );
    for (unit, _, _) in &units {
        let js = jobs.get(&Some(unit.clone())).cloned().unwrap_or_default();
        assert_eq!(js.len(), 1, "unit {unit} has jobs {js:?}");
    }
    // Every unit ended: completed, or failed `submission_unknown` while bound to Runway, one
    // per lost create answer.
    let results = views[0]["results"].as_array().cloned().unwrap_or_default();
    assert_eq!(results.len(), SHOTS, "{}", views[0]);
    let completed = results
        .iter()
        .filter(|r| r["status"] == "completed")
        .count();
    let failed: Vec<&Value> = results.iter().filter(|r| r["status"] == "failed").collect();
    eprintln!(
        "lost create answers {lost}: {completed} completed, {} failed; jobs at Kling {}, \
         Runway {}, fal {}",
        failed.len(),
        at("kling"),
        at("runway"),
        at("fal")
    );
    assert_eq!(completed + failed.len(), SHOTS, "{}", views[0]);
    assert_eq!(
        failed.len() as u64,
        lost,
        "one failed unit per lost create answer: {}",
        views[0]
    );
    for r in &failed {
        assert_eq!(r["error"]["code"], "submission_unknown", "{r}");
        let message = r["error"]["message"].as_str().unwrap_or("");
        assert!(
            message.contains("the outcome of Runway's create is unknown"),
            "{r}"
        );
        assert_eq!(r["route"]["handler"], "runway-video", "{r}");
        assert!(r["provider_task_id"].is_null(), "{r}");
    }
    // The orphans: Runway jobs no unit recorded, one per lost create answer, each the one job
    // of a failed unit.
    let recorded: HashSet<&str> = units.iter().filter_map(|(_, _, j)| j.as_deref()).collect();
    let orphans: Vec<String> = run
        .sims
        .runway
        .jobs()
        .into_iter()
        .filter(|j| !recorded.contains(j.task_id.as_str()))
        .map(|j| format!("runway {}", j.task_id))
        .collect();
    assert_eq!(orphans.len() as u64, lost, "{orphans:?}");
    let failed_prompts: HashSet<String> = failed
        .iter()
        .filter_map(|r| r["index"].as_u64().map(|i| prompt("l", i)))
        .collect();
    for (unit, p, _) in &units {
        let js = jobs.get(&Some(unit.clone())).cloned().unwrap_or_default();
        assert_eq!(
            js.iter().any(|j| orphans.contains(j)),
            failed_prompts.contains(p),
            "unit {unit} ({p}): jobs {js:?}, orphans {orphans:?}"
        );
    }
    run.stop().await;
}

/// Kling's credentials revoked halfway (`POST /_sim/account`): the units granted in the tick
/// that met it and the drained account's probes are refused, everything else goes to Runway
/// and fal at once; Kling's in-flight jobs finish once it is restored; one job per unit.
/// `GET /v1/routes` shows the route, its targets and Kling's refusals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_a_kling_account_revoked_halfway_sends_the_rest_elsewhere() {
    let run = Run::start(
        Sims::fast(30).await,
        (6, 5, 4),
        route(RoutePolicy::Ordered, [0, 1, 2]),
    )
    .await;
    let id = run.submit(shots("r", 40)).await;
    let kling_jobs = || run.sims.kling.jobs().len();
    eventually(Duration::from_secs(60), "Kling took 8 jobs", async || {
        (kling_jobs() >= 8).then_some(())
    })
    .await;
    let account = |revoked: bool| {
        let c = run.client.clone();
        let url = format!("{}/_sim/account", run.sims.kling.base_url());
        async move {
            let r = c
                .post(url)
                .json(&json!({ "revoked": revoked }))
                .send()
                .await
                .expect("sim account");
            assert!(r.status().is_success());
        }
    };
    account(true).await;
    let revoked_at = std::time::Instant::now();
    let at_revoke = kling_jobs();
    // Every unit not held by Kling completes elsewhere while Kling is revoked.
    eventually(
        Duration::from_secs(120),
        "the rest completed elsewhere",
        async || {
            let view = run.get(&format!("/v1/tasks/{id}")).await;
            let results = view["results"].as_array().cloned().unwrap_or_default();
            let open = results
                .iter()
                .filter(|r| r["status"] != "completed")
                .filter(|r| r["route"]["handler"] != "kling-video")
                .count();
            (open == 0).then_some(())
        },
    )
    .await;
    assert_eq!(
        kling_jobs(),
        at_revoke,
        "a job was created on a revoked account"
    );
    let routes = run.get("/v1/routes").await;
    let clip = &routes[0];
    assert_eq!(clip["name"], ROUTE, "{routes}");
    assert_eq!(clip["policy"], "ordered");
    let kling = &clip["targets"][0];
    assert_eq!(kling["handler"], "kling-video");
    assert_eq!(kling["state"], "ready");
    assert!(
        kling["pools"]
            .as_array()
            .is_some_and(|p| p.iter().any(|p| p["name"] == KLING_POOL)),
        "{routes}"
    );
    let refused = kling["recent_refusals"]["account_refused"]
        .as_u64()
        .unwrap_or(0);
    let rest = run
        .services
        .config
        .scheduler
        .account_probe
        .as_millis()
        .max(1) as f64;
    let probes = (revoked_at.elapsed().as_millis() as f64 / rest)
        .log2()
        .ceil()
        .max(0.0) as u64
        + 1;
    assert!(
        refused <= 6 + probes,
        "{refused} submits met the revoked account, at most {} expected",
        6 + probes
    );
    account(false).await;
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    assert_eq!(views[0]["status"], "completed", "{}", views[0]);
    let jobs = jobs_by_unit(&run.sims, &unit_rows(&run, &id, "r").await);
    assert!(!jobs.contains_key(&None), "{jobs:?}");
    assert_eq!(jobs.len(), 40);
    assert!(jobs.values().all(|j| j.len() == 1), "{jobs:?}");
    run.stop().await;
}

/// A start-by time across a route: the units still waiting on the route when it passes fail
/// `deadline_unreachable` there (the route's sweep), before any provider request; the rest
/// ran and completed. While units wait on the route, the task has an ETA from every target's
/// pools together.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_units_waiting_on_the_route_past_their_start_by_fail_before_any_request() {
    let run = Run::start(
        Sims::fast(31).await,
        (6, 5, 4),
        route(RoutePolicy::Ordered, [0, 1, 2]),
    )
    .await;
    let start_by = crate::deadlines::now_ms() + 1_500;
    let body = json!({"payload": shots("s", 120), "start_by": crate::deadlines::rfc3339(start_by)});
    let id = post_task(&run.client, &run.base, ROUTE, body).await;
    let view = run.get(&format!("/v1/tasks/{id}")).await;
    assert!(view["queue_position"].is_u64(), "{view}");
    assert!(
        view["estimated_completion_at"].is_i64(),
        "a routed task waiting on its route has an ETA: {view}"
    );
    let views = run
        .wait_terminal(std::slice::from_ref(&id), Duration::from_secs(120))
        .await;
    let results = views[0]["results"].as_array().cloned().unwrap_or_default();
    let late: Vec<&Value> = results.iter().filter(|r| r["status"] == "failed").collect();
    let done = results
        .iter()
        .filter(|r| r["status"] == "completed")
        .count();
    assert!(!late.is_empty() && done > 0, "{}", views[0]);
    assert_eq!(late.len() + done, 120, "{}", views[0]);
    for r in &late {
        assert_eq!(r["error"]["code"], "deadline_unreachable", "{r}");
        assert!(r["provider_task_id"].is_null(), "{r}");
        assert!(r["route"]["handler"].is_null(), "failed while bound: {r}");
    }
    // Nothing of the late units reached a provider.
    let jobs = jobs_by_unit(&run.sims, &unit_rows(&run, &id, "s").await);
    assert_eq!(jobs.values().map(Vec::len).sum::<usize>(), done, "{jobs:?}");
    run.stop().await;
}

/// A tenant budget across a route: each unit reserves the estimate of the target it is bound
/// to. fal first (a 5 s 720p Pika clip: $0.20, four slots), Kling second (1 unit); a budget of
/// 0.9 covers four fal clips and never a Kling one: the units the route sends to Kling while
/// fal is full do not fit and wait on the route (`wait_reason: budget`), unbound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_a_budget_counts_each_units_chosen_target() {
    let budget = |c: &mut Config| {
        c.tenants.insert(
            "local".into(),
            slotd_core::config::TenantConfig {
                budget: Some(slotd_core::config::BudgetConfig {
                    limit: 0.9,
                    period: Duration::from_secs(86_400),
                }),
                ..Default::default()
            },
        );
    };
    let run = Run::start_with(
        Sims::fast(32).await,
        (6, 5, 4),
        route(RoutePolicy::Ordered, [2, 0, 1]),
        budget,
    )
    .await;
    let id = run.submit(shots("b", 10)).await;
    let held = eventually(Duration::from_secs(60), "4 done, 6 held", async || {
        let v = run.get(&format!("/v1/tasks/{id}")).await;
        let results = v["results"].as_array().cloned().unwrap_or_default();
        let held = results
            .iter()
            .filter(|r| r["status"] == "pending" && r["wait_reason"] == "budget")
            .count();
        (v["completed"] == 4 && held == 6).then_some(v)
    })
    .await;
    let results = held["results"].as_array().cloned().unwrap_or_default();
    for r in results.iter().filter(|r| r["status"] == "completed") {
        assert_eq!(r["route"]["handler"], "fal-video", "{r}");
        assert_eq!(r["cost_estimate"], 0.2, "{r}");
    }
    for r in results.iter().filter(|r| r["status"] == "pending") {
        assert!(
            r["route"]["handler"].is_null(),
            "held units stay unbound: {r}"
        );
    }
    assert_eq!(
        run.sims.kling.jobs().len() + run.sims.runway.jobs().len(),
        0
    );
    assert_eq!(run.sims.fal.jobs().len(), 4);
    let usage = run.get("/v1/tenants/local/usage").await;
    let spent = usage["period"]["spent"].as_f64().unwrap_or(0.0);
    assert!((spent - 0.8).abs() < 1e-9, "{usage}");
    assert_eq!(usage["period"]["submissions"], 4, "{usage}");
    run.client
        .post(format!("{}/v1/tasks/{id}/cancel", run.base))
        .send()
        .await
        .expect("cancel");
    run.stop().await;
}
