//! A PostgreSQL server of the run's own: `initdb` into a temporary directory, then `postgres`
//! on a free loopback port with `pg_stat_statements` preloaded, so a scale run counts
//! statements per unit on any machine that has PostgreSQL's programs, without changing the
//! system's server. Where the programs are not installed (or cannot run), the run falls back
//! to the running server ([`super::servers::PrivateDb`]).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::cluster;

/// The OS user a server started by root runs as (PostgreSQL refuses to run as root).
const SERVER_USER: &str = "postgres";

/// A running server and the directory holding its data; stopped and removed on drop.
pub(super) struct OwnPostgres {
    child: Child,
    bindir: PathBuf,
    data: PathBuf,
    as_user: bool,
    /// Holds the data directory until the server has stopped.
    _dir: tempfile::TempDir,
    /// An administrator's URL (trust authentication, loopback only).
    pub admin_url: String,
}

impl OwnPostgres {
    /// Start one, or say why not (`None`: the caller falls back to the running server).
    pub(super) async fn start() -> Option<OwnPostgres> {
        let Some(bindir) = bindir() else {
            eprintln!(
                "scale: no PostgreSQL programs found (initdb, postgres; SLOTD_PG_BINDIR, \
                 pg_config --bindir, /usr/lib/postgresql/*/bin): using the running server"
            );
            return None;
        };
        match Self::try_start(&bindir).await {
            Ok(pg) => Some(pg),
            Err(e) => {
                eprintln!(
                    "scale: could not start a PostgreSQL server of the run's own with {}: \
                     {e:#}; using the running server",
                    bindir.display()
                );
                None
            }
        }
    }

    async fn try_start(bindir: &Path) -> anyhow::Result<OwnPostgres> {
        let as_user = running_as_root();
        let dir = tempfile::Builder::new()
            .prefix("slotd-scale-pg")
            .tempdir()?;
        let data = dir.path().join("data");
        if as_user {
            // The server's user must own the directory it writes into.
            let status = Command::new("chown")
                .arg(format!("{SERVER_USER}:"))
                .arg(dir.path())
                .status()?;
            anyhow::ensure!(
                status.success(),
                "chown {SERVER_USER} of {}",
                dir.path().display()
            );
        }
        let out = command(bindir, "initdb", as_user)
            .arg("-D")
            .arg(&data)
            .args(["-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"])
            .output()?;
        anyhow::ensure!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        let port = cluster::free_port()?;
        let child = command(bindir, "postgres", as_user)
            .arg("-D")
            .arg(&data)
            .args(["-p", &port.to_string(), "-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", dir.path().display()))
            .args(["-c", "shared_preload_libraries=pg_stat_statements"])
            .args(["-c", "pg_stat_statements.track_planning=on"])
            .args(["-c", "max_connections=300"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let pg = OwnPostgres {
            child,
            bindir: bindir.to_path_buf(),
            data,
            as_user,
            _dir: dir,
            admin_url: format!("postgres://postgres@127.0.0.1:{port}/postgres"),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match sqlx::PgPool::connect(&pg.admin_url).await {
                Ok(pool) => {
                    pool.close().await;
                    eprintln!(
                        "scale: PostgreSQL of the run's own on port {port} ({}), \
                         pg_stat_statements preloaded",
                        pg.bindir.display()
                    );
                    return Ok(pg);
                }
                Err(e) if Instant::now() > deadline => {
                    anyhow::bail!("not answering after 30 s: {e}")
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    }
}

impl Drop for OwnPostgres {
    fn drop(&mut self) {
        // A fast shutdown ends the backends too; killing the postmaster is the fallback.
        let stopped = command(&self.bindir, "pg_ctl", self.as_user)
            .arg("-D")
            .arg(&self.data)
            .args(["-m", "fast", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !stopped {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// `bindir/program`, run as [`SERVER_USER`] when `as_user`.
fn command(bindir: &Path, program: &str, as_user: bool) -> Command {
    let path = bindir.join(program);
    if as_user {
        let mut c = Command::new("runuser");
        c.args(["-u", SERVER_USER, "--"]).arg(path);
        c
    } else {
        Command::new(path)
    }
}

/// Whether this process runs as root (the owner of `/proc/self`).
fn running_as_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

/// Where `initdb` and `postgres` are: `SLOTD_PG_BINDIR`, `pg_config --bindir`, or the newest
/// `/usr/lib/postgresql/*/bin` (Debian's layout, not on `PATH`).
fn bindir() -> Option<PathBuf> {
    let has_both = |d: &Path| d.join("initdb").is_file() && d.join("postgres").is_file();
    if let Ok(d) = std::env::var("SLOTD_PG_BINDIR") {
        return Some(PathBuf::from(d)).filter(|d| has_both(d));
    }
    let from_pg_config = Command::new("pg_config")
        .arg("--bindir")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| PathBuf::from(s.trim()));
    if let Some(d) = from_pg_config.filter(|d| has_both(d)) {
        return Some(d);
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            Some((v, e.path().join("bin")))
        })
        .filter(|(_, d)| has_both(d))
        .collect();
    versions.sort();
    versions.pop().map(|(_, d)| d)
}
