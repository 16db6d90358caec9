//! slotd at scale with real processes: one API process and two scheduler processes sharing a
//! database and Redis (their own key prefix), the Kling simulator in the test process at the
//! account's limit of 20. The schedulers split the pools by lease; the failure cases kill,
//! pause or flush under them.
//!
//! The database is PostgreSQL, as deployed at scale: a fresh schema per test (see `pg.rs`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::Duration;

use serde_json::{Value, json};
use slotd_sim::kling::SimHandle;

use crate::kling::{TIME_SCALE, kling_plugins, sim_options, video_payload};
use crate::support::*;

/// Lease period of the schedulers in these tests.
pub const LEASE_TTL_MS: u64 = 400;

pub fn redis_url() -> String {
    std::env::var("SLOTD_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

/// One slotd process of the cluster.
pub struct Proc {
    pub base: String,
    pub child: Child,
}

impl Proc {
    fn pid(&self) -> String {
        self.child.id().to_string()
    }

    /// Send a signal (`KILL`, `STOP`, `CONT`) with the system's `kill`.
    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([format!("-{sig}"), self.pid()])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
        assert!(ok, "kill -{sig} {}", self.pid());
    }
}

/// A cluster: the simulator, one API process, scheduler processes.
pub struct Cluster {
    /// `slotd check` with its Redis rules when the cluster is dropped (after its processes
    /// are stopped, before the schema is dropped).
    _check: CheckOnDrop,
    pub sim: SimHandle,
    pub api: Proc,
    /// API processes beside `api` ([`ClusterOptions::apis`] − 1).
    pub more_apis: Vec<Proc>,
    pub schedulers: Vec<Proc>,
    pub client: reqwest::Client,
    pub prefix: String,
    config: PathBuf,
    log: PathBuf,
    /// Each process has a plugins directory of its own, empty ([`ClusterOptions::own_plugins`]).
    own_plugins: bool,
    /// `[pools."kling:video"] max_slots`.
    video_slots: u32,
    /// `[pools."kling:avatar"] max_slots`.
    avatar_slots: u32,
    pub dir: tempfile::TempDir,
    /// Dropped after the processes (fields drop in order): the schema outlives its users.
    _db: crate::pg::PgSchema,
}

/// How a test's cluster is set up.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub schedulers: usize,
    pub seed: u64,
    /// `[scheduler] tick_interval`: the pace when no wake arrives.
    pub tick: Duration,
    pub lease_ttl: Duration,
    /// `[pools."kling:video"] max_slots`.
    pub video_slots: u32,
    /// Provider callbacks to the API process (`public_url`); polls then only every minute.
    pub callbacks: bool,
    /// The Redis every process uses (a test may log in as a user of its own).
    pub redis_url: String,
    /// `[pools."kling:video"] rate`, if any.
    pub video_rate: Option<String>,
    /// API processes (at least one).
    pub apis: usize,
    /// Each process gets its own empty plugins directory (handlers come as releases) instead
    /// of one shared directory holding the Kling handlers.
    pub own_plugins: bool,
    /// The simulator's time scale (its 30–120 s clips take that × as long).
    pub time_scale: f64,
    /// `[pools."kling:avatar"] max_slots`.
    pub avatar_slots: u32,
    /// What the simulator's account runs at once (a test may set it above what slotd is
    /// configured with, so that an overshoot shows as a job too many instead of a refusal).
    pub sim_concurrency: u32,
    /// Both pools on one provider account (`[provider_accounts.kling]`): its limit, video's
    /// `min` and avatar's `min` (their `max` are the pools' `max_slots`).
    pub shared: Option<(u32, u32, u32)>,
}

impl ClusterOptions {
    pub fn new(schedulers: usize, seed: u64) -> ClusterOptions {
        ClusterOptions {
            schedulers,
            seed,
            tick: Duration::from_millis(((10_000.0 * TIME_SCALE) as u64).max(5)),
            lease_ttl: Duration::from_millis(LEASE_TTL_MS),
            video_slots: 18,
            callbacks: false,
            redis_url: redis_url(),
            video_rate: None,
            apis: 1,
            own_plugins: false,
            time_scale: TIME_SCALE,
            avatar_slots: 2,
            sim_concurrency: 20,
            shared: None,
        }
    }
}

