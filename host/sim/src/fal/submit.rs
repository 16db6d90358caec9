//! `POST /{model id}`: the checks in the order FAL_API.md's simulator section fixes — 401
//! (key), 403 (exhausted balance), 404 (unknown model), 422 (body not a JSON object), 422
//! (`fal_webhook`, `fal_max_queue_length`), 400 (`X-Fal-Queue-Priority`,
//! `X-Fal-Request-Timeout`, and the simulator's own `X-Fal-Object-Lifecycle-Preference` and
//! `X-Fal-Store-IO` checks), 422 schema (only with `--validate-at-submit`), 429 (queue length)
//! — then the request joins the queue. A body that breaks the schema is otherwise accepted and
//! ends with a 422 result when a runner picks it up.

use std::net::IpAddr;
use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};
use rand::Rng;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::auth::authenticate;
use super::error::FalError;
use super::fate::{draw_fate, price_usd, spec_of};
use super::job::{Job, Outcome};
use super::queue::{NewRequest, Priority};
use super::schema::{self, Detail, Schema};
use super::state::{Inner, Sim};

use crate::files::file_sha256;

/// A submit that passed the checks made before the queue.
pub(crate) struct Submission {
    pub account: String,
    pub model: String,
    pub schema: Schema,
    pub body: Value,
    /// The schema's problems (with `extra_forbidden` ones under `--refuse-unknown-keys`).
    pub problems: Vec<Detail>,
    pub extra: Vec<String>,
    pub webhook: Option<String>,
    pub max_queue_length: Option<u64>,
    pub priority: Priority,
    /// `X-Fal-Request-Timeout`, simulated seconds.
    pub timeout_s: Option<f64>,
    /// The CDN file's lifetime; `None`: never expires.
    pub media_ttl: Option<Duration>,
    pub store_io: bool,
}

