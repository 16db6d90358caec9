//! Cluster mode as prompt as embedded, with real processes: wakes published on
//! Redis reach the scheduler that holds the pool, so work created or freed on the API process
//! starts within milliseconds, not at the tick interval; pub/sub cut falls back to the tick
//! pace and recovers; a scheduler leaving (SIGTERM) or dying hands its pools over without an
//! idle lease period.
//!
//! The tick intervals here are long on purpose: only a wake can explain a prompt start.

use std::time::{Duration, Instant};

use serde_json::Value;

use crate::kling::TIME_SCALE;
use crate::scale_cluster::{Cluster, ClusterOptions, redis_url};
use crate::support::*;

const VIDEO: &str = "kling:video";

async fn metric(c: &Cluster, base: &str, name: &str) -> Option<f64> {
    metric_sum(&c.client, base, name).await
}

/// Wait until scheduler `i`'s wake relay is subscribed.
async fn relay_subscribed(c: &Cluster, i: usize) {
    let base = c.schedulers[i].base.clone();
    eventually(
        Duration::from_secs(20),
        "the wake relay subscribed",
        async || (metric(c, &base, "slotd_wake_relay_subscribed").await? == 1.0).then_some(()),
    )
    .await;
}

async fn submit(c: &Cluster, shots: usize) -> String {
    c.submit_videos(1, shots).await.remove(0)
}

/// Real seconds from each job's end to the next job's start, in start order (the pool has one
/// slot, so each start waited for the previous end).
fn gaps(c: &Cluster) -> Vec<f64> {
    let mut jobs = c.sim.jobs();
    jobs.sort_by(|a, b| a.started.total_cmp(&b.started));
    jobs.windows(2)
        .filter_map(|w| Some((w[1].started - w[0].ended?) * TIME_SCALE))
        .collect()
}

/// A task created on the API process is submitted by the scheduler process within
/// milliseconds: the tick interval is a minute, so only the published wake explains it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_created_on_the_api_starts_at_once_on_the_scheduler() {
    let _quiet = QUIET.lock().await;
    let opts = ClusterOptions {
        tick: Duration::from_secs(60),
        ..ClusterOptions::new(1, 31)
    };
    let c = Cluster::start_with(opts).await;
    c.holder_of(VIDEO).await;
    relay_subscribed(&c, 0).await;
    for round in 1..=3u64 {
        let t = Instant::now();
        submit(&c, 1).await;
        eventually(Duration::from_secs(30), "the shot submitted", async || {
            (c.sim.stats().creates >= round).then_some(())
        })
        .await;
        let took = t.elapsed();
        eprintln!("round {round}: created {took:?} after the POST");
        assert!(
            took < Duration::from_secs(5),
            "the shot waited {took:?}: the scheduler was not woken"
        );
    }
    let woken = metric(&c, &c.schedulers[0].base, "slotd_wake_received_total")
        .await
        .unwrap_or(0.0);
    assert!(woken >= 3.0, "the scheduler heard {woken} wakes");
}

/// With callbacks to the API process and one slot, each callback frees the slot there and
/// the scheduler process submits the next shot within milliseconds (polls are a minute apart
/// and so is the tick: neither can explain it), and its finalizer stores the result at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_applied_on_the_api_refills_the_slot_at_once() {
    let _quiet = QUIET.lock().await;
    let opts = ClusterOptions {
        tick: Duration::from_secs(60),
        video_slots: 1,
        callbacks: true,
        ..ClusterOptions::new(1, 32)
    };
    let c = Cluster::start_with(opts).await;
    c.holder_of(VIDEO).await;
    relay_subscribed(&c, 0).await;
    let t = Instant::now();
    let id = submit(&c, 4).await;
    c.wait_completed(&[id]).await;
    // Each unit's end reaches the scheduler's finalizer (the download) by a wake too: with
    // the minute-long tick as its only pace, the task could not be done this soon.
    let took = t.elapsed();
    assert!(took < Duration::from_secs(20), "the task took {took:?}");
    let gaps = gaps(&c);
    eprintln!("end → next start, s: {gaps:?}");
    assert_eq!(gaps.len(), 3, "four shots one after the other");
    for g in &gaps {
        assert!(*g < 5.0, "a freed slot waited {g} s");
    }
    assert!(c.sim.stats().callbacks_sent >= 4);
}

