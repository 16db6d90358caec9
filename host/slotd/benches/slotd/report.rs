//! The figures of one run: printed as one table (SQLite and PostgreSQL side by side, each
//! figure beside its docs/testing.md target and the ratio) and written to `target/slotd-bench.json`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Serialize;

/// Which way a figure should go to meet its target.
#[derive(Clone, Copy, Debug, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Better {
    Lower,
    Higher,
}

/// One measured figure.
#[derive(Clone, Debug, Serialize)]
pub struct Record {
    pub name: String,
    /// `sqlite`, `postgres`, `cluster` (PostgreSQL and Redis, one API and two scheduler
    /// processes), or `-` for figures that do not depend on the database.
    pub backend: String,
    pub value: f64,
    pub unit: String,
    /// The docs/testing.md target, if the figure has one.
    pub target: Option<f64>,
    pub better: Better,
}

impl Record {
    /// Whether the figure meets its target (`None` without one).
    pub fn met(&self) -> Option<bool> {
        let t = self.target?;
        Some(match self.better {
            Better::Lower => self.value <= t,
            Better::Higher => self.value >= t,
        })
    }

    /// value / target (how far under or over it is).
    pub fn ratio(&self) -> Option<f64> {
        let t = self.target?;
        (t != 0.0).then(|| self.value / t)
    }
}

/// The figures gathered so far, in the order they were measured.
#[derive(Default)]
pub struct Report {
    pub records: Vec<Record>,
}

impl Report {
    pub fn add(&mut self, name: &str, backend: &str, value: f64, unit: &str, target: Target) {
        let (target, better) = match target {
            Target::AtMost(t) => (Some(t), Better::Lower),
            Target::AtLeast(t) => (Some(t), Better::Higher),
            Target::None(better) => (None, better),
        };
        self.records.push(Record {
            name: name.into(),
            backend: backend.into(),
            value,
            unit: unit.into(),
            target,
            better,
        });
    }

    /// The table: one row per figure, a column per backend.
    pub fn print(&self) {
        let mut rows: BTreeMap<usize, (&str, BTreeMap<&str, &Record>)> = BTreeMap::new();
        let mut order: Vec<&str> = Vec::new();
        for r in self
            .records
            .iter()
            .filter(|r| !GROUPED.iter().any(|g| r.backend.starts_with(g.0)))
        {
            let i = match order.iter().position(|n| *n == r.name) {
                Some(i) => i,
                None => {
                    order.push(&r.name);
                    order.len() - 1
                }
            };
            rows.entry(i)
                .or_insert_with(|| (&r.name, BTreeMap::new()))
                .1
                .insert(&r.backend, r);
        }
        println!();
        println!(
            "{:<28} {:>22} {:>22} {:>22} {:>12}  {:<6}",
            "figure", "sqlite (ratio)", "postgres (ratio)", "cluster (ratio)", "target", "unit"
        );
        println!("{}", "-".repeat(119));
        for (name, by_backend) in rows.values() {
            let any = by_backend.values().next().copied();
            let cell = |b: &str| match by_backend.get(b) {
                Some(r) => format!(
                    "{}{}",
                    if r.unit == "ratio" || r.unit == "x" {
                        format!("{:.4}", r.value)
                    } else {
                        fmt_value(r.value)
                    },
                    match (r.ratio(), r.met()) {
                        (Some(q), Some(ok)) => format!(" ({q:.2}{})", if ok { "" } else { " ✗" }),
                        _ => String::new(),
                    }
                ),
                None => String::new(),
            };
            let (sqlite, postgres, cluster) = if by_backend.contains_key("-") {
                (cell("-"), "  (any backend)".to_string(), String::new())
            } else {
                (cell("sqlite"), cell("postgres"), cell("cluster"))
            };
            let target = any
                .and_then(|r| {
                    r.target.map(|t| {
                        let op = if r.better == Better::Lower {
                            "≤"
                        } else {
                            "≥"
                        };
                        if r.unit == "ratio" || r.unit == "x" {
                            format!("{op} {t:.4}")
                        } else {
                            format!("{op} {}", fmt_value(t))
                        }
                    })
                })
                .unwrap_or_default();
            println!(
                "{name:<28} {sqlite:>22} {postgres:>22} {cluster:>22} {target:>12}  {:<6}",
                any.map(|r| r.unit.as_str()).unwrap_or("")
            );
        }
        for (prefix, title) in GROUPED {
            self.print_grouped(prefix, title);
        }
        let missed: Vec<String> = self
            .records
            .iter()
            .filter(|r| r.met() == Some(false))
            .map(|r| format!("{} ({})", r.name, r.backend))
            .collect();
        println!();
        if missed.is_empty() {
            println!("every figure with a target meets it");
        } else {
            println!("targets missed: {}", missed.join(", "));
        }
    }

