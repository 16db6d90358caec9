//! Discovered limits shared through Redis in a cluster (docs/accounts-deadlines-budgets.md
//! "Discovered from the provider"): the scheduler process that read a provider's limits
//! writes them to one hash (`discovered`, a field per pool and account, the whole hash kept
//! for three refresh periods), and a process that runs no scheduler (an API process) reads
//! that hash into its own [`Discovered`] before it shows or estimates anything, at most once
//! a second. Without Redis there is one process, which holds what it read.

use serde::{Deserialize, Serialize};

use super::discovered::{Discovered, Found, FoundQuota};
use slotd_coord::keyspace::{Keyspace, KeyspaceError};

/// How often a process that runs no scheduler reads the hash, at most (ms).
pub const PULL_EVERY_MS: i64 = 1_000;

/// One field of the hash, as JSON.
#[derive(Serialize, Deserialize)]
struct Shared {
    pool: String,
    account: Option<String>,
    max_slots: Option<u32>,
    quotas: Vec<SharedQuota>,
    at: i64,
}

#[derive(Serialize, Deserialize)]
struct SharedQuota {
    dimension: String,
    limit: u32,
    window_ms: u64,
    others: u32,
}

fn hash_key(keys: &Keyspace) -> String {
    keys.key("discovered")
}

/// Write what was found for `pool` and `account`, kept for `keep_ms`.
pub async fn publish(
    keys: &Keyspace,
    pool: &str,
    account: Option<&str>,
    found: &Found,
    keep_ms: u64,
) -> Result<(), KeyspaceError> {
    let shared = Shared {
        pool: pool.to_string(),
        account: account.map(str::to_string),
        max_slots: found.max_slots,
        quotas: found
            .quotas
            .iter()
            .map(|q| SharedQuota {
                dimension: q.dimension.to_string(),
                limit: q.limit,
                window_ms: q.window_ms,
                others: q.others,
            })
            .collect(),
        at: found.at,
    };
    let field = serde_json::to_string(&(pool, account)).unwrap_or_default();
    let value = serde_json::to_string(&shared).unwrap_or_default();
    let mut conn = keys.conn().await?;
    let key = hash_key(keys);
    redis::pipe()
        .atomic()
        .cmd("HSET")
        .arg(&key)
        .arg(field)
        .arg(value)
        .ignore()
        .cmd("PEXPIRE")
        .arg(&key)
        .arg(keep_ms.max(1))
        .ignore()
        .query_async::<()>(&mut conn)
        .await?;
    Ok(())
}

/// Replace `into`'s limits with the hash's (a field that does not parse, or names a dimension
/// this host does not know, is skipped). Returns how many were read.
pub async fn pull(keys: &Keyspace, into: &Discovered) -> Result<usize, KeyspaceError> {
    let mut conn = keys.conn().await?;
    let fields: Vec<(String, String)> = redis::cmd("HGETALL")
        .arg(hash_key(keys))
        .query_async(&mut conn)
        .await?;
    let mut read = Vec::with_capacity(fields.len());
    for (_, value) in fields {
        let Ok(s) = serde_json::from_str::<Shared>(&value) else {
            tracing::debug!("a shared discovered limit did not parse; skipped");
            continue;
        };
        let quotas = s
            .quotas
            .iter()
            .filter_map(|q| {
                Some(FoundQuota {
                    dimension: known_dimension(&q.dimension)?,
                    limit: q.limit,
                    window_ms: q.window_ms,
                    others: q.others,
                })
            })
            .collect();
        let found = Found {
            max_slots: s.max_slots,
            quotas,
            at: s.at,
        };
        read.push((s.pool, s.account, found));
    }
    let n = read.len();
    into.replace_all(read);
    Ok(n)
}

fn known_dimension(d: &str) -> Option<&'static str> {
    match d {
        "rate" => Some("rate"),
        "daily" => Some("daily"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotd_coord::keyspace::testing;

    #[tokio::test]
    async fn what_one_process_found_another_reads() {
        let keys = testing::fresh();
        let found = Found {
            max_slots: Some(2),
            quotas: vec![FoundQuota {
                dimension: "daily",
                limit: 6,
                window_ms: 40_000,
                others: 3,
            }],
            at: 7,
        };
        publish(&keys, "runway:gen4_turbo", Some("studio"), &found, 60_000)
            .await
            .expect("publish");
        publish(&keys, "runway:gen4.5", None, &found, 60_000)
            .await
            .expect("publish");
        let elsewhere = Discovered::default();
        assert_eq!(pull(&keys, &elsewhere).await.expect("pull"), 2);
        assert_eq!(
            elsewhere.get("runway:gen4_turbo", Some("studio")),
            Some(found.clone())
        );
        assert_eq!(elsewhere.get("runway:gen4.5", None), Some(found.clone()));
        assert_eq!(elsewhere.get("runway:gen4_turbo", None), None);
        // A field from a newer host naming a dimension this one does not know: that quota
        // is skipped, the rest kept; garbage is skipped whole.
        let mut conn = keys.conn().await.expect("conn");
        let _: () = redis::cmd("HSET")
            .arg(keys.key("discovered"))
            .arg("x")
            .arg(r#"{"pool":"p","account":null,"max_slots":4,"quotas":[{"dimension":"spend","limit":1,"window_ms":1,"others":0}],"at":1}"#)
            .arg("y")
            .arg("not json")
            .query_async(&mut conn)
            .await
            .expect("hset");
        assert_eq!(pull(&keys, &elsewhere).await.expect("pull"), 3);
        let p = elsewhere.get("p", None).expect("p");
        assert_eq!((p.max_slots, p.quotas.len()), (Some(4), 0));
        testing::flush(&keys).await;
    }
}
