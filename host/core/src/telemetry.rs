//! Where one slotd instance's metrics go, and what each of them means.
//!
//! Every metric slotd records goes through a [`Metrics`] handle that the instance owns, not
//! through a process-wide recorder: a process that hosts several instances (the test suites
//! start dozens in one process) keeps one registry per instance, so "this counter moved" is
//! about this instance only. The `metrics` macros are used unchanged inside
//! [`Metrics::record`], which routes them to the instance's recorder for the duration of the
//! closure (`metrics::with_local_recorder`); the closure is synchronous, so the routing does
//! not depend on which thread or task runs it.
//!
//! [`SERIES`] lists every series slotd records, with its kind, unit and meaning: the one place
//! a metric is described. [`Metrics::new`] hands the list to the registry, so `/metrics` has a
//! `# HELP` line for every series; a test fails when code records a name the list lacks, and
//! docs/metrics.md is the same list for readers, with the renamed series ([`RENAMED`]).

use std::sync::Arc;

use metrics::Unit;

/// What kind of series a metric is (the macro that records it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `metrics::counter!`: only goes up (`_total`).
    Counter,
    /// `metrics::gauge!`: the value now.
    Gauge,
    /// `metrics::histogram!`: a distribution (`_bucket`, `_sum`, `_count` in `/metrics`).
    Histogram,
}

/// One series slotd records: its name, kind, unit and meaning (the `# HELP` text, which names
/// the labels too).
#[derive(Clone, Copy, Debug)]
pub struct Series {
    pub name: &'static str,
    pub kind: Kind,
    pub unit: Option<Unit>,
    pub help: &'static str,
}

const fn counter(name: &'static str, unit: Unit, help: &'static str) -> Series {
    Series {
        name,
        kind: Kind::Counter,
        unit: Some(unit),
        help,
    }
}

const fn gauge(name: &'static str, unit: Option<Unit>, help: &'static str) -> Series {
    Series {
        name,
        kind: Kind::Gauge,
        unit,
        help,
    }
}

const fn histogram(name: &'static str, unit: Unit, help: &'static str) -> Series {
    Series {
        name,
        kind: Kind::Histogram,
        unit: Some(unit),
        help,
    }
}

