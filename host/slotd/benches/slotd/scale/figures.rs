//! A scale run's figures: its records in the report, its printed line, and what saturated.

use super::{Load, Measured, SLOTS_PER_ACCOUNT, Schema, Shape, servers};
use crate::report::{Better, Report, Target};

impl Measured {
    pub(super) fn per_unit(&self, v: f64) -> f64 {
        v / self.units.max(1) as f64
    }

    pub(super) fn cpu_of(&self, prefix: &str) -> f64 {
        self.delta
            .cpu
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(_, v)| v)
            .sum()
    }

    pub(super) fn record_costs(&self, report: &mut Report, shape: &Shape, prefix: &str) {
        let b = shape.backend();
        // The per-unit targets (docs/testing.md), for the current schema at 100 accounts and one scheduler:
        // statements in the steady run, PostgreSQL's CPU when saturated, WAL in both.
        let targeted = shape.accounts == 100 && shape.schedulers == 1;
        let targeted = targeted && shape.schema == Schema::Current;
        let steady = matches!(shape.load, Load::Steady { .. });
        let target = |limit: f64, applies: bool| {
            if targeted && applies {
                Target::AtMost(limit)
            } else {
                Target::None(Better::Lower)
            }
        };
        if let Some(s) = self.delta.pg_statements {
            report.add(
                &format!("{prefix}_pg_statements_per_unit"),
                &b,
                self.per_unit(s),
                "1",
                target(6.0, steady),
            );
        }
        let none = Target::None(Better::Lower);
        for (name, v, unit, goal) in [
            (
                "pg_wal_bytes_per_unit",
                self.delta.pg_wal_bytes,
                "B",
                target(3072.0, true),
            ),
            ("pg_rows_per_unit", self.delta.pg_rows, "1", none),
            (
                "redis_commands_per_unit",
                self.delta.redis_commands,
                "1",
                none,
            ),
            (
                "scheduler_cpu_ms_per_unit",
                self.cpu_of("scheduler") * 1e3,
                "ms",
                none,
            ),
            ("api_cpu_ms_per_unit", self.cpu_of("api") * 1e3, "ms", none),
            (
                "postgres_cpu_ms_per_unit",
                self.cpu_of("postgres") * 1e3,
                "ms",
                target(0.8, !steady),
            ),
        ] {
            report.add(
                &format!("{prefix}_{name}"),
                &b,
                self.per_unit(v),
                unit,
                goal,
            );
        }
        if !steady {
            self.record_ceiling(report, shape, prefix);
        }
    }

    /// The CPU a unit costs slotd's whole stack (API, schedulers, PostgreSQL, Redis: not the
    /// bench process, whose simulators stand in for providers that run elsewhere), and the
    /// throughput those cores could give if they did nothing else: the ceiling a saturated
    /// run's units/s is read against.
    fn record_ceiling(&self, report: &mut Report, shape: &Shape, prefix: &str) {
        let b = shape.backend();
        let stack: f64 = ["api", "scheduler", "postgres", "redis"]
            .iter()
            .map(|p| self.cpu_of(p))
            .sum();
        let ms = self.per_unit(stack) * 1e3;
        report.add(
            &format!("{prefix}_stack_cpu_ms_per_unit"),
            &b,
            ms,
            "ms",
            Target::None(Better::Lower),
        );
        report.add(
            &format!("{prefix}_cpu_bound_units_per_s"),
            &b,
            self.cores as f64 * 1e3 / ms.max(1e-9),
            "1/s",
            Target::None(Better::Higher),
        );
    }

    /// This run (current schema) against `before` (the same shape on the previous schema):
    /// after/before of the per-unit costs, so a run shows what the layout changes bought.
    pub(super) fn record_against(
        &self,
        report: &mut Report,
        shape: &Shape,
        before: &Measured,
        prefix: &str,
    ) {
        let b = shape.backend();
        let mut pairs = vec![
            (
                "pg_wal_bytes",
                self.per_unit(self.delta.pg_wal_bytes),
                before.per_unit(before.delta.pg_wal_bytes),
            ),
            (
                "pg_rows",
                self.per_unit(self.delta.pg_rows),
                before.per_unit(before.delta.pg_rows),
            ),
            (
                "postgres_cpu_ms",
                self.per_unit(self.cpu_of("postgres")),
                before.per_unit(before.cpu_of("postgres")),
            ),
        ];
        if let (Some(a), Some(z)) = (self.delta.pg_statements, before.delta.pg_statements) {
            pairs.push(("pg_statements", self.per_unit(a), before.per_unit(z)));
        }
        for (name, after, was) in pairs {
            report.add(
                &format!("{prefix}_{name}_after_over_before"),
                &b,
                after / was.max(f64::MIN_POSITIVE),
                "x",
                Target::None(Better::Lower),
            );
        }
    }

    pub(super) fn record_steady(&self, report: &mut Report, shape: &Shape) {
        let b = shape.backend();
        self.record_costs(report, shape, "scale");
        let target = if shape.accounts >= 100 {
            Target::AtLeast(0.99)
        } else {
            Target::None(Better::Higher)
        };
        report.add("scale_backlog_util", &b, self.backlog_util, "ratio", target);
        report.add(
            "scale_submit_latency_p50",
            &b,
            self.latency_p50_ms,
            "ms",
            Target::None(Better::Lower),
        );
        report.add(
            "scale_submit_latency_p99",
            &b,
            self.latency_p99_ms,
            "ms",
            Target::None(Better::Lower),
        );
        report.add(
            "scale_steady_units_per_s",
            &b,
            self.units_per_s,
            "1/s",
            Target::None(Better::Higher),
        );
        report.add(
            "scale_account_peak",
            &b,
            f64::from(self.peak_per_account),
            "jobs",
            Target::AtMost(f64::from(SLOTS_PER_ACCOUNT)),
        );
        self.record_refusals(report, shape, "scale_account_refusals");
    }

    /// The creates the simulators refused (1303 and 1102, every account), beside the peak: the
    /// peak cannot pass the limit because the simulator refuses beyond it, so a grant past an
    /// account's room shows here. The target is zero.
    pub(super) fn record_refusals(&self, report: &mut Report, shape: &Shape, name: &str) {
        report.add(
            name,
            &shape.backend(),
            self.refusals.total() as f64,
            "creates",
            Target::AtMost(0.0),
        );
    }

    /// The resource that saturated first: the host's CPU when it was nearly all busy, else
    /// the busiest process (in cores).
    pub(super) fn saturated_by(&self) -> (String, f64) {
        let secs = self.wall.as_secs_f64().max(1e-9);
        let host = if self.delta.host_total > 0.0 {
            self.delta.host_busy / self.delta.host_total * self.cores as f64
        } else {
            0.0
        };
        if host >= 0.9 * self.cores as f64 {
            return (format!("host_cpu_cores_busy_of_{}", self.cores), host);
        }
        self.delta
            .cpu
            .iter()
            .map(|(k, v)| (format!("{k}_cpu_cores"), v / secs))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .unwrap_or_else(|| ("unknown".into(), 0.0))
    }
}

