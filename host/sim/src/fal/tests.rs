//! End-to-end tests of the fal simulator over real HTTP on 127.0.0.1:0, with reqwest. Waiting
//! is polling with a deadline, never a fixed sleep.

mod faults;
mod queueing;
mod requests;
mod webhooks;

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use axum::http::HeaderMap;
use parking_lot::Mutex;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::*;

const DEADLINE: Duration = Duration::from_secs(15);
const T2V: &str = "fal-ai/pika/v2.2/text-to-video";
const TURBO_I2V: &str = "fal-ai/pika/v2/turbo/image-to-video";
const IMAGE: &str = "https://example.com/frame.png";

async fn sim(opts: FalOptions) -> anyhow::Result<FalSimHandle> {
    spawn(FalOptions {
        listen: "127.0.0.1:0".parse()?,
        ..opts
    })
    .await
}

/// 1000x faster, no long tail: a 5 s 720p text-to-video runs 60–120 ms, dispatch 0.5–2 ms.
fn fast() -> FalOptions {
    FalOptions {
        time_scale: 0.001,
        long_tail_rate: 0.0,
        ..FalOptions::default()
    }
}

/// 100x faster: a text-to-video runs 0.6–1.2 s, long enough to act on a running request.
fn slowish() -> FalOptions {
    FalOptions {
        time_scale: 0.01,
        long_tail_rate: 0.0,
        ..FalOptions::default()
    }
}

/// 10x slower than real: nothing is dispatched for 5 s after its submit, so a test sees every
/// request still queued however loaded the machine.
fn frozen() -> FalOptions {
    FalOptions {
        time_scale: 10.0,
        ..FalOptions::default()
    }
}

/// 50x faster: a turbo image-to-video runs 0.3–0.7 s after a dispatch delay of 10–40 ms, so
/// a few quick submits all arrive before the first one ends.
fn brisk() -> FalOptions {
    FalOptions {
        time_scale: 0.02,
        long_tail_rate: 0.0,
        ..FalOptions::default()
    }
}

fn prompt() -> Value {
    json!({"prompt": "a fox in the snow"})
}

fn turbo_body() -> Value {
    json!({"prompt": "a fox in the snow", "image_url": IMAGE})
}

/// What a request got back.
struct Answer {
    status: StatusCode,
    headers: HeaderMap,
    /// The JSON body, or the text when it is not JSON.
    body: Value,
}

#[derive(Clone)]
struct Client {
    http: reqwest::Client,
    base: String,
    key: Option<String>,
}

impl Client {
    fn new(handle: &FalSimHandle) -> anyhow::Result<Client> {
        Ok(Client {
            http: reqwest::Client::builder().no_proxy().build()?,
            base: handle.base_url().to_owned(),
            key: Some(KEY_DEFAULT.to_owned()),
        })
    }

    fn with_key(&self, key: Option<&str>) -> Client {
        Client {
            key: key.map(str::to_owned),
            ..self.clone()
        }
    }

    /// `path_or_url` is a path on the simulator or an absolute URL.
    fn request(&self, method: Method, path_or_url: &str) -> reqwest::RequestBuilder {
        let url = if path_or_url.starts_with("http") {
            path_or_url.to_owned()
        } else {
            format!("{}{path_or_url}", self.base)
        };
        let mut req = self.http.request(method, url);
        if let Some(key) = &self.key {
            req = req.header("authorization", format!("Key {key}"));
        }
        req
    }

    async fn send(&self, req: reqwest::RequestBuilder) -> anyhow::Result<Answer> {
        let resp = req.send().await.context("sending")?;
        let status = resp.status();
        let headers = resp.headers().clone();
        let bytes = resp.bytes().await.context("reading the body")?;
        let body = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        Ok(Answer {
            status,
            headers,
            body,
        })
    }

    async fn get(&self, path: &str) -> anyhow::Result<Answer> {
        self.send(self.request(Method::GET, path)).await
    }

    async fn post(&self, path: &str, body: &Value) -> anyhow::Result<Answer> {
        self.send(self.request(Method::POST, path).json(body)).await
    }

    /// Submits to `model` and returns the answer, failing on any refusal.
    async fn submit(&self, model: &str, body: &Value) -> anyhow::Result<Value> {
        let a = self.post(&format!("/{model}"), body).await?;
        if a.status != StatusCode::OK {
            bail!("submit to {model} refused: {} {}", a.status, a.body);
        }
        Ok(a.body)
    }

    async fn status(&self, id: &str) -> anyhow::Result<Answer> {
        self.get(&format!("/fal-ai/pika/requests/{id}/status"))
            .await
    }

    async fn result(&self, id: &str) -> anyhow::Result<Answer> {
        self.get(&format!("/fal-ai/pika/requests/{id}")).await
    }

    async fn cancel(&self, id: &str) -> anyhow::Result<Answer> {
        self.send(self.request(Method::PUT, &format!("/fal-ai/pika/requests/{id}/cancel")))
            .await
    }

    /// Polls the status until it is `want`; returns that answer's body.
    async fn wait_status(&self, id: &str, want: &str) -> anyhow::Result<Value> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let a = self.status(id).await?;
            if a.body["status"] == want {
                return Ok(a.body);
            }
            if Instant::now() > deadline {
                bail!(
                    "{id} did not become {want} in {DEADLINE:?}: {} {}",
                    a.status,
                    a.body
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn id_of(answer: &Value) -> anyhow::Result<String> {
    answer["request_id"]
        .as_str()
        .map(str::to_owned)
        .with_context(|| format!("no request_id in {answer}"))
}

/// Polls `cond` until it holds, or fails at the deadline.
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

/// One delivery a [`Receiver`] got.
#[derive(Clone, Debug)]
struct Received {
    headers: HeaderMap,
    body: Vec<u8>,
}

/// A local webhook receiver: records every POST and answers `fail_first` of them 500.
struct Receiver {
    url: String,
    got: Arc<Mutex<Vec<Received>>>,
    _server: tokio::task::JoinHandle<()>,
}

impl Receiver {
    async fn start(fail_first: usize) -> anyhow::Result<Receiver> {
        use axum::routing::post;
        let got: Arc<Mutex<Vec<Received>>> = Arc::default();
        let seen = got.clone();
        let app = axum::Router::new().route(
            "/hook",
            post(move |headers: HeaderMap, body: axum::body::Bytes| {
                let seen = seen.clone();
                async move {
                    let mut all = seen.lock();
                    all.push(Received {
                        headers,
                        body: body.to_vec(),
                    });
                    if all.len() <= fail_first {
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR
                    } else {
                        axum::http::StatusCode::OK
                    }
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let url = format!("http://{}/hook", listener.local_addr()?);
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(Receiver {
            url,
            got,
            _server: server,
        })
    }

    fn received(&self) -> Vec<Received> {
        self.got.lock().clone()
    }

    /// The submit path for `model` with this receiver as `fal_webhook`.
    fn submit_path(&self, model: &str) -> String {
        let q: String = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("fal_webhook", &self.url)
            .finish();
        format!("/{model}?{q}")
    }
}
