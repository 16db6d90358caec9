//! Chaos in cluster mode: two API and three scheduler processes of the real binary over
//! PostgreSQL (behind a proxy the test can cut) and a Redis server the test starts itself,
//! the Kling simulator with faults on (5xx, malformed and slow answers, failures after
//! acceptance) and an account limit *above* the pools' together, so a slot handed out twice
//! shows as a job the pools do not allow. The scheduler runs at its defaults (reconcile
//! interval, retry budget), its timings scaled to the simulator's time by the tick. Three
//! tenants submit video shots (`kling:video`) and two-stage avatar clones (`kling:avatar`:
//! a voice, then an element carrying it, so a unit goes `submitted`, `pending` at its next
//! stage, `submitted` again) through both APIs.
//!
//! Provider callbacks are on: each scheduler is given a public URL (`SLOTD_PUBLIC_URL`) naming
//! one of the two API processes (the first scheduler the first API, the second the second,
//! the third the first), so the simulator calls back the API the pool's lease holder named
//! when it created the job. Every task carries a completion webhook (`callback_url`) to a
//! receiver the test runs; the schedulers deliver them, signed, and the receiver holds each
//! request up to 400 ms and answers a first attempt 503 now and then, so deliveries are in
//! flight and retried while disruptions land.
//!
//! At random moments one of: SIGKILL a scheduler or an API process and start it again;
//! SIGSTOP a scheduler past its lease and resume it; restart Redis (its data lost); cut every
//! PostgreSQL connection. An API kill takes the API that the most running jobs will call back
//! (their callbacks fail until it is back; slotd's polling covers them). After each: every
//! `external_task_id` was created at most once, the provider never ran more video jobs than
//! the video pool allows, more avatar jobs (voices and elements together, from its job list)
//! than the avatar pool allows, nor more of both than the pools together, and `slotd check`
//! (with its Redis rules and the object store) is clean; a slot set a dead process left
//! holding a released unit must agree with the database again within ten seconds (the next
//! lease holder frees it). At the end every unit completed or failed with a reason; the
//! provider's own count of video creates is the units plus the retries the unit log records
//! (less the units that failed with no provider job known: none accepted in the log, none on
//! the row, where a callback that reported a job's end before its create's answer leaves the
//! job); each of its avatar jobs belongs, by its `external_task_id`, to one stage of an avatar
//! unit (one job per stage at most, a job that succeeded in both stages for every completed
//! clone), every job an avatar unit's log accepted is among them, and one no log accepted
//! belongs to a unit a callback moved; every task's end was delivered to the receiver (at
//! least once, signed, recorded delivered, nothing sent after the record), the last delivery
//! of each task naming its final status.
//!
//! Every disruption lands while jobs are in flight: before each one the test tops the backlog
//! up (more tasks per tenant when fewer than five video pools' worth of units, or four avatar
//! pools' worth, wait or run) and waits until the provider runs video jobs (more jobs than
//! the avatar pool allows). The provider's own count of running jobs and the video units
//! `submitted` in the database are read just before the disruption and just after it took
//! effect (the process dead or frozen, Redis down, PostgreSQL cut), and both must be above
//! zero; an API kill must also find jobs running that will call the killed process back.
//!
//! Eight disruptions by default, a seeded shuffle of every kind (API SIGKILL, scheduler
//! SIGKILL, scheduler SIGSTOP past its lease, PostgreSQL cut, Redis restart) followed by kinds
//! drawn at random; the run asserts each kind happened. `SLOTD_CHAOS_DISRUPTIONS=50` for a
//! long run (every kind drawn at random), `SLOTD_CHAOS_SEED` to replay one (the seed is
//! printed). Both print a tally: per kind, how many and the jobs in flight at each, the avatar
//! units submitted or between stages, the callbacks in flight to a killed API and the
//! callbacks the simulator could not deliver meanwhile, and the webhook deliveries the
//! receiver held at the instant.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::{HeaderMap, StatusCode};
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use slotd_core::clock::Clock;
use slotd_sim::kling::{SimHandle, SimJob, SimOptions};
use slotd_testkit::stub::proxy::TcpProxy;

use crate::kling::{TIME_SCALE, avatar_payload, kling_plugins, video_payload};
use crate::support::*;

/// The video pool's own limit; the simulated account allows [`ACCOUNT_LIMIT`].
const POOL_LIMIT: u32 = 18;
/// The avatar pool's own limit: its voices and elements together.
const AVATAR_LIMIT: u32 = 3;
/// Above both pools together (21), so a slot handed out twice shows as a job.
const ACCOUNT_LIMIT: u32 = 25;
const VIDEO_POOL: &str = "kling:video";
const AVATAR_POOL: &str = "kling:avatar";
/// The simulator's kinds of job of each pool.
const VIDEO_KINDS: [&str; 1] = ["text2video"];
const AVATAR_KINDS: [&str; 2] = ["custom-voices", "advanced-custom-elements"];
/// `whsec_` + base64 of a 24-byte key: the completion webhooks' signing secret.
const WEBHOOK_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const LEASE_TTL_MS: u64 = 400;
const TENANTS: [&str; 3] = ["studio-a", "studio-b", "studio-c"];
const SHOTS_PER_TASK: usize = 20;
/// Avatar clones (one unit each) per tenant at the start of the run.
const AVATARS_PER_TENANT: usize = 3;
const DISRUPTIONS_DEFAULT: usize = 8;
/// Video units kept waiting or running before each disruption: five pools' worth.
const BACKLOG: i64 = 5 * POOL_LIMIT as i64;
/// Avatar units kept waiting or running before each disruption: four pools' worth.
const AVATAR_BACKLOG: i64 = 4 * AVATAR_LIMIT as i64;
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

