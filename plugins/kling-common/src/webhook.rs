//! Provider callbacks: Kling POSTs the bare task object on each status change. It becomes one
//! `callback-change` addressed by `task_id` and `external_task_id`; repeats are harmless (the
//! host ignores changes for units that already left `submitted`).
//!
//! Authenticity comes first from the host: the callback URL carries a token the host checks
//! before this code runs, and the host applies the changes only to the units the token names.
//! On top of that, where a `webhook_secret` is configured, the Standard Webhooks signature is
//! required (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 HMAC-SHA256 of
//! "{id}.{timestamp}.{body}">`), computed by the host's `signing.hmac-sha256` so the guest
//! never holds the secret (the host keys it with the decoded bytes of a `whsec_` value).
//!
//! Fail closed: only the host's "no such secret" answer (its message starts with `no secret `,
//! as the WIT documents) means "no secret configured, signatures not required". Any other
//! signing error refuses the callback.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use crate::task::{Success, TaskObject, outcome_for};
use crate::types::{CallbackChange, Host};

/// The secret webhooks are verified with.
pub const SECRET_NAME: &str = "webhook_secret";
/// Timestamps further than this from the guest's clock are refused (the scheme's advice).
pub const TOLERANCE_SECS: i64 = 5 * 60;

/// The start of the host's signing error for a secret that is not configured.
const UNCONFIGURED: &str = "no secret ";

/// What to do when signing with the webhook secret failed: a missing secret means signatures
/// are not required (`Ok(None)`); any other failure refuses the callback.
fn unconfigured_or_refuse(err: String) -> Result<Option<Vec<u8>>, String> {
    if err.starts_with(UNCONFIGURED) {
        Ok(None)
    } else {
        Err(format!(
            "callback refused: the webhook_secret could not be used to verify it ({err})"
        ))
    }
}

fn header<'h>(headers: &'h [(String, String)], name: &str) -> Option<&'h str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.trim())
}

/// Check the Standard Webhooks signature when a `webhook_secret` is configured.
pub fn verify(host: &dyn Host, headers: &[(String, String)], body: &[u8]) -> Result<(), String> {
    let id = header(headers, "webhook-id");
    let timestamp = header(headers, "webhook-timestamp");
    let signature = header(headers, "webhook-signature");
    let (Some(id), Some(timestamp), Some(signature)) = (id, timestamp, signature) else {
        // Unsigned: acceptable only when no secret is configured.
        let probe = host
            .hmac_sha256(SECRET_NAME, b"probe")
            .map(Some)
            .or_else(unconfigured_or_refuse)?;
        return match probe {
            None => Ok(()),
            Some(_) => Err(
                "unsigned callback refused: a webhook_secret is configured, so webhook-id, \
                 webhook-timestamp and webhook-signature are required"
                    .into(),
            ),
        };
    };
    let ts: i64 = timestamp
        .parse()
        .map_err(|_| format!("webhook-timestamp {timestamp:?} is not an integer"))?;
    let mut content = format!("{id}.{ts}.").into_bytes();
    content.extend_from_slice(body);
    let mac = match host
        .hmac_sha256(SECRET_NAME, &content)
        .map(Some)
        .or_else(unconfigured_or_refuse)?
    {
        Some(mac) => mac,
        // No secret configured: the signature cannot be checked and is not required.
        None => return Ok(()),
    };
    if let Some(now_ms) = host.wall_clock_ms() {
        let now = i64::try_from(now_ms / 1000).unwrap_or(i64::MAX);
        if (now - ts).abs() > TOLERANCE_SECS {
            return Err(format!(
                "webhook-timestamp {ts} is more than {TOLERANCE_SECS} s from now ({now})"
            ));
        }
    }
    check_signature(&mac, signature)
}

/// Whether any `v1,<base64>` entry of the header matches `mac` (constant time per entry).
pub fn check_signature(mac: &[u8], header: &str) -> Result<(), String> {
    let expected = STANDARD.encode(mac);
    let matched = header
        .split_whitespace()
        .filter_map(|s| s.strip_prefix("v1,"))
        .any(|candidate| constant_time_eq(candidate.as_bytes(), expected.as_bytes()));
    if matched {
        Ok(())
    } else {
        Err("webhook-signature does not match (wrong webhook_secret, or a forged callback)".into())
    }
}

fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// Verify and turn a callback body into changes. `success` maps a `succeed` task.
pub fn changes(
    host: &dyn Host,
    headers: &[(String, String)],
    body: &[u8],
    success: &dyn Fn(&TaskObject) -> Success,
) -> Result<Vec<CallbackChange>, String> {
    verify(host, headers, body)?;
    let value: Value =
        serde_json::from_slice(body).map_err(|e| format!("callback body is not JSON: {e}"))?;
    // Kling sends the bare task object; an enveloped one (`data`) is accepted too.
    let object = if value.get("task_id").is_some() {
        &value
    } else {
        value.get("data").unwrap_or(&value)
    };
    let task = TaskObject::parse(object).map_err(|e| format!("callback body: {e}"))?;
    let (outcome, state) = outcome_for(false, &task, None, success);
    Ok(vec![CallbackChange {
        provider_job_id: Some(task.task_id.clone()),
        idempotency_key: task.external_task_id.clone(),
        outcome,
        state,
        cost: task
            .cost
            .clone()
            .filter(|_| task.status == crate::task::Status::Succeed),
    }])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{FakeHost, hmac};

    const KEY_B64: &str = "dGVzdHNlY3JldHRlc3RzZWNyZXR0ZXN0c2VjcmV0MTI=";
    const BODY: &str = r#"{"id":"1234567890","status":"succeeded","message":"","create_time":1781080778802,"update_time":1781080794151}"#;

    #[test]
    fn official_test_vector_verifies_with_the_decoded_key() {
        let key = STANDARD.decode(KEY_B64).unwrap_or_default();
        let mac = hmac(&key, format!("9876543210.1781080794.{BODY}").as_bytes());
        assert_eq!(
            check_signature(&mac, "v1,UsKlJP00XoQyOn410NM9xv34sP+Gl0jnOO9Lcpr7NJ4="),
            Ok(())
        );
        assert!(check_signature(&mac, "v1,AAAA v2,x").is_err());
    }

    #[test]
    fn unsigned_callbacks_only_without_a_secret() {
        let body = br#"{"task_id":"9","task_status":"succeed","task_info":{"external_task_id":"k"},"task_result":{"videos":[{"url":"http://x/9.mp4","duration":"5"}]},"final_unit_deduction":"1"}"#;
        let open = FakeHost::default();
        let ok = changes(&open, &[], body, &crate::video::success).unwrap_or_default();
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].provider_job_id.as_deref(), Some("9"));
        assert_eq!(ok[0].idempotency_key.as_deref(), Some("k"));
        assert_eq!(ok[0].cost.as_deref(), Some("1"));
        let mut guarded = FakeHost::default();
        guarded
            .secrets
            .insert(SECRET_NAME.into(), b"whsec_x".to_vec());
        assert!(changes(&guarded, &[], body, &crate::video::success).is_err());
        let now = guarded.wall_clock_ms().unwrap_or(0) / 1000;
        let content = format!("m1.{now}.{}", String::from_utf8_lossy(body));
        let mac = hmac(b"whsec_x", content.as_bytes());
        let headers = vec![
            ("Webhook-Id".to_string(), "m1".to_string()),
            ("webhook-timestamp".to_string(), now.to_string()),
            (
                "webhook-signature".to_string(),
                format!("v1,{}", STANDARD.encode(mac)),
            ),
        ];
        assert!(changes(&guarded, &headers, body, &crate::video::success).is_ok());
        let mut stale = headers.clone();
        stale[1].1 = (now - 600).to_string();
        assert!(changes(&guarded, &stale, body, &crate::video::success).is_err());
    }

    #[test]
    fn a_signing_failure_other_than_no_secret_refuses_the_callback() {
        let body = br#"{"task_id":"9","task_status":"succeed","task_info":{"external_task_id":"k"},"task_result":{"videos":[{"url":"http://x/9.mp4","duration":"5"}]},"final_unit_deduction":"1"}"#;
        let broken = FakeHost {
            signing_error: Some(
                "secret \"webhook_secret\" of handler \"kling-video\": a whsec_ secret must be \
                 base64 after the prefix"
                    .into(),
            ),
            ..FakeHost::default()
        };
        let unsigned = changes(&broken, &[], body, &crate::video::success);
        assert!(
            unsigned
                .as_ref()
                .is_err_and(|e| e.contains("could not be used")),
            "{unsigned:?}"
        );
        let headers = vec![
            ("webhook-id".to_string(), "m1".to_string()),
            ("webhook-timestamp".to_string(), "1781080794".to_string()),
            ("webhook-signature".to_string(), "v1,AAAA".to_string()),
        ];
        let signed = changes(&broken, &headers, body, &crate::video::success);
        assert!(
            signed
                .as_ref()
                .is_err_and(|e| e.contains("could not be used")),
            "{signed:?}"
        );
        // The host's own "not configured" answer keeps meaning "no signature required".
        let open = FakeHost::default();
        assert!(changes(&open, &headers, body, &crate::video::success).is_ok());
    }
}
