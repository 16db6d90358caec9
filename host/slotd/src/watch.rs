//! `slotd task watch ID`: a task's live progress from its event stream (SSE), redrawn in place
//! on a terminal and one line per change otherwise; resumes after a dropped connection from the
//! last event id, and ends with the task.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

/// One frame of a `text/event-stream` body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Frame {
    pub event: String,
    pub id: Option<String>,
    pub data: String,
}

/// Frames out of a streamed response body, as its chunks arrive.
pub struct Frames {
    resp: reqwest::Response,
    buf: String,
}

/// How long a stream may be silent (keep-alives included) before it counts as dropped.
pub const SILENCE: Duration = Duration::from_secs(45);

impl Frames {
    pub fn new(resp: reqwest::Response) -> Frames {
        Frames {
            resp,
            buf: String::new(),
        }
    }

    /// The next frame that carries an event (comment lines are keep-alives); `Ok(None)` when
    /// the server closed the stream.
    pub async fn next(&mut self) -> anyhow::Result<Option<Frame>> {
        loop {
            if let Some(at) = self.buf.find("\n\n") {
                let raw: String = self.buf.drain(..at + 2).collect();
                let frame = parse_frame(&raw);
                if !frame.event.is_empty() {
                    return Ok(Some(frame));
                }
                continue;
            }
            let chunk = tokio::time::timeout(SILENCE, self.resp.chunk())
                .await
                .map_err(|_| anyhow::anyhow!("the event stream was silent for {SILENCE:?}"))?
                .context("reading the event stream")?;
            let Some(chunk) = chunk else {
                return Ok(None);
            };
            self.buf
                .push_str(&String::from_utf8_lossy(&chunk).replace("\r\n", "\n"));
        }
    }
}

/// One frame's fields (`event:`, `id:`, `data:` lines; data lines joined by newlines).
pub fn parse_frame(raw: &str) -> Frame {
    let mut f = Frame::default();
    let mut data: Vec<&str> = Vec::new();
    for line in raw.lines() {
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "event" => f.event = value.to_string(),
            "id" => f.id = Some(value.to_string()),
            "data" => data.push(value),
            _ => {}
        }
    }
    f.data = data.join("\n");
    f
}

/// What the watcher knows of the task: each unit's latest status.
#[derive(Debug, Default)]
pub struct Progress {
    pub total: u32,
    units: BTreeMap<String, String>,
}

impl Progress {
    pub fn new(total: u32) -> Progress {
        Progress {
            total,
            units: BTreeMap::new(),
        }
    }

    /// Take one unit event (`{"unit_id", "to_status", …}`).
    pub fn apply(&mut self, event: &Value) {
        if let (Some(unit), Some(to)) = (event["unit_id"].as_str(), event["to_status"].as_str()) {
            self.units.insert(unit.to_string(), to.to_string());
        }
    }