/// A Redis user of the test's own, so pub/sub can be taken from the cluster alone: `cut`
/// forbids its channels and drops its subscriptions; `restore` allows them again.
struct RedisUser {
    name: String,
    admin: redis::aio::MultiplexedConnection,
}

impl RedisUser {
    async fn create() -> (RedisUser, String) {
        let name = format!("slotd-e2e-{}", uuid::Uuid::new_v4().simple());
        let password = uuid::Uuid::new_v4().simple().to_string();
        let client = redis::Client::open(redis_url()).expect("redis url");
        let mut admin = client
            .get_multiplexed_async_connection()
            .await
            .expect("redis");
        let _: () = redis::cmd("ACL")
            .arg(
                &[
                    "SETUSER",
                    &name,
                    "on",
                    &format!(">{password}"),
                    "~*",
                    "&*",
                    "+@all",
                ][..],
            )
            .query_async(&mut admin)
            .await
            .expect("ACL SETUSER");
        let mut url = url::Url::parse(&redis_url()).expect("redis url");
        url.set_username(&name).expect("user");
        url.set_password(Some(&password)).expect("password");
        (RedisUser { name, admin }, url.to_string())
    }

    async fn acl(&mut self, rules: &[&str]) {
        let _: () = redis::cmd("ACL")
            .arg("SETUSER")
            .arg(&self.name)
            .arg(rules)
            .query_async(&mut self.admin)
            .await
            .expect("ACL SETUSER");
    }

    async fn cut(&mut self) {
        self.acl(&["-publish", "-subscribe", "-psubscribe"]).await;
        let _: i64 = redis::cmd("CLIENT")
            .arg(&["KILL", "USER", &self.name, "TYPE", "pubsub"][..])
            .query_async(&mut self.admin)
            .await
            .expect("CLIENT KILL");
    }

    async fn restore(&mut self) {
        self.acl(&["+publish", "+subscribe", "+psubscribe"]).await;
    }
}

impl Drop for RedisUser {
    fn drop(&mut self) {
        let name = self.name.clone();
        let mut admin = self.admin.clone();
        // Best effort: the user only exists for this test.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .ok()?;
            rt.block_on(async {
                redis::cmd("ACL")
                    .arg(&["DELUSER", &name][..])
                    .query_async::<i64>(&mut admin)
                    .await
                    .ok()
            })
        })
        .join();
    }
}

/// Pub/sub cut mid-run: the run goes on at the tick pace (a freed slot waits for the next
/// tick) and completes; once pub/sub is back, the relay re-subscribes and slots are refilled
/// within milliseconds again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pub_sub_cut_falls_back_to_the_tick_and_recovers() {
    let _quiet = QUIET.lock().await;
    let (mut user, url) = RedisUser::create().await;
    let tick = Duration::from_millis(1500);
    let opts = ClusterOptions {
        tick,
        video_slots: 1,
        callbacks: true,
        redis_url: url,
        ..ClusterOptions::new(1, 33)
    };
    let c = Cluster::start_with(opts).await;
    c.holder_of(VIDEO).await;
    relay_subscribed(&c, 0).await;
    let id = submit(&c, 12).await;
    c.wait_creates(2).await;
    user.cut().await;
    let cut_at = c.sim.stats().creates;
    eventually(Duration::from_secs(20), "the relay noticed", async || {
        (metric(&c, &c.schedulers[0].base, "slotd_wake_relay_subscribed").await? == 0.0)
            .then_some(())
    })
    .await;
    // Progress without pub/sub: at the tick's pace.
    c.wait_creates(cut_at + 4).await;
    user.restore().await;
    relay_subscribed(&c, 0).await;
    let restored_at = c.sim.stats().creates;
    c.wait_completed(&[id]).await;
    let gaps = gaps(&c);
    eprintln!("end → next start, s: {gaps:?} (cut after {cut_at}, back after {restored_at})");
    // Gap k is the wait before job k + 1 (0-based) started.
    let cut: Vec<f64> = gaps[cut_at as usize..(cut_at as usize + 3)].to_vec();
    let after: Vec<f64> = gaps[restored_at as usize..].to_vec();
    assert!(!after.is_empty(), "shots left after the restore");
    assert!(
        cut.iter().any(|g| *g > 0.1),
        "without pub/sub a freed slot waits for a tick: {cut:?}"
    );
    for g in &after {
        assert!(*g < 1.0, "after the restore a freed slot waited {g} s");
    }
}

