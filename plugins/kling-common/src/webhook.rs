//! Provider callbacks: Kling POSTs the bare task object on each status change. It becomes one
//! `callback-change` addressed by `task_id` and `external_task_id`; repeats are harmless (the
//! host ignores changes for units that already left `submitted`).
//!
//! Authenticity comes first from the host: the callback URL carries a token the host checks
//! before this code runs, and the host applies the changes only to the units the token names.
//! On top of that, where a `webhook_secret` is configured, the Standard Webhooks signature is
//! required (the SDK's [`webhook::verify`], failing closed on any signing error other than
//! "no such secret").

use serde_json::Value;
use slotd_sdk::{CallbackChange, Host, webhook};

use crate::task::{Success, TaskObject, outcome_for};

/// The secret webhooks are verified with.
pub const SECRET_NAME: &str = "webhook_secret";

/// Verify and turn a callback body into changes. `success` maps a `succeed` task.
pub fn changes(
    host: &dyn Host,
    headers: &[(String, String)],
    body: &[u8],
    success: &dyn Fn(&TaskObject) -> Success,
) -> Result<Vec<CallbackChange>, String> {
    webhook::verify(host, SECRET_NAME, headers, body)?;
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
    use base64::Engine as _;
    use base64::engine::general_purpose::STANDARD;
    use slotd_sdk::testing::{ScriptedHost, hmac_sha256};

    use super::*;

    const BODY: &[u8] = br#"{"task_id":"9","task_status":"succeed","task_info":{"external_task_id":"k"},"task_result":{"videos":[{"url":"http://x/9.mp4","duration":"5"}]},"final_unit_deduction":"1"}"#;

    fn video(
        host: &ScriptedHost,
        headers: &[(String, String)],
    ) -> Result<Vec<CallbackChange>, String> {
        changes(host, headers, BODY, &crate::video::success)
    }

    #[test]
    fn unsigned_callbacks_only_without_a_secret() {
        let ok = video(&ScriptedHost::new(), &[]).unwrap_or_default();
        assert_eq!(ok.len(), 1);
        assert_eq!(ok[0].provider_job_id.as_deref(), Some("9"));
        assert_eq!(ok[0].idempotency_key.as_deref(), Some("k"));
        assert_eq!(ok[0].cost.as_deref(), Some("1"));
        let guarded = ScriptedHost::new().with_secret(SECRET_NAME, "whsec_x");
        assert!(video(&guarded, &[]).is_err());
        let now = guarded.wall_clock_ms().unwrap_or(0) / 1000;
        let content = format!("m1.{now}.{}", String::from_utf8_lossy(BODY));
        let mac = hmac_sha256(b"whsec_x", content.as_bytes());
        let headers = vec![
            ("Webhook-Id".to_string(), "m1".to_string()),
            ("webhook-timestamp".to_string(), now.to_string()),
            (
                "webhook-signature".to_string(),
                format!("v1,{}", STANDARD.encode(mac)),
            ),
        ];
        assert!(video(&guarded, &headers).is_ok());
        let mut stale = headers.clone();
        stale[1].1 = (now - 600).to_string();
        assert!(video(&guarded, &stale).is_err());
    }

    #[test]
    fn a_signing_failure_other_than_no_secret_refuses_the_callback() {
        let broken = ScriptedHost::new().with_signing_error(
            "secret \"webhook_secret\" of handler \"kling-video\": a whsec_ secret must be \
             base64 after the prefix",
        );
        let unsigned = video(&broken, &[]);
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
        let signed = video(&broken, &headers);
        assert!(
            signed
                .as_ref()
                .is_err_and(|e| e.contains("could not be used")),
            "{signed:?}"
        );
        // The host's own "not configured" answer keeps meaning "no signature required".
        assert!(video(&ScriptedHost::new(), &headers).is_ok());
    }
}
