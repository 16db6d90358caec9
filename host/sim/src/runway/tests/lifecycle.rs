//! Tasks over time: THROTTLED queueing in submission order, cancel and delete, progress,
//! failures, signed output links.

use sha2::{Digest, Sha256};

use super::*;

/// Each task's status, `404` for a task not found.
async fn statuses(c: &Client, ids: &[String]) -> anyhow::Result<Vec<String>> {
    let mut out = Vec::new();
    for id in ids {
        let (_, v) = c.task(id).await?;
        out.push(v["status"].as_str().unwrap_or("404").to_owned());
    }
    Ok(out)
}

/// `concurrency + 3` tasks of one model: `concurrency` take a slot, three wait THROTTLED; each
/// cancel frees a slot at once and the oldest throttled task takes it.
#[tokio::test]
async fn throttled_tasks_queue_in_order_and_a_cancel_frees_the_slot() -> anyhow::Result<()> {
    let handle = sim(RunwayOptions {
        concurrency: 2,
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?);
    }
    assert_eq!(
        statuses(&c, &ids).await?,
        ["PENDING", "PENDING", "THROTTLED", "THROTTLED", "THROTTLED"]
    );
    let (_, throttled) = c.task(&ids[2]).await?;
    assert_eq!(
        throttled["estimatedCost"],
        json!({"credits": 50}),
        "{throttled}"
    );
    assert!(
        throttled["createdAt"]
            .as_str()
            .is_some_and(|t| t.len() == 24 && t.ends_with('Z'))
    );
    let m = &handle.stats().models["gen4_turbo"];
    assert_eq!(
        (m.pending, m.throttled, m.max_running_seen, m.max_held_seen),
        (2, 3, 2, 5)
    );

    // Cancel a running one: 204, then 404, and the first throttled task starts.
    let (status, body) = c.delete(&format!("/v1/tasks/{}", ids[0])).await?;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    assert_eq!(
        statuses(&c, &ids).await?,
        ["404", "PENDING", "PENDING", "THROTTLED", "THROTTLED"]
    );
    // Cancel a throttled one: it leaves the queue, nothing else moves.
    c.delete(&format!("/v1/tasks/{}", ids[3])).await?;
    c.delete(&format!("/v1/tasks/{}", ids[1])).await?;
    assert_eq!(
        statuses(&c, &ids).await?,
        ["404", "404", "PENDING", "404", "PENDING"]
    );

    let jobs = handle.jobs();
    assert!(jobs.iter().all(|j| j.credits == 0));
    assert_eq!(
        jobs[0].cancelled_at, jobs[2].started,
        "the slot passed at the cancel"
    );
    assert_eq!(jobs[1].cancelled_at, jobs[4].started);
    assert_eq!(
        (jobs[3].started, jobs[3].status.as_str()),
        (None, "CANCELLED")
    );
    let stats = handle.stats();
    let m = &stats.models["gen4_turbo"];
    assert_eq!(
        (stats.cancelled, m.cancelled, m.pending, m.throttled),
        (3, 3, 2, 0)
    );
    assert_eq!((m.max_running_seen, m.max_held_seen), (2, 5));
    handle.shutdown().await
}

