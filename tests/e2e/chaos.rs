//! Chaos in cluster mode: two API and three scheduler processes of the real binary over
//! PostgreSQL (behind a proxy the test can cut) and a Redis server the test starts itself,
//! the Kling simulator with faults on (5xx, malformed and slow answers, failures after
//! acceptance) and an account limit *above* the pool's, so a slot handed out twice shows as
//! a job the pool does not allow. Three tenants submit the shots through both APIs.
//!
//! At random moments one of: SIGKILL a scheduler or an API process and start it again;
//! SIGSTOP a scheduler past its lease and resume it; restart Redis (its data lost); cut every
//! PostgreSQL connection. After each: every `external_task_id` was created at most once, the
//! provider never ran more than the pool's limit at once, and `slotd check` (with its Redis
//! rules and the object store) is clean; a slot set a dead process left holding a released
//! unit must agree with the database again within ten seconds (the next lease holder frees
//! it). At the end every unit completed or failed with a reason, and the provider's own count
//! of creates is the units plus the retries the unit log records (less the units that failed
//! before the provider accepted them).
//!
//! Every disruption lands while jobs are in flight: before each one the test tops the backlog
//! up (more tasks per tenant when fewer than five pools' worth of units wait or run) and
//! waits until the provider runs jobs. The provider's own count of running jobs and the units
//! `submitted` in the database are read just before the disruption and just after it took
//! effect (the process dead or frozen, Redis down, PostgreSQL cut), and both must be above
//! zero.
//!
//! Eight disruptions by default, a seeded shuffle of every kind (API SIGKILL, scheduler
//! SIGKILL, scheduler SIGSTOP past its lease, PostgreSQL cut, Redis restart) followed by kinds
//! drawn at random; the run asserts each kind happened. `SLOTD_CHAOS_DISRUPTIONS=50` for a
//! long run (every kind drawn at random, as the short run did before), `SLOTD_CHAOS_SEED` to
//! replay one (the seed is printed). Both print a tally: per kind, how many and the jobs in
//! flight at each.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use slotd_sim::kling::{SimHandle, SimOptions};
use slotd_testkit::stub::proxy::TcpProxy;

use crate::kling::{TIME_SCALE, kling_plugins, video_payload};
use crate::support::*;

/// The video pool's own limit; the simulated account allows [`ACCOUNT_LIMIT`].
const POOL_LIMIT: u32 = 18;
const ACCOUNT_LIMIT: u32 = 25;
const LEASE_TTL_MS: u64 = 400;
const TENANTS: [&str; 3] = ["studio-a", "studio-b", "studio-c"];
const SHOTS_PER_TASK: usize = 20;
const DISRUPTIONS_DEFAULT: usize = 8;
/// Units kept waiting or running before each disruption: five pools' worth.
const BACKLOG: i64 = 5 * POOL_LIMIT as i64;
/// How long a slot set may name units released in the database after a process died between
/// the two: the lease lapses (400 ms), the next holder takes the pool and reconciles at its
/// first tick; ten times that on a loaded two-core machine.
const SLOT_RECOVERY: Duration = Duration::from_secs(10);

/// The kinds of disruption, in the order the tally prints them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    ApiKill,
    SchedulerKill,
    SchedulerStop,
    PostgresCut,
    RedisRestart,
}

impl Kind {
    const ALL: [Kind; 5] = [
        Kind::ApiKill,
        Kind::SchedulerKill,
        Kind::SchedulerStop,
        Kind::PostgresCut,
        Kind::RedisRestart,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::ApiKill => "API SIGKILL",
            Kind::SchedulerKill => "scheduler SIGKILL",
            Kind::SchedulerStop => "scheduler SIGSTOP past its lease",
            Kind::PostgresCut => "PostgreSQL connections cut",
            Kind::RedisRestart => "Redis restart (data lost)",
        }
    }

    /// One kind at random, with the weights (and the one draw) the long run always had, so
    /// an old seed replays the same kinds.
    fn draw(rng: &mut rand::rngs::StdRng) -> Kind {
        match rng.random_range(0..10) {
            0..=2 => Kind::SchedulerKill,
            3 => Kind::ApiKill,
            4..=5 => Kind::SchedulerStop,
            6..=7 => Kind::RedisRestart,
            _ => Kind::PostgresCut,
        }
    }
}

