//! End-to-end tests of the simulator over real HTTP on 127.0.0.1:0, with reqwest. Waiting is
//! polling with a deadline, never a fixed sleep.

mod account;
mod lifecycle;
mod other_client;
mod requests;

use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::*;

const DEADLINE: Duration = Duration::from_secs(20);

fn now_secs() -> i64 {
    crate::clock::unix_secs_now()
}

async fn sim(opts: SimOptions) -> anyhow::Result<SimHandle> {
    start(SimOptions {
        listen: "127.0.0.1:0".parse()?,
        ..opts
    })
    .await
}

/// Options for fast tests: 2000x faster, no long tail.
fn fast() -> SimOptions {
    SimOptions {
        time_scale: 0.0005,
        long_tail_rate: 0.0,
        ..SimOptions::default()
    }
}

/// Options where nothing ends during a test.
fn frozen() -> SimOptions {
    SimOptions {
        time_scale: 1.0,
        ..SimOptions::default()
    }
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    fn new(handle: &SimHandle) -> anyhow::Result<Client> {
        Ok(Client {
            http: reqwest::Client::builder().no_proxy().build()?,
            base: handle.base_url().to_owned(),
            token: issue_token(ACCESS_KEY_DEFAULT, SECRET_KEY_DEFAULT, now_secs()),
        })
    }

    async fn raw(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, bytes::Bytes)> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("calling {path}"))?;
        Ok((resp.status(), resp.bytes().await?))
    }

    async fn get(&self, path: &str) -> anyhow::Result<(StatusCode, Value)> {
        let (status, body) = self.raw(reqwest::Method::GET, path, None).await?;
        Ok((
            status,
            serde_json::from_slice(&body)
                .with_context(|| format!("GET {path}: body is not JSON"))?,
        ))
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<(StatusCode, Value)> {
        let (status, bytes) = self.raw(reqwest::Method::POST, path, Some(&body)).await?;
        Ok((
            status,
            serde_json::from_slice(&bytes)
                .with_context(|| format!("POST {path}: body is not JSON"))?,
        ))
    }

    /// Creates and returns the task id, failing on any refusal.
    async fn create(&self, path: &str, body: Value) -> anyhow::Result<String> {
        let (status, v) = self.post(path, body).await?;
        if status != StatusCode::OK || v["code"] != 0 {
            bail!("create at {path} refused: {status} {v}");
        }
        v["data"]["task_id"]
            .as_str()
            .map(str::to_owned)
            .context("create answer without data.task_id")
    }

    /// Polls `path` until its task reaches `want`, or fails at the deadline.
    async fn wait_status(&self, path: &str, want: &str) -> anyhow::Result<Value> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let (status, v) = self.get(path).await?;
            if status != StatusCode::OK {
                bail!("GET {path}: {status} {v}");
            }
            if v["data"]["task_status"] == want {
                return Ok(v["data"].clone());
            }
            if Instant::now() > deadline {
                bail!("{path} did not reach {want} in {DEADLINE:?}: {v}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn video(prompt: &str, ext: &str) -> Value {
    json!({"model_name": "kling-v1-6", "prompt": prompt, "mode": "std", "duration": "5",
           "aspect_ratio": "16:9", "external_task_id": ext})
}
