//! `slotd check` as an operator runs it (the real binary, read-only) on a database a real run
//! produced: clean first, then corrupted one way at a time, each reported with a finding that
//! names the unit and what is wrong, and exit status 1.

use std::process::Command;

use serde_json::json;
use sqlx::Connection;

use crate::support::*;

/// Run `slotd check` on `database_url` (and the object store); (exit ok, stdout).
fn slotd_check(database_url: &str, objects_url: &str) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_slotd"))
        .args(["check", "--database", database_url, "--objects"])
        .args(["--object-store", objects_url])
        .env_remove("SLOTD_CONFIG")
        .env_remove("SLOTD_REDIS_URL")
        .output()
        .expect("run slotd check");
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    (out.status.success(), format!("{stdout}{stderr}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reports_each_corruption_of_a_real_database() {
    let m = Manual::start(3, 100).await;
    let id = m.submit("fixture", json!({"count": 4})).await;
    m.run_until(&["fixture"], 300, async |m| {
        m.task(&id).await["status"] == "completed"
    })
    .await;
    let db = m.services.config.database_url.clone();
    let objects = m.services.config.object_store.clone();
    let (ok, out) = slotd_check(&db, &objects);
    assert!(ok, "a clean run must pass: {out}");
    assert!(out.contains("4 units"), "{out}");
    assert!(out.contains("4 artifacts"), "{out}");
    // The library agrees; from here on the database is corrupted on purpose.
    m.check().await;

    let view = m.task(&id).await;
    let units = m
        .services
        .store
        .task_units(&id)
        .await
        .expect("units of the task");
    let unit = |i: usize| units[i].id.clone();
    let mut conn = sqlx::SqliteConnection::connect(&db).await.expect("open db");
    let exec = async |conn: &mut sqlx::SqliteConnection, sql: &str, arg: &str| {
        sqlx::query(sql)
            .bind(arg)
            .execute(conn)
            .await
            .expect("corrupt the database");
    };

    // The database refuses illegal moves itself; a database corrupted by other means (an old
    // backup, a hand edit) is what `slotd check` is for, so the trigger goes first.
    exec(&mut conn, "DROP TRIGGER units_legal_move", "").await;
    // 1. A completed unit set back to submitted (no event says so).
    exec(
        &mut conn,
        "UPDATE units SET status = 'submitted' WHERE id = ?1",
        &unit(0),
    )
    .await;
    let (ok, out) = slotd_check(&db, &objects);
    assert!(!ok, "{out}");
    assert!(
        out.contains(&format!("unit {}", unit(0)))
            && out.contains("ends in completed, but the unit is submitted"),
        "{out}"
    );

    // 2. An illegal event: completed -> pending.
    exec(
        &mut conn,
        "INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage) \
         SELECT id, task_id, 0, 'completed', 'pending', stage FROM units WHERE id = ?1",
        &unit(1),
    )
    .await;
    let (ok, out) = slotd_check(&db, &objects);
    assert!(!ok);
    assert!(
        out.contains("illegal transition") && out.contains("completed -> pending"),
        "{out}"
    );

    // 3. A missing object.
    let key = view["results"][2]["object_key"]
        .as_str()
        .expect("object key")
        .to_string();
    let root = objects.strip_prefix("file://").expect("local store");
    std::fs::remove_file(std::path::Path::new(root).join(&key)).expect("delete the object");
    let (ok, out) = slotd_check(&db, &objects);
    assert!(!ok);
    assert!(
        out.contains(&format!("unit {}", unit(2))) && out.contains("cannot be read"),
        "{out}"
    );

    // 4. One idempotency key accepted as a second provider job.
    exec(
        &mut conn,
        "INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail) \
         SELECT id, task_id, 0, 'completed', 'completed', stage, \
             'accepted as provider job forged-1' FROM units WHERE id = ?1",
        &unit(3),
    )
    .await;
    let (ok, out) = slotd_check(&db, &objects);
    assert!(!ok);
    assert!(
        out.contains("submitted twice") && out.contains("forged-1"),
        "{out}"
    );
    assert!(out.contains("finding(s)"), "{out}");

    // A database that is not there is an error, not a clean report (and nothing is created).
    let missing = format!("sqlite://{}/nope.db", root);
    let (ok, out) = slotd_check(&missing, &objects);
    assert!(!ok, "{out}");
    assert!(!std::path::Path::new(root).join("nope.db").exists());
}