impl Cluster {
    pub async fn start(schedulers: usize, seed: u64) -> Cluster {
        Cluster::start_with(ClusterOptions::new(schedulers, seed)).await
    }

    pub async fn start_with(opts: ClusterOptions) -> Cluster {
        let dir = tempfile::TempDir::new().expect("tmp");
        let sim = slotd_sim::kling::start(slotd_sim::kling::SimOptions {
            time_scale: opts.time_scale,
            concurrency: opts.sim_concurrency,
            ..sim_options(opts.seed)
        })
        .await
        .expect("simulator");
        let prefix = format!("slotd-e2e:{}:", uuid::Uuid::new_v4().simple());
        let db = crate::pg::PgSchema::create().await;
        let api_listen = format!("127.0.0.1:{}", free_port());
        let config = write_config(dir.path(), &sim, &prefix, &db.url(), &opts, &api_listen);
        let log = dir.path().join("slotd.log");
        let client = reqwest::Client::new();
        let own = opts.own_plugins;
        let api = spawn_at(&own_config(&config, own), &log, "api", api_listen);
        wait_healthy(&client, &api.base).await;
        let mut more_apis = Vec::new();
        for _ in 1..opts.apis {
            let p = spawn(&own_config(&config, own), &log, "api");
            wait_healthy(&client, &p.base).await;
            more_apis.push(p);
        }
        let mut procs = Vec::new();
        for _ in 0..opts.schedulers {
            let p = spawn(&own_config(&config, own), &log, "scheduler");
            wait_healthy(&client, &p.base).await;
            procs.push(p);
        }
        let check = CheckOnDrop::with(slotd_server::check::CheckOptions {
            database_url: db.url(),
            objects: Some(format!("file://{}", dir.path().join("objects").display())),
            redis_url: Some(opts.redis_url.clone()),
            redis_prefix: prefix.clone(),
            pool_limits: [
                ("kling:video".to_string(), opts.video_slots),
                ("kling:avatar".to_string(), opts.avatar_slots),
            ]
            .into(),
            account_limits: Default::default(),
            shared_accounts: shared_check(&opts),
            pool_quotas: Default::default(),
            account_quotas: Default::default(),
            finalize_grace: slotd_server::check::FINALIZE_GRACE_DEFAULT,
            now_ms: 0,
        });
        Cluster {
            _check: check,
            sim,
            api,
            more_apis,
            schedulers: procs,
            client,
            prefix,
            config,
            log,
            own_plugins: own,
            video_slots: opts.video_slots,
            avatar_slots: opts.avatar_slots,
            dir,
            _db: db,
        }
    }

    /// Another scheduler process.
    pub async fn add_scheduler(&mut self) {
        let p = spawn(
            &own_config(&self.config, self.own_plugins),
            &self.log,
            "scheduler",
        );
        wait_healthy(&self.client, &p.base).await;
        self.schedulers.push(p);
    }

    pub async fn submit_videos(&self, tasks: usize, shots: usize) -> Vec<String> {
        let mut ids = Vec::new();
        for _ in 0..tasks {
            let r = self
                .client
                .post(format!("{}/v1/tasks/video", self.api.base))
                .json(&json!({"payload": video_payload(shots)}))
                .send()
                .await
                .expect("submit");
            assert_eq!(r.status(), 202);
            let v: Value = r.json().await.expect("json");
            ids.push(v["task_id"].as_str().expect("id").to_string());
        }
        ids
    }

