//! The deadline terms of `POST /v1/tasks/{type}`: `deadline` and `start_by` (RFC 3339 times)
//! and `deadline_policy` (`refuse`, the default, or `best_effort`). See `scheduler/deadlines.rs`
//! for what the scheduler does with them.

use serde_json::{Map, Value};

use super::error::ApiError;
use slotd_store::TaskTerms;

/// Read the terms out of the body's fields, naming the offending one: a wrong type is 400, a
/// value that is no time (or an unknown policy, or a policy without a time) is 422.
pub fn parse(fields: &mut Map<String, Value>) -> Result<TaskTerms, ApiError> {
    let deadline_at = time(fields, "deadline")?;
    let start_by = time(fields, "start_by")?;
    let best_effort = match fields.remove("deadline_policy") {
        None | Some(Value::Null) => None,
        Some(Value::String(p)) if p == "refuse" => Some(false),
        Some(Value::String(p)) if p == "best_effort" => Some(true),
        Some(Value::String(p)) => {
            return Err(ApiError::invalid_field(
                "deadline_policy",
                format!("deadline_policy {p:?} is not one of \"refuse\", \"best_effort\""),
            ));
        }
        Some(_) => {
            return Err(ApiError::bad_field(
                "deadline_policy",
                "deadline_policy must be a string",
            ));
        }
    };
    if best_effort.is_some() && deadline_at.is_none() && start_by.is_none() {
        return Err(ApiError::invalid_field(
            "deadline_policy",
            "deadline_policy needs a deadline or start_by to apply to",
        ));
    }
    if let (Some(d), Some(s)) = (deadline_at, start_by)
        && s > d
    {
        return Err(ApiError::invalid_field(
            "start_by",
            "start_by is after the deadline",
        ));
    }
    Ok(TaskTerms {
        deadline_at,
        start_by,
        best_effort: best_effort.unwrap_or(false),
    })
}

/// Refuse terms already missed at `now` (a client's clock or arithmetic is wrong; nothing
/// could be scheduled for them).
pub fn check_not_past(terms: &TaskTerms, now: i64) -> Result<(), ApiError> {
    for (field, at) in [
        ("deadline", terms.deadline_at),
        ("start_by", terms.start_by),
    ] {
        if let Some(at) = at
            && at <= now
        {
            return Err(ApiError::invalid_field(
                field,
                format!(
                    "{field} {} is not in the future (now is {})",
                    rfc3339(at),
                    rfc3339(now)
                ),
            ));
        }
    }
    Ok(())
}

/// Unix ms as RFC 3339 (UTC, milliseconds).
pub fn rfc3339(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map_or_else(
        || ms.to_string(),
        |t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
    )
}

fn time(fields: &mut Map<String, Value>, field: &str) -> Result<Option<i64>, ApiError> {
    let text = match fields.remove(field) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::String(t)) => t,
        Some(_) => {
            return Err(ApiError::bad_field(
                field,
                format!("{field} must be an RFC 3339 time string like \"2026-12-01T18:00:00Z\""),
            ));
        }
    };
    let at = chrono::DateTime::parse_from_rfc3339(&text).map_err(|e| {
        ApiError::invalid_field(
            field,
            format!("{field} {text:?} is not an RFC 3339 time like \"2026-12-01T18:00:00Z\": {e}"),
        )
    })?;
    let ms = at.timestamp_millis();
    if !(0..slotd_core::model::NO_DEADLINE).contains(&ms) {
        return Err(ApiError::invalid_field(
            field,
            format!("{field} {text:?} is before 1970"),
        ));
    }
    Ok(Some(ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_json(body: &str) -> Result<TaskTerms, (u16, Option<String>)> {
        let Value::Object(mut fields) = serde_json::from_str(body).expect("test JSON") else {
            panic!("test body is an object");
        };
        parse(&mut fields).map_err(|e| e.status_and_field())
    }

    #[test]
    fn times_with_offsets_and_policies() {
        let t = parse_json(
            r#"{"deadline":"2026-12-01T20:00:00+02:00","start_by":"2026-12-01T17:30:00Z",
                "deadline_policy":"best_effort"}"#,
        )
        .expect("valid");
        assert_eq!(t.deadline_at, Some(1_796_148_000_000));
        assert_eq!(t.start_by, Some(1_796_146_200_000));
        assert!(t.best_effort);
        assert_eq!(parse_json("{}").expect("none"), TaskTerms::default());
        assert_eq!(
            parse_json(r#"{"deadline":"tomorrow"}"#),
            Err((422, Some("deadline".into())))
        );
        assert_eq!(
            parse_json(r#"{"deadline":17}"#),
            Err((400, Some("deadline".into())))
        );
        assert_eq!(
            parse_json(r#"{"deadline_policy":"best_effort"}"#),
            Err((422, Some("deadline_policy".into())))
        );
        assert_eq!(
            parse_json(r#"{"deadline":"2026-12-01T20:00:00Z","deadline_policy":"maybe"}"#),
            Err((422, Some("deadline_policy".into())))
        );
        assert_eq!(
            parse_json(r#"{"deadline":"2026-12-01T20:00:00Z","start_by":"2026-12-01T21:00:00Z"}"#),
            Err((422, Some("start_by".into())))
        );
        let past = parse_json(r#"{"deadline":"2026-12-01T20:00:00Z"}"#).expect("valid");
        assert!(
            check_not_past(&past, 1_796_155_200_000).is_err(),
            "exactly now is past"
        );
        assert!(check_not_past(&past, 1_796_155_199_999).is_ok());
    }
}
