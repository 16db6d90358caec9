//! `slotd plugin publish FILE`: send a handler component to a running slotd's API
//! (`POST /v1/handlers`) as a release, then (unless `--no-wait`) follow it until every process
//! of the cluster has loaded it, one line per change, naming any process that could not.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde_json::Value;

/// How often the releases are read while waiting.
const POLL: Duration = Duration::from_millis(500);

/// Where and how to publish.
pub struct PublishOptions<'a> {
    pub url: &'a str,
    pub key: Option<&'a str>,
    /// Wait this long for every process to load the release (`None`: do not wait).
    pub wait: Option<Duration>,
    /// The release takes over the provider jobs of the releases before it.
    pub takes_over: bool,
}

/// Publish `file`; returns the release's sha256.
pub async fn publish(file: &Path, opts: &PublishOptions<'_>) -> anyhow::Result<String> {
    let bytes = tokio::fs::read(file)
        .await
        .with_context(|| format!("reading {}", file.display()))?;
    let client = reqwest::Client::new();
    let base = opts.url.trim_end_matches('/');
    let auth = |rb: reqwest::RequestBuilder| match opts.key {
        Some(k) => rb.bearer_auth(k),
        None => rb,
    };
    let query = if opts.takes_over {
        "?takes_over=true"
    } else {
        ""
    };
    let resp = auth(client.post(format!("{base}/v1/handlers{query}")))
        .header(reqwest::header::CONTENT_TYPE, "application/wasm")
        .body(bytes)
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .with_context(|| format!("sending {} to {base}", file.display()))?;
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        let detail = body["detail"].as_str().unwrap_or("no detail");
        bail!("{} was refused ({status}): {detail}", file.display());
    }
    let release = &body["release"];
    let sha = release["sha256"].as_str().unwrap_or_default().to_string();
    let name = release["name"].as_str().unwrap_or_default().to_string();
    println!(
        "{} {} {} (sha256 {})",
        if body["published"] == "new" {
            "published"
        } else {
            "made current again:"
        },
        name,
        release["version"].as_str().unwrap_or_default(),
        sha.get(..12).unwrap_or(&sha)
    );
    if let Some(limit) = opts.wait {
        follow(&client, base, opts.key, &name, &sha, limit).await?;
    }
    Ok(sha)
}

/// Each process's word on release `sha`, from `GET /v1/handlers/{name}/releases`:
/// (process, state, reason) for every process heard from, `missing` for one with no word yet.
pub fn words(list: &Value, sha: &str) -> Vec<(String, String, Option<String>)> {
    let release = list["releases"]
        .as_array()
        .and_then(|rs| rs.iter().find(|r| r["sha256"] == sha));
    let mut out = Vec::new();
    for p in list["processes"].as_array().into_iter().flatten() {
        let process = p["process"].as_str().unwrap_or_default().to_string();
        let word = release
            .and_then(|r| r["processes"].as_array())
            .and_then(|ws| ws.iter().find(|w| w["process"] == process.as_str()));
        let state = word
            .and_then(|w| w["state"].as_str())
            .unwrap_or("missing")
            .to_string();
        let reason = word.and_then(|w| w["reason"].as_str()).map(str::to_string);
        out.push((process, state, reason));
    }
    out
}

/// Poll until every process heard from has loaded `sha` (or one failed, or `limit` passed).
async fn follow(
    client: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    name: &str,
    sha: &str,
    limit: Duration,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let mut shown = String::new();
    loop {
        let mut rb = client.get(format!("{base}/v1/handlers/{name}/releases"));
        if let Some(k) = key {
            rb = rb.bearer_auth(k);
        }
        let list: Value = rb
            .send()
            .await
            .context("reading the releases")?
            .json()
            .await
            .context("reading the releases")?;
        let words = words(&list, sha);
        let loaded = words.iter().filter(|(_, s, _)| s == "loaded").count();
        let line = format!("{loaded}/{} processes run it", words.len());
        if line != shown {
            println!("{line}");
            shown = line;
        }
        if let Some((process, _, reason)) = words.iter().find(|(_, s, _)| s == "failed") {
            bail!(
                "process {process} could not load it: {}",
                reason.as_deref().unwrap_or("no reason given")
            );
        }
        if !words.is_empty() && loaded == words.len() {
            return Ok(());
        }
        if started.elapsed() > limit {
            bail!("not every process runs it after {limit:?} ({shown})");
        }
        tokio::time::sleep(POLL).await;
    }
}
