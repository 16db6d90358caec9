//! Handler releases over HTTP (docs/handlers.md, "Releases"):
//! - `POST /v1/handlers`: publish a handler component (the body, `application/wasm`) as a
//!   release every process of the cluster then runs. An admin key may publish any handler; a
//!   key with `publish = ["name", …]` only those names; other keys are refused (403). The file
//!   is checked as a drop-in into the plugins directory is (size, contract, compile, its
//!   declaration, the configuration's pins, its task types against the other handlers') before
//!   anything is stored; a refusal names the reason and changes nothing.
//! - `GET /v1/handlers/releases` (`?name=`) and `GET /v1/handlers/{name}/releases`: every
//!   release, which is current, each process's word on it (loaded, draining, canary,
//!   unloaded, failed), and the rollouts (`rollouts.rs`).

use std::path::Path as FsPath;

use axum::Json;
use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::{Tenant, publish_rights};
use super::error::{ApiError, log_store_error};
use slotd_coord::wake::WakeKey;
use slotd_store::{
    HandlerLoad, NewRelease, Published, Release, ReleaseFollower, Rollout, current_releases,
};
use slotd_units::services::Services;

/// A process not heard from for this long is shown as gone (it rewrites its words at every
/// look, `slotd_runtime::follow::FOLLOW_INTERVAL`).
const HEARD_WITHIN_MS: i64 = 60_000;

/// Routes of releases (the publish route shares `/v1/handlers` with the list).
pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new()
        .routes(routes!(list_releases))
        .routes(routes!(handler_releases))
}

/// What publishing did.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct PublishedView {
    /// `new`: stored now; `already`: this very file was published before (made current
    /// again).
    pub published: String,
    pub release: Release,
    /// The rollout started with it (`?rollout=`).
    pub rollout: Option<Rollout>,
}

/// Query of `POST /v1/handlers`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct PublishQuery {
    /// The release takes over the provider jobs of the releases before it at once (it reads
    /// their job state); by default each job finishes on the release that created it.
    #[serde(default)]
    pub takes_over: bool,
    /// Roll it out in stages instead of making it current at once: the shares of new units
    /// per stage, in percent, ascending, ending at 100 (`10,25,100`). Each stage is judged
    /// against the current release on provider outcomes (docs/handlers.md).
    #[param(pattern = "^[0-9]{1,3}(,[0-9]{1,3}){0,9}$")]
    pub rollout: Option<String>,
    /// Candidate units that must end in a stage before it is judged (default 20).
    #[param(minimum = 1, maximum = 100000)]
    pub min_units: Option<u32>,
    /// How much higher (0..1) the candidate's failure share may be than the current release's
    /// (default 0.05).
    #[param(minimum = 0.0, maximum = 0.99)]
    pub margin: Option<f64>,
}

