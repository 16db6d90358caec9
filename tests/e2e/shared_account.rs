//! One Kling account of 20 over two pools (docs/accounts-deadlines-budgets.md "One account,
//! many pools"): `kling:video` (min 14, max 20) and `kling:avatar` (min 2, max 6). Video alone
//! borrows the whole account; avatar clones submitted mid-run get their 2 guaranteed slots as
//! the first video slots free, more only later; the simulator never runs more than 20 of ours
//! (it would take 22, so an overshoot shows as a job too many, not as a refusal). The same with
//! two schedulers, one per pool, sharing the account through Redis; `slotd check` replays the
//! unit log against the account's limit in both.

use std::collections::BTreeMap;
use std::time::Duration;

use slotd_core::config::{ProviderAccountConfig, ShareConfig};
use slotd_sim::kling::{SimJob, SimOptions};

use slotd::demo::report::{peak_running as peak, pool_of_kind};

use crate::kling::{Run, avatar_payload, sim_options, video_payload};
use crate::scale_cluster::{Cluster, ClusterOptions};
use crate::support::*;

/// Slower than the other Kling tests (a clip takes 0.3–1.2 s): the avatars are submitted
/// while the video backlog is still several waves long.
const SCALE: f64 = 0.01;
const ACCOUNT: u32 = 20;

fn is_avatar(j: &SimJob) -> bool {
    pool_of_kind(&j.kind) == "kling:avatar"
}

/// The shares on `[provider_accounts.kling]`.
fn shares(c: &mut slotd_core::config::Config) {
    c.pools.remove("kling:video");
    c.pools.remove("kling:avatar");
    let share = |min, max| ShareConfig {
        min,
        max: Some(max),
        account: None,
    };
    c.provider_accounts.insert(
        "kling".into(),
        ProviderAccountConfig {
            max_slots: ACCOUNT,
            pools: BTreeMap::from([
                ("kling:video".to_string(), share(14, 20)),
                ("kling:avatar".to_string(), share(2, 6)),
            ]),
        },
    );
}

/// What the simulator saw, checked against the shares: never above the account; video alone
/// used all of it before the avatars came; the avatars' first two jobs started within one
/// video job's time of their submission (`submitted_at`, simulated seconds), and they never
/// held more than their max.
fn assert_shares_held(jobs: &[SimJob], max_running: u32, submitted_at: f64) {
    assert!(
        max_running <= ACCOUNT,
        "the simulator ran {max_running} of ours at once; the account allows {ACCOUNT}"
    );
    let video: Vec<&SimJob> = jobs.iter().filter(|j| !is_avatar(j)).collect();
    let avatar: Vec<&SimJob> = jobs.iter().filter(|j| is_avatar(j)).collect();
    let before: Vec<&SimJob> = video
        .iter()
        .copied()
        .filter(|j| j.started < submitted_at)
        .collect();
    assert_eq!(
        peak(&before),
        ACCOUNT as usize,
        "video alone borrowed the whole account"
    );
    let mut starts: Vec<f64> = avatar.iter().map(|j| j.started).collect();
    starts.sort_by(f64::total_cmp);
    // The first two slots to free after the submission are the avatars': they come when the
    // second of the video jobs running then ends (plus the scheduler's own turnaround: a
    // second of real time on a loaded machine is 100 simulated seconds here). Without the
    // kept minimum they would wait behind the whole video backlog.
    let mut ends: Vec<f64> = before
        .iter()
        .filter_map(|j| j.ended)
        .filter(|e| *e > submitted_at)
        .collect();
    ends.sort_by(f64::total_cmp);
    let second_free = ends.get(1).copied().unwrap_or(submitted_at);
    let bound = second_free + 100.0;
    assert!(
        starts.len() >= 2 && starts[1] <= bound,
        "the avatars' 2 guaranteed slots came at {:?}, submitted at {submitted_at:.0} s; \
         the second video slot freed at {second_free:.0} s",
        &starts[..starts.len().min(2)]
    );
    let last_video = video.iter().map(|j| j.started).fold(0.0, f64::max);
    let avatars_at_once = peak(&avatar);
    assert!(
        (2..=6).contains(&avatars_at_once),
        "avatars held {avatars_at_once} at once; their share is 2 to 6"
    );
    println!(
        "shared account: avatars submitted at {submitted_at:.0} s, the second video slot freed \
         at {second_free:.0} s, the avatars' first two jobs at {:.0} s and {:.0} s (the last \
         video job started at {last_video:.0} s); avatars at once {avatars_at_once}; the \
         account at once {max_running}",
        starts[0], starts[1]
    );
}

