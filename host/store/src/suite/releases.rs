//! Handler releases: content-addressed, one file per handler version, bytes returned exactly.

use crate::{DynStore, HandlerLoad, NewRelease, Published, ReleaseFollower, release_key};

use super::fixtures::T0;

fn release(name: &str, version: &str, bytes: &[u8], now: i64) -> NewRelease {
    NewRelease {
        name: name.into(),
        version: version.into(),
        contract: "1.3.0".into(),
        bytes: bytes.to_vec(),
        published_by: "team-kling".into(),
        takes_over: false,
        current: true,
        now,
    }
}

pub(crate) async fn handler_releases(store: DynStore) {
    // A component of a realistic size, every byte value present.
    let a: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i % 251) as u8).collect();
    let b = b"\0asm another build".to_vec();
    let (key_a, key_b) = (release_key(&a), release_key(&b));
    assert_eq!(key_a.len(), 64, "hex sha256");

    let first = store
        .release_put(&release("kling-video", "1.0.0", &a, T0))
        .await;
    assert_eq!(first.unwrap(), Published::New(key_a.clone()));

    // The same file again, by anyone: stored once, nothing changes.
    let mut again = release("kling-video", "1.0.0", &a, T0 + 5);
    again.published_by = "plugins directory".into();
    let again = store.release_put(&again).await.unwrap();
    assert_eq!(again, Published::Already(key_a.clone()));

    // Another file under a published version: refused, naming the file that has it.
    let taken = store
        .release_put(&release("kling-video", "1.0.0", &b, T0 + 6))
        .await;
    assert_eq!(
        taken.unwrap(),
        Published::VersionTaken {
            name: "kling-video".into(),
            version: "1.0.0".into(),
            sha256: key_a.clone(),
        }
    );
    assert!(
        store.release_get(&key_b).await.unwrap().is_none(),
        "not stored"
    );

    // A new version is a new release; another handler's are its own.
    let second = store
        .release_put(&release("kling-video", "1.1.0", &b, T0 + 10))
        .await;
    assert_eq!(second.unwrap(), Published::New(key_b.clone()));
    let runway = store
        .release_put(&release("runway-video", "1.0.0", b"\0asm runway", T0 + 20))
        .await;
    assert!(matches!(runway.unwrap(), Published::New(_)));

    // Listed newest first, without their bytes.
    let kling = store.release_list(Some("kling-video")).await.unwrap();
    let listed: Vec<(&str, &str, i64)> = kling
        .iter()
        .map(|r| (r.version.as_str(), r.sha256.as_str(), r.size))
        .collect();
    assert_eq!(
        listed,
        [
            ("1.1.0", key_b.as_str(), b.len() as i64),
            ("1.0.0", key_a.as_str(), 1 << 20)
        ]
    );
    assert_eq!(
        kling[1].published_by, "team-kling",
        "the first publisher is kept"
    );
    assert_eq!(kling[1].published_at, T0);
    assert_eq!(store.release_list(None).await.unwrap().len(), 3);
    assert_eq!(store.release_list(Some("fal-video")).await.unwrap(), []);

    // The bytes come back exactly, with what was recorded of them.
    let (meta, bytes) = store.release_get(&key_a).await.unwrap().expect("stored");
    assert_eq!(bytes, a);
    assert_eq!(meta, kling[1]);
    assert_eq!(meta.contract, "1.3.0");
    assert!(store.release_get(&"0".repeat(64)).await.unwrap().is_none());
}

fn load(process: &str, sha: &str, state: &str, at: i64) -> HandlerLoad {
    HandlerLoad {
        process: process.into(),
        role: "scheduler".into(),
        sha256: sha.into(),
        name: "kling-video".into(),
        version: "1.0.0".into(),
        state: state.into(),
        reason: (state == "failed").then(|| "compile: out of memory".into()),
        at,
    }
}

fn follower(process: &str, at: i64) -> ReleaseFollower {
    ReleaseFollower {
        process: process.into(),
        role: "scheduler".into(),
        last_seen: at,
    }
}