impl Measured {
    /// The WAL of the run's window by record type, per unit (`pg_walinspect`; nothing where
    /// the extension is missing).
    pub(super) async fn print_wal_by_record(&self, db: &super::PrivateDb) {
        let (Some(from), Some(to)) = (&self.delta.wal_lsn, &self.delta.wal_lsn_end) else {
            return;
        };
        let records = db.wal_by_record(from, to).await;
        if !records.is_empty() {
            eprintln!(
                "  WAL bytes per unit by record (server-wide): {}",
                records
                    .iter()
                    .take(10)
                    .map(|(k, v)| format!("{k} {:.0}", self.per_unit(*v)))
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }

    /// The run's line: per-unit costs, utilization, latency, CPU by process, the top Redis
    /// commands.
    pub(super) fn print(&self, shape: &Shape) {
        let m = self;
        let wall = m.wall;
        eprintln!(
            "scale {}: {} units in {:.1} s ({:.1}/s); per unit: {} statements, {:.0} WAL bytes, \
         {:.1} rows, {:.1} Redis commands, scheduler {:.2} ms, API {:.2} ms, PostgreSQL {:.2} ms \
         CPU; util while waiting {:.4}; submit latency p50 {:.0} ms p99 {:.0} ms; account \
         peak {} jobs, creates refused {} (1303) + {} (1102); CPU by process (s): {:?}",
            shape.backend(),
            m.units,
            wall.as_secs_f64(),
            m.units_per_s,
            m.delta
                .pg_statements
                .map_or("?".into(), |s| format!("{:.1}", m.per_unit(s))),
            m.per_unit(m.delta.pg_wal_bytes),
            m.per_unit(m.delta.pg_rows),
            m.per_unit(m.delta.redis_commands),
            m.per_unit(m.cpu_of("scheduler")) * 1e3,
            m.per_unit(m.cpu_of("api")) * 1e3,
            m.per_unit(m.cpu_of("postgres")) * 1e3,
            m.backlog_util,
            m.latency_p50_ms,
            m.latency_p99_ms,
            m.peak_per_account,
            m.refusals.full_1303,
            m.refusals.balance_1102,
            m.delta
                .cpu
                .iter()
                .map(|(k, v)| format!("{k}={v:.1}"))
                .collect::<Vec<_>>(),
        );
        let mut statements: Vec<_> = m.delta.by_statement.values().collect();
        statements.sort_by(|a, b| {
            (b.wal_bytes + b.exec_ms + b.plan_ms).total_cmp(&(a.wal_bytes + a.exec_ms + a.plan_ms))
        });
        let line = |s: &&servers::Statement| {
            let query: String = s.query.split_whitespace().collect::<Vec<_>>().join(" ");
            eprintln!(
                "  per unit {:>5.2} calls {:>6.0} WAL bytes {:>6.3} ms + {:>6.3} ms planning: {}",
                m.per_unit(s.calls),
                m.per_unit(s.wal_bytes),
                m.per_unit(s.exec_ms),
                m.per_unit(s.plan_ms),
                shortened(&query)
            );
        };
        statements.iter().take(12).for_each(line);
        // The cheap ones count against the statements per unit too: the rest, by calls.
        let mut rest: Vec<_> = statements.iter().skip(12).collect();
        rest.sort_by(|a, b| b.calls.total_cmp(&a.calls));
        let shown = |s: &&&servers::Statement| m.per_unit(s.calls) >= 0.05;
        if rest.iter().any(&shown) {
            eprintln!("  and by calls:");
            rest.into_iter().filter(shown).for_each(line);
        }
        let mut top: Vec<(&String, &f64)> = m.delta.redis_by_command.iter().collect();
        top.sort_by(|a, b| b.1.total_cmp(a.1));
        eprintln!(
            "  Redis commands per unit: {}",
            top.iter()
                .take(10)
                .map(|(k, v)| format!("{k} {:.1}", m.per_unit(**v)))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
}

/// A statement's text for its line: the start, and the end where it is long (the end of a
/// read names its table and condition after the column list).
fn shortened(query: &str) -> String {
    let chars: Vec<char> = query.chars().collect();
    if chars.len() <= 200 {
        return query.to_string();
    }
    let head: String = chars[..80].iter().collect();
    let tail: String = chars[chars.len() - 110..].iter().collect();
    format!("{head} … {tail}")
}