    /// The figures whose backend starts with `prefix` (see [`GROUPED`]): a column per shape
    /// (a deployment `accounts=N,schedulers=M`, a `layout=NAME`), and for per-unit costs the
    /// spread (largest over smallest) across them.
    fn print_grouped(&self, prefix: &str, title: &str) {
        let scale: Vec<&Record> = self
            .records
            .iter()
            .filter(|r| r.backend.starts_with(prefix))
            .collect();
        if scale.is_empty() {
            return;
        }
        let mut columns: Vec<&str> = Vec::new();
        let mut names: Vec<&str> = Vec::new();
        for r in &scale {
            if !columns.contains(&r.backend.as_str()) {
                columns.push(&r.backend);
            }
            if !names.contains(&r.name.as_str()) {
                names.push(&r.name);
            }
        }
        let short = |b: &str| {
            b.replace("accounts=", "N=")
                .replace(",schedulers=", " M=")
                .replace("layout=", "")
        };
        println!();
        print!("{title:<38}");
        for c in &columns {
            print!(" {:>13}", short(c));
        }
        println!(" {:>9} {:>10}  unit", "max/min", "target");
        println!("{}", "-".repeat(38 + 14 * columns.len() + 28));
        for name in names {
            let row: Vec<Option<&&Record>> = columns
                .iter()
                .map(|c| scale.iter().find(|r| r.name == name && r.backend == *c))
                .collect();
            print!("{name:<38}");
            for cell in &row {
                match cell {
                    Some(r) => {
                        let mark = if r.met() == Some(false) { "✗" } else { "" };
                        print!(" {:>13}", format!("{}{mark}", fmt_value(r.value)));
                    }
                    None => print!(" {:>13}", ""),
                }
            }
            let values: Vec<f64> = row.iter().flatten().map(|r| r.value).collect();
            let spread = match (
                values.iter().copied().reduce(f64::min),
                values.iter().copied().reduce(f64::max),
            ) {
                (Some(lo), Some(hi)) if name.ends_with("_per_unit") && lo > 0.0 => {
                    format!("{:.2}", hi / lo)
                }
                _ => String::new(),
            };
            let any = row.iter().flatten().next();
            let target = any
                .and_then(|r| {
                    r.target.map(|t| {
                        let op = if r.better == Better::Lower {
                            "≤"
                        } else {
                            "≥"
                        };
                        format!("{op} {}", fmt_value(t))
                    })
                })
                .unwrap_or_default();
            println!(
                " {spread:>9} {target:>10}  {}",
                any.map(|r| r.unit.as_str()).unwrap_or("")
            );
        }
    }

    /// `[{name, backend, value, unit, target, better}]`, for scripts that compare runs.
    pub fn write_json(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = serde_json::to_string_pretty(&self.records).map_err(std::io::Error::other)?;
        std::fs::write(path, text + "\n")
    }
}

/// A figure of the scale group (its backend names a deployment).
/// Figures printed in tables of their own, a column per shape: the scale runs (backend
/// `accounts=N,schedulers=M`) and the layouts they compare (`layout=NAME`).
const GROUPED: [(&str, &str); 2] = [("accounts=", "scale figure"), ("layout=", "layout figure")];

/// A figure's docs/testing.md target.
#[derive(Clone, Copy, Debug)]
pub enum Target {
    AtMost(f64),
    AtLeast(f64),
    /// Reported for context, with no target.
    None(Better),
}

fn fmt_value(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else if v.abs() >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}
