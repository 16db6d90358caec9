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
    /// Roll it out in stages (`10,25,100`) instead of making it current at once.
    pub rollout: Option<&'a str>,
    /// With `rollout`: follow it until it is promoted or rolled back (exit status 1 then).
    pub watch: bool,
    /// With `rollout`: candidate units ended before a stage is judged.
    pub min_units: Option<u32>,
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
    let mut query: Vec<(&str, String)> = Vec::new();
    if opts.takes_over {
        query.push(("takes_over", "true".into()));
    }
    if let Some(stages) = opts.rollout {
        query.push(("rollout", stages.to_string()));
    }
    if let Some(n) = opts.min_units {
        query.push(("min_units", n.to_string()));
    }
    let resp = auth(client.post(format!("{base}/v1/handlers")))
        .query(&query)
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
    if opts.watch && !body["rollout"].is_null() {
        let id = body["rollout"]["id"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        watch_rollout(&client, base, opts.key, &name, &id).await?;
    }
    Ok(sha)
}

/// A rollout's progress as one line: a bar over its stages, the stage, its share, its state.
pub fn rollout_line(r: &Value) -> String {
    let stages: Vec<u64> = r["stages"]
        .as_array()
        .map(|s| s.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    let stage = r["stage"].as_u64().unwrap_or(0) as usize;
    let state = r["state"].as_str().unwrap_or("?");
    let done = if state == "promoted" {
        stages.len()
    } else {
        stage
    };
    let bar: String = (0..stages.len())
        .map(|i| {
            if i < done {
                '█'
            } else if i == stage {
                '▒'
            } else {
                '░'
            }
        })
        .collect();
    let share = stages.get(stage).copied().unwrap_or(100);
    let mut line = format!(
        "[{bar}] stage {} of {} ({share} % of new units): {state}",
        stage + 1,
        stages.len()
    );
    if let Some(reason) = r["reason"].as_str() {
        line.push_str(&format!(" — {reason}"));
    }
    line
}

/// Print the rollout's moves until it ends; an error when it was rolled back.
async fn watch_rollout(
    client: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    name: &str,
    id: &str,
) -> anyhow::Result<()> {
    let mut shown = String::new();
    loop {
        let list = releases_of(client, base, key, name).await?;
        let Some(r) = list["rollouts"]
            .as_array()
            .and_then(|rs| rs.iter().find(|r| r["id"] == id))
        else {
            bail!("rollout {id} is gone");
        };
        let line = rollout_line(r);
        if line != shown {
            println!("{line}");
            shown = line;
        }
        match r["state"].as_str() {
            Some("promoted") => return Ok(()),
            Some("rolled_back") => bail!("the rollout was rolled back"),
            _ => {}
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `slotd handler promote|rollback|pause|resume NAME`: act on a rollout in progress.
pub async fn rollout_action(
    url: &str,
    key: Option<&str>,
    name: &str,
    action: &str,
) -> anyhow::Result<()> {
    let client = reqwest::Client::new();
    let base = url.trim_end_matches('/');
    let mut rb = client
        .post(format!("{base}/v1/handlers/{name}/rollout"))
        .json(&serde_json::json!({ "action": action }));
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    let resp = rb
        .send()
        .await
        .with_context(|| format!("reaching {base}"))?;
    let status = resp.status();
    let body: Value = resp.json().await.unwrap_or(Value::Null);
    if !status.is_success() {
        bail!(
            "{action} refused ({status}): {}",
            body["detail"].as_str().unwrap_or("no detail")
        );
    }
    println!("{}", rollout_line(&body));
    Ok(())
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

/// `GET {base}/v1/handlers/{name}/releases`: the releases, each process's word, the rollouts.
async fn releases_of(
    client: &reqwest::Client,
    base: &str,
    key: Option<&str>,
    name: &str,
) -> anyhow::Result<Value> {
    let mut rb = client.get(format!("{base}/v1/handlers/{name}/releases"));
    if let Some(k) = key {
        rb = rb.bearer_auth(k);
    }
    rb.send()
        .await
        .context("reading the releases")?
        .json()
        .await
        .context("reading the releases")
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
        let list = releases_of(client, base, key, name).await?;
        let words = words(&list, sha);
        // A rollout's candidate runs as a canary.
        let loaded = words
            .iter()
            .filter(|(_, s, _)| s == "loaded" || s == "canary")
            .count();
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