/// A scheduler stopped with SIGTERM gives its leases up and says so: the other takes its pools
/// at once, not at its next coordinator round (a third of a 10 s lease period), and the time
/// the pool spent without a holder, shown on `GET /v1/pools`, is a few milliseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_the_pools_over_without_an_idle_period() {
    let _quiet = QUIET.lock().await;
    let opts = ClusterOptions {
        lease_ttl: Duration::from_secs(10),
        ..ClusterOptions::new(2, 34)
    };
    let mut c = Cluster::start_with(opts).await;
    relay_subscribed(&c, 0).await;
    relay_subscribed(&c, 1).await;
    let holder = c.holder_of(VIDEO).await;
    let before = unheld_ms(&c, VIDEO).await;
    let t = Instant::now();
    c.schedulers[holder].signal("TERM");
    let other = eventually(Duration::from_secs(30), "the pool taken over", async || {
        let h = c.try_holder_of(VIDEO).await?;
        (h != holder).then_some(h)
    })
    .await;
    eprintln!("taken over {:?} after SIGTERM", t.elapsed());
    // Before, the others looked at the leases every third of a lease period: up to 3.3 s.
    let gap = unheld_ms(&c, VIDEO).await - before;
    assert!(gap < 300, "the pool went {gap} ms without a holder");
    c.schedulers[holder].child.wait().ok();
    assert_ne!(other, holder);
}

/// A scheduler killed outright keeps its lease until it runs out; the other takes the pool
/// right then, within one lease period of the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_scheduler_s_pools_are_taken_within_one_lease_period() {
    let _quiet = QUIET.lock().await;
    let ttl = Duration::from_secs(6);
    let opts = ClusterOptions {
        lease_ttl: ttl,
        ..ClusterOptions::new(2, 35)
    };
    let c = Cluster::start_with(opts).await;
    let holder = c.holder_of(VIDEO).await;
    let before = unheld_ms(&c, VIDEO).await;
    let t = Instant::now();
    c.schedulers[holder].signal("KILL");
    eventually(Duration::from_secs(30), "the pool taken over", async || {
        let h = c.try_holder_of(VIDEO).await?;
        (h != holder).then_some(h)
    })
    .await;
    let took = t.elapsed();
    let gap = unheld_ms(&c, VIDEO).await - before;
    eprintln!("taken over {took:?} after SIGKILL; {gap} ms without a holder");
    // The lease runs out at most one period after the kill; the others are there at once
    // (before, they came by every third of a period: up to 2 s later).
    assert!(took < ttl + Duration::from_millis(500), "{took:?}");
    assert!(gap < 300, "the pool went {gap} ms without a holder");
}

/// `lease.unheld_ms_total` of `pool` on `GET /v1/pools`.
async fn unheld_ms(c: &Cluster, pool: &str) -> u64 {
    let pools: Value = c
        .client
        .get(format!("{}/v1/pools", c.api.base))
        .send()
        .await
        .expect("pools")
        .json()
        .await
        .expect("json");
    pools
        .as_array()
        .and_then(|a| a.iter().find(|p| p["name"] == pool))
        .and_then(|p| p["lease"]["unheld_ms_total"].as_u64())
        .unwrap_or_else(|| panic!("no lease figure for {pool} in {pools}"))
}
