//! The account's runtime controls (`POST /_sim/account`): revoke its credentials and give it
//! a balance of resource-pack units, mid-run, and restore both, so a test can watch a client
//! meet an account the provider refuses (KLING_API.md: 401/1002, 429/1102).
//!
//! - `revoked: true`: every `/v1/…` request is answered 401/1002 ("Authorization token is
//!   invalid") whatever its token, until set back to `false`.
//! - `balance: N`: each accepted create deducts its price (see [`price_units`]); a create that
//!   finds the balance below its price is answered 429/1102 and creates nothing.
//!   `balance: null`: unlimited (the default, or `--balance N` at start).
//! - `over_capacity_rate: r`: that share of creates is refused 429/1303 with room left.
//! - `other_client: {"slots": N, "burst_secs"?, "gap_secs"?, "first_secs"?}`: another client
//!   of the account takes N slots in bursts (see [`other_client`](super::other_client)); the
//!   burst in progress ends at once and the new schedule counts from this change (from the
//!   first create if there was none). `null` or `{"slots": 0}`: no other client.
//!
//! The answer (and `GET /_sim/account`) is the state in force:
//! `{"revoked", "balance", "over_capacity_rate", "other_client"}`.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::error::SimError;
use super::other_client::{OtherClientPlan, parse_plan};
use super::state::Sim;
use super::task::Spec;

/// The account's controllable state.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct Account {
    /// Every authenticated request is refused 401/1002.
    pub revoked: bool,
    /// Resource-pack units left; `None`: unlimited.
    pub balance: Option<f64>,
    /// Share of creates refused 429/1303 with room left (other clients hold the capacity).
    pub over_capacity_rate: f64,
    /// Another client's burst schedule, if any.
    pub other_client: Option<OtherClientPlan>,
}

impl Account {
    pub(crate) fn to_json(self) -> Value {
        json!({
            "revoked": self.revoked,
            "balance": self.balance,
            "over_capacity_rate": self.over_capacity_rate,
            "other_client": self.other_client.map(OtherClientPlan::to_json),
        })
    }
}

/// The changes a `POST /_sim/account` asks for; `None` keeps the value in force.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct AccountChange {
    pub revoked: Option<bool>,
    /// `Some(None)`: unlimited.
    pub balance: Option<Option<f64>>,
    pub over_capacity_rate: Option<f64>,
    /// `Some(None)`: no other client.
    pub other_client: Option<Option<OtherClientPlan>>,
}

/// What a job costs in resource-pack units, the same rule `final_unit_deduction` reports (and
/// the `kling-video` handler estimates): video std 5 s 1, std 10 s 2, pro 5 s 3.5, pro 10 s 7.
/// Kling publishes no unit price for custom voices and elements; the simulator charges 1.
pub(crate) fn price_units(spec: &Spec) -> f64 {
    match spec {
        Spec::Video {
            pro: false,
            duration: 5,
        } => 1.0,
        Spec::Video { pro: false, .. } => 2.0,
        Spec::Video {
            pro: true,
            duration: 5,
        } => 3.5,
        Spec::Video { pro: true, .. } => 7.0,
        Spec::Voice { .. } | Spec::Element { .. } => 1.0,
    }
}

/// 401/1002 while the account is revoked.
pub(crate) fn revoked() -> SimError {
    SimError::auth(
        1002,
        "Authorization token is invalid: the account's credentials are revoked",
    )
}

/// 429/1102: the balance does not cover the job; nothing was created.
pub(crate) fn exhausted(balance: f64, price: f64) -> SimError {
    SimError::new(
        StatusCode::TOO_MANY_REQUESTS,
        1102,
        format!("resource pack exhausted: {balance} units left, the task needs {price}"),
    )
}

/// `GET /_sim/account`.
pub(crate) async fn show(State(sim): State<Sim>) -> Response {
    Json(sim.account().to_json()).into_response()
}

/// `POST /_sim/account` with `{"revoked": bool?, "balance": number|null?,
/// "over_capacity_rate": number?, "other_client": object|null?}`: fields left out keep their
/// value. A body that is not such an object is answered 400 and changes nothing.
pub(crate) async fn update(State(sim): State<Sim>, body: Bytes) -> Response {
    match parse(&body, sim.opts.concurrency) {
        Ok(change) => Json(sim.update_account(change).to_json()).into_response(),
        Err(why) => (StatusCode::BAD_REQUEST, Json(json!({ "error": why }))).into_response(),
    }
}