/// Every series slotd records, by area (docs/metrics.md is this list for readers). A name
/// recorded anywhere under `host/` and missing here fails `every_recorded_metric_is_described`.
pub const SERIES: &[Series] = &[
    // Pools and units (the scheduler).
    gauge(
        "slotd_pool_slots_used",
        Some(Unit::Count),
        "Slots of the pool held by units after the pool's last tick, by pool.",
    ),
    gauge(
        "slotd_pool_slots_max",
        Some(Unit::Count),
        "The pool's configured slot limit (max_slots) at its last tick, by pool.",
    ),
    gauge(
        "slotd_pool_utilization",
        Some(Unit::Percent),
        "Slots used over the slot limit after the pool's last tick (0 to 1), by pool.",
    ),
    gauge(
        "slotd_pool_effective_max",
        Some(Unit::Count),
        "The pool's effective slot limit as the provider's answers adapted it (at most max_slots), by pool.",
    ),
    counter(
        "slotd_capacity_rejections_total",
        Unit::Count,
        "Submits the provider refused as over capacity (the unit goes back to pending, no retry spent), by pool.",
    ),
    counter(
        "slotd_capacity_decisions_total",
        Unit::Count,
        "What the capacity estimate made of a tick's answers, by slot set (pool) and verdict: noise, ceiling, probe_refused, probe_accepted, queued, restored.",
    ),
    gauge(
        "slotd_units",
        Some(Unit::Count),
        "Units in the store, by pool and status (every status set, 0 included); counted every 5 s.",
    ),
    counter(
        "slotd_unit_transitions_total",
        Unit::Count,
        "Unit status changes written, by pool and the status moved to (to).",
    ),
    counter(
        "slotd_tasks_created_total",
        Unit::Count,
        "Tasks created (an idempotent replay not counted), by task type (type).",
    ),
    counter(
        "slotd_illegal_writes_total",
        Unit::Count,
        "Unit writes the state machine refused, whoever built them; should stay 0.",
    ),
    counter(
        "slotd_deadline_unreachable_total",
        Unit::Count,
        "Tasks failed because their deadline could no longer be met (best-effort tasks are only noted, not counted), by pool.",
    ),
    // Durations.
    histogram(
        "slotd_provider_job_seconds",
        Unit::Seconds,
        "How long a succeeded provider job took, from the unit's submit to its success as slotd saw it, by pool and duration class.",
    ),
    histogram(
        "slotd_unit_end_to_end_seconds",
        Unit::Seconds,
        "From the task's creation to a unit's stored result (finalization written), by pool.",
    ),
    histogram(
        "slotd_provider_http_seconds",
        Unit::Seconds,
        "Duration of each HTTP request a handler made to its provider, by handler and status (the HTTP status, or denied, timeout, too_large, invalid, transport).",
    ),
    // Ticks and leases.
    histogram(
        "slotd_tick_seconds",
        Unit::Seconds,
        "Duration of one scheduler tick of a pool, by pool.",
    ),
    histogram(
        "slotd_tick_step_seconds",
        Unit::Seconds,
        "Duration of each step of a pool's tick (claim, collect, call, commit, finish), by pool and step.",
    ),
    counter(
        "slotd_tick_failures_total",
        Unit::Count,
        "Pool ticks that failed (store or slots unreachable; the scheduler backs off), by pool.",
    ),
    gauge(
        "slotd_scheduler_info",
        None,
        "Always 1 on a process running the scheduler; the owner label is the id its pool leases carry.",
    ),
    counter(
        "slotd_pool_lease_changes_total",
        Unit::Count,
        "Pool leases this scheduler took or dropped, by pool and change (taken, dropped).",
    ),
    histogram(
        "slotd_pool_unheld_seconds",
        Unit::Seconds,
        "How long a pool was held by no scheduler before this one took its lease, by pool.",
    ),
    // Handlers (the wasm runtime).
    histogram(
        "slotd_handler_call_seconds",
        Unit::Seconds,
        "Duration of each call into a handler, by handler, version and function (plan, tick, finalize, ...): its count is the calls each version took, so a rollout shows which release polled which jobs.",
    ),
    counter(
        "slotd_rollout_moves_total",
        Unit::Count,
        "Moves of handler rollouts, by handler and the state moved to (running: the next stage, paused, promoted, rolled_back).",
    ),
    counter(
        "slotd_handler_faults_total",
        Unit::Count,
        "Handler calls that faulted, by handler and kind (trap, deadline, provider_deadline, cpu, memory, error, instantiate).",
    ),
    counter(
        "slotd_handler_illegal_changes_total",
        Unit::Count,
        "Unit changes a handler asked for that the state machine refused (never applied), by handler.",
    ),
    counter(
        "slotd_handler_loads_total",
        Unit::Count,
        "Handler versions loaded, by handler.",
    ),
    counter(
        "slotd_handler_refusals_total",
        Unit::Count,
        "Handler components refused at load (bad world, major version, garbage); the running version keeps serving.",
    ),
    counter(
        "slotd_handler_quarantines_total",
        Unit::Count,
        "Handler versions quarantined after repeated faults, by handler.",
    ),
    counter(
        "slotd_handler_fallbacks_total",
        Unit::Count,
        "Handler calls run on the slower on-demand allocator, by handler and reason (does_not_fit: the component exceeds the instance pool's slots; pool_full: no free concurrent slot).",
    ),
    // Routes, accounts, quotas, budgets.
    counter(
        "slotd_route_grants_total",
        Unit::Count,
        "Units granted a slot through a route, by route and target.",
    ),
    counter(
        "slotd_route_refusals_total",
        Unit::Count,
        "Units sent back to their route's next option because a target refused them, by route, target and reason.",
    ),
    gauge(
        "slotd_account_drained",
        None,
        "1 while the provider account is drained (refused by the provider, no new submits), 0 once restored, by handler and account.",
    ),
    counter(
        "slotd_account_drains_total",
        Unit::Count,
        "Provider accounts drained, by handler and account.",
    ),
    gauge(
        "slotd_quota_remaining",
        Some(Unit::Count),
        "What the provider quota leaves in its current window, by pool and dimension.",
    ),
    gauge(
        "slotd_quota_closed",
        None,
        "1 while a slot set is closed because the provider quota is reached, 0 once reopened, by slot set (slots).",
    ),
    gauge(
        "slotd_spend_remaining",
        None,
        "What the spend limit leaves in its current period (in the unit of the limit and the providers' reported costs), by scope (pool, account) and name.",
    ),
    // Provider callbacks: what providers send to /v1/callbacks/{handler}.
    counter(
        "slotd_provider_callbacks_total",
        Unit::Count,
        "Provider callbacks accepted and applied, by handler.",
    ),
    counter(
        "slotd_provider_callbacks_refused_total",
        Unit::Count,
        "Provider callbacks refused, nothing changed, by reason (no-token, bad-token, bad-signature, handler-refused).",
    ),
    counter(
        "slotd_provider_callbacks_changes_out_of_scope_total",
        Unit::Count,
        "Changes in a provider callback for a submitted unit its token does not name (ignored), by handler.",
    ),
    counter(
        "slotd_provider_callbacks_changes_unknown_total",
        Unit::Count,
        "Changes in a provider callback naming no known provider job (forged, replayed or very late; ignored), by handler.",
    ),
    // Completion webhooks: what slotd delivers to the task's callback_url.
    counter(
        "slotd_completion_webhook_attempts_total",
        Unit::Count,
        "Completion-webhook delivery attempts to tasks' callback URLs, by outcome (delivered, retry, gave_up).",
    ),
    // Finalization and artifacts.
    counter(
        "slotd_finalizations_total",
        Unit::Count,
        "Finalizations written (a stored result, or a failed attempt released for retry or given up), by task type (task_type).",
    ),
    counter(
        "slotd_artifact_bytes_total",
        Unit::Bytes,
        "Bytes of artifacts downloaded and stored by finalization.",
    ),
    // API, store, hot cache, event streams.
    counter(
        "slotd_api_requests_total",
        Unit::Count,
        "API requests served, by route template and status.",
    ),
    histogram(
        "slotd_task_commit_batch_size",
        Unit::Count,
        "Task creations written together in one group commit.",
    ),
    counter(
        "slotd_hot_lookups_total",
        Unit::Count,
        "Task status lookups in the Redis hot cache, by outcome (hit, miss, unavailable).",
    ),
    counter(
        "slotd_event_streams_total",
        Unit::Count,
        "Live event streams (SSE) opened, by scope (tenant, task).",
    ),
    counter(
        "slotd_event_stream_reads_total",
        Unit::Count,
        "Reads of the event log by live streams, each of its own scope.",
    ),
    counter(
        "slotd_event_feed_reads_total",
        Unit::Count,
        "Reads of the whole event log by the feed that wakes live streams.",
    ),
    counter(
        "slotd_event_feed_failures_total",
        Unit::Count,
        "Event feed reads that failed (streams then read on their own until it answers).",
    ),
    counter(
        "slotd_event_feed_wakes_total",
        Unit::Count,
        "Live streams woken by the event feed.",
    ),
    // The cluster's wake relay (Redis).
    counter(
        "slotd_wake_published_total",
        Unit::Count,
        "Wakes published to the other processes of the cluster.",
    ),
    counter(
        "slotd_wake_received_total",
        Unit::Count,
        "Wakes received from other processes of the cluster.",
    ),
    gauge(
        "slotd_wake_relay_subscribed",
        None,
        "1 while the wake relay is subscribed to the cluster's wakes, 0 while it reconnects.",
    ),
    counter(
        "slotd_wake_relay_reconnects_total",
        Unit::Count,
        "Times the wake relay lost its subscription and reconnected.",
    ),
];