/// Work in flight at one instant: jobs running at the provider (its own count), video units
/// `submitted` in slotd's database, and avatar units `submitted` or `pending` at their second
/// stage (between the voice and the element).
#[derive(Clone, Copy, Debug)]
struct InFlight {
    provider: u32,
    submitted: i64,
    avatars: i64,
    between_stages: i64,
}

impl std::fmt::Display for InFlight {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} running/{} submitted (avatars {} submitted, {} between stages)",
            self.provider, self.submitted, self.avatars, self.between_stages
        )
    }
}

/// Units by pool, stage and status, as counted in the database.
type UnitCounts = BTreeMap<(String, String, String), i64>;

impl InFlight {
    /// Video jobs run at the provider (more jobs than the avatar pool allows) and video units
    /// are `submitted`.
    fn video_running(&self) -> bool {
        self.provider > AVATAR_LIMIT && self.submitted > 0
    }

    fn of(provider: u32, counts: &UnitCounts) -> InFlight {
        let sum = |pool: &str, stage: Option<&str>, status: &str| -> i64 {
            counts
                .iter()
                .filter(|((p, s, st), _)| {
                    p == pool && st == status && stage.is_none_or(|want| want == s)
                })
                .map(|(_, n)| n)
                .sum()
        };
        InFlight {
            provider,
            submitted: sum(VIDEO_POOL, None, "submitted"),
            avatars: sum(AVATAR_POOL, None, "submitted"),
            between_stages: sum(AVATAR_POOL, Some("element"), "pending"),
        }
    }
}

/// One disruption as it landed: the work in flight just before it and just after it took
/// effect (before the process was started again, resumed or the cut healed).
#[derive(Clone, Copy, Debug)]
struct Landed {
    kind: Kind,
    before: InFlight,
    after: InFlight,
    /// An API kill: the jobs running just before it that will call the killed API back.
    callbacks: Option<usize>,
    /// Callbacks the simulator sent that were not taken (no answer, or not 2xx) from just
    /// before the disruption (before the wait for work in flight) until the cluster was
    /// whole again.
    callbacks_lost: u64,
    /// Completion webhook requests the receiver held (not yet answered) just before it.
    deliveries: u32,
}