/// A refusal and its reason in `submits_refused`.
pub(crate) type Refusal = (FalError, &'static str);

/// The checks up to (not including) the queue length.
pub(crate) fn check(
    sim: &Sim,
    model: &str,
    query: Option<&str>,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<Submission, Refusal> {
    let account = authenticate(sim, headers).map_err(|e| (e, "unauthorized"))?;
    if sim.is_exhausted(&account) {
        sim.count(|s| s.locked_refusals += 1);
        let text = "User is locked. Reason: Exhausted balance. Top up your balance at fal.ai/dashboard/billing";
        return Err((FalError::detail(StatusCode::FORBIDDEN, text), "locked"));
    }
    let Some(schema) = schema::schema_of(model) else {
        let text = format!("Application {model:?} not found");
        return Err((
            FalError::detail(StatusCode::NOT_FOUND, text),
            "unknown_model",
        ));
    };
    let body = parse_body(body).map_err(|e| (e, "bad_body"))?;
    let (webhook, max_queue_length) = parse_query(query).map_err(|e| (e, "bad_query"))?;
    let header = |name: &str| -> Result<Option<String>, Refusal> {
        match headers.get(name).map(|v| v.to_str()) {
            None => Ok(None),
            Some(Ok(v)) => Ok(Some(v.trim().to_owned())),
            Some(Err(_)) => Err((
                FalError::bad_request(format!("The {name} header is not valid text")),
                "bad_header",
            )),
        }
    };
    let bad = |text: String| (FalError::bad_request(text), "bad_header");
    let priority = match header("x-fal-queue-priority")?.as_deref() {
        None => Priority::Normal,
        Some(p) if p.eq_ignore_ascii_case("normal") => Priority::Normal,
        Some(p) if p.eq_ignore_ascii_case("low") => Priority::Low,
        Some(p) => {
            return Err(bad(format!(
                "X-Fal-Queue-Priority must be normal or low, not {p:?}"
            )));
        }
    };
    let timeout_s = match header("x-fal-request-timeout")? {
        None => None,
        Some(t) => match t.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 1.0 => Some(s),
            _ => {
                return Err(bad(format!(
                    "X-Fal-Request-Timeout must be a number of seconds greater than 1, not {t:?}"
                )));
            }
        },
    };
    let media_ttl = match header("x-fal-object-lifecycle-preference")? {
        None => Some(sim.opts.media_ttl),
        Some(p) => match lifecycle(&p) {
            Some(ttl) => ttl,
            None => {
                return Err(bad(format!(
                    "X-Fal-Object-Lifecycle-Preference must be {{\"expiration_duration_seconds\": N}} or null, not {p:?}"
                )));
            }
        },
    };
    let store_io = match header("x-fal-store-io")?.as_deref() {
        None | Some("1" | "true") => true,
        Some("0" | "false") => false,
        Some(v) => return Err(bad(format!("X-Fal-Store-IO must be 0 or 1, not {v:?}"))),
    };
    let checked = schema::check(schema, &body);
    let mut problems = checked.problems;
    if sim.opts.refuse_unknown_keys {
        problems.extend(checked.extra.iter().map(|k| Detail {
            loc: vec![json!("body"), json!(k)],
            msg: "Extra inputs are not permitted".into(),
            kind: "extra_forbidden".into(),
            input: body.get(k).cloned(),
        }));
    }
    if sim.opts.validate_at_submit && !problems.is_empty() {
        let err = FalError::model(StatusCode::UNPROCESSABLE_ENTITY, json!(problems));
        return Err((err, "schema"));
    }
    Ok(Submission {
        account,
        model: model.to_owned(),
        schema,
        body,
        problems,
        extra: checked.extra,
        webhook,
        max_queue_length,
        priority,
        timeout_s,
        media_ttl,
        store_io,
    })
}

/// 422 unless the body is a JSON object (FastAPI's `json_invalid` / `model_attributes_type`).
fn parse_body(bytes: &[u8]) -> Result<Value, FalError> {
    let unprocessable = |detail: Value| FalError::model(StatusCode::UNPROCESSABLE_ENTITY, detail);
    match serde_json::from_slice::<Value>(bytes) {
        Ok(v @ Value::Object(_)) => Ok(v),
        Ok(other) => Err(unprocessable(json!([{
            "loc": ["body"], "type": "model_attributes_type", "input": other,
            "msg": "Input should be a valid dictionary or object to extract fields from",
        }]))),
        Err(e) => Err(unprocessable(json!([{
            "loc": ["body", e.column()], "type": "json_invalid", "input": {},
            "msg": "JSON decode error", "ctx": {"error": e.to_string()},
        }]))),
    }
}

/// `fal_webhook` (an http(s) URL on a loopback address) and `fal_max_queue_length`.
fn parse_query(query: Option<&str>) -> Result<(Option<String>, Option<u64>), FalError> {
    let mut webhook = None;
    let mut max_len = None;
    for (k, v) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match k.as_ref() {
            "fal_webhook" => {
                let u = url::Url::parse(&v).map_err(|e| {
                    FalError::query(
                        "fal_webhook",
                        "url_parsing",
                        format!("Input should be a valid URL, {e}"),
                        &v,
                    )
                })?;
                if !matches!(u.scheme(), "http" | "https") {
                    return Err(FalError::query(
                        "fal_webhook",
                        "url_scheme",
                        "URL scheme should be 'http' or 'https'",
                        &v,
                    ));
                }
                let loopback = match u.host() {
                    Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
                    Some(url::Host::Ipv4(ip)) => IpAddr::V4(ip).is_loopback(),
                    Some(url::Host::Ipv6(ip)) => IpAddr::V6(ip).is_loopback(),
                    None => false,
                };
                if !loopback {
                    return Err(FalError::query(
                        "fal_webhook",
                        "value_error",
                        "Value error, the simulator delivers webhooks to loopback addresses only (127.0.0.0/8, ::1, localhost)",
                        &v,
                    ));
                }
                webhook = Some(v.into_owned());
            }
            "fal_max_queue_length" => {
                let n = v.trim().parse::<u64>().map_err(|_| {
                    FalError::query(
                        "fal_max_queue_length",
                        "int_parsing",
                        "Input should be a valid integer ≥ 0, unable to parse string as an integer",
                        &v,
                    )
                })?;
                max_len = Some(n);
            }
            _ => {}
        }
    }
    Ok((webhook, max_len))
}

/// `{"expiration_duration_seconds": N}` → `Some(Some(N s))`; `null` (either way) →
/// `Some(None)`, never expires; anything else → `None`.
fn lifecycle(text: &str) -> Option<Option<Duration>> {
    match serde_json::from_str::<Value>(text).ok()? {
        Value::Null => Some(None),
        Value::Object(m) => match m.get("expiration_duration_seconds") {
            None | Some(Value::Null) => Some(None),
            Some(n) => {
                let s = n.as_f64().filter(|s| s.is_finite() && *s >= 0.0)?;
                // Longer than a `Duration` holds: as good as never.
                Some(Duration::try_from_secs_f64(s).ok())
            }
        },
        _ => None,
    }
}