/// Series renamed (old name → new name): provider callbacks and completion webhooks each got
/// a name of their own. docs/metrics.md lists them for dashboards and alerts.
pub const RENAMED: &[(&str, &str)] = &[
    ("slotd_callbacks_total", "slotd_provider_callbacks_total"),
    (
        "slotd_callbacks_refused_total",
        "slotd_provider_callbacks_refused_total",
    ),
    (
        "slotd_callback_changes_out_of_scope_total",
        "slotd_provider_callbacks_changes_out_of_scope_total",
    ),
    (
        "slotd_callback_changes_unknown_total",
        "slotd_provider_callbacks_changes_unknown_total",
    ),
    (
        "slotd_webhook_attempts_total",
        "slotd_completion_webhook_attempts_total",
    ),
];

/// The description of `name`, if slotd records it.
pub fn series(name: &str) -> Option<&'static Series> {
    SERIES.iter().find(|s| s.name == name)
}

/// Describe every series of [`SERIES`] to `recorder` (its `# HELP` lines).
pub fn describe(recorder: &dyn metrics::Recorder) {
    for s in SERIES {
        let name = metrics::KeyName::from_const_str(s.name);
        let help = metrics::SharedString::const_str(s.help);
        match s.kind {
            Kind::Counter => recorder.describe_counter(name, s.unit, help),
            Kind::Gauge => recorder.describe_gauge(name, s.unit, help),
            Kind::Histogram => recorder.describe_histogram(name, s.unit, help),
        }
    }
}

