//! The Grafana dashboard in the repository charts what slotd exports (docs/operations.md):
//! every metric its queries name is one slotd records, and those a plain run records are in
//! `/metrics` after one, histograms with their buckets.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::support::*;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the workspace")
        .to_path_buf()
}

/// The metric names in `text` (`slotd_…`), a histogram's `_bucket`/`_sum`/`_count` series
/// counted as the histogram.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(at) = text[i..].find("slotd_") {
        let start = i + at;
        let mut end = start;
        while end < bytes.len()
            && (bytes[end].is_ascii_lowercase()
                || bytes[end] == b'_'
                || bytes[end].is_ascii_digit())
        {
            end += 1;
        }
        let name = &text[start..end];
        let name = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(name);
        out.insert(name.to_string());
        i = end;
    }
    out
}

/// Every query of every panel.
fn dashboard_queries() -> Vec<String> {
    let path = repo().join("deploy/grafana/dashboards/slotd.json");
    let text = std::fs::read_to_string(&path).expect("the dashboard");
    let dash: Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut out = Vec::new();
    for panel in dash["panels"].as_array().expect("panels") {
        for t in panel["targets"].as_array().into_iter().flatten() {
            out.push(t["expr"].as_str().expect("expr").to_string());
        }
    }
    out
}

/// The `"slotd_…"` metric names recorded somewhere in the host's source.
fn recorded_in_source() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut dirs: Vec<PathBuf> = ["core", "store", "runtime", "server"]
        .iter()
        .map(|c| repo().join("host").join(c).join("src"))
        .collect();
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).expect("source dir").flatten() {
            let p = entry.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                let text = std::fs::read_to_string(&p).unwrap_or_default();
                for line in text.lines().filter(|l| l.contains("\"slotd_")) {
                    names.extend(metric_names(line));
                }
            }
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_charts_what_slotd_exports() {
    let queries = dashboard_queries();
    assert!(queries.len() >= 15, "{} queries", queries.len());
    let charted: BTreeSet<String> = queries.iter().flat_map(|q| metric_names(q)).collect();
    let recorded = recorded_in_source();
    let unknown: Vec<&String> = charted.difference(&recorded).collect();
    assert!(
        unknown.is_empty(),
        "the dashboard charts metrics slotd never records: {unknown:?}"
    );

    // A plain run records the core of it.
    let m = Manual::start(2, 100).await;
    let id = m.submit("fixture", json!({"count": 3, "polls": 1})).await;
    m.run_until(&["fixture"], 200, async |m| {
        m.task(&id).await["status"] == "completed"
    })
    .await;
    let (status, _) = api_call(&m.services, "GET", "/v1/pools", None).await;
    assert_eq!(status, 200);
    let text = m
        .services
        .prometheus
        .as_ref()
        .expect("the Prometheus recorder")
        .render();
    let exported = metric_names(&text);
    for name in [
        "slotd_pool_slots_used",
        "slotd_pool_slots_max",
        "slotd_pool_effective_max",
        "slotd_pool_utilization",
        "slotd_unit_transitions_total",
        "slotd_provider_job_seconds",
        "slotd_unit_end_to_end_seconds",
        "slotd_provider_http_seconds",
        "slotd_tick_seconds",
        "slotd_handler_call_seconds",
        "slotd_api_requests_total",
        "slotd_tasks_created_total",
    ] {
        assert!(charted.contains(name), "{name} is not on the dashboard");
        assert!(
            exported.contains(name),
            "{name} is not in /metrics:\n{text}"
        );
    }
    for histogram in [
        "slotd_provider_job_seconds",
        "slotd_unit_end_to_end_seconds",
    ] {
        assert!(
            text.contains(&format!("{histogram}_bucket")),
            "{histogram} has no buckets"
        );
    }
    m.check().await;
}

/// After a plain run, every series in `/metrics` has its `# HELP` line (the descriptions are
/// `slotd_core::telemetry::SERIES`, given to each instance's registry; docs/metrics.md).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_exported_series_has_help() {
    let m = Manual::start(2, 100).await;
    let id = m.submit("fixture", json!({"count": 2, "polls": 1})).await;
    m.run_until(&["fixture"], 200, async |m| {
        m.task(&id).await["status"] == "completed"
    })
    .await;
    let (status, _) = api_call(&m.services, "GET", "/v1/pools", None).await;
    assert_eq!(status, 200);
    let text = m
        .services
        .prometheus
        .as_ref()
        .expect("the Prometheus recorder")
        .render();
    let typed: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next())
        .collect();
    assert!(typed.len() >= 10, "only {} series:\n{text}", typed.len());
    for name in typed {
        let help = format!("# HELP {name} ");
        assert!(text.contains(&help), "{name} has no HELP line:\n{text}");
        let described = slotd_core::telemetry::series(name).map(|s| s.help);
        assert!(
            described.is_some_and(|h| text.contains(&format!("{help}{h}\n"))),
            "{name}'s HELP is not its description in telemetry::SERIES:\n{text}"
        );
    }
    m.check().await;
}