/// The requested changes (`concurrency`: the account's, which the other client stays below).
pub(crate) fn parse(body: &[u8], concurrency: u32) -> Result<AccountChange, String> {
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("the body is not JSON: {e}"))?;
    let Value::Object(map) = value else {
        return Err(
            "the body must be a JSON object {\"revoked\"?, \"balance\"?, \"over_capacity_rate\"?, \
             \"other_client\"?}"
                .into(),
        );
    };
    let mut change = AccountChange::default();
    for (key, value) in map {
        match (key.as_str(), value) {
            ("revoked", Value::Bool(b)) => change.revoked = Some(b),
            ("revoked", other) => return Err(format!("revoked must be a boolean, got {other}")),
            ("balance", Value::Null) => change.balance = Some(None),
            ("balance", Value::Number(n)) => match n.as_f64() {
                Some(f) if f.is_finite() && f >= 0.0 => change.balance = Some(Some(f)),
                _ => return Err(format!("balance must be a number ≥ 0 or null, got {n}")),
            },
            ("balance", other) => {
                return Err(format!("balance must be a number ≥ 0 or null, got {other}"));
            }
            ("over_capacity_rate", Value::Number(n)) => match n.as_f64() {
                Some(f) if (0.0..=1.0).contains(&f) => change.over_capacity_rate = Some(f),
                _ => return Err(format!("over_capacity_rate must be within 0..1, got {n}")),
            },
            ("over_capacity_rate", other) => {
                return Err(format!(
                    "over_capacity_rate must be within 0..1, got {other}"
                ));
            }
            ("other_client", value) => {
                change.other_client = Some(parse_plan(value, concurrency)?);
            }
            (other, _) => {
                return Err(format!(
                    "unknown field {other:?} (revoked, balance, over_capacity_rate, other_client)"
                ));
            }
        }
    }
    Ok(change)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_say_what_changes() {
        let parse = |body: &[u8]| parse(body, 5);
        let change = |revoked, balance, over_capacity_rate| {
            Ok(AccountChange {
                revoked,
                balance,
                over_capacity_rate,
                other_client: None,
            })
        };
        assert_eq!(parse(b"{}"), change(None, None, None));
        assert_eq!(
            parse(br#"{"revoked": true}"#),
            change(Some(true), None, None)
        );
        assert_eq!(
            parse(br#"{"balance": 2.5}"#),
            change(None, Some(Some(2.5)), None)
        );
        assert_eq!(
            parse(br#"{"balance": null, "revoked": false}"#),
            change(Some(false), Some(None), None)
        );
        assert_eq!(
            parse(br#"{"over_capacity_rate": 0.25}"#),
            change(None, None, Some(0.25))
        );
        let other = parse(br#"{"other_client": {"slots": 2, "burst_secs": 30, "gap_secs": 60}}"#);
        assert_eq!(
            other.map(|c| c.other_client),
            Ok(Some(Some(OtherClientPlan {
                slots: 2,
                burst_secs: 30.0,
                gap_secs: 60.0,
                first_secs: 60.0,
            })))
        );
        assert_eq!(
            parse(br#"{"other_client": null}"#).map(|c| c.other_client),
            Ok(Some(None))
        );
        for bad in [
            &b"[]"[..],
            b"nope",
            br#"{"revoked": 1}"#,
            br#"{"balance": -1}"#,
            br#"{"balance": "3"}"#,
            br#"{"credits": 3}"#,
            br#"{"over_capacity_rate": 1.5}"#,
            br#"{"over_capacity_rate": true}"#,
            br#"{"other_client": {"slots": 5}}"#,
            br#"{"other_client": 2}"#,
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn prices_follow_the_unit_rule() {
        let video = |pro, duration| Spec::Video { pro, duration };
        assert_eq!(price_units(&video(false, 5)), 1.0);
        assert_eq!(price_units(&video(false, 10)), 2.0);
        assert_eq!(price_units(&video(true, 5)), 3.5);
        assert_eq!(price_units(&video(true, 10)), 7.0);
    }
}
