//! The request history, `GET /v1/models/requests/by-endpoint` (FAL_API.md "Idempotency and
//! crash recovery"), served on the simulator's own host: the caller's account only, one
//! `endpoint_id`, a `start`/`end` window on the end time (default the last 24 h), `status`
//! (`success` 2xx, `user_error` 4xx, `error` 5xx), `request_id`, `limit` ≤ 100 and an opaque
//! `cursor`, `expand=payloads` for `json_input`/`json_output`. Finished requests only, unless
//! `--history-includes-unfinished` (then with `ended_at` null, listed first); newest end first.

use axum::Json;
use axum::extract::{RawQuery, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::{Value, json};

use super::auth::authenticate;
use super::error::FalError;
use super::job::Job;
use super::state::Sim;
use crate::clock::{parse_rfc3339_ms, unix_ms_now};

/// Page size without `limit`.
const LIMIT_DEFAULT: usize = 50;
const LIMIT_MAX: usize = 100;
const DAY_MS: i64 = 86_400_000;

/// A history query, checked.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct HistoryQuery {
    pub endpoint_id: String,
    /// Unix ms.
    pub start: Option<i64>,
    pub end: Option<i64>,
    /// `success`, `user_error` or `error`.
    pub status: Option<String>,
    pub request_id: Option<String>,
    /// `(end key, request id)` of the last item of the previous page.
    pub cursor: Option<(i64, String)>,
    pub limit: usize,
    pub payloads: bool,
}