    /// Other clients of the Kling account take its capacity for a while: that share of
    /// creates is refused 429/1303 with room left (`POST /_sim/account`); 0 ends it.
    pub async fn others_hold(&self, over_capacity_rate: f64) {
        let r = self
            .client
            .post(format!("{}/_sim/account", self.sim.base_url()))
            .json(&json!({ "over_capacity_rate": over_capacity_rate }))
            .send()
            .await
            .expect("the simulator's account control");
        assert_eq!(r.status(), 200, "{:?}", r.text().await);
    }

    pub async fn wait_creates(&self, n: u64) {
        eventually(Duration::from_secs(60), "provider progress", async || {
            (self.sim.stats().creates >= n).then_some(())
        })
        .await;
    }

    /// Wait until every task completed; returns their views. On a timeout the panic names
    /// the tasks that had not, with their status and counts as last read.
    pub async fn wait_completed(&self, ids: &[String]) -> Vec<Value> {
        let deadline = Duration::from_secs(120);
        let start = std::time::Instant::now();
        loop {
            let mut out = Vec::new();
            let mut open = Vec::new();
            for id in ids {
                let read = async {
                    self.client
                        .get(format!("{}/v1/tasks/{id}", self.api.base))
                        .send()
                        .await
                        .ok()?
                        .json::<Value>()
                        .await
                        .ok()
                };
                match read.await {
                    Some(v) if v["status"] == "completed" => out.push(v),
                    Some(v) => open.push(format!(
                        "{id}: {} ({} of {} completed, {} failed, {} running, {} pending)",
                        v["status"],
                        v["completed"],
                        v["total"],
                        v["failed"],
                        v["running"],
                        v["pending"]
                    )),
                    None => open.push(format!("{id}: unreadable")),
                }
            }
            if open.is_empty() {
                return out;
            }
            assert!(
                start.elapsed() < deadline,
                "timed out after {deadline:?} waiting for every task completed; not yet: {open:#?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The scheduler holding `pool`'s lease (each scheduler publishes its owner id in `slotd_scheduler_info`).
    pub async fn holder_of(&self, pool: &str) -> usize {
        eventually(Duration::from_secs(10), "a lease holder", async || {
            self.try_holder_of(pool).await
        })
        .await
    }

    /// The scheduler answering as `pool`'s lease holder now, if any.
    pub async fn try_holder_of(&self, pool: &str) -> Option<usize> {
        let owner: String = {
            let client = redis::Client::open(redis_url()).ok()?;
            let mut conn = client.get_multiplexed_async_connection().await.ok()?;
            redis::cmd("GET")
                .arg(format!("{}lease:{pool}", self.prefix))
                .query_async::<Option<String>>(&mut conn)
                .await
                .ok()
                .flatten()?
        };
        for (i, p) in self.schedulers.iter().enumerate() {
            // A paused (SIGSTOP) process accepts the connection but never answers.
            let answer = self
                .client
                .get(format!("{}/metrics", p.base))
                .timeout(Duration::from_millis(500))
                .send()
                .await;
            let Ok(answer) = answer else {
                continue;
            };
            let text = answer.text().await.unwrap_or_default();
            if text.contains(&owner) {
                return Some(i);
            }
        }
        None
    }

    /// Delete this cluster's Redis keys: a flush, as far as this cluster can tell.
    pub async fn flush_redis(&self) {
        flush_prefix(&self.prefix).await;
    }

    /// `slotd check` on the cluster's database, clean.
    pub async fn check(&self) {
        assert_check_clean(
            &self._db.url(),
            None,
            &[("kling:video", 18), ("kling:avatar", self.avatar_slots)],
        )
        .await;
    }

    /// The checks every scenario ends with: each shot created once, never above the video
    /// pool's own limit (by default 18, below the account's 20, so a slot accounting error
    /// shows) and no 1303, no panic in any process, and `slotd check` clean on the database.
    pub async fn assert_clean(&self, shots: u64) {
        let slots = self.video_slots;
        assert_check_clean(
            &self._db.url(),
            None,
            &[("kling:video", slots), ("kling:avatar", self.avatar_slots)],
        )
        .await;
        let stats = self.sim.stats();
        assert_eq!(stats.creates, shots, "every shot created once");
        assert!(
            stats.creates_by_external_id.values().all(|&n| n == 1),
            "an external_task_id was created twice"
        );
        assert!(
            stats.max_running <= slots,
            "simulator saw {} at once; the pool allows {slots}",
            stats.max_running
        );
        assert_eq!(stats.rate_limited_1303, 0, "the provider refused a submit");
        let log_text = std::fs::read_to_string(&self.log).unwrap_or_default();
        assert!(
            !log_text.contains("panicked"),
            "slotd panicked:\n{log_text}"
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for p in self
            .schedulers
            .iter_mut()
            .chain(self.more_apis.iter_mut())
            .chain(std::iter::once(&mut self.api))
        {
            let _ = Command::new("kill")
                .args(["-CONT", &p.child.id().to_string()])
                .status();
            p.child.kill().ok();
            p.child.wait().ok();
        }
    }
}

fn write_config(
    dir: &Path,
    sim: &SimHandle,
    prefix: &str,
    database: &str,
    opts: &ClusterOptions,
    api_listen: &str,
) -> PathBuf {
    let plugins = kling_plugins(dir);
    let callbacks = if opts.callbacks {
        format!("public_url = \"http://{api_listen}\"\n")
    } else {
        String::new()
    };
    let polls = if opts.callbacks {
        "poll_max = \"60s\"\n"
    } else {
        ""
    };
    let text = format!(
        r#"
database_url = "{database}"
redis_url = "{redis}"
redis_prefix = "{prefix}"
plugins_dir = "{plugins}"
object_store = "file://{objects}"
{callbacks}
[limits]
call_deadline = "2s"

[scheduler]
tick_interval = "{tick_ms}ms"
min_rest = "2ms"
finalize_lease = "500ms"
lease_ttl = "{lease_ms}ms"
{polls}
[pools."kling:video"]
max_slots = {video_slots}
{video_rate}

[pools."kling:avatar"]
max_slots = {avatar_slots}

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
        redis = opts.redis_url,
        tick_ms = opts.tick.as_millis(),
        lease_ms = opts.lease_ttl.as_millis(),
        video_slots = opts.video_slots,
        avatar_slots = opts.avatar_slots,
        video_rate = opts
            .video_rate
            .as_ref()
            .map_or(String::new(), |r| format!("rate = \"{r}\"")),
        plugins = plugins.display(),
        objects = dir.join("objects").display(),
        base = sim.base_url(),
        host = sim.addr(),
    );
    let shared = match opts.shared {
        Some((limit, video_min, avatar_min)) => format!(
            "\n[provider_accounts.kling]\nmax_slots = {limit}\npools.\"kling:video\" = {{ min = {video_min}, max = {} }}\npools.\"kling:avatar\" = {{ min = {avatar_min}, max = {} }}\n",
            opts.video_slots, opts.avatar_slots
        ),
        None => String::new(),
    };
    let path = dir.join("slotd.toml");
    std::fs::write(&path, text + &shared).expect("write config");
    path
}

/// The provider account `slotd check` holds the cluster to, when it has one.
fn shared_check(
    opts: &ClusterOptions,
) -> std::collections::BTreeMap<String, slotd_server::check::SharedCheck> {
    let Some((limit, _, _)) = opts.shared else {
        return Default::default();
    };
    let members = [
        (("kling:video".to_string(), None), opts.video_slots),
        (("kling:avatar".to_string(), None), opts.avatar_slots),
    ]
    .into();
    [(
        "kling".to_string(),
        slotd_server::check::SharedCheck { limit, members },
    )]
    .into()
}

/// `config` itself, or with `own`, a copy naming a new empty plugins directory of its own.
fn own_config(config: &Path, own: bool) -> PathBuf {
    if !own {
        return config.to_path_buf();
    }
    let dir = config.parent().expect("the config's directory");
    let n = std::fs::read_dir(dir)
        .expect("the cluster's directory")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.file_name().to_string_lossy().starts_with("plugins-"))
        })
        .count();
    let plugins = dir.join(format!("plugins-{n}"));
    std::fs::create_dir_all(&plugins).expect("plugins directory");
    let text = std::fs::read_to_string(config).expect("read config");
    let text: String = text
        .lines()
        .map(|l| {
            if l.starts_with("plugins_dir = ") {
                format!("plugins_dir = \"{}\"\n", plugins.display())
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let path = dir.join(format!("slotd-{n}.toml"));
    std::fs::write(&path, text).expect("write config");
    path
}

fn spawn(config: &Path, log: &Path, role: &'static str) -> Proc {
    spawn_at(config, log, role, format!("127.0.0.1:{}", free_port()))
}

fn spawn_at(config: &Path, log: &Path, role: &'static str, listen: String) -> Proc {
    let child = spawn_slotd(config, log, &["--role", role, "--listen", &listen]);
    Proc {
        base: format!("http://{listen}"),
        child,
    }
}

/// Two schedulers and an API, 300 shots: the limit holds, each job is created once, all
/// complete, and the two pools are spread over the two schedulers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schedulers_share_the_work_within_the_limit() {
    let c = Cluster::start(2, 21).await;
    let ids = c.submit_videos(15, 20).await;
    c.wait_completed(&ids).await;
    c.assert_clean(300).await;
    let video = c.holder_of("kling:video").await;
    let avatar = c.holder_of("kling:avatar").await;
    assert_ne!(video, avatar, "two pools, two schedulers: one each");
}

/// The scheduler driving the video pool is killed (SIGKILL) mid-run: the other takes the pool
/// over and finishes, nothing created twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_scheduler_s_pools_are_taken_over() {
    let mut c = Cluster::start(2, 22).await;
    let ids = c.submit_videos(6, 20).await;
    c.wait_creates(40).await;
    let holder = c.holder_of("kling:video").await;
    c.schedulers[holder].signal("KILL");
    c.schedulers[holder].child.wait().ok();
    c.wait_completed(&ids).await;
    c.assert_clean(120).await;
    // And a fresh scheduler joining later does not disturb anything.
    c.add_scheduler().await;
}

/// The video scheduler paused (SIGSTOP) past its lease, then resumed: another took over, the
/// resumed one's writes are refused by fencing, nothing is doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_scheduler_is_fenced_out() {
    let c = Cluster::start(2, 23).await;
    let ids = c.submit_videos(6, 20).await;
    c.wait_creates(30).await;
    let holder = c.holder_of("kling:video").await;
    c.schedulers[holder].signal("STOP");
    // Wait until someone else holds the lease (it expired: at most two lease periods).
    let other = eventually(Duration::from_secs(10), "lease taken over", async || {
        let h = c.try_holder_of("kling:video").await?;
        (h != holder).then_some(h)
    })
    .await;
    let creates_then = c.sim.stats().creates;
    c.wait_creates(creates_then + 10).await;
    c.schedulers[holder].signal("CONT");
    c.wait_completed(&ids).await;
    c.assert_clean(120).await;
    assert_ne!(other, holder);
}

/// Redis flushed mid-run: slot sets are rebuilt from the database before any grant, the run
/// completes, no over-limit, no duplicate submission.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_flush_mid_run_loses_nothing() {
    let c = Cluster::start(2, 24).await;
    let ids = c.submit_videos(6, 20).await;
    c.wait_creates(30).await;
    c.flush_redis().await;
    c.wait_creates(60).await;
    c.flush_redis().await;
    c.wait_completed(&ids).await;
    c.assert_clean(120).await;
}

/// Delete every Redis key under `prefix`: a flush, as far as the slotd using it can tell.
pub async fn flush_prefix(prefix: &str) {
    let client = redis::Client::open(redis_url()).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("redis");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .expect("KEYS");
    if !keys.is_empty() {
        let _: i64 = redis::cmd("DEL")
            .arg(&keys)
            .query_async(&mut conn)
            .await
            .expect("DEL");
    }
}
