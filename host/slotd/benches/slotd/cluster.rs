//! slotd in cluster mode for the Kling benchmark: PostgreSQL and Redis, one `--role api`
//! process and two `--role scheduler` processes of the real binary, all killed when dropped.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The processes of one cluster.
pub struct Cluster {
    /// The API process's base URL (tasks are submitted and read there).
    pub base: String,
    children: Vec<Child>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

/// The Redis to use: `SLOTD_TEST_REDIS_URL` or the local server, if it answers.
pub async fn redis_url() -> Option<String> {
    let url =
        std::env::var("SLOTD_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let client = redis::Client::open(url.as_str()).ok()?;
    let mut conn = tokio::time::timeout(
        Duration::from_secs(2),
        client.get_multiplexed_async_connection(),
    )
    .await
    .ok()?
    .ok()?;
    redis::cmd("PING")
        .query_async::<String>(&mut conn)
        .await
        .ok()?;
    Some(url)
}

/// Start a cluster in `dir` whose handler talks to the simulator (`handler`: the
/// `[handlers.kling-video]` section, as TOML lines) and whose pool `kling:video` has `limit`
/// slots, timed by `tick`; callbacks go to the API process when `callbacks`. `None` when
/// PostgreSQL or Redis does not answer (the cluster figures are then skipped).
pub async fn start(
    dir: &Path,
    handler: &str,
    limit: u32,
    tick: Duration,
    callbacks: bool,
) -> anyhow::Result<Option<Cluster>> {
    let (Some(database), Some(redis)) = (crate::common::pg_schema_url().await, redis_url().await)
    else {
        eprintln!("PostgreSQL or Redis not reachable: the cluster figures are skipped");
        return Ok(None);
    };
    let api_listen = format!("127.0.0.1:{}", free_port()?);
    let servers = Servers {
        database,
        redis,
        public: callbacks.then(|| format!("http://{api_listen}")),
    };
    let file = write_config(dir, &servers, handler, limit, tick)?;
    Ok(Some(start_with(dir, &file, &api_listen, 2).await?))
}

/// One API process listening on `api_listen` and `schedulers` scheduler processes, all
/// reading `file`; ready once every process answers and `kling:video` has a lease holder.
pub async fn start_with(
    dir: &Path,
    file: &Path,
    api_listen: &str,
    schedulers: usize,
) -> anyhow::Result<Cluster> {
    start_binary(
        Path::new(env!("CARGO_BIN_EXE_slotd")),
        dir,
        file,
        api_listen,
        schedulers,
    )
    .await
}

/// [`start_with`] on another build of slotd (`binary`): the scale bench's baseline.
pub async fn start_binary(
    binary: &Path,
    dir: &Path,
    file: &Path,
    api_listen: &str,
    schedulers: usize,
) -> anyhow::Result<Cluster> {
    let log = dir.join("cluster.log");
    let mut cluster = Cluster {
        base: format!("http://{api_listen}"),
        children: Vec::new(),
    };
    let mut bases = Vec::new();
    let mut roles = vec![("api", api_listen.to_string())];
    for _ in 0..schedulers {
        roles.push(("scheduler", format!("127.0.0.1:{}", free_port()?)));
    }
    for (role, listen) in roles {
        cluster
            .children
            .push(spawn(binary, file, &log, role, &listen)?);
        bases.push(format!("http://{listen}"));
    }
    wait_ready(&cluster.base, &bases, &log).await?;
    Ok(cluster)
}

impl Cluster {
    /// Process ids: the API process first, then the schedulers.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(Child::id).collect()
    }
}

/// What a cluster's processes connect to.
struct Servers {
    database: String,
    redis: String,
    /// The API process's URL, for provider callbacks.
    public: Option<String>,
}

/// The configuration file every process of the cluster reads.
fn write_config(
    dir: &Path,
    servers: &Servers,
    handler: &str,
    limit: u32,
    tick: Duration,
) -> anyhow::Result<std::path::PathBuf> {
    let plugins = dir.join("plugins");
    std::fs::create_dir_all(&plugins)?;
    let src = slotd_testkit::built_handler("kling-video")
        .ok_or_else(|| anyhow::anyhow!("kling-video not built"))?;
    std::fs::copy(src, plugins.join("kling-video.wasm"))?;
    let public = servers
        .public
        .as_ref()
        .map(|url| format!("public_url = \"{url}\"\n"))
        .unwrap_or_default();
    let config = format!(
        r#"database_url = "{database}"
redis_url = "{redis}"
redis_prefix = "slotd-bench:{prefix}:"
plugins_dir = "{plugins}"
cache_dir = "{cache}"
object_store = "file://{objects}"
max_units_per_task = 1000
{public}
[scheduler]
tick_interval = "{tick_ms}ms"

[pools."kling:video"]
max_slots = {limit}

{handler}
"#,
        database = servers.database,
        redis = servers.redis,
        prefix = uuid::Uuid::new_v4().simple(),
        plugins = plugins.display(),
        cache = dir.join("cache").display(),
        objects = dir.join("objects").display(),
        tick_ms = tick.as_millis(),
    );
    let file = dir.join("cluster.toml");
    std::fs::write(&file, config)?;
    Ok(file)
}

/// One `slotd serve --role ROLE` of the real binary, its stderr appended to `log`.
fn spawn(
    binary: &Path,
    file: &Path,
    log: &Path,
    role: &str,
    listen: &str,
) -> anyhow::Result<Child> {
    let err = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    Ok(Command::new(binary)
        .arg("serve")
        .args(["--role", role, "--listen", listen])
        .arg("--config")
        .arg(file)
        .env("SLOTD_LOG", "warn")
        .env_remove("SLOTD_DATABASE_URL")
        .env_remove("SLOTD_REDIS_URL")
        .stdout(Stdio::null())
        .stderr(err)
        .spawn()?)
}

/// Every process answers, and the pool has a lease holder.
async fn wait_ready(api: &str, bases: &[String], log: &Path) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    for base in bases {
        loop {
            let ok = client
                .get(format!("{base}/healthz"))
                .send()
                .await
                .is_ok_and(|r| r.status().is_success());
            if ok {
                break;
            }
            if Instant::now() > deadline {
                anyhow::bail!(
                    "{base} did not start: {}",
                    std::fs::read_to_string(log).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    loop {
        let pools: serde_json::Value = client
            .get(format!("{api}/v1/pools"))
            .send()
            .await?
            .json()
            .await?;
        let held = pools.as_array().is_some_and(|a| {
            a.iter()
                .any(|p| p["name"] == "kling:video" && p["lease"]["holder"].is_string())
        });
        if held {
            return Ok(());
        }
        if Instant::now() > deadline {
            anyhow::bail!("no scheduler took the pool: {pools}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
