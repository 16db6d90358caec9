//! The checks that read a second system besides the database: the object store (every
//! `completed` unit's artifacts exist with the recorded size and sha256) and Redis (slot sets
//! equal the `submitted` units; fencing tokens only grow).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Context;
use futures::StreamExt;
use serde_json::Value;
use sha2::{Digest, Sha256};

use super::rows::{Finding, Snapshot, UnitRow};
use slotd_coord::keyspace::Keyspace;
use slotd_objects::Objects;

/// A slot set and the database are compared twice this far apart before a difference is
/// reported: between a grant and its submit marker (or a release after a commit) they differ
/// for a moment on a live system.
const SLOT_RECHECK: Duration = Duration::from_millis(1_500);

/// One artifact a completed unit's result records.
struct Recorded {
    key: String,
    bytes: Option<u64>,
    sha256: Option<String>,
}

fn recorded_artifacts(unit: &UnitRow) -> Result<Vec<Recorded>, String> {
    let Some(text) = unit.result.as_deref() else {
        return Ok(Vec::new());
    };
    let v: Value =
        serde_json::from_str(text).map_err(|e| format!("the result is not JSON: {e}"))?;
    let list = v
        .get("artifacts")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    list.iter()
        .map(|a| {
            let key = a
                .get("object_key")
                .and_then(Value::as_str)
                .ok_or_else(|| format!("an artifact has no object_key: {a}"))?;
            Ok(Recorded {
                key: key.to_string(),
                bytes: a.get("bytes").and_then(Value::as_u64),
                sha256: a.get("sha256").and_then(Value::as_str).map(String::from),
            })
        })
        .collect()
}

/// Verify every completed unit's artifacts; returns the findings and how many were checked.
pub async fn objects(url: &str, snap: &Snapshot) -> anyhow::Result<(Vec<Finding>, usize)> {
    let store = Objects::open(url).with_context(|| format!("opening the object store {url}"))?;
    let mut out = Vec::new();
    let mut checked = 0;
    for unit in snap.units.iter().filter(|u| u.status == "completed") {
        let finding = |message: String| Finding {
            kind: "artifact",
            task_id: Some(unit.task_id.clone()),
            unit_id: Some(unit.id.clone()),
            message,
        };
        let artifacts = match recorded_artifacts(unit) {
            Ok(a) => a,
            Err(e) => {
                out.push(finding(e));
                continue;
            }
        };
        for a in artifacts {
            checked += 1;
            match digest(&store, &a.key).await {
                Err(e) => out.push(finding(format!("{} cannot be read: {e:#}", a.key))),
                Ok((bytes, sha)) => {
                    if a.bytes.is_some_and(|b| b != bytes) {
                        out.push(finding(format!(
                            "{} has {bytes} bytes; {} were recorded",
                            a.key,
                            a.bytes.unwrap_or_default()
                        )));
                    }
                    if a.sha256.as_deref().is_some_and(|s| s != sha) {
                        out.push(finding(format!(
                            "{} has sha256 {sha}; {} was recorded",
                            a.key,
                            a.sha256.as_deref().unwrap_or_default()
                        )));
                    }
                }
            }
        }
    }
    Ok((out, checked))
}

/// Size and sha256 of a stored object, streamed.
async fn digest(store: &Objects, key: &str) -> anyhow::Result<(u64, String)> {
    let mut stream = store.get_stream(key).await?;
    let mut hasher = Sha256::new();
    let mut bytes = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk = chunk?;
        bytes += chunk.len() as u64;
        hasher.update(&chunk);
    }
    Ok((bytes, hex::encode(hasher.finalize())))
}

/// Slot sets against `submitted` units, and fencing tokens against the counter Redis issues
/// them from.
pub async fn redis(
    url: &str,
    prefix: &str,
    database_url: &str,
    snap: &Snapshot,
) -> anyhow::Result<Vec<Finding>> {
    let keys = Keyspace::new(url, prefix)?;
    let mut conn = keys.conn().await.context("connecting to Redis")?;
    // One slot set per pool and account (`pool@account`; the pool's own for the implicit one).
    let mut submitted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for u in &snap.units {
        let set = submitted
            .entry(slotd_pools::pool_state::slot_key(
                &u.pool,
                u.account.as_deref(),
            ))
            .or_default();
        if u.status == "submitted" {
            // Slot sets name submissions: a holder of an earlier submission of a unit
            // submitted again is a slot nobody will release.
            set.insert(slotd_coord::slots::holder(
                &u.id,
                u.submitted_at.unwrap_or(0),
            ));
        }
    }
    let mut out = Vec::new();
    for (pool, in_db) in &submitted {
        let set_key = keys.key(&format!("slots:{pool}"));
        let in_redis: BTreeSet<String> = redis::cmd("SMEMBERS")
            .arg(&set_key)
            .query_async(&mut conn)
            .await?;
        if in_redis == *in_db {
            continue;
        }
        // A live system differs for a moment around each grant and release: look again.
        tokio::time::sleep(SLOT_RECHECK).await;
        let again: BTreeSet<String> = redis::cmd("SMEMBERS")
            .arg(&set_key)
            .query_async(&mut conn)
            .await?;
        let db_again = super::read::submitted_holders(database_url, pool).await?;
        let extra: Vec<&String> = in_redis
            .difference(in_db)
            .filter(|id| again.contains(*id) && !db_again.contains(*id))
            .collect();
        let missing: Vec<&String> = in_db
            .difference(&in_redis)
            .filter(|id| !again.contains(*id) && db_again.contains(*id))
            .collect();
        // An empty, unmarked set is a flushed Redis: the scheduler rebuilds it before granting.
        let rebuilt_later = again.is_empty()
            && !redis::cmd("EXISTS")
                .arg(keys.key(&format!("slots:{pool}:ok")))
                .query_async::<bool>(&mut conn)
                .await?;
        if !extra.is_empty() {
            out.push(Finding {
                kind: "slots",
                task_id: None,
                unit_id: None,
                message: format!(
                    "pool {pool}: Redis holds slots for submissions that are not submitted \
                     (unit@submitted_at): {extra:?}"
                ),
            });
        }
        if !missing.is_empty() && !rebuilt_later {
            out.push(Finding {
                kind: "slots",
                task_id: None,
                unit_id: None,
                message: format!(
                    "pool {pool}: submitted units hold no slot in Redis \
                     (unit@submitted_at): {missing:?}"
                ),
            });
        }
    }
    for (pool, token) in &snap.fences {
        let issued: Option<i64> = redis::cmd("GET")
            .arg(keys.fence_key(pool))
            .query_async(&mut conn)
            .await?;
        if let Some(issued) = issued
            && *token > issued
        {
            out.push(Finding {
                kind: "fencing",
                task_id: None,
                unit_id: None,
                message: format!(
                    "pool {pool}: the database has seen token {token}, above the {issued} Redis \
                     last issued: a new lease would be fenced out"
                ),
            });
        }
    }
    Ok(out)
}
