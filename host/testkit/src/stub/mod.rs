//! The stub provider: the small test provider the fixture handler (`plugins/fixture`) speaks to.
//! Used by the host's tests, the end-to-end suite and the benches; not part of the scheduling
//! path (the Kling-compatible simulator is a separate, richer stand-in).
//!
//! An axum app on `127.0.0.1:0` with a per-account concurrency `limit`:
//! - `POST /jobs` `{"key", "polls", "outcome": "succeed"|"fail", "code"?, "message"?}` →
//!   200 `{"id"}`; 429 when `limit` jobs are in flight; 409 `{"id"}` for a key already used
//!   (not a create, but counted in `duplicate_creates` and `creates_by_key`).
//! - `GET /jobs/{id}` → `{"id", "status": "running"|"succeeded"|"failed", "code", "message",
//!   "url"}`. A job holds a slot from its create until the poll that ends it: it answers
//!   `running` to its first `polls` polls and ends on the next one (`polls` = 0: the first).
//! - `GET /jobs/by-key/{key}` → the job created with that key, or 404.
//! - `GET /files/{id}` → a few KB of bytes derived from the id (deterministic). A test can
//!   point the result URLs at another server instead ([`StubHandle::set_files_base`]).
//! - `GET /stats` → [`StubStats`] as JSON, so a test can read them from another process.
//!
//! A test can hold creates at a gate ([`StubHandle::hold_creates`]) to stop a handler call in
//! the middle of its provider request until it says go, and hold running jobs running
//! ([`StubHandle::hold_jobs`]) across a moment it chooses.
//!
//! [`proxy::TcpProxy`] is the other test stand-in: a TCP proxy a test cuts and restores to make
//! a real server (PostgreSQL) go away and come back.

pub mod proxy;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::json;
use sha2::{Digest, Sha256};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

/// Size of a result file served by `GET /files/{id}`.
pub const FILE_BYTES: usize = 4 * 1024;

/// How the stub behaves.
#[derive(Clone, Debug)]
pub struct StubOptions {
    /// Jobs the account may have in flight at once; creates beyond it answer 429.
    pub limit: u32,
}

impl Default for StubOptions {
    fn default() -> Self {
        StubOptions { limit: 5 }
    }
}

/// What the stub has seen, for assertions on request budgets and capacity.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StubStats {
    /// Jobs created (duplicates and refusals excluded).
    pub creates: u32,
    /// Create requests per idempotency key, the refused duplicates (409) included: any value
    /// above 1 is a double submission attempt, whether or not the stub let it through.
    pub creates_by_key: BTreeMap<String, u32>,
    /// Create requests refused with 409 because their key was already used.
    pub duplicate_creates: u32,
    /// Creates refused with 429.
    pub capacity_refusals: u32,
    /// Jobs holding a slot now.
    pub in_flight: u32,
    /// The most jobs ever in flight at once.
    pub max_in_flight: u32,
    /// `GET /jobs/{id}` requests.
    pub polls: u32,
    /// `GET /files/{id}` requests served.
    pub downloads: u32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum JobStatus {
    Running,
    Succeeded,
    Failed,
}

impl JobStatus {
    fn as_str(self) -> &'static str {
        match self {
            JobStatus::Running => "running",
            JobStatus::Succeeded => "succeeded",
            JobStatus::Failed => "failed",
        }
    }
}

struct Job {
    id: String,
    status: JobStatus,
    /// Polls still answered `running` before the job ends.
    polls_left: u32,
    fails: bool,
    code: Option<String>,
    message: Option<String>,
}

struct Inner {
    limit: u32,
    next_id: u64,
    jobs: HashMap<String, Job>,
    by_key: HashMap<String, String>,
    stats: StubStats,
    /// Where result URLs point (`{files_base}/files/{id}`); the stub itself when `None`.
    files_base: Option<String>,
    /// While set, creates wait at this gate before doing anything ([`StubHandle::hold_creates`]).
    gate: Option<Arc<CreateGate>>,
    /// While set, running jobs stay running: polls answer `running` and count nothing down
    /// ([`StubHandle::hold_jobs`]).
    hold_jobs: bool,
}

