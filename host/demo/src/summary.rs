//! The demo's summary of the Kling pools: makespan against an ideal zero-overhead FIFO
//! scheduler, slot utilization, provider requests per unit, refusals, failures with their
//! reasons, and where the files are.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::Value;
use slotd_sim::kling::{SimHandle, SimStats};

use super::{DemoOptions, Ended, Submitted, accounts, report, route};

/// Print the summary of the Kling accounts `[sim, backup]` and the ended tasks.
pub(crate) fn print(
    opts: &DemoOptions,
    [sim, backup]: [&SimHandle; 2],
    ended: &Ended,
    routed: &route::RouteOutcome,
    objects: Option<&Path>,
) {
    let stats = accounts::combined(&sim.stats(), &backup.stats());
    println!("\n== summary");
    println!(
        "makespan {:.1}s real = {:.0}s of provider time (time x{})",
        ended.makespan.as_secs_f64(),
        ended.makespan.as_secs_f64() / opts.time_scale,
        opts.time_scale
    );
    pool_figures([sim, backup]);
    requests(&stats, &ended.tasks, &ended.views, routed);
    failures(&ended.tasks, &ended.views);
    match objects {
        Some(root) => println!("artifacts: {} (per tenant / task / unit)", root.display()),
        None => println!("artifacts: in the configured object store"),
    }
    println!(
        "database: {} (try `SLOTD_DATABASE_URL=sqlite://{} slotd serve` to inspect it through the API)",
        opts.dir.join("slotd.db").display(),
        opts.dir.join("slotd.db").display()
    );
}

/// Per Kling pool: its jobs, makespan against the ideal FIFO one, and slot utilization; then
/// both pools together. Each ideal runs on every slot the work could use (video: both
/// accounts whole, the main one's avatar share borrowed; avatars: their share's max; both:
/// the two accounts), so it is a lower bound on what any schedule of those jobs could take.
fn pool_figures([sim, backup]: [&SimHandle; 2]) {
    let mut jobs = sim.jobs();
    jobs.extend(backup.jobs());
    let all_slots = accounts::MAIN_SLOTS + accounts::BACKUP_SLOTS;
    let slots = BTreeMap::from([
        ("kling:video".to_string(), all_slots),
        ("kling:avatar".to_string(), accounts::AVATAR_SHARE.1),
    ]);
    let figures = report::pool_figures(&jobs, &slots);
    for (pool, f) in &figures {
        let durations: Vec<f64> = jobs
            .iter()
            .filter(|j| report::pool_of_kind(&j.kind) == pool)
            .map(|j| j.planned_seconds)
            .collect();
        let n = slots.get(pool).copied().unwrap_or(1);
        let ideal = report::ideal_fifo_makespan(&durations, n);
        println!(
            "  {pool:<13} {:>3} provider jobs | makespan {:>6.0}s vs ideal FIFO on {n:>2} slots {:>6.0}s = {:.3}x | slot utilization {:>5.1}% (while a backlog waited: {:>5.1}%)",
            f.jobs,
            f.makespan,
            ideal,
            if ideal > 0.0 { f.makespan / ideal } else { 1.0 },
            f.utilization * 100.0,
            f.backlog_utilization * 100.0
        );
    }
    // Both pools on the slots they share.
    let mut ordered: Vec<&slotd_sim::kling::SimJob> = jobs.iter().collect();
    ordered.sort_by(|a, b| a.started.total_cmp(&b.started));
    let durations: Vec<f64> = ordered.iter().map(|j| j.planned_seconds).collect();
    let first = ordered.first().map_or(0.0, |j| j.started);
    let last = jobs.iter().filter_map(|j| j.ended).fold(first, f64::max);
    let ideal = report::ideal_fifo_makespan(&durations, all_slots);
    println!(
        "  {:<13} {:>3} provider jobs | makespan {:>6.0}s vs ideal FIFO on {all_slots:>2} slots {:>6.0}s = {:.3}x",
        "kling (both)",
        jobs.len(),
        last - first,
        ideal,
        if ideal > 0.0 {
            (last - first) / ideal
        } else {
            1.0
        },
    );
}

/// Kling's requests per completed unit and its refusals.
fn requests(stats: &SimStats, tasks: &[Submitted], views: &[Value], routed: &route::RouteOutcome) {
    // Kling's requests are counted against Kling's units: its tasks' and the routed units it
    // served.
    let on_kling = |t: &&Submitted| matches!(t.ty, "video" | "avatar_clone");
    let routed_on_kling = |counts: &BTreeMap<String, u64>| -> u64 {
        counts
            .iter()
            .filter(|(t, _)| t.starts_with("kling-video/"))
            .map(|(_, n)| n)
            .sum()
    };
    let units: u64 = tasks
        .iter()
        .filter(on_kling)
        .map(|t| u64::from(t.units))
        .sum::<u64>()
        + routed_on_kling(&routed.served);
    let completed: u64 = tasks
        .iter()
        .zip(views)
        .filter(|(t, _)| on_kling(t))
        .map(|(_, v)| v["completed"].as_u64().unwrap_or(0))
        .sum::<u64>()
        + routed_on_kling(&routed.completed_by);
    println!(
        "provider requests (Kling): {} for {units} units ({:.2} per completed unit): {} creates, {} single queries, {} list queries, {} downloads; callbacks received: {}",
        stats.requests,
        if completed > 0 {
            stats.requests as f64 / completed as f64
        } else {
            0.0
        },
        stats.creates,
        stats.single_queries,
        stats.list_queries,
        stats.downloads,
        stats.callbacks_sent
    );
    println!(
        "1303 refusals: {} | validation refusals: {} | auth refusals: {} | 1102 refusals (packs exhausted): {}",
        stats.rate_limited_1303,
        stats.validation_refusals,
        stats.auth_refusals,
        stats.balance_refusals
    );
}

/// Every failed unit with its reason.
fn failures(tasks: &[Submitted], views: &[Value]) {
    let mut failures = Vec::new();
    for (t, v) in tasks.iter().zip(views) {
        for r in v["results"].as_array().into_iter().flatten() {
            if r["status"] == "failed" {
                failures.push(format!(
                    "  {} unit {}: {}",
                    t.label.trim(),
                    r["index"],
                    r["error"]["message"].as_str().unwrap_or("?")
                ));
            }
        }
    }
    println!("failures: {}", failures.len());
    for f in failures {
        println!("{f}");
    }
}