/// Work in flight at one instant: jobs running at the provider (its own count) and units
/// `submitted` in slotd's database.
#[derive(Clone, Copy, Debug)]
struct InFlight {
    provider: u32,
    submitted: i64,
}

impl std::fmt::Display for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} running/{} submitted", self.provider, self.submitted)
    }
}

/// One disruption as it landed: the work in flight just before it and just after it took
/// effect (before the process was started again, resumed or the cut healed).
#[derive(Clone, Copy, Debug)]
struct Landed {
    kind: Kind,
    before: InFlight,
    after: InFlight,
}

impl Landed {
    fn in_flight(&self) -> bool {
        self.before.provider > 0
            && self.before.submitted > 0
            && self.after.provider > 0
            && self.after.submitted > 0
    }
}

fn env_number(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

fn api_key(tenant: &str) -> String {
    format!("chaos-key-{tenant}")
}

/// A Redis server of the test's own, on a port of its own, keeping nothing on disk: a
/// restart loses every key, as a crashed cache without persistence does.
struct OwnRedis {
    port: u16,
    child: Child,
}

impl OwnRedis {
    async fn start(port: u16) -> OwnRedis {
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("start redis-server (Debian package redis-server)");
        let r = OwnRedis { port, child };
        eventually(
            Duration::from_secs(10),
            "redis-server answering",
            async || {
                let client = redis::Client::open(r.url()).ok()?;
                let mut conn = client.get_multiplexed_async_connection().await.ok()?;
                redis::cmd("PING")
                    .query_async::<String>(&mut conn)
                    .await
                    .ok()
            },
        )
        .await;
        r
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// SIGKILL and start again on the same port: every key is gone.
    async fn restart(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
        *self = OwnRedis::start(self.port).await;
    }
}

impl Drop for OwnRedis {
    fn drop(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }
}

/// One slotd process: its role, where it listens, the child.
struct Proc {
    role: &'static str,
    listen: String,
    child: Child,
}

impl Proc {
    fn spawn(config: &Path, log: &Path, role: &'static str, listen: String) -> Proc {
        let child = spawn_slotd(config, log, &["--role", role, "--listen", &listen]);
        Proc {
            role,
            listen,
            child,
        }
    }

    fn base(&self) -> String {
        format!("http://{}", self.listen)
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([format!("-{sig}"), self.child.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "kill -{sig} {}", self.child.id());
    }

    /// SIGKILL, reaped.
    fn kill(&mut self) {
        self.child.kill().ok();
        self.child.wait().ok();
    }

    /// The same role started again on the same address (after [`Proc::kill`]).
    async fn restart(&mut self, config: &Path, log: &Path, client: &reqwest::Client) {
        *self = Proc::spawn(config, log, self.role, self.listen.clone());
        wait_healthy(client, &self.base()).await;
    }
}

/// What a run did, for the summary line and the closing assertions.
#[derive(Debug, Default)]
struct Tally {
    landed: Vec<Landed>,
    checks: usize,
    /// The longest a slot set took to agree with the database again after a disruption.
    slot_recovery: Duration,
}

struct Chaos {
    sim: SimHandle,
    redis: OwnRedis,
    proxy: TcpProxy,
    apis: Vec<Proc>,
    schedulers: Vec<Proc>,
    client: reqwest::Client,
    config: PathBuf,
    log: PathBuf,
    prefix: String,
    objects: String,
    /// The test's own connections to the database, straight (not through the proxy): the
    /// count of `submitted` units stays readable while slotd's connections are cut.
    direct: sqlx::PgPool,
    /// Dropped after the processes (fields drop in order): the schema outlives its users.
    db: crate::pg::PgSchema,
    _dir: tempfile::TempDir,
}

impl Drop for Chaos {
    fn drop(&mut self) {
        for p in self.schedulers.iter_mut().chain(self.apis.iter_mut()) {
            let _ = Command::new("kill")
                .args(["-CONT", &p.child.id().to_string()])
                .status();
            p.child.kill().ok();
            p.child.wait().ok();
        }
    }
}

impl Chaos {
    async fn start(seed: u64) -> Chaos {
        let dir = tempfile::TempDir::new().expect("tmp");
        let sim = slotd_sim::kling::start(SimOptions {
            listen: "127.0.0.1:0".parse().expect("addr"),
            concurrency: ACCOUNT_LIMIT,
            time_scale: TIME_SCALE,
            access_key: "AK".into(),
            secret_key: "SK".into(),
            seed,
            fail_5xx_rate: 0.05,
            malformed_rate: 0.03,
            slow_rate: 0.01,
            slow_ms: 2_500,
            failure_after_accept_rate: 0.03,
            ..SimOptions::default()
        })
        .await
        .expect("simulator");
        let redis = OwnRedis::start(free_port()).await;
        let db = crate::pg::PgSchema::create().await;
        let direct = sqlx::postgres::PgPoolOptions::new()
            .max_connections(2)
            .connect(&db.url())
            .await
            .expect("connect to the test's schema");
        let mut url = url::Url::parse(&db.url()).expect("database url");
        let target = format!(
            "{}:{}",
            url.host_str().unwrap_or("127.0.0.1"),
            url.port().unwrap_or(5432)
        );
        let proxy = TcpProxy::start(target).await.expect("proxy");
        url.set_port(Some(proxy.port())).expect("port");
        let prefix = format!("slotd-chaos:{}:", uuid::Uuid::new_v4().simple());
        let objects = format!("file://{}", dir.path().join("objects").display());
        let config = write_config(dir.path(), &sim, url.as_str(), &redis.url(), &prefix);
        let log = dir.path().join("slotd.log");
        let client = reqwest::Client::new();
        let mut apis = Vec::new();
        for _ in 0..2 {
            let p = Proc::spawn(&config, &log, "api", format!("127.0.0.1:{}", free_port()));
            wait_healthy(&client, &p.base()).await;
            apis.push(p);
        }
        let mut schedulers = Vec::new();
        for _ in 0..3 {
            let p = Proc::spawn(
                &config,
                &log,
                "scheduler",
                format!("127.0.0.1:{}", free_port()),
            );
            wait_healthy(&client, &p.base()).await;
            schedulers.push(p);
        }
        Chaos {
            sim,
            redis,
            proxy,
            apis,
            schedulers,
            client,
            config,
            log,
            prefix,
            objects,
            direct,
            db,
            _dir: dir,
        }
    }

    /// Submit `tasks` video tasks per tenant, alternating between the two API processes.
    async fn submit(&self, tasks: usize) -> Vec<(String, String)> {
        let mut ids = Vec::new();
        for i in 0..tasks {
            for (t, tenant) in TENANTS.iter().enumerate() {
                let api = &self.apis[(i + t) % self.apis.len()];
                // Just after a PostgreSQL cut an API may still answer 503 (nothing stored):
                // ask again until it takes the task.
                let r = eventually(
                    Duration::from_secs(30),
                    "an API accepting a task",
                    async || {
                        let r = self
                            .client
                            .post(format!("{}/v1/tasks/video", api.base()))
                            .bearer_auth(api_key(tenant))
                            .json(&json!({"payload": video_payload(SHOTS_PER_TASK)}))
                            .send()
                            .await
                            .expect("submit");
                        (r.status() != 503).then_some(r)
                    },
                )
                .await;
                assert_eq!(r.status(), 202, "submit as {tenant}");
                let v: Value = r.json().await.expect("json");
                let id = v["task_id"].as_str().expect("task id").to_string();
                ids.push((tenant.to_string(), id));
            }
        }
        ids
    }

    /// Units of the video pool in each status, read straight from the database.
    async fn unit_counts(&self) -> BTreeMap<String, i64> {
        let rows: Vec<(String, i64)> = sqlx::query_as(
            "SELECT status, count(*) FROM units WHERE pool = 'kling:video' GROUP BY status",
        )
        .fetch_all(&self.direct)
        .await
        .expect("count units by status");
        rows.into_iter().collect()
    }

    /// The work in flight now; the provider's count is read last (the instant that matters
    /// is the disruption's, which follows or precedes this call).
    /// Jobs in flight on both sides, read just before a disruption acts. Jobs seen in flight
    /// by [`Chaos::ensure_in_flight`] may all have ended at the provider since, unnoticed by
    /// slotd yet (its slots still held): this waits, bounded, until the provider runs one
    /// again, so a disruption never starts on nothing in flight.
    async fn in_flight_before(&self) -> InFlight {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = self.in_flight().await;
            if (now.provider > 0 && now.submitted > 0) || Instant::now() > deadline {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn in_flight(&self) -> InFlight {
        let submitted = self
            .unit_counts()
            .await
            .get("submitted")
            .copied()
            .unwrap_or(0);
        InFlight {
            provider: self.sim.stats().running,
            submitted,
        }
    }

    /// The provider's count first, then the database's: for just after a disruption.
    async fn in_flight_after(&self) -> InFlight {
        let provider = self.sim.stats().running;
        let submitted = self
            .unit_counts()
            .await
            .get("submitted")
            .copied()
            .unwrap_or(0);
        InFlight {
            provider,
            submitted,
        }
    }

    /// Keep work coming so no disruption finds an idle cluster: when fewer than
    /// [`BACKLOG`] units wait or run (about three seconds of work, the time from one
    /// disruption to the next), enough tasks per tenant to make up the difference (added to
    /// `ids`). Then wait, bounded, until the provider runs jobs and units are `submitted` (a
    /// pool just taken over after a disruption fills again within a lease period or two).
    /// Returns how long it waited.
    async fn ensure_in_flight(&self, ids: &mut Vec<(String, String)>) -> Duration {
        let started = Instant::now();
        let counts = self.unit_counts().await;
        let waiting: i64 = ["pending", "submitted"]
            .iter()
            .filter_map(|s| counts.get(*s))
            .sum();
        if waiting < BACKLOG {
            let per_round = SHOTS_PER_TASK * TENANTS.len();
            let short = usize::try_from(BACKLOG - waiting).unwrap_or(0);
            ids.extend(self.submit(short.div_ceil(per_round)).await);
        }
        eventually(
            Duration::from_secs(30),
            "jobs in flight before a disruption",
            async || {
                // More than one job: a lone job may end in the instant the disruption takes,
                // and the disruption would then land on nothing in flight.
                let now = self.in_flight().await;
                (now.provider > 1 && now.submitted > 1).then_some(())
            },
        )
        .await;
        started.elapsed()
    }

    /// What must hold at every instant, checked after each disruption: on the provider's
    /// side (its own records) and in slotd's (`slotd check`, Redis and objects included).
    async fn assert_invariants(&self, when: &str, tally: &mut Tally) {
        let stats = self.sim.stats();
        let twice: Vec<_> = stats
            .creates_by_external_id
            .iter()
            .filter(|(_, n)| **n > 1)
            .collect();
        assert!(
            twice.is_empty(),
            "{when}: external_task_id created more than once: {twice:?}"
        );
        assert!(
            stats.max_running <= POOL_LIMIT,
            "{when}: the provider ran {} jobs at once; the pool allows {POOL_LIMIT}",
            stats.max_running
        );
        assert_eq!(
            stats.rate_limited_1303, 0,
            "{when}: the provider refused a submit for lack of capacity"
        );
        let waited = self.check(when).await;
        tally.checks += 1;
        tally.slot_recovery = tally.slot_recovery.max(waited);
    }

    /// `slotd check` after a disruption. Every rule must hold at once, except that a slot
    /// set may still name units a killed or frozen process released in the database but not
    /// in Redis (it died between its commit and the removal): the pool's next lease holder
    /// frees those when it takes over (a lease period, then its first reconciliation). Those
    /// findings must be gone within [`SLOT_RECOVERY`]; the longest wait is returned.
    async fn check(&self, when: &str) -> Duration {
        let started = Instant::now();
        loop {
            let findings = self.check_once(when).await;
            if findings.is_empty() {
                return started.elapsed();
            }
            let only_slots = findings.iter().all(|f| f.kind == "slots");
            assert!(
                only_slots && started.elapsed() < SLOT_RECOVERY,
                "{when}: slotd check found {} problem(s){}:\n{}",
                findings.len(),
                if only_slots {
                    format!(" still after {SLOT_RECOVERY:?}")
                } else {
                    String::new()
                },
                findings
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join("\n")
            );
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    async fn check_once(&self, when: &str) -> Vec<slotd_server::check::Finding> {
        let opts = slotd_server::check::CheckOptions {
            database_url: self.db.url(),
            objects: Some(self.objects.clone()),
            redis_url: Some(self.redis.url()),
            redis_prefix: self.prefix.clone(),
            pool_limits: BTreeMap::from([("kling:video".to_string(), POOL_LIMIT)]),
            account_limits: BTreeMap::new(),
            shared_accounts: Default::default(),
            pool_quotas: BTreeMap::new(),
            account_quotas: BTreeMap::new(),
            finalize_grace: slotd_server::check::FINALIZE_GRACE_DEFAULT,
            now_ms: slotd_core::clock::Clock::now_ms(&slotd_core::clock::SystemClock),
        };
        let report = slotd_server::check::run(&opts)
            .await
            .unwrap_or_else(|e| panic!("{when}: slotd check could not run: {e:#}"));
        assert!(
            report.checked.contains(&"redis") && report.checked.contains(&"objects"),
            "{when}: the check skipped a part: {:?}",
            report.checked
        );
        report.findings
    }

    /// One disruption of `kind` (which process, how long a cut: drawn from `rng`), with the
    /// work in flight just before it and just after it took effect.
    async fn disrupt(&mut self, kind: Kind, rng: &mut rand::rngs::StdRng) -> Landed {
        let (config, log) = (self.config.clone(), self.log.clone());
        let (before, after);
        match kind {
            Kind::SchedulerKill => {
                let i = rng.random_range(0..self.schedulers.len());
                before = self.in_flight_before().await;
                self.schedulers[i].kill();
                after = self.in_flight_after().await;
                self.schedulers[i]
                    .restart(&config, &log, &self.client)
                    .await;
            }
            Kind::ApiKill => {
                let i = rng.random_range(0..self.apis.len());
                before = self.in_flight_before().await;
                self.apis[i].kill();
                after = self.in_flight_after().await;
                self.apis[i].restart(&config, &log, &self.client).await;
            }
            Kind::SchedulerStop => {
                let i = rng.random_range(0..self.schedulers.len());
                before = self.in_flight_before().await;
                self.schedulers[i].signal("STOP");
                after = self.in_flight_after().await;
                // Past its lease: another scheduler takes its pools over meanwhile.
                tokio::time::sleep(Duration::from_millis(LEASE_TTL_MS * 3)).await;
                self.schedulers[i].signal("CONT");
            }
            Kind::RedisRestart => {
                before = self.in_flight_before().await;
                self.redis.child.kill().ok();
                self.redis.child.wait().ok();
                after = self.in_flight_after().await;
                self.redis.restart().await;
            }
            Kind::PostgresCut => {
                before = self.in_flight_before().await;
                self.proxy.set_up(false);
                after = self.in_flight_after().await;
                tokio::time::sleep(Duration::from_millis(rng.random_range(100..800))).await;
                self.proxy.set_up(true);
            }
        }
        Landed {
            kind,
            before,
            after,
        }
    }

    /// Every task terminal, read through whichever API answers.
    async fn wait_terminal(&self, ids: &[(String, String)]) -> Vec<Value> {
        eventually(
            Duration::from_secs(600),
            "every task terminal",
            async || {
                let mut out = Vec::new();
                for (tenant, id) in ids {
                    let mut view = None;
                    for api in &self.apis {
                        let got = self
                            .client
                            .get(format!("{}/v1/tasks/{id}?units=true", api.base()))
                            .bearer_auth(api_key(tenant))
                            .timeout(Duration::from_secs(5))
                            .send()
                            .await;
                        if let Ok(r) = got
                            && let Ok(v) = r.json::<Value>().await
                        {
                            view = Some(v);
                            break;
                        }
                    }
                    let v = view?;
                    if !matches!(v["status"].as_str(), Some("completed" | "failed")) {
                        return None;
                    }
                    out.push(v);
                }
                Some(out)
            },
        )
        .await
    }
}

fn write_config(dir: &Path, sim: &SimHandle, database: &str, redis: &str, prefix: &str) -> PathBuf {
    let plugins = kling_plugins(dir);
    let keys: String = TENANTS
        .iter()
        .map(|t| {
            format!(
                "[[api_keys]]\nkey = \"{}\"\ntenant = \"{t}\"\n\n",
                api_key(t)
            )
        })
        .collect();
    let text = format!(
        r#"
database_url = "{database}"
redis_url = "{redis}"
redis_prefix = "{prefix}"
plugins_dir = "{plugins}"
object_store = "file://{objects}"

{keys}
[limits]
call_deadline = "2s"

[scheduler]
tick_interval = "{tick_ms}ms"
min_rest = "2ms"
finalize_lease = "500ms"
lease_ttl = "{LEASE_TTL_MS}ms"

[pools."kling:video"]
max_slots = {POOL_LIMIT}

[handlers.kling-video]
base_url = "{base}"
access_key = "AK"
secret_key = "SK"
allowed_hosts = ["{host}"]
"#,
        tick_ms = ((10_000.0 * TIME_SCALE) as u64).max(5),
        plugins = plugins.display(),
        objects = dir.join("objects").display(),
        base = sim.base_url(),
        host = sim.addr(),
    );
    let path = dir.join("slotd.toml");
    std::fs::write(&path, text).expect("write config");
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_under_chaos_keeps_every_invariant() {
    let long_run = env_number("SLOTD_CHAOS_DISRUPTIONS");
    let disruptions = long_run.map_or(DISRUPTIONS_DEFAULT, |n| n as usize);
    let seed = env_number("SLOTD_CHAOS_SEED").unwrap_or(20261203);
    eprintln!("chaos: {disruptions} disruptions, seed {seed} (SLOTD_CHAOS_SEED={seed} replays it)");
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    // The default run: every kind once, in a seeded order, then kinds at random. A long run
    // draws every kind at random, as it always has (an old seed replays its kinds).
    let mut cover: Vec<Kind> = Vec::new();
    if long_run.is_none() {
        cover = Kind::ALL.to_vec();
        cover.shuffle(&mut rng);
    }
    let mut c = Chaos::start(seed).await;
    // 300 shots from three tenants; more for a long run, so disruptions keep landing mid-run.
    let per_tenant = 5 * disruptions.div_ceil(DISRUPTIONS_DEFAULT).max(1);
    let mut ids = c.submit(per_tenant).await;
    let started = Instant::now();
    let mut tally = Tally::default();
    for n in 1..=disruptions {
        tokio::time::sleep(Duration::from_millis(rng.random_range(200..1_200))).await;
        let kind = cover
            .get(n - 1)
            .copied()
            .unwrap_or_else(|| Kind::draw(&mut rng));
        let waited = c.ensure_in_flight(&mut ids).await;
        let landed = c.disrupt(kind, &mut rng).await;
        let when = format!("disruption {n} ({})", kind.name());
        eprintln!(
            "chaos: {when}: {} before, {} after (waited {waited:.2?} for work in flight)",
            landed.before, landed.after
        );
        assert!(
            landed.in_flight(),
            "{when} landed while nothing was in flight: {} just before, {} just after \
             (provider running/units submitted)",
            landed.before,
            landed.after
        );
        tally.landed.push(landed);
        c.assert_invariants(&format!("after {when}"), &mut tally)
            .await;
    }
    eprintln!(
        "chaos: {disruptions} disruptions done after {:.1}s; {} creates so far",
        started.elapsed().as_secs_f64(),
        c.sim.stats().creates
    );
    let mut by_kind: BTreeMap<Kind, Vec<&Landed>> = BTreeMap::new();
    for l in &tally.landed {
        by_kind.entry(l.kind).or_default().push(l);
    }
    for (kind, all) in &by_kind {
        let in_flight = all.iter().filter(|l| l.in_flight()).count();
        let at: Vec<String> = all
            .iter()
            .map(|l| format!("{}->{}", l.before.provider, l.after.provider))
            .collect();
        eprintln!(
            "chaos: tally: {:<34} {} ({in_flight} in flight); jobs running before->after: {}",
            kind.name(),
            all.len(),
            at.join(", ")
        );
    }
    if long_run.is_none() {
        let missing: Vec<&str> = Kind::ALL
            .iter()
            .filter(|k| !by_kind.contains_key(k))
            .map(|k| k.name())
            .collect();
        assert!(
            missing.is_empty(),
            "the default run left out {missing:?}; it made {:?}",
            by_kind.keys().map(|k| k.name()).collect::<Vec<_>>()
        );
    }
    let views = c.wait_terminal(&ids).await;
    c.assert_invariants("at the end", &mut tally).await;

    let (mut completed, mut failed) = (0, 0);
    for v in &views {
        for r in v["results"].as_array().expect("results") {
            match r["status"].as_str() {
                Some("completed") => {
                    completed += 1;
                    assert!(r["object_key"].is_string(), "completed without a file: {r}");
                }
                Some("failed") => {
                    failed += 1;
                    assert!(
                        r["error"]["message"]
                            .as_str()
                            .is_some_and(|m| !m.is_empty()),
                        "unit failed without a reason: {r}"
                    );
                }
                other => panic!("unit ended {other:?}: {r}"),
            }
        }
    }
    let (units, retries, never) = unit_log_counts(&c.db.url(), "kling:video").await;
    let stats = c.sim.stats();
    let shots = (ids.len() * SHOTS_PER_TASK) as i64;
    assert_eq!(units, shots, "one unit per shot");
    assert_eq!(
        stats.creates as i64,
        units + retries - never,
        "the provider's creates are the units ({units}) plus recorded retries ({retries}) \
         less units that failed before any acceptance ({never})"
    );
    assert!(
        never <= units / 20,
        "{never} of {units} units failed before the provider accepted them"
    );
    eprintln!(
        "chaos: {} disruptions; {units} units: {completed} completed, {failed} failed \
         ({never} before acceptance); provider: {} creates, max {} at once (pool {POOL_LIMIT}, \
         account {ACCOUNT_LIMIT}), faults {:?}; slotd check clean {} times (slot sets agreed \
         again within {:?} at worst)",
        disruptions,
        stats.creates,
        stats.max_running,
        stats.faults,
        tally.checks,
        tally.slot_recovery
    );
    assert!(completed > 0, "nothing completed");
    let log_text = std::fs::read_to_string(&c.log).unwrap_or_default();
    assert!(
        !log_text.contains("panicked"),
        "slotd panicked:\n{log_text}"
    );
}