/// Each process's word on a release is one row it rewrites; old words are pruned.
pub(crate) async fn handler_loads(store: DynStore) {
    let (a, b) = ("a".repeat(64), "b".repeat(64));
    // A process that looked with nothing to load is listed all the same.
    store
        .handler_load_put(&follower("p0", T0), &[])
        .await
        .unwrap();
    store
        .handler_load_put(&follower("p1", T0), &[load("p1", &a, "loaded", T0)])
        .await
        .unwrap();
    store
        .handler_load_put(&follower("p2", T0), &[load("p2", &a, "failed", T0)])
        .await
        .unwrap();
    // p1 moves on to b: a is unloaded, b loaded; the row for (p1, a) is rewritten, not added.
    store
        .handler_load_put(
            &follower("p1", T0 + 10),
            &[
                load("p1", &a, "unloaded", T0 + 10),
                load("p1", &b, "loaded", T0 + 10),
            ],
        )
        .await
        .unwrap();
    let alive = store.handler_process_list(T0 + 5).await.unwrap();
    assert_eq!(alive, [follower("p1", T0 + 10)]);
    assert_eq!(store.handler_process_list(0).await.unwrap().len(), 3);
    let all = store.handler_load_list(0).await.unwrap();
    assert_eq!(all.len(), 3, "{all:?}");
    let p1a = all
        .iter()
        .find(|l| l.process == "p1" && l.sha256 == a)
        .unwrap();
    assert_eq!((p1a.state.as_str(), p1a.at), ("unloaded", T0 + 10));
    let p2 = all.iter().find(|l| l.process == "p2").unwrap();
    assert_eq!(p2.reason.as_deref(), Some("compile: out of memory"));
    // Only what was heard since T0 + 5; pruning drops p2's old word.
    assert_eq!(store.handler_load_list(T0 + 5).await.unwrap().len(), 2);
    // p2's word, p0's and p2's looks.
    assert_eq!(store.handler_load_prune(T0 + 5).await.unwrap(), 3);
    assert_eq!(store.handler_load_list(0).await.unwrap().len(), 2);
    assert_eq!(store.handler_process_list(0).await.unwrap().len(), 1);
}

/// A handler's current release: the most recently promoted one not withdrawn.
pub(crate) async fn release_currency(store: DynStore) {
    let put = |version: &str, bytes: &[u8], by: &str, now: i64| NewRelease {
        published_by: by.into(),
        takes_over: false,
        current: true,
        ..release("kling-video", version, bytes, now)
    };
    let one = store
        .release_put(&put("1.0.0", b"\0asm one", "plugins:kling-video.wasm", T0))
        .await
        .unwrap();
    let two = store
        .release_put(&put("2.0.0", b"\0asm two", "team-kling", T0 + 10))
        .await
        .unwrap();
    let (Published::New(one), Published::New(two)) = (one, two) else {
        panic!("both new");
    };
    let current = |all: &[crate::Release]| {
        crate::current_releases(all)
            .get("kling-video")
            .map(|r| r.sha256.clone())
    };
    let all = store.release_list(None).await.unwrap();
    assert_eq!(
        current(&all),
        Some(two.clone()),
        "the newer publish is current"
    );
    assert!(all.iter().all(|r| r.promoted_at == r.published_at));

    // The older file promoted again (dropped back into a plugins directory) serves.
    assert!(store.release_promote(&one, T0 + 20).await.unwrap());
    assert!(
        !store
            .release_promote(&"0".repeat(64), T0 + 20)
            .await
            .unwrap()
    );
    let all = store.release_list(None).await.unwrap();
    assert_eq!(current(&all), Some(one.clone()));

    // Its file removed: withdrawn (only what that source published), and 2.0.0 is current.
    let gone = store
        .release_withdraw(
            "kling-video",
            "plugins:kling-video.wasm",
            "file removed",
            T0 + 30,
        )
        .await
        .unwrap();
    assert_eq!(gone, vec![one.clone()]);
    let all = store.release_list(None).await.unwrap();
    assert_eq!(current(&all), Some(two.clone()));
    let withdrawn = all.iter().find(|r| r.sha256 == one).unwrap();
    assert_eq!(withdrawn.withdrawn_at, Some(T0 + 30));
    assert_eq!(withdrawn.withdrawn_reason.as_deref(), Some("file removed"));
    // Withdrawing again finds nothing; promoting brings it back.
    assert!(
        store
            .release_withdraw("kling-video", "plugins:kling-video.wasm", "again", T0 + 40)
            .await
            .unwrap()
            .is_empty()
    );
    store.release_promote(&one, T0 + 50).await.unwrap();
    let all = store.release_list(None).await.unwrap();
    assert_eq!(current(&all), Some(one));
    assert!(all.iter().all(|r| r.withdrawn_at.is_none()));
}