    fn count(&self, status: &str) -> u32 {
        let n = self.units.values().filter(|s| *s == status).count();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// `[#####.....] 45/100 completed · 3 failed · 20 at the provider · 30 waiting`.
    pub fn line(&self) -> String {
        const WIDTH: u32 = 30;
        let done = self.count("completed");
        let failed = self.count("failed") + self.count("cancelled");
        let running = self.count("submitted") + self.count("succeeded") + self.count("finalizing");
        let seen = u32::try_from(self.units.len()).unwrap_or(u32::MAX);
        let waiting = self.count("pending") + self.total.saturating_sub(seen);
        let filled = if self.total == 0 {
            0
        } else {
            (u64::from(done + failed) * u64::from(WIDTH) / u64::from(self.total)) as u32
        };
        let bar: String = (0..WIDTH)
            .map(|i| if i < filled { '#' } else { '.' })
            .collect();
        format!(
            "[{bar}] {done}/{} completed · {failed} failed or cancelled · {running} at the provider · {waiting} waiting",
            self.total
        )
    }
}

/// Watch task `id` at `base` until it ends; returns its final status.
pub async fn watch(
    base: &str,
    key: Option<&str>,
    id: &str,
    out: &mut (impl Write + Send),
    redraw: bool,
) -> anyhow::Result<String> {
    let client = reqwest::Client::new();
    let auth = |rb: reqwest::RequestBuilder| match key {
        Some(k) => rb.bearer_auth(k),
        None => rb,
    };
    let view: Value = {
        let resp = auth(client.get(format!("{base}/v1/tasks/{id}")))
            .send()
            .await
            .with_context(|| format!("calling slotd at {base}"))?;
        let status = resp.status();
        let body: Value = resp.json().await.context("reading the task")?;
        if !status.is_success() {
            anyhow::bail!("slotd answered {status}: {}", body["detail"]);
        }
        body
    };
    let total = view["total"]
        .as_u64()
        .and_then(|n| u32::try_from(n).ok())
        .unwrap_or(0);
    let mut progress = Progress::new(total);
    let mut last_id: Option<String> = None;
    let mut last_line = String::new();
    let mut drops = 0u32;
    loop {
        let mut req = auth(client.get(format!("{base}/v1/tasks/{id}/events")))
            .header("accept", "text/event-stream");
        if let Some(last) = &last_id {
            req = req.header("last-event-id", last);
        }
        let resp = match req.send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => anyhow::bail!("slotd answered {} to the event stream", r.status()),
            Err(e) if drops < 10 => {
                drops += 1;
                writeln!(out, "\nconnection lost ({e}); resuming…")?;
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            Err(e) => return Err(e).context("the event stream"),
        };
        let mut frames = Frames::new(resp);
        loop {
            let frame = match frames.next().await {
                Ok(Some(f)) => f,
                Ok(None) | Err(_) if drops < 10 => {
                    drops += 1;
                    break;
                }
                Ok(None) => anyhow::bail!("the event stream kept closing"),
                Err(e) => return Err(e),
            };
            match frame.event.as_str() {
                "unit" => {
                    if let Ok(event) = serde_json::from_str::<Value>(&frame.data) {
                        progress.apply(&event);
                    }
                    last_id = frame.id.or(last_id);
                }
                "end" => {
                    let end: Value = serde_json::from_str(&frame.data).unwrap_or_default();
                    let status = end["status"].as_str().unwrap_or("ended").to_string();
                    draw(out, &progress.line(), &mut last_line, redraw)?;
                    writeln!(out, "\ntask {id} {status}")?;
                    return Ok(status);
                }
                "error" => anyhow::bail!("the event stream failed: {}", frame.data),
                _ => {}
            }
            draw(out, &progress.line(), &mut last_line, redraw)?;
        }
    }
}

/// Show `line` if it changed: in place on a terminal, as a new line otherwise.
fn draw(out: &mut impl Write, line: &str, last: &mut String, redraw: bool) -> std::io::Result<()> {
    if line == last {
        return Ok(());
    }
    if redraw {
        write!(out, "\r\x1b[2K{line}")?;
    } else {
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    *last = line.to_string();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn frames_parse_like_the_sse_spec() {
        let f = parse_frame("event: unit\nid: 0.0.7\ndata: {\"a\":1}\n\n");
        assert_eq!(
            f,
            Frame {
                event: "unit".into(),
                id: Some("0.0.7".into()),
                data: "{\"a\":1}".into()
            }
        );
        assert_eq!(parse_frame("data:x\ndata: y\n\n").data, "x\ny");
        assert_eq!(parse_frame(": keep-alive\n\n").event, "");
    }

    #[test]
    fn progress_counts_each_unit_at_its_latest_status() {
        let mut p = Progress::new(4);
        for (unit, to) in [
            ("u0", "submitted"),
            ("u0", "succeeded"),
            ("u0", "finalizing"),
            ("u0", "completed"),
            ("u1", "submitted"),
            ("u2", "failed"),
        ] {
            p.apply(&json!({"unit_id": unit, "to_status": to}));
        }
        let line = p.line();
        assert!(line.contains("1/4 completed"), "{line}");
        assert!(line.contains("1 failed or cancelled"), "{line}");
        assert!(line.contains("1 at the provider"), "{line}");
        assert!(line.contains("1 waiting"), "{line}");
        // Half of the bar: two of four units have ended.
        assert!(
            line.starts_with(&format!("[{}{}]", "#".repeat(15), ".".repeat(15))),
            "{line}"
        );
    }
}