/// Holds `POST /jobs` requests until released: a test's way to stop a handler call in the
/// middle, deterministically, while the caller waits at the provider.
pub struct CreateGate {
    /// Create requests that reached the gate so far.
    arrived: tokio::sync::watch::Sender<u32>,
    open: tokio::sync::watch::Sender<bool>,
}

impl CreateGate {
    /// Wait until `n` create requests are waiting at (or went through) the gate.
    pub async fn arrived(&self, n: u32) {
        let mut rx = self.arrived.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = rx.wait_for(|seen| *seen >= n).await;
    }

    /// Let every held and later create through.
    pub fn release(&self) {
        self.open.send_replace(true);
    }

    async fn pass(&self) {
        self.arrived.send_modify(|n| *n += 1);
        let mut rx = self.open.subscribe();
        let _ = rx.wait_for(|open| *open).await;
    }
}

type Shared = Arc<Mutex<Inner>>;

#[derive(Clone)]
struct AppState {
    inner: Shared,
    base_url: Arc<str>,
}

/// Entry point: `StubProvider::start(options)`.
pub struct StubProvider;

impl StubProvider {
    /// Serve the stub on `127.0.0.1:0` until [`StubHandle::shutdown`] (or the handle drops).
    pub async fn start(options: StubOptions) -> anyhow::Result<StubHandle> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the stub provider to 127.0.0.1:0")?;
        let addr = listener
            .local_addr()
            .context("reading the stub's address")?;
        let base_url = format!("http://{addr}");
        let inner = Arc::new(Mutex::new(Inner {
            limit: options.limit,
            next_id: 1,
            jobs: HashMap::new(),
            by_key: HashMap::new(),
            stats: StubStats::default(),
            files_base: None,
            gate: None,
            hold_jobs: false,
        }));
        let app = router(AppState {
            inner: inner.clone(),
            base_url: Arc::from(base_url.as_str()),
        });
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let serve = axum::serve(listener, app).with_graceful_shutdown(async move {
                let _ = stopped.await;
            });
            if let Err(e) = serve.await {
                tracing::warn!("stub provider stopped: {e}");
            }
        });
        Ok(StubHandle {
            addr,
            base_url,
            inner,
            stop: Some(stop),
            task: Some(task),
        })
    }
}