/// A unit records the release that planned it and the one that created its job; the jobs in
/// flight are counted per release.
pub(crate) async fn unit_releases(store: DynStore) {
    use super::fixtures::{POOL, VIDEO, apply, create, submit, task, unit};
    use crate::{Field, UnitUpdate};
    use slotd_core::model::UnitStatus;
    let (v1, v2) = ("1".repeat(64), "2".repeat(64));
    let mut t = task("rel", "a", VIDEO, POOL, 3, 0);
    for u in &mut t.units {
        u.planned_release = Some(v1.clone());
    }
    create(&store, t).await;
    let u0 = unit(&store, "rel", 0).await;
    assert_eq!(u0.releases.planned_release.as_deref(), Some(v1.as_str()));
    assert_eq!(u0.releases.job_release, None);
    submit(&store, &["rel-u0", "rel-u1"], T0 + 1).await;
    for (id, job, sha) in [("rel-u0", "job-0", &v1), ("rel-u1", "job-1", &v2)] {
        apply(
            &store,
            UnitUpdate {
                unit_id: id.into(),
                from: Some(UnitStatus::Submitted),
                provider_job_id: Field::Set(job.into()),
                job_release: Some(sha.clone()),
                ..Default::default()
            },
            T0 + 2,
        )
        .await;
    }
    // A later poll that names no release keeps it.
    apply(
        &store,
        UnitUpdate {
            unit_id: "rel-u0".into(),
            from: Some(UnitStatus::Submitted),
            polls: Some(1),
            next_at: Some(T0 + 100),
            ..Default::default()
        },
        T0 + 3,
    )
    .await;
    let u0 = unit(&store, "rel", 0).await;
    assert_eq!(u0.releases.job_release.as_deref(), Some(v1.as_str()));
    let jobs = store.unit_job_releases().await.unwrap();
    assert_eq!(jobs, vec![(v1.clone(), 1), (v2.clone(), 1)]);
    // A job that ended no longer counts.
    apply(
        &store,
        UnitUpdate {
            unit_id: "rel-u1".into(),
            from: Some(UnitStatus::Submitted),
            to: Some(UnitStatus::Failed),
            error: Field::Set(r#"{"message":"gone"}"#.into()),
            ..Default::default()
        },
        T0 + 4,
    )
    .await;
    assert_eq!(store.unit_job_releases().await.unwrap(), vec![(v1, 1)]);
    // Retried, the failed unit has no job and so no job release: a rolled-back candidate's
    // sweep no longer counts it as that release's.
    let u1 = unit(&store, "rel", 1).await;
    assert_eq!(u1.releases.job_release.as_deref(), Some(v2.as_str()));
    store.task_retry_failed("a", "rel", T0 + 5).await.unwrap();
    let u1 = unit(&store, "rel", 1).await;
    assert_eq!(u1.status, UnitStatus::Pending);
    assert_eq!(u1.releases.job_release, None);
}

/// A rollout's live figures and moves (each with its step), and the signals its releases'
/// ticks add, summed over the minutes of a window.
pub(crate) async fn rollout_signals(store: DynStore) {
    use crate::{ReleaseSignals, Rollout, RolloutMove, RolloutState};
    let (cand, inc) = ("c".repeat(64), "i".repeat(64));
    let rollout = Rollout {
        id: "r1".into(),
        name: "kling-video".into(),
        candidate: cand.clone(),
        incumbent: inc.clone(),
        stages: vec![10, 100],
        stage: 0,
        state: RolloutState::Running,
        min_units: 5,
        margin: 0.05,
        started_at: T0,
        stage_started_at: T0,
        updated_at: T0,
        reason: Some("started".into()),
        figures: None,
        events: Vec::new(),
    };
    assert!(store.rollout_start(&rollout).await.unwrap());
    assert!(
        !store
            .rollout_start(&Rollout {
                id: "r2".into(),
                ..rollout.clone()
            })
            .await
            .unwrap(),
        "one rollout of a handler at a time"
    );
    let live = serde_json::json!({"candidate": {"ended": 3}});
    store.rollout_figures("r1", &live).await.unwrap();
    let listed = store.rollout_list(Some("kling-video"), 10).await.unwrap();
    assert_eq!(listed[0].figures.as_ref(), Some(&live));
    let m = RolloutMove {
        id: "r1".into(),
        from_stage: 0,
        from_state: RolloutState::Running,
        stage: 0,
        state: RolloutState::RolledBack,
        reason: "stage 1 failed".into(),
        figures: None,
        now: T0 + 10,
    };
    assert!(store.rollout_move(&m).await.unwrap());
    assert!(!store.rollout_move(&m).await.unwrap(), "moved once");
    let steps = store.rollout_events("r1").await.unwrap();
    let states: Vec<_> = steps.iter().map(|e| e.state).collect();
    assert_eq!(states, [RolloutState::Running, RolloutState::RolledBack]);
    // Figures of an ended rollout stay those it ended on.
    store
        .rollout_figures("r1", &serde_json::json!({}))
        .await
        .unwrap();
    let listed = store.rollout_list(Some("kling-video"), 10).await.unwrap();
    assert_eq!(listed[0].figures.as_ref(), Some(&live));

    let tick = |units, refused, job_ms: Option<i64>| {
        let mut s = ReleaseSignals {
            units,
            creates: units,
            create_refused: refused,
            faults: 1,
            refused_changes: 0,
            ..ReleaseSignals::default()
        };
        if let Some(ms) = job_ms {
            s.job(ms);
        }
        s
    };
    // A minute before the window, then two ticks inside it.
    store
        .release_signals_add(&cand, T0 - 60_000, &tick(100, 100, None))
        .await
        .unwrap();
    store
        .release_signals_add(&cand, T0 + 1, &tick(4, 1, Some(1_000)))
        .await
        .unwrap();
    store
        .release_signals_add(&cand, T0 + 2, &tick(6, 2, Some(3_000)))
        .await
        .unwrap();
    let got = store
        .release_signals(&[cand.clone(), inc.clone()], T0)
        .await
        .unwrap();
    let want = ReleaseSignals {
        units: 10,
        creates: 10,
        create_refused: 3,
        faults: 2,
        refused_changes: 0,
        jobs: 2,
        job_log_ms: 0.0,
        job_log_ms_sq: 0.0,
    };
    let (ln1, ln3) = (1_000f64.ln(), 3_000f64.ln());
    let (c, i) = (&got[0], &got[1]);
    assert_eq!((&c.0, &i.0), (&cand, &inc));
    assert!((c.1.job_log_ms - (ln1 + ln3)).abs() < 1e-9, "{got:?}");
    assert!((c.1.job_log_ms_sq - (ln1 * ln1 + ln3 * ln3)).abs() < 1e-9);
    let counts = ReleaseSignals {
        job_log_ms: 0.0,
        job_log_ms_sq: 0.0,
        ..c.1.clone()
    };
    assert_eq!(counts, want);
    assert_eq!(i.1, ReleaseSignals::default());
}
