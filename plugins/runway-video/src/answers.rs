//! Reading Runway's answers: error bodies (`{"error": …, "issues": [{code, path, message}]}`)
//! and task objects (`GET /v1/tasks/{id}`). Nothing here trusts the provider: every field is
//! optional until checked, and an unreadable answer is an error value, never a panic.

use serde_json::Value;
use slotd_sdk::{ProviderError, Response};

/// Characters of an error text kept in messages.
const EXCERPT_CHARS: usize = 300;
/// Issues listed in a message (a validation error may list many).
const MAX_ISSUES: usize = 5;

/// An error answer: the provider error it becomes, coded `http_<status>` unless the first
/// validation issue gives a code (e.g. `invalid_type`, `unrecognized_keys`).
pub fn error(r: &Response) -> ProviderError {
    let body: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
    let text = body
        .get("error")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| String::from_utf8_lossy(&r.body).trim().to_string());
    let issues: Vec<&Value> = body
        .get("issues")
        .and_then(Value::as_array)
        .map(|a| a.iter().collect())
        .unwrap_or_default();
    let code = issues
        .first()
        .and_then(|i| i.get("code"))
        .and_then(Value::as_str)
        .map_or_else(|| format!("http_{}", r.status), str::to_string);
    let mut message = format!("HTTP {}", r.status);
    if !text.is_empty() {
        message.push_str(": ");
        message.push_str(&excerpt(&text));
    }
    let listed: Vec<String> = issues.iter().take(MAX_ISSUES).map(|i| issue(i)).collect();
    if !listed.is_empty() {
        message.push_str(" — ");
        message.push_str(&listed.join("; "));
    }
    if issues.len() > MAX_ISSUES {
        message.push_str(&format!("; and {} more", issues.len() - MAX_ISSUES));
    }
    ProviderError::new(Some(&code), message)
}

/// One issue as `path: message`, the path written like `promptImage[0].uri`.
fn issue(v: &Value) -> String {
    let mut path = String::new();
    for segment in v
        .get("path")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match segment {
            Value::Number(n) => path.push_str(&format!("[{n}]")),
            Value::String(s) if path.is_empty() => path.push_str(s),
            Value::String(s) => path.push_str(&format!(".{s}")),
            _ => {}
        }
    }
    let message = v
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or("invalid");
    let mut text = if path.is_empty() {
        message.to_string()
    } else {
        format!("{path}: {message}")
    };
    if let Some(keys) = v.get("keys").and_then(Value::as_array) {
        let keys: Vec<&str> = keys.iter().filter_map(Value::as_str).collect();
        text.push_str(&format!(" ({})", keys.join(", ")));
    }
    excerpt(&text)
}

fn excerpt(s: &str) -> String {
    if s.chars().count() <= EXCERPT_CHARS {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(EXCERPT_CHARS).collect::<String>())
    }
}

/// A task's status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    Throttled,
    Pending,
    Running,
    Succeeded,
    Failed,
    Cancelled,
}

impl Status {
    fn parse(s: &str) -> Option<Status> {
        Some(match s {
            "THROTTLED" => Status::Throttled,
            "PENDING" => Status::Pending,
            "RUNNING" => Status::Running,
            "SUCCEEDED" => Status::Succeeded,
            "FAILED" => Status::Failed,
            "CANCELLED" => Status::Cancelled,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Status::Throttled => "THROTTLED",
            Status::Pending => "PENDING",
            Status::Running => "RUNNING",
            Status::Succeeded => "SUCCEEDED",
            Status::Failed => "FAILED",
            Status::Cancelled => "CANCELLED",
        }
    }

    /// Whether the task has ended (it holds no concurrency at Runway any more).
    pub fn is_terminal(self) -> bool {
        matches!(self, Status::Succeeded | Status::Failed | Status::Cancelled)
    }
}

/// A task object, as far as this handler reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Task {
    pub id: String,
    pub status: Status,
    /// `createdAt` (ISO 8601), when present.
    pub created_at: Option<String>,
    /// `progress` (0–1) of a running task.
    pub progress: Option<f64>,
    /// `output` URLs of a succeeded task (strings only).
    pub output: Vec<String>,
    /// `failure` text of a failed task.
    pub failure: Option<String>,
    /// `failureCode` of a failed task.
    pub failure_code: Option<String>,
    /// `cost.credits`, when present.
    pub credits: Option<serde_json::Number>,
}

/// Read a task object from a 2xx answer.
pub fn task(r: &Response) -> Result<Task, String> {
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| {
        format!(
            "Runway's task answer is not JSON ({} bytes): {e}",
            r.body.len()
        )
    })?;
    let id = v
        .get("id")
        .and_then(Value::as_str)
        .ok_or("Runway's task answer has no id")?
        .to_string();
    let raw_status = v.get("status").and_then(Value::as_str).unwrap_or_default();
    let status = Status::parse(raw_status)
        .ok_or_else(|| format!("Runway's task {id} has an unknown status {raw_status:?}"))?;
    let text = |key: &str| v.get(key).and_then(Value::as_str).map(str::to_string);
    Ok(Task {
        status,
        created_at: text("createdAt"),
        progress: v.get("progress").and_then(Value::as_f64),
        output: v
            .get("output")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default(),
        failure: text("failure"),
        failure_code: text("failureCode"),
        credits: credits(&v, "cost"),
        id,
    })
}

