//! How honest `estimated_completion_at` is (issue 13): the Kling simulator with the real handler
//! and an embedded slotd (callbacks on), four video tasks of 40, 20, 12 and 6 shots submitted
//! together onto the 20-slot pool, a fifth of 10 shots a little later; every task's view read
//! every 250 ms until it completes. Each estimate is compared with when the task really
//! completed (the view's `updated_at` once `completed`): the median absolute error in seconds of
//! the simulation's clock (time × `SLOTD_BENCH_TIME_SCALE`, 0.1 by default, so a 60 s job takes
//! 6 s here), and the median error relative to the time that was left when it was made.
//! Estimates exist once some jobs ended (the pool's durations are learned, not guessed); the
//! number of samples is printed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use slotd::sim::SimOptions;

use crate::kling::{Deployment, Running, start};
use crate::report::{Better, Report, Target};

/// (task id, when sampled, the estimated completion), Unix ms.
type Sample = (String, i64, i64);

async fn create(client: &reqwest::Client, base: &str, shots: usize) -> anyhow::Result<String> {
    let shots: Vec<Value> = (0..shots)
        .map(|i| json!({"prompt": format!("shot {i}")}))
        .collect();
    let resp: Value = client
        .post(format!("{base}/v1/tasks/video"))
        .json(&json!({"payload": {"model_name": "kling-v1-6", "mode": "std", "duration": "5", "shots": shots}}))
        .send()
        .await?
        .json()
        .await?;
    resp["task_id"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| anyhow::anyhow!("no task id: {resp}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

async fn run_one(scale: f64) -> anyhow::Result<(Vec<f64>, Vec<f64>, f64)> {
    let dir = tempfile::TempDir::new()?;
    let sim = slotd::sim::start(SimOptions {
        listen: "127.0.0.1:0".parse()?,
        concurrency: 20,
        time_scale: scale,
        seed: 2027,
        access_key: "AK".into(),
        secret_key: "SK".into(),
        ..SimOptions::default()
    })
    .await?;
    let Some((base, running)) = start(Deployment::Embedded, dir.path(), &sim, scale, true).await?
    else {
        anyhow::bail!("embedded slotd did not start");
    };
    let client = reqwest::Client::new();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for shots in [40, 20, 12, 6] {
        tasks.push(create(&client, &base, shots).await?);
    }
    let mut late = false;
    let mut samples: Vec<Sample> = Vec::new();
    let mut done: BTreeMap<String, i64> = BTreeMap::new();
    while done.len() < tasks.len() + usize::from(!late) {
        if !late && started.elapsed() > Duration::from_secs_f64(300.0 * scale) {
            tasks.push(create(&client, &base, 10).await?);
            late = true;
        }
        for id in &tasks {
            if done.contains_key(id) {
                continue;
            }
            let v: Value = client
                .get(format!("{base}/v1/tasks/{id}"))
                .send()
                .await?
                .json()
                .await?;
            match v["status"].as_str() {
                Some("completed") => {
                    done.insert(id.clone(), v["updated_at"].as_i64().unwrap_or(0));
                }
                Some("failed" | "cancelled") => anyhow::bail!("task {id} ended {}", v["status"]),
                _ => {
                    if let Some(eta) = v["estimated_completion_at"].as_i64() {
                        let now = std::time::SystemTime::now()
                            .duration_since(std::time::UNIX_EPOCH)?
                            .as_millis() as i64;
                        samples.push((id.clone(), now, eta));
                    }
                }
            }
        }
        if started.elapsed() > Duration::from_secs(900) {
            anyhow::bail!("the run did not finish");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let wall = started.elapsed().as_secs_f64();
    if let Running::Embedded { stop, server } = running {
        stop.send(()).ok();
        server.await??;
    }
    let mut abs = Vec::new();
    let mut rel = Vec::new();
    for (id, at, eta) in samples {
        let Some(&end) = done.get(&id) else { continue };
        let left = (end - at).max(1) as f64;
        let err = (eta - end).abs() as f64;
        // In the provider's own time: the simulation runs `scale` times faster.
        abs.push(err / 1000.0 / scale);
        rel.push(err / left);
    }
    Ok((abs, rel, wall))
}

pub async fn run(report: &mut Report) {
    let scale: f64 = std::env::var("SLOTD_BENCH_TIME_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0.1);
    eprintln!("eta: 5 Kling video tasks (88 shots) on 20 slots at time x{scale}, callbacks…");
    let (abs, rel, wall) = run_one(scale).await.expect("eta run");
    eprintln!(
        "eta: {} estimates over {wall:.1} s; 90th percentile absolute error {:.1} s",
        abs.len(),
        {
            let mut a = abs.clone();
            a.sort_by(f64::total_cmp);
            a.get(a.len() * 9 / 10).copied().unwrap_or(f64::NAN)
        }
    );
    report.add(
        "eta_median_abs_error_s",
        "sqlite",
        median(abs),
        "s",
        Target::None(Better::Lower),
    );
    report.add(
        "eta_median_rel_error",
        "sqlite",
        median(rel),
        "ratio",
        Target::AtMost(0.25),
    );
}