impl Landed {
    fn in_flight(&self) -> bool {
        self.before.provider > 0
            && self.before.submitted > 0
            && self.after.provider > 0
            && self.after.submitted > 0
            && self.callbacks.is_none_or(|n| n > 0)
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

/// One slotd process: its role, where it listens, its public URL (a scheduler's: where the
/// provider calls back), the child.
struct Proc {
    role: &'static str,
    listen: String,
    public_url: Option<String>,
    child: Child,
}

impl Proc {
    fn spawn(
        config: &Path,
        log: &Path,
        role: &'static str,
        listen: String,
        public_url: Option<String>,
    ) -> Proc {
        let env: Vec<(&str, &str)> = public_url
            .as_deref()
            .map(|u| ("SLOTD_PUBLIC_URL", u))
            .into_iter()
            .collect();
        let child = spawn_slotd_with_env(config, log, &["--role", role, "--listen", &listen], &env);
        Proc {
            role,
            listen,
            public_url,
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
        *self = Proc::spawn(
            config,
            log,
            self.role,
            self.listen.clone(),
            self.public_url.clone(),
        );
        wait_healthy(client, &self.base()).await;
    }
}

/// One completion webhook request the receiver got.
#[derive(Clone, Debug)]
struct Hit {
    /// Its `webhook-id`.
    id: String,
    /// The body's `type`, `data.task_id` and `data.status`.
    event: String,
    task: String,
    status: String,
    /// When it arrived (ms since the epoch, the clock slotd records with).
    at: i64,
    /// Its signature verified against [`WEBHOOK_SECRET`] on arrival.
    signed: bool,
    /// What the receiver answered (or would have, had the sender waited).
    answered: u16,
}

/// The test's webhook receiver: every request logged on arrival, before it is answered (so a
/// request whose sender died while it was held is in the log too).
#[derive(Default)]
struct Hooks {
    hits: Mutex<Vec<Hit>>,
    /// Requests being held right now.
    open: AtomicU32,
}

/// Counts a held request until its answer goes or its sender goes away (the handler's future
/// dropped).
struct Held<'a>(&'a AtomicU32);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Hooks {
    /// Serve `POST /hook` on a port of its own; the URL tasks name as `callback_url`.
    async fn serve(hooks: Arc<Hooks>) -> (String, tokio::task::JoinHandle<()>) {
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: HeaderMap, body: String| {
                let hooks = hooks.clone();
                async move { hooks.receive(&headers, &body).await }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind the webhook receiver");
        let addr = listener.local_addr().expect("receiver address");
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        (format!("http://{addr}/hook"), server)
    }

    /// Log the request, then hold it 0–400 ms (drawn from its id and attempt) and answer: 400
    /// to a bad signature, 503 to the first attempt of one delivery in eight, else 200.
    async fn receive(&self, headers: &HeaderMap, body: &str) -> StatusCode {
        let at = slotd_core::clock::SystemClock.now_ms();
        let header = |n: &str| {
            headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_string()
        };
        let id = header("webhook-id");
        let signed = header("webhook-timestamp").parse::<i64>().is_ok_and(|ts| {
            slotd_core::standard_webhooks::verify(
                WEBHOOK_SECRET,
                &id,
                ts,
                body.as_bytes(),
                &header("webhook-signature"),
                at / 1000,
            )
            .is_ok()
        });
        let v: Value = serde_json::from_str(body).unwrap_or(Value::Null);
        let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
        let (answered, draw) = {
            let mut hits = self.hits.lock().expect("hits");
            let earlier = hits.iter().filter(|h| h.id == id).count();
            let draw = fnv1a(&format!("{id}/{earlier}"));
            let answered = if !signed {
                400
            } else if earlier == 0 && fnv1a(&id).is_multiple_of(8) {
                503
            } else {
                200
            };
            hits.push(Hit {
                id,
                event: text(&v["type"]),
                task: text(&v["data"]["task_id"]),
                status: text(&v["data"]["status"]),
                at,
                signed,
                answered,
            });
            (answered, draw)
        };
        self.open.fetch_add(1, Ordering::SeqCst);
        let _held = Held(&self.open);
        tokio::time::sleep(Duration::from_millis(draw % 401)).await;
        StatusCode::from_u16(answered).expect("status")
    }

    fn hits(&self) -> Vec<Hit> {
        self.hits.lock().expect("hits").clone()
    }
}

/// A stable hash of a string (the receiver's draws, the same for the same delivery).
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The most jobs of `kinds` that ran at once at the provider, from its job list (each job
/// from when it took its slot to when it released it; at equal instants an end comes first).
fn peak_running(jobs: &[SimJob], kinds: &[&str]) -> usize {
    let mut edges: Vec<(f64, i32)> = Vec::new();
    for j in jobs.iter().filter(|j| kinds.contains(&j.kind.as_str())) {
        edges.push((j.started, 1));
        if let Some(end) = j.ended {
            edges.push((end, -1));
        }
    }
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut peak) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        peak = peak.max(now);
    }
    usize::try_from(peak).unwrap_or(0)
}

/// A task the test submitted: who, which, of what type.
#[derive(Clone, Debug)]
struct Submitted {
    tenant: String,
    id: String,
    avatar: bool,
}

/// What a run did, for the summary line and the closing assertions.
#[derive(Debug, Default)]
struct Tally {
    landed: Vec<Landed>,
    checks: usize,
    /// The longest from a check's start to its clean report: its own runs (the objects
    /// verified) and any wait for a slot set to agree with the database again.
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
    /// The completion webhooks' receiver, its URL and its server.
    hooks: Arc<Hooks>,
    hook_url: String,
    hook_server: tokio::task::JoinHandle<()>,
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
        self.hook_server.abort();
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
        let hooks = Arc::new(Hooks::default());
        let (hook_url, hook_server) = Hooks::serve(hooks.clone()).await;
        let mut apis: Vec<Proc> = Vec::new();
        for _ in 0..2 {
            let listen = format!("127.0.0.1:{}", free_port());
            let p = Proc::spawn(&config, &log, "api", listen, None);
            wait_healthy(&client, &p.base()).await;
            apis.push(p);
        }
        // Each scheduler hands the provider the address of one API for its callbacks: the
        // first and the third the first API's, the second the second's.
        let mut schedulers = Vec::new();
        for i in 0..3 {
            let listen = format!("127.0.0.1:{}", free_port());
            let public = apis[i % apis.len()].base();
            let p = Proc::spawn(&config, &log, "scheduler", listen, Some(public));
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
            hooks,
            hook_url,
            hook_server,
            db,
            _dir: dir,
        }
    }

    /// Submit `tasks` video tasks (or avatar clones) per tenant, alternating between the two
    /// API processes, each with its completion webhook to the test's receiver.
    async fn submit(&self, tasks: usize, avatar: bool) -> Vec<Submitted> {
        let (ty, payload) = if avatar {
            ("avatar_clone", avatar_payload())
        } else {
            ("video", video_payload(SHOTS_PER_TASK))
        };
        let body = json!({"payload": payload, "callback_url": self.hook_url});
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
                            .post(format!("{}/v1/tasks/{ty}", api.base()))
                            .bearer_auth(api_key(tenant))
                            .json(&body)
                            .send()
                            .await
                            .expect("submit");
                        (r.status() != 503).then_some(r)
                    },
                )
                .await;
                assert_eq!(r.status(), 202, "submit {ty} as {tenant}");
                let v: Value = r.json().await.expect("json");
                let id = v["task_id"].as_str().expect("task id").to_string();
                ids.push(Submitted {
                    tenant: tenant.to_string(),
                    id,
                    avatar,
                });
            }
        }
        ids
    }

    /// Units by pool, stage and status, read straight from the database.
    async fn unit_counts(&self) -> UnitCounts {
        let rows: Vec<(String, String, String, i64)> = sqlx::query_as(
            "SELECT pool, stage, status, count(*) FROM units GROUP BY pool, stage, status",
        )
        .fetch_all(&self.direct)
        .await
        .expect("count units by status");
        rows.into_iter()
            .map(|(pool, stage, status, n)| ((pool, stage, status), n))
            .collect()
    }

    /// Units of `pool` waiting or running (`pending` or `submitted`, at any stage).
    fn waiting(counts: &UnitCounts, pool: &str) -> i64 {
        counts
            .iter()
            .filter(|((p, _, status), _)| {
                p == pool && (status == "pending" || status == "submitted")
            })
            .map(|(_, n)| n)
            .sum()
    }

    /// Jobs in flight on both sides, read just before a disruption acts. Jobs seen in flight
    /// by [`Chaos::ensure_in_flight`] may all have ended at the provider since, unnoticed by
    /// slotd yet (its slots still held): this waits, bounded, until the provider runs a video
    /// job again, so a disruption never starts on nothing in flight.
    async fn in_flight_before(&self) -> InFlight {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = self.in_flight().await;
            if now.video_running() || Instant::now() > deadline {
                return now;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The work in flight now; the provider's count is read last (the instant that matters
    /// is the disruption's, which follows this call).
    async fn in_flight(&self) -> InFlight {
        let counts = self.unit_counts().await;
        InFlight::of(self.sim.stats().running, &counts)
    }

    /// The provider's count first, then the database's: for just after a disruption.
    async fn in_flight_after(&self) -> InFlight {
        let provider = self.sim.stats().running;
        InFlight::of(provider, &self.unit_counts().await)
    }

    /// Per API process, the jobs running at the provider that will call it back.
    fn callbacks_to_apis(&self) -> Vec<usize> {
        let jobs = self.sim.jobs();
        self.apis
            .iter()
            .map(|api| {
                let prefix = format!("{}/", api.base());
                jobs.iter()
                    .filter(|j| j.ended.is_none())
                    .filter(|j| {
                        j.callback_url
                            .as_deref()
                            .is_some_and(|u| u.starts_with(&prefix))
                    })
                    .count()
            })
            .collect()
    }

    /// Callbacks the simulator sent that were not taken, so far.
    fn callbacks_lost(&self) -> u64 {
        let stats = self.sim.stats();
        stats.callbacks_failed + stats.callbacks_rejected
    }

    /// Keep work coming so no disruption finds an idle cluster: when fewer than
    /// [`BACKLOG`] video units wait or run (about three seconds of work, the time from one
    /// disruption to the next), enough tasks per tenant to make up the difference (added to
    /// `ids`); the same for avatar clones under [`AVATAR_BACKLOG`]. Then wait, bounded, until
    /// the provider runs video jobs and video units are `submitted` (a pool just taken over
    /// after a disruption fills again within a lease period or two). Returns how long it
    /// waited.
    async fn ensure_in_flight(&self, ids: &mut Vec<Submitted>) -> Duration {
        let started = Instant::now();
        let counts = self.unit_counts().await;
        let waiting = Chaos::waiting(&counts, VIDEO_POOL);
        if waiting < BACKLOG {
            let per_round = SHOTS_PER_TASK * TENANTS.len();
            let short = usize::try_from(BACKLOG - waiting).unwrap_or(0);
            ids.extend(self.submit(short.div_ceil(per_round), false).await);
        }
        let avatars = Chaos::waiting(&counts, AVATAR_POOL);
        if avatars < AVATAR_BACKLOG {
            let short = usize::try_from(AVATAR_BACKLOG - avatars).unwrap_or(0);
            ids.extend(self.submit(short.div_ceil(TENANTS.len()), true).await);
        }
        eventually(
            Duration::from_secs(30),
            "jobs in flight before a disruption",
            async || {
                // More than one video job: a lone job may end in the instant the disruption
                // takes, and the disruption would then land on nothing in flight (an avatar
                // voice, 10–40 ms, all the more).
                let now = self.in_flight().await;
                (now.provider > AVATAR_LIMIT + 1 && now.submitted > 1).then_some(())
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
        // Video shots are text2video jobs; voices and elements share the avatar pool, so
        // their peak together (from the job list) stays within it, as every kind's own does.
        let kind_peak = |kind: &str| {
            stats
                .max_running_by_kind
                .get(kind)
                .copied()
                .unwrap_or_default()
        };
        for kind in VIDEO_KINDS {
            assert!(
                kind_peak(kind) <= POOL_LIMIT,
                "{when}: the provider ran {} {kind} jobs at once; the video pool allows \
                 {POOL_LIMIT}",
                kind_peak(kind)
            );
        }
        for kind in AVATAR_KINDS {
            assert!(
                kind_peak(kind) <= AVATAR_LIMIT,
                "{when}: the provider ran {} {kind} jobs at once; the avatar pool allows \
                 {AVATAR_LIMIT}",
                kind_peak(kind)
            );
        }
        let jobs = self.sim.jobs();
        let avatar_peak = peak_running(&jobs, &AVATAR_KINDS);
        assert!(
            avatar_peak <= AVATAR_LIMIT as usize,
            "{when}: the provider ran {avatar_peak} avatar jobs (voices and elements) at once; \
             the avatar pool allows {AVATAR_LIMIT}"
        );
        let video_peak = peak_running(&jobs, &VIDEO_KINDS);
        assert!(
            video_peak <= POOL_LIMIT as usize,
            "{when}: the provider's job list shows {video_peak} video jobs at once; the video \
             pool allows {POOL_LIMIT}"
        );
        assert!(
            stats.max_running <= POOL_LIMIT + AVATAR_LIMIT,
            "{when}: the provider ran {} jobs at once; the pools allow {} together",
            stats.max_running,
            POOL_LIMIT + AVATAR_LIMIT
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
    /// findings must be gone from a check that starts within [`SLOT_RECOVERY`] (a check of a
    /// long run's thousands of objects takes seconds itself); the longest wait is returned.
    async fn check(&self, when: &str) -> Duration {
        let started = Instant::now();
        let mut first: Option<(Duration, String)> = None;
        loop {
            let this_one = started.elapsed();
            let findings = self.check_once(when).await;
            if findings.is_empty() {
                let waited = started.elapsed();
                if let Some((took, finding)) = first {
                    eprintln!(
                        "chaos: {when}: slot sets agreed with the database again after \
                         {waited:.2?} (the first check took {took:.2?} and found: {finding})"
                    );
                }
                return waited;
            }
            first.get_or_insert_with(|| (started.elapsed(), findings[0].to_string()));
            let only_slots = findings.iter().all(|f| f.kind == "slots");
            assert!(
                only_slots && this_one < SLOT_RECOVERY,
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
            pool_limits: BTreeMap::from([
                (VIDEO_POOL.to_string(), POOL_LIMIT),
                (AVATAR_POOL.to_string(), AVATAR_LIMIT),
            ]),
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
    /// work in flight just before it and just after it took effect, the callbacks and webhook
    /// deliveries in flight and the callbacks lost meanwhile.
    async fn disrupt(&mut self, kind: Kind, rng: &mut rand::rngs::StdRng) -> Landed {
        let (config, log) = (self.config.clone(), self.log.clone());
        let (before, after);
        let mut callbacks = None;
        // Read first: the simulator's counters are a copy of all its records, too slow to read
        // between the work in flight and the disruption.
        let lost_before = self.callbacks_lost();
        let deliveries;
        match kind {
            Kind::SchedulerKill => {
                let i = rng.random_range(0..self.schedulers.len());
                before = self.in_flight_before().await;
                deliveries = self.held();
                self.schedulers[i].kill();
                after = self.in_flight_after().await;
                self.schedulers[i]
                    .restart(&config, &log, &self.client)
                    .await;
            }
            Kind::ApiKill => {
                // The drawn process, unless the other has more jobs running that will call it
                // back: the kill lands with callbacks in flight to the killed process. The
                // jobs are counted first (the job list is long), the work in flight last.
                let drawn = rng.random_range(0..self.apis.len());
                let deadline = Instant::now() + Duration::from_secs(30);
                let (b, calling) = loop {
                    let calling = self.callbacks_to_apis();
                    let now = self.in_flight().await;
                    let ready = now.video_running() && calling.iter().any(|n| *n > 0);
                    if ready || Instant::now() > deadline {
                        break (now, calling);
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                };
                before = b;
                let i = (0..self.apis.len())
                    .max_by_key(|&i| (calling[i], i == drawn))
                    .unwrap_or(drawn);
                callbacks = Some(calling[i]);
                deliveries = self.held();
                self.apis[i].kill();
                after = self.in_flight_after().await;
                self.apis[i].restart(&config, &log, &self.client).await;
            }
            Kind::SchedulerStop => {
                let i = rng.random_range(0..self.schedulers.len());
                before = self.in_flight_before().await;
                deliveries = self.held();
                self.schedulers[i].signal("STOP");
                after = self.in_flight_after().await;
                // Past its lease: another scheduler takes its pools over meanwhile.
                tokio::time::sleep(Duration::from_millis(LEASE_TTL_MS * 3)).await;
                self.schedulers[i].signal("CONT");
            }
            Kind::RedisRestart => {
                before = self.in_flight_before().await;
                deliveries = self.held();
                self.redis.child.kill().ok();
                self.redis.child.wait().ok();
                after = self.in_flight_after().await;
                self.redis.restart().await;
            }
            Kind::PostgresCut => {
                before = self.in_flight_before().await;
                deliveries = self.held();
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
            callbacks,
            callbacks_lost: self.callbacks_lost() - lost_before,
            deliveries,
        }
    }

    /// The webhook requests the receiver holds now.
    fn held(&self) -> u32 {
        self.hooks.open.load(Ordering::SeqCst)
    }

    /// Every task terminal, read through whichever API answers.
    async fn wait_terminal(&self, ids: &[Submitted]) -> Vec<Value> {
        eventually(
            Duration::from_secs(600),
            "every task terminal",
            async || {
                let mut out = Vec::new();
                for Submitted { tenant, id, .. } in ids {
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

    /// Every task's end queued and recorded delivered: no task with a `callback_url` left
    /// with its webhook open, no delivery still pending. The deliveries, oldest first.
    async fn wait_delivered(&self) -> Vec<Delivery> {
        eventually(
            Duration::from_secs(120),
            "every task's end delivered",
            async || {
                let open: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM tasks WHERE callback_url IS NOT NULL \
                     AND webhook_done = 0",
                )
                .fetch_one(&self.direct)
                .await
                .ok()?;
                let pending: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM webhook_deliveries WHERE status <> 'delivered'",
                )
                .fetch_one(&self.direct)
                .await
                .ok()?;
                if open > 0 || pending > 0 {
                    return None;
                }
                sqlx::query_as(
                    "SELECT id, task_id, event, delivered_at FROM webhook_deliveries \
                     ORDER BY created_at, id",
                )
                .fetch_all(&self.direct)
                .await
                .ok()
            },
        )
        .await
    }

    /// Units of `pool` that failed with no provider job known: no acceptance in their log and
    /// no job id on their row.
    async fn failed_without_a_job(&self, pool: &str) -> i64 {
        sqlx::query_scalar(
            "SELECT count(*) FROM units u WHERE u.pool = $1 AND u.status = 'failed' \
             AND u.provider_job_id IS NULL AND NOT EXISTS (SELECT 1 FROM unit_events e \
             WHERE e.unit_id = u.id AND e.detail LIKE 'accepted as provider job %')",
        )
        .bind(pool)
        .fetch_one(&self.direct)
        .await
        .expect("units failed without a job")
    }

    /// Per unit of `pool`: its status, the provider jobs its log says were accepted (with
    /// their stage), and whether any of its transitions was made by a provider callback.
    async fn unit_logs(&self, pool: &str) -> BTreeMap<String, UnitLog> {
        const ACCEPTED: &str = "accepted as provider job ";
        let units: Vec<(String, String)> =
            sqlx::query_as("SELECT id, status FROM units WHERE pool = $1")
                .bind(pool)
                .fetch_all(&self.direct)
                .await
                .expect("units");
        let mut out: BTreeMap<String, UnitLog> = units
            .into_iter()
            .map(|(id, status)| {
                let log = UnitLog {
                    status,
                    ..UnitLog::default()
                };
                (id, log)
            })
            .collect();
        let events: Vec<(String, String, String)> = sqlx::query_as(
            "SELECT e.unit_id, e.stage, e.detail FROM unit_events e \
             JOIN units u ON u.id = e.unit_id \
             WHERE u.pool = $1 AND e.detail IS NOT NULL",
        )
        .bind(pool)
        .fetch_all(&self.direct)
        .await
        .expect("unit events");
        for (unit, stage, detail) in events {
            let Some(log) = out.get_mut(&unit) else {
                continue;
            };
            if let Some(rest) = detail.strip_prefix(ACCEPTED) {
                // The id is the first word: a callback appends " (callback)".
                let job = rest.split_whitespace().next().unwrap_or_default();
                log.accepted.insert((stage, job.to_string()));
            }
            if detail.ends_with("(callback)") || detail == "by callback" {
                log.by_callback = true;
            }
        }
        out
    }
}

/// What a unit's row and log say, for the closing accounting.
#[derive(Debug, Default)]
struct UnitLog {
    status: String,
    /// The provider jobs accepted: (stage, job id).
    accepted: BTreeSet<(String, String)>,
    /// A provider callback made one of its transitions (a callback may report a job's end
    /// before its create's answer was recorded: then no acceptance names the job).
    by_callback: bool,
}

/// A completion webhook delivery as slotd recorded it: its id, task, event and when its 2xx
/// was recorded.
type Delivery = (String, String, String, Option<i64>);

/// What the receiver got, against what slotd recorded and how each task ended: every request
/// signed and of a recorded delivery, carrying that delivery's task and event, none after
/// its 2xx was recorded; every task's end received and answered 2xx at least once, the last
/// delivery of each task naming the task's final status. Returns the requests answered 2xx
/// more than once per delivery (a resend after a kill: at least once, not exactly once).
fn assert_webhooks(
    ids: &[Submitted],
    views: &[Value],
    deliveries: &[Delivery],
    hits: &[Hit],
) -> usize {
    let unsigned: Vec<&Hit> = hits.iter().filter(|h| !h.signed).collect();
    assert!(
        unsigned.is_empty(),
        "webhooks without a valid signature: {unsigned:#?}"
    );
    let by_id: BTreeMap<&str, &Delivery> = deliveries.iter().map(|d| (d.0.as_str(), d)).collect();
    let mut resent = 0;
    for (id, task, event, delivered_at) in deliveries {
        let of: Vec<&Hit> = hits.iter().filter(|h| &h.id == id).collect();
        for h in &of {
            assert!(
                &h.task == task && &h.event == event,
                "delivery {id} ({event} of {task}) carried another task's end: {h:?}"
            );
            assert!(
                delivered_at.is_some_and(|at| h.at <= at),
                "delivery {id} sent after its 2xx was recorded at {delivered_at:?}: {h:?}"
            );
        }
        let ok = of
            .iter()
            .filter(|h| (200..300).contains(&h.answered))
            .count();
        resent += ok.saturating_sub(1);
    }
    let stray: Vec<&Hit> = hits
        .iter()
        .filter(|h| !by_id.contains_key(h.id.as_str()))
        .collect();
    assert!(
        stray.is_empty(),
        "webhooks of no recorded delivery: {stray:#?}"
    );
    for (s, v) in ids.iter().zip(views) {
        let status = v["status"].as_str().expect("task status");
        let Some((last, _, event, _)) = deliveries.iter().rev().find(|d| d.1 == s.id) else {
            panic!("task {} ended {status} but no delivery was queued", s.id);
        };
        assert_eq!(
            event,
            &format!("task.{status}"),
            "task {}'s last delivery {last} names another end than its final {status}",
            s.id
        );
        let of: Vec<&Hit> = hits.iter().filter(|h| &h.id == last).collect();
        assert!(
            of.iter().any(|h| (200..300).contains(&h.answered)),
            "task {}'s end ({status}) never reached the receiver with a 2xx: {of:#?}",
            s.id
        );
        assert!(
            of.iter().all(|h| h.status == status),
            "task {} ended {status}; its last delivery said otherwise: {of:#?}",
            s.id
        );
    }
    resent
}

/// The cluster's one configuration file (each scheduler's public URL comes from its
/// environment). The scheduler at its defaults but for its timings, scaled to the simulator's
/// time by the tick; completion webhooks signed, to the receiver on loopback, retried at the
/// test's pace (a killed scheduler's claim on a delivery lapses after six `timeout`s).
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

[webhooks]
secret = "{WEBHOOK_SECRET}"
allow_private = true
retry_base = "100ms"
retry_max = "500ms"
timeout = "2s"

[pools."{VIDEO_POOL}"]
max_slots = {POOL_LIMIT}

[pools."{AVATAR_POOL}"]
max_slots = {AVATAR_LIMIT}

[handlers.kling-video]
base_url = "{base}"
access_key = "AK"
secret_key = "SK"
allowed_hosts = ["{host}"]

[handlers.kling-avatar]
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
    // 300 shots and 9 avatar clones from three tenants; more for a long run, so disruptions
    // keep landing mid-run.
    let per_tenant = 5 * disruptions.div_ceil(DISRUPTIONS_DEFAULT).max(1);
    let mut ids = c.submit(per_tenant, false).await;
    ids.extend(c.submit(AVATARS_PER_TENANT, true).await);
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
        let list = |f: &dyn Fn(&Landed) -> String| -> String {
            all.iter().map(|l| f(l)).collect::<Vec<_>>().join(", ")
        };
        eprintln!(
            "chaos: tally: {:<34} {} ({in_flight} in flight); jobs running before->after: {}; \
             avatar units submitted/between stages before: {}; webhook deliveries held: {}; \
             callbacks lost meanwhile: {}{}",
            kind.name(),
            all.len(),
            list(&|l| format!("{}->{}", l.before.provider, l.after.provider)),
            list(&|l| format!("{}/{}", l.before.avatars, l.before.between_stages)),
            list(&|l| l.deliveries.to_string()),
            list(&|l| l.callbacks_lost.to_string()),
            if *kind == Kind::ApiKill {
                format!(
                    "; jobs running that call the killed API back: {}",
                    list(&|l| l.callbacks.unwrap_or_default().to_string())
                )
            } else {
                String::new()
            }
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
                    // Avatar clones store no file.
                    if v["type"] == "video" {
                        assert!(r["object_key"].is_string(), "completed without a file: {r}");
                    }
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
    // Video: one stage, so the provider's creates are the units, the retries and nothing
    // more (a unit that failed before any acceptance made none). A unit's log may name no
    // acceptance though its job ran: a callback reported the job's end before the create's
    // answer was recorded (the row keeps the job id): such a unit made its create.
    let (units, retries, never_in_log) = unit_log_counts(&c.db.url(), VIDEO_POOL).await;
    let never = c.failed_without_a_job(VIDEO_POOL).await;
    let stats = c.sim.stats();
    let video_tasks = ids.iter().filter(|s| !s.avatar).count();
    let shots = (video_tasks * SHOTS_PER_TASK) as i64;
    let kind_creates = |kinds: &[&str]| -> u64 {
        kinds
            .iter()
            .filter_map(|k| stats.creates_by_kind.get(*k))
            .sum()
    };
    let video_creates = kind_creates(&VIDEO_KINDS);
    assert_eq!(units, shots, "one unit per shot");
    assert_eq!(
        video_creates as i64,
        units + retries - never,
        "the provider's video creates are the units ({units}) plus recorded retries ({retries}) \
         less units that failed before any acceptance ({never})"
    );
    assert!(
        never <= units / 20,
        "{never} of {units} units failed before the provider accepted them"
    );
    // Avatars: two stages, so no count of creates per unit; each provider job is tied to its
    // unit by its `external_task_id` (`<unit>-<stage>-<submit attempt>`) instead. Every job
    // belongs to an avatar unit's stage (attempt 0: nothing retried a unit), each stage of a
    // unit has one job at most (an `external_task_id` is created once, checked throughout),
    // every job a log accepted is that unit's job in that stage, a job no log accepted
    // belongs to a unit a callback moved (its end came before the create's answer was
    // recorded), and every completed clone has a job that succeeded in each stage.
    let (_, avatar_retries, _) = unit_log_counts(&c.db.url(), AVATAR_POOL).await;
    let avatar_units = c.unit_logs(AVATAR_POOL).await;
    let avatar_tasks = ids.iter().filter(|s| s.avatar).count();
    assert_eq!(
        avatar_units.len(),
        avatar_tasks,
        "one unit per avatar clone"
    );
    let provider_jobs = c.sim.jobs();
    // (unit, stage) -> the provider's jobs: (job id, its status).
    let mut by_stage: BTreeMap<(String, String), Vec<(String, String)>> = BTreeMap::new();
    for j in provider_jobs
        .iter()
        .filter(|j| AVATAR_KINDS.contains(&j.kind.as_str()))
    {
        let key = j.external_task_id.clone().unwrap_or_default();
        let mut parts = key.rsplitn(3, '-');
        let (attempt, stage, unit) = (parts.next(), parts.next(), parts.next());
        let (Some(attempt), Some(stage), Some(unit)) = (attempt, stage, unit) else {
            panic!(
                "avatar job {} without a unit's external_task_id: {j:?}",
                j.task_id
            );
        };
        assert!(
            avatar_units.contains_key(unit) && ["voice", "element"].contains(&stage),
            "avatar job {} names no avatar unit's stage: {j:?}",
            j.task_id
        );
        assert!(
            avatar_retries > 0 || attempt == "0",
            "avatar job {} is a second submit attempt though nothing was retried: {j:?}",
            j.task_id
        );
        by_stage
            .entry((unit.to_string(), stage.to_string()))
            .or_default()
            .push((j.task_id.clone(), j.status.clone()));
    }
    let (mut both_stages, mut unaccepted) = (0, 0);
    for (unit, log) in &avatar_units {
        let jobs_of = |stage: &str| {
            by_stage
                .get(&(unit.clone(), stage.to_string()))
                .cloned()
                .unwrap_or_default()
        };
        for (stage, job) in &log.accepted {
            assert!(
                jobs_of(stage).iter().any(|(id, _)| id == job),
                "avatar unit {unit} accepted job {job} in stage {stage}; the provider's jobs \
                 of that stage are {:?}",
                jobs_of(stage)
            );
        }
        for stage in ["voice", "element"] {
            let jobs = jobs_of(stage);
            if avatar_retries == 0 {
                assert!(
                    jobs.len() <= 1,
                    "avatar unit {unit} made {} jobs in stage {stage}: {jobs:?}",
                    jobs.len()
                );
            }
            for (job, _) in &jobs {
                if !log.accepted.iter().any(|(_, j)| j == job) {
                    unaccepted += 1;
                    assert!(
                        log.by_callback,
                        "avatar unit {unit}'s job {job} (stage {stage}) is in no acceptance of \
                         its log, and no callback moved the unit: {log:?}"
                    );
                }
            }
            if log.status == "completed" {
                assert!(
                    jobs.iter().any(|(_, status)| status == "succeed"),
                    "avatar unit {unit} completed without a job that succeeded in stage \
                     {stage}: {jobs:?}"
                );
            }
        }
        if !jobs_of("element").is_empty() {
            both_stages += 1;
        }
    }
    let avatar_jobs: usize = by_stage.values().map(Vec::len).sum();
    assert!(both_stages > 0, "no avatar unit reached its second stage");
    // Completion webhooks: every end delivered, at least once.
    let deliveries = c.wait_delivered().await;
    let hits = c.hooks.hits();
    let resent = assert_webhooks(&ids, &views, &deliveries, &hits);
    let jobs = c.sim.jobs();
    let called: Vec<usize> = c
        .apis
        .iter()
        .map(|api| {
            let prefix = format!("{}/", api.base());
            jobs.iter()
                .filter(|j| {
                    j.callback_url
                        .as_deref()
                        .is_some_and(|u| u.starts_with(&prefix))
                })
                .count()
        })
        .collect();
    assert!(
        stats.callbacks_sent > 0,
        "the provider sent no callbacks: {stats:?}"
    );
    eprintln!(
        "chaos: {} disruptions; video: {units} units, {never} failed before acceptance ({} \
         more with a job learnt by callback alone), {video_creates} creates; avatars: \
         {avatar_tasks} units ({both_stages} reached their element stage), {avatar_jobs} jobs \
         ({unaccepted} learnt by callback alone); {completed} completed, {failed} failed; \
         provider: {} creates, max {} at once (pools {POOL_LIMIT} + {AVATAR_LIMIT}, account \
         {ACCOUNT_LIMIT}), faults {:?}; callbacks: {} sent ({} refused), {} undelivered, jobs \
         calling back each API {called:?}; webhooks: {} deliveries, {} requests ({} answered \
         2xx again after a first 2xx); slotd check clean {} times (the longest, its own runs and \
         any wait for slot sets to agree included, took {:?})",
        disruptions,
        never_in_log - never,
        stats.creates,
        stats.max_running,
        stats.faults,
        stats.callbacks_sent,
        stats.callbacks_rejected,
        stats.callbacks_failed,
        deliveries.len(),
        hits.len(),
        resent,
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
