//! What a unit's life writes under other layouts, against a target of 3 KB of WAL per unit
//! (docs/scale.md): the same life (task and unit inserted, submit marker, the provider's
//! answer, `succeeded`, `finalizing`, `completed`, in batches as a tick writes them) as SQL
//! over slotd's own schema, over a split of the columns a move changes from the rest, and over
//! the least a row per unit can cost. Each runs
//! in a database of its own on the run's server, after a checkpoint; WAL is the server's
//! position before and after (`pg_current_wal_lsn`), time the statement's wall time on an
//! otherwise idle server. The statements are written for the measurement, not slotd's own,
//! so the figures compare layouts; the scale runs measure slotd.
//!
//! `SLOTD_SCALE_ONLY=layouts cargo bench -p slotd -- scale`; the figures are
//! `scale_layout_wal_bytes_per_unit` and `scale_layout_us_per_unit`, by layout, with the
//! ratio of each to today's (docs/scale.md).

use std::time::Instant;

use super::servers::PrivateDb;
use crate::report::{Better, Report, Target};

const TODAY: &str = include_str!("layouts/today.sql");
const SPLIT: &str = include_str!("layouts/split.sql");
const LEAST: &str = include_str!("layouts/least.sql");
/// Where a layout's tables end and its life begins.
const LIFE: &str = "-- life\n";
const UNITS: usize = 5_000;
const BATCH: usize = 100;

struct Layout {
    name: &'static str,
    sql: &'static str,
    events: bool,
}

const LAYOUTS: &[Layout] = &[
    Layout {
        name: "today",
        sql: TODAY,
        events: true,
    },
    Layout {
        name: "today-no-events",
        sql: TODAY,
        events: false,
    },
    Layout {
        name: "split",
        sql: SPLIT,
        events: true,
    },
    Layout {
        name: "split-no-events",
        sql: SPLIT,
        events: false,
    },
    Layout {
        name: "least",
        sql: LEAST,
        events: false,
    },
];

/// WAL bytes and microseconds per unit.
struct Written {
    wal: f64,
    micros: f64,
}

pub(super) async fn run(report: &mut Report, own: Option<&str>) {
    let mut today: Option<Written> = None;
    for layout in LAYOUTS {
        match measure(layout, own).await {
            Ok(Some(w)) => {
                let base = today.get_or_insert(Written {
                    wal: w.wal,
                    micros: w.micros,
                });
                eprintln!(
                    "scale layout {}: {:.0} WAL bytes ({:.2}× today's), {:.0} µs per unit \
                     ({:.2}×)",
                    layout.name,
                    w.wal,
                    w.wal / base.wal,
                    w.micros,
                    w.micros / base.micros
                );
                let label = format!("layout={}", layout.name);
                report.add(
                    "scale_layout_wal_bytes_per_unit",
                    &label,
                    w.wal,
                    "B",
                    Target::AtMost(3_000.0),
                );
                report.add(
                    "scale_layout_us_per_unit",
                    &label,
                    w.micros,
                    "µs",
                    Target::None(Better::Lower),
                );
            }
            Ok(None) => {
                eprintln!("scale layouts: no PostgreSQL to measure on; skipped");
                return;
            }
            Err(e) => eprintln!("scale layout {}: {e:#}", layout.name),
        }
    }
}

async fn measure(layout: &Layout, own: Option<&str>) -> anyhow::Result<Option<Written>> {
    let Some(db) = PrivateDb::create(own).await? else {
        return Ok(None);
    };
    let written = write_life(layout, &db.url).await;
    db.drop_database().await;
    written.map(Some)
}

async fn write_life(layout: &Layout, url: &str) -> anyhow::Result<Written> {
    slotd_store::open(url).await?.migrate().await?;
    let pool = sqlx::PgPool::connect(url).await?;
    let (tables, life) = layout.sql.split_once(LIFE).unwrap_or(("", layout.sql));
    if !tables.trim().is_empty() {
        sqlx::raw_sql(tables).execute(&pool).await?;
    }
    let life = life
        .replace("{n}", &UNITS.to_string())
        .replace("{batch}", &BATCH.to_string())
        .replace("{events}", if layout.events { "true" } else { "false" });
    // Every layout starts after a checkpoint, so each pays its own first writes of a page in
    // full (a server that does not let this user checkpoint measures without it).
    if let Err(e) = sqlx::query("CHECKPOINT").execute(&pool).await {
        eprintln!("scale layouts: no checkpoint ({e}); figures include what came before");
    }
    let from: String = sqlx::query_scalar("SELECT pg_current_wal_lsn()::text")
        .fetch_one(&pool)
        .await?;
    let started = Instant::now();
    sqlx::raw_sql(&life).execute(&pool).await?;
    let elapsed = started.elapsed();
    let wal: f64 =
        sqlx::query_scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::float8")
            .bind(&from)
            .fetch_one(&pool)
            .await?;
    pool.close().await;
    Ok(Written {
        wal: wal / UNITS as f64,
        micros: elapsed.as_secs_f64() * 1e6 / UNITS as f64,
    })
}
