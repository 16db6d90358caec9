//! End-to-end tests of the simulator over real HTTP on 127.0.0.1:0, with reqwest. Waiting is
//! polling with a deadline, never a fixed sleep.

mod faults;
mod lifecycle;
mod requests;
mod validation;

use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;

const DEADLINE: Duration = Duration::from_secs(8);
const IMAGE: &str = "https://example.com/frame.png";

async fn sim(opts: RunwayOptions) -> anyhow::Result<RunwaySimHandle> {
    spawn(RunwayOptions {
        listen: "127.0.0.1:0".parse()?,
        ..opts
    })
    .await
}

/// Options for fast tests: 1000x faster (a 5 s gen4_turbo clip takes 30–80 ms), no long tail.
fn fast() -> RunwayOptions {
    RunwayOptions {
        time_scale: 0.001,
        long_tail_rate: 0.0,
        ..RunwayOptions::default()
    }
}

/// Options where no task even starts RUNNING during a test (PENDING lasts 2 s or more).
fn frozen() -> RunwayOptions {
    RunwayOptions {
        time_scale: 1.0,
        ..RunwayOptions::default()
    }
}

struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
    version: Option<String>,
}

impl Client {
    fn new(handle: &RunwaySimHandle) -> anyhow::Result<Client> {
        Ok(Client {
            http: reqwest::Client::builder().no_proxy().build()?,
            base: handle.base_url().to_owned(),
            key: Some(API_KEY_DEFAULT.to_owned()),
            version: Some(RUNWAY_VERSION.to_owned()),
        })
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(key) = &self.key {
            req = req.bearer_auth(key);
        }
        if let Some(v) = &self.version {
            req = req.header(VERSION_HEADER, v);
        }
        req
    }

    /// Sends and reads the answer; an empty body reads as `null`.
    async fn send(&self, req: reqwest::RequestBuilder) -> anyhow::Result<(StatusCode, Value)> {
        let resp = req.send().await.context("sending")?;
        let status = resp.status();
        let bytes = resp.bytes().await.context("reading the body")?;
        if bytes.is_empty() {
            return Ok((status, Value::Null));
        }
        let v = serde_json::from_slice(&bytes)
            .with_context(|| format!("{status}: body is not JSON: {bytes:?}"))?;
        Ok((status, v))
    }

    async fn get(&self, path: &str) -> anyhow::Result<(StatusCode, Value)> {
        self.send(self.request(Method::GET, path)).await
    }

    async fn delete(&self, path: &str) -> anyhow::Result<(StatusCode, Value)> {
        self.send(self.request(Method::DELETE, path)).await
    }

    async fn post(&self, path: &str, body: &Value) -> anyhow::Result<(StatusCode, Value)> {
        self.send(self.request(Method::POST, path).json(body)).await
    }

    /// Creates and returns the task id, failing on any refusal.
    async fn create(&self, path: &str, body: &Value) -> anyhow::Result<String> {
        let (status, v) = self.post(path, body).await?;
        if status != StatusCode::OK {
            bail!("create at {path} refused: {status} {v}");
        }
        v["id"]
            .as_str()
            .map(str::to_owned)
            .context("create answer without id")
    }

    async fn task(&self, id: &str) -> anyhow::Result<(StatusCode, Value)> {
        self.get(&format!("/v1/tasks/{id}")).await
    }

    /// Polls the task until `done(status, body)` holds, or fails at the deadline.
    async fn wait_for(
        &self,
        id: &str,
        what: &str,
        done: impl Fn(StatusCode, &Value) -> bool,
    ) -> anyhow::Result<Value> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let (status, v) = self.task(id).await?;
            if done(status, &v) {
                return Ok(v);
            }
            if Instant::now() > deadline {
                bail!("task {id} did not become {what} in {DEADLINE:?}: {status} {v}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// Polls until the task has status `want`.
    async fn wait_status(&self, id: &str, want: &str) -> anyhow::Result<Value> {
        self.wait_for(id, want, |s, v| s == StatusCode::OK && v["status"] == want)
            .await
    }
}

/// Polls `cond` (on the handle's counters, say) until it holds, or fails at the deadline.
async fn wait_until(what: &str, cond: impl Fn() -> bool) -> anyhow::Result<()> {
    let deadline = Instant::now() + DEADLINE;
    while !cond() {
        if Instant::now() > deadline {
            bail!("{what} did not happen in {DEADLINE:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    Ok(())
}

/// A valid image-to-video body for `model` (its required keys only).
fn i2v(model: &str) -> Value {
    match model {
        "gen4.5" => json!({"model": model, "promptImage": IMAGE, "promptText": "a cat",
                           "ratio": "1280:720", "duration": 5}),
        "veo3" => json!({"model": model, "promptImage": IMAGE, "ratio": "1280:720", "duration": 8}),
        _ => json!({"model": model, "promptImage": IMAGE, "ratio": "1280:720"}),
    }
}

/// A valid text-to-video body for `model` (its required keys only).
fn t2v(model: &str) -> Value {
    match model {
        "gen4.5" | "veo3" => {
            let duration = if model == "veo3" { 8 } else { 5 };
            json!({"model": model, "promptText": "a cat", "ratio": "1280:720", "duration": duration})
        }
        _ => json!({"model": model, "promptText": "a cat", "ratio": "1280:720"}),
    }
}

/// `body` with `key` set to `value` (or removed when `value` is `None`).
fn with(mut body: Value, key: &str, value: Option<Value>) -> Value {
    if let Some(obj) = body.as_object_mut() {
        match value {
            Some(v) => {
                obj.insert(key.to_owned(), v);
            }
            None => {
                obj.remove(key);
            }
        }
    }
    body
}