/// One instance's metrics registry (cheap to clone: every clone records into the same one).
#[derive(Clone, Default)]
pub struct Metrics {
    recorder: Option<Arc<dyn metrics::Recorder + Send + Sync>>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics")
            .field("registry", &self.recorder.is_some())
            .finish()
    }
}

impl Metrics {
    /// Record into `recorder`, every series of [`SERIES`] described to it first (so each has
    /// its `# HELP` line once recorded).
    pub fn new(recorder: Arc<dyn metrics::Recorder + Send + Sync>) -> Metrics {
        describe(recorder.as_ref());
        Metrics {
            recorder: Some(recorder),
        }
    }

    /// Record nowhere (`plugin check`, tools and tests that do not read metrics).
    pub fn discard() -> Metrics {
        Metrics { recorder: None }
    }

    /// Run `f`, sending every metric it records to this instance's registry. Without one,
    /// what `f` records is dropped (no process-wide recorder is ever installed).
    pub fn record<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.recorder {
            Some(r) => metrics::with_local_recorder(r.as_ref(), f),
            None => metrics::with_local_recorder(&metrics::NoopRecorder, f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    /// Counts every counter increment it is given.
    struct Counting(Arc<AtomicU64>);

    struct Inc(Arc<AtomicU64>);
    impl metrics::CounterFn for Inc {
        fn increment(&self, value: u64) {
            self.0.fetch_add(value, Ordering::SeqCst);
        }
        fn absolute(&self, _: u64) {}
    }

    impl metrics::Recorder for Counting {
        fn describe_counter(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_gauge(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn describe_histogram(
            &self,
            _: metrics::KeyName,
            _: Option<metrics::Unit>,
            _: metrics::SharedString,
        ) {
        }
        fn register_counter(
            &self,
            _: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Counter {
            metrics::Counter::from_arc(Arc::new(Inc(self.0.clone())))
        }
        fn register_gauge(&self, _: &metrics::Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
            metrics::Gauge::noop()
        }
        fn register_histogram(
            &self,
            _: &metrics::Key,
            _: &metrics::Metadata<'_>,
        ) -> metrics::Histogram {
            metrics::Histogram::noop()
        }
    }

    #[test]
    fn two_instances_keep_their_own_counts_across_threads() {
        let (a_seen, b_seen) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let a = Metrics::new(Arc::new(Counting(a_seen.clone())));
        let b = Metrics::new(Arc::new(Counting(b_seen.clone())));
        let worker = {
            let b = b.clone();
            std::thread::spawn(move || {
                b.record(|| metrics::counter!("slotd_tasks_created_total").increment(5))
            })
        };
        a.record(|| metrics::counter!("slotd_tasks_created_total").increment(2));
        worker.join().expect("worker");
        Metrics::discard().record(|| metrics::counter!("slotd_tasks_created_total").increment(100));
        assert_eq!(a_seen.load(Ordering::SeqCst), 2);
        assert_eq!(b_seen.load(Ordering::SeqCst), 5);
    }

    /// Every series named like Prometheus wants and described in one line; the renamed ones
    /// map an old name slotd no longer records to one it does.
    #[test]
    fn every_series_is_named_and_described_once() {
        let mut seen = std::collections::HashSet::new();
        for s in SERIES {
            assert!(seen.insert(s.name), "{} is listed twice", s.name);
            assert!(
                s.name.starts_with("slotd_")
                    && s.name
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_'),
                "{} is not a slotd_ snake_case name",
                s.name
            );
            assert_eq!(
                s.kind == Kind::Counter,
                s.name.ends_with("_total"),
                "{}: counters, and only counters, end in _total",
                s.name
            );
            assert!(
                !["_bucket", "_sum", "_count"]
                    .iter()
                    .any(|x| s.name.ends_with(x)),
                "{}: a suffix Prometheus gives histograms",
                s.name
            );
            assert!(
                s.help.len() > 20 && s.help.ends_with('.') && !s.help.contains('\n'),
                "{}: the help is one sentence or more, on one line: {:?}",
                s.name,
                s.help
            );
        }
        for (old, new) in RENAMED {
            assert!(series(old).is_none(), "{old} is renamed but still listed");
            assert!(
                series(new).is_some(),
                "{old} is renamed to {new}, not listed"
            );
        }
    }

    /// A Prometheus registry given to [`Metrics::new`] renders a `# HELP` line for every
    /// `# TYPE` line, whatever was recorded: here every series once.
    #[test]
    fn every_rendered_series_has_help() {
        let recorder = metrics_exporter_prometheus::PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let m = Metrics::new(Arc::new(recorder));
        m.record(|| {
            for s in SERIES {
                match s.kind {
                    Kind::Counter => metrics::counter!(s.name, "pool" => "p").increment(1),
                    Kind::Gauge => metrics::gauge!(s.name, "pool" => "p").set(1.0),
                    Kind::Histogram => metrics::histogram!(s.name, "pool" => "p").record(0.5),
                }
            }
            // A series no one described renders without help: the check below can fail.
            metrics::counter!("undescribed_total").increment(1);
        });
        let text = handle.render();
        let undescribed = types_without_help(&text);
        assert_eq!(undescribed, vec!["undescribed_total".to_string()], "{text}");
        for s in SERIES {
            assert!(
                text.contains(&format!("# HELP {} {}\n", s.name, s.help)),
                "{} has no HELP line:\n{text}",
                s.name
            );
        }
    }

    /// The names of `# TYPE` lines in Prometheus `text` that have no `# HELP` line.
    fn types_without_help(text: &str) -> Vec<String> {
        let helped: std::collections::HashSet<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# HELP ")?.split(' ').next())
            .collect();
        text.lines()
            .filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next())
            .filter(|name| !helped.contains(name))
            .map(str::to_string)
            .collect()
    }

    // -----------------------------------------------------------------------------------------
    // The sources, docs and dashboard against the list.
    // -----------------------------------------------------------------------------------------

    use std::path::{Path, PathBuf};

    fn workspace() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .nth(2)
            .expect("the workspace")
            .to_path_buf()
    }

    /// Every file under `dir` (no `target`, no hidden directory) whose name ends in one of
    /// `exts`.
    fn files(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
        let mut out = Vec::new();
        let mut dirs = vec![dir.to_path_buf()];
        while let Some(d) = dirs.pop() {
            let Ok(entries) = std::fs::read_dir(&d) else {
                continue;
            };
            for p in entries.flatten().map(|e| e.path()) {
                let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
                if p.is_dir() {
                    if name != "target" && !name.starts_with('.') {
                        dirs.push(p);
                    }
                } else if exts.iter().any(|e| name.ends_with(e)) {
                    out.push(p);
                }
            }
        }
        out.sort();
        out
    }

    /// Each `counter!(`, `gauge!(` and `histogram!(` call in `text`, as (line, kind, the
    /// literal name or `None` when the name is not a string literal).
    fn metric_calls(text: &str) -> Vec<(usize, Kind, Option<String>)> {
        let mut out = Vec::new();
        for (kind, word) in [
            (Kind::Counter, "counter"),
            (Kind::Gauge, "gauge"),
            (Kind::Histogram, "histogram"),
        ] {
            let pattern = format!("{word}!(");
            let mut from = 0;
            while let Some(at) = text[from..].find(&pattern) {
                let start = from + at;
                from = start + pattern.len();
                let before = text[..start].bytes().next_back();
                if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
                    continue; // describe_counter!( and the like
                }
                let line = text[..start].matches('\n').count() + 1;
                let rest = text[from..].trim_start();
                let name = rest
                    .strip_prefix('"')
                    .and_then(|r| r.split_once('"'))
                    .map(|(name, _)| name.to_string());
                out.push((line, kind, name));
            }
        }
        out
    }

    /// Every metric recorded under `host/`, as (where, kind, name).
    fn recorded() -> Vec<(String, Kind, Option<String>)> {
        let root = workspace();
        let mut out = Vec::new();
        for path in files(&root.join("host"), &[".rs"]) {
            if path.ends_with("core/src/telemetry.rs") {
                continue; // the list itself, and tests recording made-up names
            }
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let shown = path
                .strip_prefix(&root)
                .unwrap_or(&path)
                .display()
                .to_string();
            for (line, kind, name) in metric_calls(&text) {
                out.push((format!("{shown}:{line}"), kind, name));
            }
        }
        out
    }

    /// A new metric recorded anywhere under `host/` without a line in [`SERIES`] (or recorded
    /// with another kind, or named by anything but a string literal) fails here.
    #[test]
    fn every_recorded_metric_is_described() {
        let calls = recorded();
        assert!(calls.len() > 40, "found only {} metric calls", calls.len());
        let mut wrong = Vec::new();
        for (at, kind, name) in &calls {
            match name.as_deref().map(|n| (n, series(n))) {
                None => wrong.push(format!("{at}: name the metric with a string literal")),
                Some((n, None)) => {
                    wrong.push(format!("{at}: {n} is not described in telemetry::SERIES"))
                }
                Some((n, Some(s))) if s.kind != *kind => wrong.push(format!(
                    "{at}: {n} is recorded as a {kind:?}, described as a {:?}",
                    s.kind
                )),
                Some(_) => {}
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }

    /// Every series listed is recorded somewhere: a renamed or removed metric leaves no stale
    /// description behind.
    #[test]
    fn every_described_series_is_recorded() {
        let names: std::collections::HashSet<String> =
            recorded().into_iter().filter_map(|(_, _, n)| n).collect();
        let stale: Vec<&str> = SERIES
            .iter()
            .map(|s| s.name)
            .filter(|n| !names.contains(*n))
            .collect();
        assert!(
            stale.is_empty(),
            "described but recorded nowhere: {stale:?}"
        );
    }

    /// The `slotd_…` words of `text`, except Rust paths (`slotd_core::…`) and prefixes
    /// (`slotd_wake_*`).
    fn slotd_words(text: &str) -> Vec<String> {
        let bytes = text.as_bytes();
        let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
        let mut out = Vec::new();
        let mut from = 0;
        while let Some(at) = text[from..].find("slotd_") {
            let start = from + at;
            let mut end = start;
            while end < bytes.len() && word(bytes[end]) {
                end += 1;
            }
            from = end;
            if start > 0 && word(bytes[start - 1]) {
                continue;
            }
            let w = &text[start..end];
            if w.ends_with('_') || text[end..].starts_with("::") {
                continue;
            }
            out.push(w.to_string());
        }
        out
    }

    /// The series a name in a doc or query stands for (a histogram's `_bucket`, `_sum` and
    /// `_count` are the histogram).
    fn series_of(word: &str) -> Option<&'static Series> {
        series(word).or_else(|| {
            ["_bucket", "_sum", "_count"]
                .iter()
                .filter_map(|x| word.strip_suffix(x))
                .find_map(series)
                .filter(|s| s.kind == Kind::Histogram)
        })
    }

    /// Words that look like series and are not.
    const NOT_SERIES: &[&str] = &["slotd_skip_tool_tests"];

    /// docs/metrics.md lists every series (with its help text) and every rename; the other docs, the README, the
    /// deployment files (the Grafana dashboard) and the tests' quoted names name only series
    /// slotd records, so a renamed series leaves no old name behind outside the renamed table.
    #[test]
    fn docs_and_dashboard_name_only_recorded_series() {
        let root = workspace();
        let reference =
            std::fs::read_to_string(root.join("docs/metrics.md")).expect("docs/metrics.md");
        for s in SERIES {
            let kind = format!("{:?}", s.kind).to_lowercase();
            let unit = match s.unit {
                None => "—",
                Some(Unit::Percent) => "ratio",
                Some(u) => u.as_str(),
            };
            let row = format!("| `{}` | {kind} | {unit} | {} |", s.name, s.help);
            assert!(
                reference.contains(&row),
                "docs/metrics.md lacks the row (or its text differs):\n{row}"
            );
        }
        for (old, new) in RENAMED {
            assert!(
                reference.contains(&format!("| `{old}` | `{new}` |")),
                "docs/metrics.md's renamed table lacks {old} → {new}"
            );
        }
        let mut places = files(&root.join("docs"), &[".md"]);
        places.extend(files(
            &root.join("deploy"),
            &[".json", ".yml", ".yaml", ".toml"],
        ));
        places.push(root.join("README.md"));
        let mut wrong = Vec::new();
        for path in &places {
            let text = std::fs::read_to_string(path).unwrap_or_default();
            let shown = path
                .strip_prefix(&root)
                .unwrap_or(path)
                .display()
                .to_string();
            for w in slotd_words(&text) {
                let renamed = RENAMED.iter().any(|(old, _)| *old == w);
                let ok = series_of(&w).is_some()
                    || NOT_SERIES.contains(&w.as_str())
                    || (renamed && shown == "docs/metrics.md");
                if !ok {
                    wrong.push(format!("{shown}: {w}"));
                }
            }
        }
        for path in files(&root.join("tests"), &[".rs"]) {
            let text = std::fs::read_to_string(&path).unwrap_or_default();
            let shown = path
                .strip_prefix(&root)
                .unwrap_or(&path)
                .display()
                .to_string();
            for piece in text.split("\"slotd_").skip(1) {
                let w = format!("slotd_{piece}");
                let w = slotd_words(&w).into_iter().next().unwrap_or_default();
                if !w.is_empty() && series_of(&w).is_none() {
                    wrong.push(format!("{shown}: {w}"));
                }
            }
        }
        assert!(
            wrong.is_empty(),
            "names no series slotd records (describe it in telemetry::SERIES, or add it to \
             NOT_SERIES if it is not a metric):\n{}",
            wrong.join("\n")
        );
    }
}