/// At speed: every task runs, starts follow submission order, and a slot is only reused once
/// the task holding it has ended.
#[tokio::test]
async fn slots_are_reused_only_after_an_end_in_submission_order() -> anyhow::Result<()> {
    let concurrency = 2;
    let handle = sim(RunwayOptions {
        concurrency,
        ..fast()
    })
    .await?;
    let c = Client::new(&handle)?;
    let mut ids = Vec::new();
    for _ in 0..concurrency + 3 {
        ids.push(c.create("/v1/text_to_video", &t2v("veo3.1_fast")).await?);
    }
    for id in &ids {
        let done = c.wait_status(id, "SUCCEEDED").await?;
        assert_eq!(done["cost"], json!({"credits": 80}), "{done}");
        assert!(done.get("estimatedCost").is_none(), "{done}");
    }
    let jobs = handle.jobs();
    let starts: Vec<f64> = jobs.iter().map(|j| j.started.unwrap_or(f64::NAN)).collect();
    assert!(
        starts.windows(2).all(|w| w[0] <= w[1]),
        "started in submission order: {starts:?}"
    );
    let mut ends: Vec<f64> = jobs.iter().filter_map(|j| j.ended).collect();
    ends.sort_by(f64::total_cmp);
    for (k, start) in starts.iter().enumerate().skip(concurrency as usize) {
        let ended_before = ends.iter().filter(|e| *e <= start).count();
        assert!(
            ended_before > k - concurrency as usize,
            "start {k} at {start} reused a busy slot: {jobs:?}"
        );
    }
    let stats = handle.stats();
    let m = &stats.models["veo3.1_fast"];
    assert_eq!(
        (m.max_running_seen, m.max_held_seen, m.succeeded),
        (2, 5, 5)
    );
    assert_eq!((m.running, m.pending, m.throttled), (0, 0, 0));
    assert_eq!(stats.credits_charged, 5 * 80);
    handle.shutdown().await
}

#[tokio::test]
async fn running_shows_progress_and_cancelled_stays_visible_for_a_while() -> anyhow::Result<()> {
    let handle = sim(RunwayOptions {
        time_scale: 0.05,
        long_tail_rate: 0.0,
        cancelled_visible_ms: 500,
        ..RunwayOptions::default()
    })
    .await?;
    let c = Client::new(&handle)?;
    let id = c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    let running = c.wait_status(&id, "RUNNING").await?;
    let progress = running["progress"].as_f64().context("progress")?;
    assert!((0.0..1.0).contains(&progress), "{running}");
    assert_eq!(running["estimatedCost"], json!({"credits": 50}));

    assert_eq!(
        c.delete(&format!("/v1/tasks/{id}")).await?.0,
        StatusCode::NO_CONTENT
    );
    let (status, v) = c.task(&id).await?;
    assert_eq!(
        (status, v["status"].clone(), v["cost"].clone()),
        (StatusCode::OK, json!("CANCELLED"), json!({"credits": 0}))
    );
    c.wait_for(&id, "gone", |s, _| s == StatusCode::NOT_FOUND)
        .await?;
    assert_eq!(handle.stats().models["gen4_turbo"].running, 0);
    handle.shutdown().await
}

