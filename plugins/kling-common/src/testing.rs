//! Test helpers: the SDK's scripted host configured for Kling, and Kling's envelope.

use slotd_sdk::testing::{ScriptedHost, json_answer};
use slotd_sdk::{HttpError, Request, Response};

/// A host configured for Kling (`base_url`, `access_key`, `secret_key`) answering with `f`.
pub fn kling_host(
    f: impl FnMut(&Request) -> Result<Response, HttpError> + 'static,
) -> ScriptedHost {
    ScriptedHost::new()
        .with_config("base_url", "http://kling.test/")
        .with_config("access_key", "AK")
        .with_secret("secret_key", "SK")
        .on_any(f)
}

/// A Kling envelope answer.
pub fn kling(
    status: u16,
    code: i64,
    message: &str,
    data: serde_json::Value,
) -> Result<Response, HttpError> {
    let body =
        serde_json::json!({"code": code, "message": message, "request_id": "r", "data": data});
    json_answer(status, &body)
}