impl Sim {
    /// Queues a checked submit unless the endpoint's queue is at `fal_max_queue_length`: the
    /// request id and the submit answer. `lost`: the answer will not reach the client.
    pub(crate) fn accept(&self, sub: Submission, lost: bool) -> Result<(String, Value), Refusal> {
        let input_sha256 = hex::encode(Sha256::digest(sub.body.to_string()));
        let (id, answer, success) = self.with_now(|inner, now| {
            queue_room(inner, &sub)?;
            let spec = spec_of(sub.schema, &sub.body);
            let images = matches!(
                sub.schema,
                Schema::ImageToVideo | Schema::ImageToVideoOlder | Schema::Scenes | Schema::Frames
            );
            let invalid = !sub.problems.is_empty();
            let price = price_usd(&sub.model, spec);
            let fate = draw_fate(
                &mut inner.fate_rng,
                &self.opts,
                &sub.model,
                spec,
                images,
                invalid,
            );
            let id = uuid::Builder::from_random_bytes(inner.fate_rng.random())
                .into_uuid()
                .to_string();
            let planned = match (invalid, fate.failure) {
                (true, _) => Outcome::Invalid(json!(sub.problems)),
                (false, Some(kind)) => Outcome::Failed(kind),
                (false, None) => Outcome::Success,
            };
            let app = sub.model.split('/').take(2).collect::<Vec<_>>().join("/");
            inner.queue.submit(
                NewRequest {
                    id: id.clone(),
                    account: sub.account.clone(),
                    endpoint: sub.model.clone(),
                    priority: sub.priority,
                    dispatch_delay_ms: self.base.clock.real_ms(fate.dispatch_s),
                    run_ms: self.base.clock.real_ms(fate.run_s),
                },
                now,
            );
            count_submit(inner, &sub, fate.failure.is_some(), lost, &input_sha256);
            let job = Job {
                id: id.clone(),
                account: sub.account,
                endpoint: sub.model,
                app,
                priority: sub.priority,
                input: sub.body,
                store_io: sub.store_io,
                spec,
                fate,
                price_usd: price,
                planned,
                outcome: None,
                submitted_ms: now,
                started_ms: None,
                ended_ms: None,
                deadline_ms: sub
                    .timeout_s
                    .map(|t| now.saturating_add(self.base.clock.real_ms(t))),
                webhook: sub.webhook,
                media_ttl: sub.media_ttl,
                file_sha256: None,
                lost_answer: lost,
                input_sha256,
                unknown_keys: sub.extra,
                webhook_attempts: 0,
                webhook_deliveries: 0,
            };
            let mut answer = job.links(&self.base.base_url);
            answer["status"] = json!("IN_QUEUE");
            answer["queue_position"] = json!(inner.queue.position(&id).unwrap_or(0));
            let success = job.planned == Outcome::Success;
            inner.jobs.insert(id.clone(), job);
            inner.order.push(id.clone());
            inner.unfinished.insert(id.clone());
            Ok((id, answer, success))
        })?;
        if success {
            // Hashing the file takes a millisecond or so: outside the lock.
            let sha = file_sha256(&id);
            if let Some(job) = self.inner.lock().jobs.get_mut(&id) {
                job.file_sha256 = Some(sha);
            }
        }
        Ok((id, answer))
    }
}

/// `Err(429 queue_full)` when the endpoint's queue for the account already holds
/// `fal_max_queue_length` requests not started.
fn queue_room(inner: &Inner, sub: &Submission) -> Result<(), Refusal> {
    let Some(max) = sub.max_queue_length else {
        return Ok(());
    };
    let waiting = inner
        .unfinished
        .iter()
        .filter_map(|id| inner.jobs.get(id))
        .filter(|j| j.started_ms.is_none())
        .filter(|j| j.account == sub.account && j.endpoint == sub.model)
        .count() as u64;
    if waiting < max {
        return Ok(());
    }
    let text =
        format!("The queue is full: {waiting} requests waiting (fal_max_queue_length={max})");
    let err = FalError::request(StatusCode::TOO_MANY_REQUESTS, "queue_full", text);
    Err((err, "queue_full"))
}

/// The counters an accepted submit moves: submits, unknown keys, drawn failures, lost answers,
/// repeated inputs, and the account's queued and unfinished requests.
fn count_submit(inner: &mut Inner, sub: &Submission, fails: bool, lost: bool, input_sha256: &str) {
    let s = &mut inner.stats;
    s.submits += 1;
    s.unknown_input_keys += sub.extra.len() as u64;
    for k in &sub.extra {
        *s.unknown_input_key_names.entry(k.clone()).or_default() += 1;
    }
    if fails {
        s.faults.failed_after_accept += 1;
    }
    if lost {
        s.faults.lost_answers += 1;
    }
    let seen = (
        sub.account.clone(),
        sub.model.clone(),
        input_sha256.to_string(),
    );
    if !inner.inputs_seen.insert(seen) {
        inner.stats.duplicate_inputs += 1;
    }
    if let Some(a) = inner.accounts.get_mut(&sub.account) {
        a.submits += 1;
        a.queued += 1;
        a.unfinished += 1;
        a.max_unfinished = a.max_unfinished.max(a.unfinished);
    }
    let unfinished: u64 = inner.accounts.values().map(|a| a.unfinished).sum();
    inner.stats.max_unfinished = inner.stats.max_unfinished.max(unfinished);
}