/// With a cancel lag, a `DELETE`d task keeps its status and its slot (the throttled task
/// behind it waits) until the lag has passed; a second `DELETE` meanwhile changes nothing;
/// then it is gone and the next task takes the slot at that instant.
#[tokio::test]
async fn a_cancel_lag_keeps_the_slot_until_the_task_is_gone() -> anyhow::Result<()> {
    let handle = sim(RunwayOptions {
        concurrency: 1,
        cancel_lag_ms: 300,
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    let a = c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    let b = c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    for _ in 0..2 {
        assert_eq!(
            c.delete(&format!("/v1/tasks/{a}")).await?.0,
            StatusCode::NO_CONTENT
        );
        assert_eq!(
            statuses(&c, &[a.clone(), b.clone()]).await?,
            ["PENDING", "THROTTLED"]
        );
    }
    c.wait_for(&a, "gone", |s, _| s == StatusCode::NOT_FOUND)
        .await?;
    c.wait_status(&b, "PENDING").await?;
    let jobs = handle.jobs();
    let (ja, jb) = (&jobs[0], &jobs[1]);
    let (asked, cancelled) = (
        ja.cancel_requested.context("cancel asked")?,
        ja.cancelled_at.context("cancelled")?,
    );
    // Simulated seconds at time scale 1: the lag is 0.3 s.
    assert!(cancelled - asked >= 0.3, "{ja:?}");
    assert_eq!(
        jb.started,
        Some(cancelled),
        "B took A's slot when A was gone"
    );
    let stats = handle.stats();
    assert_eq!((stats.deletes, stats.cancelled), (2, 1));
    assert_eq!(stats.models["gen4_turbo"].max_held_seen, 2);
    handle.shutdown().await
}

#[tokio::test]
async fn failures_after_accept_carry_a_documented_code_and_cost_nothing() -> anyhow::Result<()> {
    let handle = sim(RunwayOptions {
        failure_after_accept_rate: 1.0,
        ..fast()
    })
    .await?;
    let c = Client::new(&handle)?;
    let id = c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    let failed = c.wait_status(&id, "FAILED").await?;
    let code = failed["failureCode"].as_str().context("failureCode")?;
    assert!(task::FAILURES.iter().any(|f| f.code == code), "{failed}");
    assert!(
        failed["failure"].is_string() && failed.get("output").is_none(),
        "{failed}"
    );
    assert_eq!(failed["cost"], json!({"credits": 0}));
    // Deleting a finished task: 204, then 404.
    assert_eq!(
        c.delete(&format!("/v1/tasks/{id}")).await?.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(c.task(&id).await?.0, StatusCode::NOT_FOUND);
    let stats = handle.stats();
    assert_eq!(
        (
            stats.failed,
            stats.deleted,
            stats.faults.failed_after_accept,
            stats.credits_charged
        ),
        (1, 1, 1, 0)
    );
    assert_eq!(handle.jobs()[0].failure_code.as_deref(), Some(code));
    handle.shutdown().await
}

#[tokio::test]
async fn output_links_expire_refuse_changes_and_are_minted_afresh() -> anyhow::Result<()> {
    let handle = sim(RunwayOptions {
        output_ttl_ms: 800,
        ..fast()
    })
    .await?;
    let c = Client::new(&handle)?;
    let id = c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    let done = c.wait_status(&id, "SUCCEEDED").await?;
    let link = done["output"][0].as_str().context("output[0]")?.to_owned();
    assert!(
        link.starts_with(&format!(
            "{}/_files/{id}/video.mp4?_jwt=",
            handle.base_url()
        )),
        "{link}"
    );

    let resp = c.http.get(&link).send().await?;
    assert_eq!(resp.status(), StatusCode::OK);
    assert_eq!(resp.headers()["content-type"], "video/mp4");
    let len: usize = resp.headers()["content-length"].to_str()?.parse()?;
    let body = resp.bytes().await?;
    assert_eq!(body.len(), len);
    assert_eq!(hex::encode(Sha256::digest(&body)), file_sha256(&id));

    let altered = [
        link.replace("exp=", "exp=9"),
        link.replace("_jwt=", "_jwt=A"),
        link.replace(&id, "3086d332-1963-4c9d-8103-0f90efa72e20"),
        link.split('?').next().unwrap_or_default().to_owned(),
    ];
    for bad in &altered {
        assert_eq!(
            c.http.get(bad).send().await?.status(),
            StatusCode::FORBIDDEN,
            "{bad}"
        );
    }

    // Poll the link until it expires (real milliseconds), then a fresh GET gives a good one.
    let deadline = Instant::now() + DEADLINE;
    loop {
        let resp = c.http.head(&link).send().await?;
        if resp.status() == StatusCode::FORBIDDEN {
            break;
        }
        anyhow::ensure!(Instant::now() < deadline, "the link never expired");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, again) = c.task(&id).await?;
    let fresh = again["output"][0].as_str().context("fresh output")?;
    assert_ne!(fresh, link);
    let body = c
        .http
        .get(fresh)
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    assert_eq!(hex::encode(Sha256::digest(&body)), file_sha256(&id));

    // A deleted task's output is gone even through a valid link.
    assert_eq!(
        c.delete(&format!("/v1/tasks/{id}")).await?.0,
        StatusCode::NO_CONTENT
    );
    assert_eq!(
        c.http.get(fresh).send().await?.status(),
        StatusCode::NOT_FOUND
    );
    let stats = handle.stats();
    assert!(
        stats.link_refusals >= 5 && stats.downloads >= 2,
        "{stats:?}"
    );
    handle.shutdown().await
}