/// Publish a handler
///
/// The body is a handler component (`wasm32-wasip2`, `Content-Type: application/wasm` or
/// `application/octet-stream`). It is
/// checked as the plugins directory checks a file (size, contract, compile, `describe`, the
/// configuration's pins, its task types), then stored as a release keyed by its sha256; every
/// process loads it within seconds (`GET /v1/handlers/releases` shows which). The same file
/// again makes it the current release once more.
#[utoipa::path(
    post,
    path = "/v1/handlers",
    tag = "handlers",
    operation_id = "publish_handler",
    params(PublishQuery),
    request_body(description = "The component file", content(
        (Vec<u8> = "application/wasm"),
        (Vec<u8> = "application/octet-stream"),
    )),
    responses(
        (status = 201, description = "Published", body = PublishedView),
        (status = 200, description = "This file was published before; it is current again", body = PublishedView),
        (status = 403, description = "This key may not publish this handler"),
        (status = 409, description = "This handler version is already published as another file"),
        (status = 413, description = "Over [limits] handler_file_mb"),
        (status = 422, description = "The file would be refused: not a component, the wrong contract, a bad declaration, a pinned handler, a task type another handler serves"),
    ),
)]
pub(crate) async fn publish(
    State(services): State<Services>,
    Tenant(tenant): Tenant,
    headers: HeaderMap,
    query: Result<Query<PublishQuery>, QueryRejection>,
    body: Body,
) -> Result<(StatusCode, Json<PublishedView>), ApiError> {
    let Query(q) = query.map_err(ApiError::malformed_query)?;
    let terms = super::rollouts::RolloutTerms::of(q.rollout.as_deref(), q.min_units, q.margin)?;
    let rights = publish_rights(&services, &headers)?;
    let limit = services.config.limits.handler_file_bytes;
    let bytes = axum::body::to_bytes(body, limit)
        .await
        .map_err(|_| ApiError::PayloadTooLarge { limit })?
        .to_vec();
    let checked = services
        .runtime
        .load_bytes(FsPath::new("published.wasm"), bytes.clone())
        .await
        .map_err(|e| ApiError::unprocessable(format!("{e:#}")))?;
    let name = checked.info.name.clone();
    if let Some(names) = &rights
        && !names.contains(&name)
    {
        return Err(ApiError::Forbidden(format!(
            "the file declares handler {name:?}; the key of tenant {tenant:?} may publish only \
             {names:?}"
        )));
    }
    refuse_unservable(&services, &checked)?;
    // A rollout is judged against the current release: there must be one, and not this file.
    let incumbent = match &terms {
        Some(_) => Some(super::rollouts::incumbent_for(&services, &name, &checked.sha256).await?),
        None => None,
    };
    let new = NewRelease {
        name: name.clone(),
        version: checked.info.version.clone(),
        contract: checked.contract.clone(),
        bytes,
        published_by: format!("tenant:{tenant}"),
        takes_over: q.takes_over,
        current: terms.is_none(),
        now: services.clock.now_ms(),
    };
    let published = services
        .store
        .release_put(&new)
        .await
        .map_err(log_store_error("publishing a handler release"))?;
    let (status, word, sha) = match published {
        Published::New(sha) => (StatusCode::CREATED, "new", sha),
        Published::Already(sha) if terms.is_none() => {
            services
                .store
                .release_promote(&sha, new.now)
                .await
                .map_err(log_store_error("making a handler release current"))?;
            (StatusCode::OK, "already", sha)
        }
        Published::Already(sha) => (StatusCode::OK, "already", sha),
        Published::VersionTaken {
            name,
            version,
            sha256,
        } => {
            return Err(ApiError::Conflict(format!(
                "handler {name:?} version {version} is already published as another file \
                 (sha256 {sha256}); give the new build a new version"
            )));
        }
    };
    let release = services
        .store
        .release_list(Some(&name))
        .await
        .map_err(log_store_error("reading the published release"))?
        .into_iter()
        .find(|r| r.sha256 == sha)
        .ok_or(ApiError::Internal)?;
    let rollout = match (terms, incumbent) {
        (Some(terms), Some(incumbent)) => Some(
            super::rollouts::start(&services, terms, &name, &sha, incumbent, &tenant, new.now)
                .await?,
        ),
        _ => None,
    };
    tracing::info!(handler = %name, version = %release.version, sha256 = %sha, %tenant, "handler release published");
    services.wake.wake(WakeKey::Releases);
    Ok((
        status,
        Json(PublishedView {
            published: word.into(),
            release,
            rollout,
        }),
    ))
}

/// Refuse what no process would serve: a handler pinned to a file of the plugins directory
/// (or to other content), or one whose task types another handler serves.
fn refuse_unservable(services: &Services, h: &slotd_runtime::Handler) -> Result<(), ApiError> {
    let name = &h.info.name;
    if let Some(config) = services.config.handlers.get(name) {
        if let Some(file) = &config.file {
            return Err(ApiError::unprocessable(format!(
                "handler {name:?} is pinned to file {file} by handlers.{name}.file: it is served \
                 only from that file in the plugins directory, not published"
            )));
        }
        if let Some(want) = &config.sha256
            && !want.eq_ignore_ascii_case(&h.sha256)
        {
            return Err(ApiError::unprocessable(format!(
                "handler {name:?} is pinned by handlers.{name}.sha256 to content {want}; this \
                 file has sha256 {}",
                h.sha256
            )));
        }
    }
    let snapshot = services.registry.snapshot();
    for t in &h.info.task_types {
        if let Some(other) = snapshot.by_type.get(&t.name)
            && other != name
        {
            return Err(ApiError::unprocessable(format!(
                "task type {:?} is already served by handler {other:?}",
                t.name
            )));
        }
    }
    Ok(())
}