pub(crate) async fn handler(
    State(sim): State<Sim>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    sim.count(|s| s.requests += 1);
    let account = match authenticate(&sim, &headers) {
        Ok(a) => a,
        Err(e) => return e.into_response(),
    };
    match parse(query.as_deref().unwrap_or_default()) {
        Ok(q) => Json(sim.history(&account, &q)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// Parses the query string; each bad parameter is a 422 naming it.
pub(crate) fn parse(query: &str) -> Result<HistoryQuery, FalError> {
    let mut q = HistoryQuery {
        limit: LIMIT_DEFAULT,
        ..HistoryQuery::default()
    };
    let mut endpoint = None;
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        let time = |name: &str| {
            parse_rfc3339_ms(&v).ok_or_else(|| {
                FalError::query(
                    name,
                    "datetime_parsing",
                    "Input should be a valid datetime (RFC 3339)",
                    &v,
                )
            })
        };
        match k.as_ref() {
            "endpoint_id" => endpoint = Some(v.trim().to_owned()).filter(|e| !e.is_empty()),
            "start" => q.start = Some(time("start")?),
            "end" => q.end = Some(time("end")?),
            "status" => match v.as_ref() {
                "success" | "error" | "user_error" => q.status = Some(v.into_owned()),
                _ => {
                    return Err(FalError::query(
                        "status",
                        "literal_error",
                        "Input should be 'success', 'error' or 'user_error'",
                        &v,
                    ));
                }
            },
            "request_id" => q.request_id = Some(v.into_owned()),
            "limit" => match v.trim().parse::<usize>() {
                Ok(n) if (1..=LIMIT_MAX).contains(&n) => q.limit = n,
                _ => {
                    return Err(FalError::query(
                        "limit",
                        "less_than_equal",
                        format!("Input should be an integer from 1 to {LIMIT_MAX}"),
                        &v,
                    ));
                }
            },
            "cursor" => {
                q.cursor = Some(decode_cursor(&v).ok_or_else(|| {
                    FalError::query(
                        "cursor",
                        "value_error",
                        "Value error, not a cursor this API returned",
                        &v,
                    )
                })?);
            }
            "expand" => {
                for item in v.split(',').map(str::trim).filter(|s| !s.is_empty()) {
                    if item != "payloads" {
                        return Err(FalError::query(
                            "expand",
                            "literal_error",
                            "Input should be 'payloads'",
                            &v,
                        ));
                    }
                    q.payloads = true;
                }
            }
            _ => {}
        }
    }
    let Some(endpoint) = endpoint else {
        return Err(FalError::query(
            "endpoint_id",
            "missing",
            "Field required",
            "",
        ));
    };
    q.endpoint_id = endpoint;
    if let (Some(s), Some(e)) = (q.start, q.end)
        && e < s
    {
        return Err(FalError::query(
            "end",
            "value_error",
            "Value error, end is before start",
            "",
        ));
    }
    Ok(q)
}

fn encode_cursor(end_key: i64, id: &str) -> String {
    URL_SAFE_NO_PAD.encode(format!("{end_key}:{id}"))
}

fn decode_cursor(text: &str) -> Option<(i64, String)> {
    let raw = String::from_utf8(URL_SAFE_NO_PAD.decode(text.trim()).ok()?).ok()?;
    let (end, id) = raw.split_once(':')?;
    Some((end.parse().ok()?, id.to_owned()))
}

/// The class of a result code, as the `status` filter names it.
fn class(code: u16) -> &'static str {
    match code {
        200..=299 => "success",
        400..=499 => "user_error",
        _ => "error",
    }
}

impl Sim {
    /// One page of `account`'s history.
    pub(crate) fn history(&self, account: &str, q: &HistoryQuery) -> Value {
        let now_unix = unix_ms_now();
        let end = q.end.unwrap_or(now_unix);
        let start = q.start.unwrap_or(end.saturating_sub(DAY_MS));
        self.with_now(|inner, _| {
            inner.stats.history_reads += 1;
            // Sort key: the end (unfinished: after everything), then the id.
            let key = |j: &Job| {
                (
                    j.ended_ms.map_or(i64::MAX, |e| self.base.clock.unix_ms(e)),
                    j.id.clone(),
                )
            };
            let mut found: Vec<&Job> = inner
                .jobs
                .values()
                .filter(|j| j.account == account && j.endpoint == q.endpoint_id)
                .filter(|j| q.request_id.as_ref().is_none_or(|r| *r == j.id))
                .filter(|j| match j.ended_ms.map(|e| self.base.clock.unix_ms(e)) {
                    Some(e) => (start..=end).contains(&e),
                    None => self.opts.history_includes_unfinished,
                })
                .filter(|j| {
                    let code = j.outcome.as_ref().map(|o| o.status_code());
                    q.status
                        .as_ref()
                        .is_none_or(|s| code.is_some_and(|c| class(c) == s))
                })
                .filter(|j| q.cursor.as_ref().is_none_or(|c| key(j) < *c))
                .collect();
            found.sort_by_key(|j| std::cmp::Reverse(key(j)));
            let has_more = found.len() > q.limit;
            found.truncate(q.limit);
            let next_cursor = found.last().filter(|_| has_more).map(|j| {
                let (e, id) = key(j);
                encode_cursor(e, &id)
            });
            let items: Vec<Value> = found
                .iter()
                .map(|j| self.history_item(j, q.payloads))
                .collect();
            json!({ "items": items, "next_cursor": next_cursor, "has_more": has_more })
        })
    }

    fn history_item(&self, j: &Job, payloads: bool) -> Value {
        let iso = |ms: Option<i64>| ms.map(|m| self.base.clock.iso(m));
        let mut item = json!({
            "request_id": j.id,
            "endpoint_id": j.endpoint,
            "sent_at": self.base.clock.iso(j.submitted_ms),
            "started_at": iso(j.started_ms),
            "ended_at": iso(j.ended_ms),
            "status_code": j.outcome.as_ref().map(|o| o.status_code()),
            "duration": j.started_ms.zip(j.ended_ms)
                .map(|(s, e)| (self.base.clock.simulated_s(e - s) * 1000.0).round() / 1000.0),
        });
        if payloads {
            let output = j.result(&self.base.base_url).map(|r| match r {
                Ok(v) => v,
                Err(e) => e.body,
            });
            item["json_input"] = if j.store_io {
                j.input.clone()
            } else {
                Value::Null
            };
            item["json_output"] = output.filter(|_| j.store_io).unwrap_or(Value::Null);
        }
        item
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_are_checked_parameter_by_parameter() {
        let q = parse(
            "endpoint_id=fal-ai/pika/v2.2/text-to-video&status=success&limit=2&expand=payloads",
        )
        .unwrap_or_else(|e| panic!("{:?}", e.body));
        assert_eq!(
            (q.limit, q.payloads, q.status.as_deref()),
            (2, true, Some("success"))
        );
        let cursor = encode_cursor(123, "r-1");
        assert_eq!(decode_cursor(&cursor), Some((123, "r-1".to_owned())));
        let loc = |query: &str| {
            parse(query)
                .err()
                .map(|e| e.body["detail"][0]["loc"][1].clone())
        };
        assert_eq!(loc("status=success"), Some(json!("endpoint_id")));
        assert_eq!(loc("endpoint_id=x&limit=101"), Some(json!("limit")));
        assert_eq!(loc("endpoint_id=x&status=done"), Some(json!("status")));
        assert_eq!(loc("endpoint_id=x&start=yesterday"), Some(json!("start")));
        assert_eq!(loc("endpoint_id=x&cursor=%%%"), Some(json!("cursor")));
        assert_eq!(loc("endpoint_id=x&expand=logs"), Some(json!("expand")));
        assert_eq!(
            loc("endpoint_id=x&start=2026-01-02T00:00:00Z&end=2026-01-01T00:00:00Z"),
            Some(json!("end"))
        );
    }
}