/// A running stub provider.
pub struct StubHandle {
    addr: SocketAddr,
    base_url: String,
    inner: Shared,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl StubHandle {
    /// `http://127.0.0.1:PORT`, the fixture's `base_url`.
    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// The listening address (its `host:port` goes into `allowed_hosts`).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Make succeeded jobs' result URLs `{base}/files/{id}` on another server (a test's file
    /// server that redirects or trickles), or the stub's own again with `None`.
    pub fn set_files_base(&self, base: Option<String>) {
        self.inner.lock().files_base = base;
    }

    /// From now on, hold every create at a gate until [`CreateGate::release`] (which also
    /// removes the gate for later creates).
    pub fn hold_creates(&self) -> Arc<CreateGate> {
        let gate = Arc::new(CreateGate {
            arrived: tokio::sync::watch::Sender::new(0),
            open: tokio::sync::watch::Sender::new(false),
        });
        self.inner.lock().gate = Some(gate.clone());
        gate
    }

    /// Keep every running job running (`true`) until released (`false`): a test's way to have
    /// jobs in flight across a moment it chooses, whatever the machine's speed.
    pub fn hold_jobs(&self, hold: bool) {
        self.inner.lock().hold_jobs = hold;
    }

    /// A copy of the counters.
    pub fn stats(&self) -> StubStats {
        self.inner.lock().stats.clone()
    }

    /// Stop serving and wait for the server task to end.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for StubHandle {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/jobs", post(create))
        .route("/jobs/{id}", get(poll))
        .route("/jobs/by-key/{key}", get(by_key))
        .route("/files/{id}", get(file))
        .route("/stats", get(stats))
        .with_state(state)
}

#[derive(Deserialize)]
struct CreateJob {
    key: String,
    #[serde(default)]
    polls: u32,
    #[serde(default)]
    outcome: Option<String>,
    #[serde(default)]
    code: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

async fn create(State(app): State<AppState>, Json(req): Json<CreateJob>) -> Response {
    let gate = app.inner.lock().gate.clone();
    if let Some(gate) = gate {
        gate.pass().await;
        let mut s = app.inner.lock();
        if s.gate.as_ref().is_some_and(|g| Arc::ptr_eq(g, &gate)) && *gate.open.borrow() {
            s.gate = None;
        }
    }
    let mut s = app.inner.lock();
    if let Some(id) = s.by_key.get(&req.key).cloned() {
        s.stats.duplicate_creates += 1;
        *s.stats.creates_by_key.entry(req.key).or_default() += 1;
        return (StatusCode::CONFLICT, Json(json!({"id": id}))).into_response();
    }
    if s.stats.in_flight >= s.limit {
        s.stats.capacity_refusals += 1;
        let body = json!({"error": "over capacity", "limit": s.limit});
        return (StatusCode::TOO_MANY_REQUESTS, Json(body)).into_response();
    }
    let id = format!("job-{}", s.next_id);
    s.next_id += 1;
    s.jobs.insert(
        id.clone(),
        Job {
            id: id.clone(),
            status: JobStatus::Running,
            polls_left: req.polls,
            fails: req.outcome.as_deref() == Some("fail"),
            code: req.code,
            message: req.message,
        },
    );
    s.by_key.insert(req.key.clone(), id.clone());
    s.stats.creates += 1;
    *s.stats.creates_by_key.entry(req.key).or_default() += 1;
    s.stats.in_flight += 1;
    s.stats.max_in_flight = s.stats.max_in_flight.max(s.stats.in_flight);
    Json(json!({"id": id})).into_response()
}

fn job_json(job: &Job, base_url: &str, files_base: Option<&str>) -> serde_json::Value {
    let base = files_base.unwrap_or(base_url);
    let url = (job.status == JobStatus::Succeeded).then(|| format!("{base}/files/{}", job.id));
    let (code, message) = match job.status {
        JobStatus::Failed => (
            Some(job.code.clone().unwrap_or_else(|| "failed".into())),
            Some(
                job.message
                    .clone()
                    .unwrap_or_else(|| "the job failed".into()),
            ),
        ),
        _ => (None, None),
    };
    json!({"id": job.id, "status": job.status.as_str(), "code": code, "message": message, "url": url})
}

async fn poll(State(app): State<AppState>, Path(id): Path<String>) -> Response {
    let mut guard = app.inner.lock();
    let s = &mut *guard;
    s.stats.polls += 1;
    let Some(job) = s.jobs.get_mut(&id) else {
        return (StatusCode::NOT_FOUND, Json(json!({"error": "no such job"}))).into_response();
    };
    if job.status == JobStatus::Running && !s.hold_jobs {
        if job.polls_left == 0 {
            job.status = if job.fails {
                JobStatus::Failed
            } else {
                JobStatus::Succeeded
            };
            s.stats.in_flight = s.stats.in_flight.saturating_sub(1);
        } else {
            job.polls_left -= 1;
        }
    }
    Json(job_json(job, &app.base_url, s.files_base.as_deref())).into_response()
}

async fn by_key(State(app): State<AppState>, Path(key): Path<String>) -> Response {
    let s = app.inner.lock();
    match s.by_key.get(&key).and_then(|id| s.jobs.get(id)) {
        Some(job) => Json(job_json(job, &app.base_url, s.files_base.as_deref())).into_response(),
        None => (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "no job with that key"})),
        )
            .into_response(),
    }
}

/// Deterministic content for a job's result file: sha256 chained from the id.
pub fn file_bytes(id: &str) -> Vec<u8> {
    let mut out = Vec::with_capacity(FILE_BYTES);
    let mut block = Sha256::digest(id.as_bytes());
    while out.len() < FILE_BYTES {
        out.extend_from_slice(&block);
        block = Sha256::digest(block);
    }
    out.truncate(FILE_BYTES);
    out
}

async fn file(State(app): State<AppState>, Path(id): Path<String>) -> Response {
    let mut s = app.inner.lock();
    if !s.jobs.contains_key(&id) {
        return (StatusCode::NOT_FOUND, "no such job").into_response();
    }
    s.stats.downloads += 1;
    drop(s);
    (
        [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
        file_bytes(&id),
    )
        .into_response()
}

async fn stats(State(app): State<AppState>) -> Json<StubStats> {
    Json(app.inner.lock().stats.clone())
}

#[cfg(test)]
mod tests;
