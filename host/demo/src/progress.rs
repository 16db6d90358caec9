//! The demo's live progress: each pool's busy slots and each task's units, redrawn in place on
//! a terminal (every 5 s otherwise), until every task has ended or the demo is interrupted.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Submitted, TENANTS, get_json};

/// What the progress display watches.
pub(crate) struct Watch<'a> {
    pub client: &'a reqwest::Client,
    /// The embedded slotd's base URL.
    pub base: &'a str,
    pub tasks: &'a [Submitted],
    pub started: Instant,
    /// Cancelled when the demo is asked to stop.
    pub interrupted: &'a tokio_util::sync::CancellationToken,
    /// The demo's working directory, named when it is interrupted.
    pub dir: &'a Path,
}

impl Watch<'_> {
    /// Show the progress until every task has ended (or the demo is interrupted); each task's
    /// last view, in the tasks' order.
    pub async fn until_done(&self) -> anyhow::Result<Vec<Value>> {
        let tty = std::io::stdout().is_terminal();
        let mut drawn = 0usize;
        let mut last_print = Instant::now() - Duration::from_secs(60);
        loop {
            let (views, pools) = self.read().await?;
            let done = views.iter().all(|v| {
                matches!(
                    v["status"].as_str(),
                    Some("completed" | "failed" | "cancelled")
                )
            });
            if tty || last_print.elapsed() >= Duration::from_secs(5) || done {
                let mut lines = vec![format!(
                    "elapsed {:>5.1}s",
                    self.started.elapsed().as_secs_f64()
                )];
                lines.extend(pool_lines(&pools));
                lines.extend(task_lines(self.tasks, &views));
                drawn = draw(&lines, tty, drawn)?;
                last_print = Instant::now();
            }
            if done {
                return Ok(views);
            }
            if self.interrupted.is_cancelled() {
                println!(
                    "\ninterrupted; the work is safe in {} and resumes on the next `slotd serve` there",
                    self.dir.display()
                );
                return Ok(views);
            }
            tokio::time::sleep(Duration::from_millis(if tty { 250 } else { 1000 })).await;
        }
    }

    /// Every task's view and the pools (`GET /v1/pools`).
    async fn read(&self) -> anyhow::Result<(Vec<Value>, Value)> {
        let (client, base) = (self.client, self.base);
        let mut views = Vec::new();
        for t in self.tasks {
            views.push(get_json(client, &format!("{base}/v1/tasks/{}", t.id), t.key).await?);
        }
        let pools = get_json(client, &format!("{base}/v1/pools"), TENANTS[0].1).await?;
        Ok((views, pools))
    }
}

/// One line per pool: its busy slots, or the units a route's pool holds waiting for a target.
fn pool_lines(pools: &Value) -> Vec<String> {
    let width = pools
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["name"].as_str())
        .map(str::len)
        .max()
        .unwrap_or(14);
    let mut lines = Vec::new();
    for p in pools.as_array().into_iter().flatten() {
        // A route's units wait in `route:NAME` until a target's pool binds them.
        if let Some(r) = p["name"]
            .as_str()
            .and_then(slotd_core::model::route_of_pool)
        {
            lines.push(format!(
                "  route {r:<width$} {:>2} units waiting for a target with room",
                p["units"]["pending"].as_u64().unwrap_or(0)
            ));
            continue;
        }
        let (used, max) = (
            p["used"].as_u64().unwrap_or(0),
            p["max_slots"].as_u64().unwrap_or(0),
        );
        lines.push(format!(
            "  pool {:<width$} {} {used:>2}/{max:<2} slots busy",
            p["name"].as_str().unwrap_or("?"),
            bar(used, max, 20)
        ));
    }
    lines
}

/// One line per task: its completed units, status and message.
fn task_lines(tasks: &[Submitted], views: &[Value]) -> Vec<String> {
    tasks
        .iter()
        .zip(views)
        .map(|(t, v)| {
            let (c, n) = (
                v["completed"].as_u64().unwrap_or(0),
                v["total"].as_u64().unwrap_or(u64::from(t.units)),
            );
            format!(
                "  {:<44} {} {c:>2}/{n:<2} {:<9} {}",
                t.label,
                bar(c, n, 24),
                v["status"].as_str().unwrap_or("?"),
                v["message"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// Print `lines`, over the `drawn` lines printed last on a terminal; the lines now drawn.
fn draw(lines: &[String], tty: bool, drawn: usize) -> std::io::Result<usize> {
    let mut out = std::io::stdout().lock();
    if tty && drawn > 0 {
        write!(out, "\x1b[{drawn}A")?;
    }
    for l in lines {
        if tty {
            writeln!(out, "\x1b[2K{l}")?;
        } else {
            writeln!(out, "{l}")?;
        }
    }
    out.flush()?;
    Ok(lines.len())
}

fn bar(done: u64, total: u64, width: usize) -> String {
    let filled = if total == 0 {
        width
    } else {
        ((done as f64 / total as f64) * width as f64).round() as usize
    };
    format!(
        "[{}{}]",
        "#".repeat(filled.min(width)),
        ".".repeat(width - filled.min(width))
    )
}