/// Simulated seconds since the simulator's first create.
fn sim_now(sim: &slotd_sim::kling::SimHandle) -> f64 {
    sim.first_create()
        .map_or(0.0, |t| t.elapsed().as_secs_f64() / SCALE)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn video_borrows_the_account_and_avatars_get_their_minimum_as_video_slots_free() {
    let opts = SimOptions {
        concurrency: ACCOUNT + 2,
        time_scale: SCALE,
        ..sim_options(71)
    };
    let run = Run::start_with(opts, ACCOUNT, false, shares).await;
    let mut ids = Vec::new();
    for _ in 0..6 {
        ids.push(run.submit("video", video_payload(20)).await);
    }
    // Video alone: the whole account at once.
    eventually(
        Duration::from_secs(60),
        "20 video jobs at once",
        async || (run.sim.stats().running >= ACCOUNT).then_some(()),
    )
    .await;
    let submitted_at = sim_now(&run.sim);
    for _ in 0..8 {
        ids.push(run.submit("avatar_clone", avatar_payload()).await);
    }
    // The pool's view while both wait: the account's slots, the avatar share kept for it.
    let pools = eventually(
        Duration::from_secs(60),
        "avatar shown waiting",
        async || {
            let pools = get_json(&run.client, &format!("{}/v1/pools", run.base)).await?;
            let avatar = pools
                .as_array()?
                .iter()
                .find(|p| p["name"] == "kling:avatar")?
                .clone();
            let share = avatar["shared_accounts"].get(0)?.clone();
            (share["waiting"] == true || share["held"].as_u64()? > 0).then_some(share)
        },
    )
    .await;
    assert_eq!(pools["account"], "kling");
    assert_eq!(pools["max_slots"], ACCOUNT);
    assert_eq!(
        (pools["min"].as_u64(), pools["max"].as_u64()),
        (Some(2), Some(6))
    );
    let views = run.wait_terminal(&ids, Duration::from_secs(240)).await;
    for v in &views {
        assert_eq!(v["status"], "completed", "{v}");
    }
    let stats = run.sim.stats();
    assert_shares_held(&run.sim.jobs(), stats.max_running, submitted_at);
    assert_eq!(stats.rate_limited_1303, 0, "the provider refused nothing");
    run.stop().await;
}

/// Two schedulers, one per pool, with the account in Redis: the same shares hold across them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_accounts_limit_holds_across_two_schedulers_driving_its_two_pools() {
    let mut opts = ClusterOptions::new(2, 72);
    opts.time_scale = SCALE;
    opts.video_slots = ACCOUNT;
    opts.avatar_slots = 6;
    opts.sim_concurrency = ACCOUNT + 2;
    opts.shared = Some((ACCOUNT, 14, 2));
    let c = Cluster::start_with(opts).await;
    eventually(
        Duration::from_secs(30),
        "one pool per scheduler",
        async || {
            let video = c.try_holder_of("kling:video").await?;
            let avatar = c.try_holder_of("kling:avatar").await?;
            (video != avatar).then_some(())
        },
    )
    .await;
    let mut ids = c.submit_videos(6, 20).await;
    eventually(
        Duration::from_secs(60),
        "20 video jobs at once",
        async || (c.sim.stats().running >= ACCOUNT).then_some(()),
    )
    .await;
    let submitted_at = sim_now(&c.sim);
    for _ in 0..8 {
        ids.push(
            post_task(
                &c.client,
                &c.api.base,
                "avatar_clone",
                serde_json::json!({ "payload": avatar_payload() }),
            )
            .await,
        );
    }
    c.wait_completed(&ids).await;
    let stats = c.sim.stats();
    assert_shares_held(&c.sim.jobs(), stats.max_running, submitted_at);
    assert_eq!(stats.rate_limited_1303, 0, "the provider refused nothing");
}

/// A share that names a slot set its pool's handler does not have is refused at start-up,
/// naming the key: an account the handler lacks, a handler account left unnamed where the
/// handler has several.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_share_on_an_account_its_handler_does_not_serve_is_refused_naming_the_key() {
    let sim = slotd_sim::kling::start(sim_options(73))
        .await
        .expect("simulator");
    let refused = async |adjust: &dyn Fn(&mut slotd_core::config::Config)| {
        let dir = tempfile::TempDir::new().expect("tmp");
        let mut c = crate::kling::kling_config(dir.path(), &sim, ACCOUNT);
        shares(&mut c);
        adjust(&mut c);
        match slotd_server::app::build_with_clock(c, system_clock()).await {
            Ok(_) => panic!("slotd started with a share its handler does not serve"),
            Err(e) => format!("{e:#}"),
        }
    };
    let e = refused(&|c| {
        if let Some(a) = c.provider_accounts.get_mut("kling") {
            a.pools.entry("kling:video".into()).or_default().account = Some("main".into());
        }
    })
    .await;
    assert!(
        e.contains("provider_accounts.kling.pools.\"kling:video\".account")
            && e.contains("kling-video"),
        "{e}"
    );
    let e = refused(&|c| {
        let accounts: toml::Table =
            toml::from_str("[[accounts]]\nname = \"main\"\nmax_slots = 20").expect("toml");
        if let Some(h) = c.handlers.get_mut("kling-video") {
            h.set_accounts("kling-video", &accounts["accounts"])
                .expect("accounts");
        }
    })
    .await;
    assert!(
        e.contains("provider_accounts.kling.pools.\"kling:video\"") && e.contains("main"),
        "{e}"
    );
}