/// `<key>.credits` as a non-negative number.
pub fn credits(v: &Value, key: &str) -> Option<serde_json::Number> {
    match v.get(key)?.get("credits")? {
        Value::Number(n) if n.as_f64().is_some_and(|f| f >= 0.0) => Some(n.clone()),
        _ => None,
    }
}

/// The task id of a create answer (`{"id": "…"}`), and its `estimatedCost.credits` if sent.
pub fn created(r: &Response) -> Result<(String, Option<f64>), String> {
    let v: Value = serde_json::from_slice(&r.body).map_err(|e| {
        format!(
            "Runway's create answer is not JSON ({} bytes): {e}",
            r.body.len()
        )
    })?;
    let id = v
        .get("id")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|id| !id.is_empty())
        .ok_or("Runway's create answer has no task id")?;
    let estimate = credits(&v, "estimatedCost").and_then(|n| n.as_f64());
    Ok((id.to_string(), estimate))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(status: u16, body: Value) -> Response {
        Response::new(status, body.to_string())
    }

    #[test]
    fn validation_errors_name_the_code_and_the_paths() {
        let r = answer(
            400,
            json!({"error": "Validation of body failed", "issues": [
                {"code": "custom", "path": ["promptImage", 0, "uri"], "message": "Only HTTPS URLs are allowed"},
                {"code": "unrecognized_keys", "keys": ["foo", "bar"], "path": [], "message": "Unrecognized keys"}
            ], "docUrl": "https://docs.dev.runwayml.com/api"}),
        );
        let e = error(&r);
        assert_eq!(e.code.as_deref(), Some("custom"));
        assert_eq!(
            e.message,
            "HTTP 400: Validation of body failed — promptImage[0].uri: Only HTTPS URLs are \
             allowed; Unrecognized keys (foo, bar)"
        );
    }

    #[test]
    fn plain_errors_are_coded_by_status() {
        let e = error(&answer(401, json!({"error": "Invalid API key"})));
        assert_eq!(e.code.as_deref(), Some("http_401"));
        assert_eq!(e.message, "HTTP 401: Invalid API key");
        let e = error(&Response::new(503, "<html>busy</html>"));
        assert_eq!(e.message, "HTTP 503: <html>busy</html>");
        let e = error(&Response::new(502, ""));
        assert_eq!(e.message, "HTTP 502");
        let many: Vec<Value> = (0..8)
            .map(|i| json!({"code": "c", "path": [format!("k{i}")], "message": "m"}))
            .collect();
        let e = error(&answer(400, json!({"error": "x", "issues": many})));
        assert!(e.message.ends_with("k4: m; and 3 more"), "{}", e.message);
    }

    #[test]
    fn task_objects_are_read_without_trusting_them() {
        let t = task(&answer(
            200,
            json!({"id": "t1", "createdAt": "2026-08-11T06:12:01.171Z",
            "status": "SUCCEEDED", "output": ["https://cdn.test/v.mp4", 3], "cost": {"credits": 25}}),
        ));
        assert_eq!(
            t.as_ref().map(|t| t.output.clone()),
            Ok(vec!["https://cdn.test/v.mp4".to_string()])
        );
        assert_eq!(t.as_ref().map(|t| t.credits.clone()), Ok(Some(25.into())));
        assert_eq!(t.map(|t| t.status), Ok(Status::Succeeded));
        for (body, why) in [
            (json!({"status": "RUNNING"}), "no id"),
            (json!({"id": "t1", "status": "EXPLODED"}), "unknown status"),
            (json!({"id": "t1"}), "unknown status"),
        ] {
            let got = task(&answer(200, body)).err().unwrap_or_default();
            assert!(got.contains(why), "{got}");
        }
        assert!(task(&Response::new(200, "<html>")).is_err());
        let negative = json!({"cost": {"credits": -1}});
        assert_eq!(credits(&negative, "cost"), None);
    }

    #[test]
    fn create_answers_need_an_id() {
        let ok = answer(200, json!({"id": "t1", "estimatedCost": {"credits": 50}}));
        assert_eq!(created(&ok), Ok(("t1".into(), Some(50.0))));
        assert_eq!(
            created(&answer(200, json!({"id": "t2"}))),
            Ok(("t2".into(), None))
        );
        assert!(created(&answer(200, json!({"id": " "}))).is_err());
        assert!(created(&answer(200, json!({}))).is_err());
        assert!(created(&Response::new(200, "")).is_err());
    }
}