/// One release as listed, with every process's word on it.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReleaseView {
    #[serde(flatten)]
    pub release: Release,
    /// Whether it is its handler's current release (what processes load).
    pub current: bool,
    /// Each process's word on it, heard within the last minute.
    pub processes: Vec<HandlerLoad>,
}

/// `GET /v1/handlers/releases`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ReleaseList {
    /// Newest published first.
    pub releases: Vec<ReleaseView>,
    /// The processes following the releases.
    pub processes: Vec<ReleaseFollower>,
    /// The newest rollouts (at most 20), newest first: stage, state, why it moved, and the
    /// last judgement's figures beside the incumbent's.
    pub rollouts: Vec<Rollout>,
}

/// Query of `GET /v1/handlers/releases`.
#[derive(Debug, Default, Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
#[into_params(parameter_in = Query)]
pub struct ReleaseQuery {
    /// Only this handler's releases.
    pub name: Option<String>,
}

/// List handler releases
///
/// Every published release (newest first), which one is each handler's current release, and
/// each process's word on it: `loaded`, `unloaded` (replaced) or `failed` with the reason.
#[utoipa::path(
    get,
    path = "/v1/handlers/releases",
    tag = "handlers",
    operation_id = "list_releases",
    params(ReleaseQuery),
    responses(
        (status = 200, description = "The releases", body = ReleaseList),
        (status = 400, description = "A bad query parameter"),
    ),
)]
async fn list_releases(
    State(services): State<Services>,
    Tenant(_tenant): Tenant,
    query: Result<Query<ReleaseQuery>, QueryRejection>,
) -> Result<Json<ReleaseList>, ApiError> {
    let Query(q) = query.map_err(ApiError::malformed_query)?;
    releases_of(&services, q.name.as_deref()).await.map(Json)
}

/// One handler's releases
///
/// `GET /v1/handlers/releases?name={name}`.
#[utoipa::path(
    get,
    path = "/v1/handlers/{name}/releases",
    tag = "handlers",
    operation_id = "handler_releases",
    params(("name" = String, Path, description = "The handler's name")),
    responses((status = 200, description = "The handler's releases", body = ReleaseList)),
)]
async fn handler_releases(
    State(services): State<Services>,
    Tenant(_tenant): Tenant,
    Path(name): Path<String>,
) -> Result<Json<ReleaseList>, ApiError> {
    releases_of(&services, Some(&name)).await.map(Json)
}

async fn releases_of(services: &Services, name: Option<&str>) -> Result<ReleaseList, ApiError> {
    let releases = services
        .store
        .release_list(name)
        .await
        .map_err(log_store_error("listing handler releases"))?;
    let since = services.clock.now_ms() - HEARD_WITHIN_MS;
    let loads = services
        .store
        .handler_load_list(since)
        .await
        .map_err(log_store_error("reading the processes' handler loads"))?;
    let processes = services
        .store
        .handler_process_list(since)
        .await
        .map_err(log_store_error(
            "reading the processes following the releases",
        ))?;
    let current: Vec<String> = current_releases(&releases)
        .values()
        .map(|r| r.sha256.clone())
        .collect();
    let views = releases
        .into_iter()
        .map(|release| ReleaseView {
            current: current.contains(&release.sha256),
            processes: loads
                .iter()
                .filter(|l| l.sha256 == release.sha256)
                .cloned()
                .collect(),
            release,
        })
        .collect();
    let mut rollouts = services
        .store
        .rollout_list(name, 20)
        .await
        .map_err(log_store_error("reading the rollouts"))?;
    for r in &mut rollouts {
        r.events = services
            .store
            .rollout_events(&r.id)
            .await
            .map_err(log_store_error("reading a rollout's steps"))?;
    }
    Ok(ReleaseList {
        releases: views,
        processes,
        rollouts,
    })
}
