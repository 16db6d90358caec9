//! Injected faults: 5xx before the effect, lost answers after it, slow answers; all drawn
//! from the seed, so the same seed gives the same faults for the same request sequence.

use super::*;

/// The status of each of `n` sequential creates (`None`: the answer was lost).
async fn outcomes(
    opts: RunwayOptions,
    n: usize,
) -> anyhow::Result<(Vec<Option<u16>>, RunwayStats)> {
    let handle = sim(opts).await?;
    let c = Client::new(&handle)?;
    let mut out = Vec::new();
    for _ in 0..n {
        let sent = c
            .request(Method::POST, "/v1/text_to_video")
            .json(&t2v("veo3"))
            .send()
            .await;
        let status = match sent {
            Ok(resp) => {
                let status = resp.status().as_u16();
                resp.bytes().await.ok().map(|_| status)
            }
            Err(_) => None,
        };
        out.push(status);
    }
    let stats = handle.stats();
    handle.shutdown().await?;
    Ok((out, stats))
}

#[tokio::test]
async fn faults_are_determined_by_the_seed() -> anyhow::Result<()> {
    let opts = |seed| RunwayOptions {
        seed,
        fail_5xx_rate: 0.3,
        lost_answer_rate: 0.3,
        ..frozen()
    };
    let (a, stats) = outcomes(opts(7), 30).await?;
    let (b, _) = outcomes(opts(7), 30).await?;
    let (other, _) = outcomes(opts(8), 30).await?;
    assert_eq!(a, b, "same seed, same faults");
    assert_ne!(a, other, "another seed, other faults");

    let failed = a.iter().filter(|s| matches!(s, Some(502..=504))).count() as u64;
    let lost = a.iter().filter(|s| s.is_none()).count() as u64;
    let ok = a.iter().filter(|s| **s == Some(200)).count() as u64;
    assert!(failed > 0 && lost > 0 && ok > 0, "{a:?}");
    assert_eq!(failed + lost + ok, 30, "{a:?}");
    // A 5xx created nothing; a lost answer did create its task.
    assert_eq!(stats.creates, ok + lost, "{stats:?}");
    assert_eq!(
        (stats.faults.http_5xx, stats.faults.lost_answers),
        (failed, lost)
    );
    let refused_5xx: u64 = ["502", "503", "504"]
        .iter()
        .filter_map(|c| stats.creates_refused.get(*c))
        .sum();
    assert_eq!(refused_5xx, failed);
    Ok(())
}

#[tokio::test]
async fn a_lost_create_answer_leaves_a_task_behind() -> anyhow::Result<()> {
    let handle = sim(RunwayOptions {
        lost_answer_rate: 1.0,
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    let sent = c
        .request(Method::POST, "/v1/image_to_video")
        .json(&i2v("gen4_turbo"))
        .send()
        .await;
    // Not even a status line arrives: hyper drops the connection with the answer unsent.
    assert!(sent.is_err(), "the answer must not arrive: {sent:?}");
    let jobs = handle.jobs();
    assert_eq!(jobs.len(), 1, "the create took effect: {jobs:?}");
    assert_eq!(jobs[0].status, "PENDING");
    let stats = handle.stats();
    assert_eq!((stats.creates, stats.faults.lost_answers), (1, 1));
    assert_eq!(stats.models["gen4_turbo"].pending, 1);
    // A lost DELETE answer: the cancel took effect all the same.
    let sent = c
        .request(Method::DELETE, &format!("/v1/tasks/{}", jobs[0].task_id))
        .send()
        .await;
    assert!(
        sent.is_err() || sent.is_ok_and(|r| r.status() == StatusCode::OK),
        "no 204 arrives"
    );
    assert_eq!(handle.jobs()[0].status, "CANCELLED");
    // Answers arrive again once the rate is set to 0.
    handle.set_lost_answer_rate(0.0);
    c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    assert_eq!(handle.stats().faults.lost_answers, 2);
    handle.shutdown().await
}

#[tokio::test]
async fn slow_answers_take_effect_then_wait() -> anyhow::Result<()> {
    let handle = sim(RunwayOptions {
        slow_rate: 1.0,
        slow_ms: 200,
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    let short = reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_millis(50))
        .build()?;
    let timed_out = short
        .post(format!("{}/v1/image_to_video", c.base))
        .bearer_auth(API_KEY_DEFAULT)
        .header(VERSION_HEADER, RUNWAY_VERSION)
        .json(&i2v("gen4_turbo"))
        .send()
        .await;
    assert!(
        timed_out.is_err_and(|e| e.is_timeout()),
        "a client timeout before the answer"
    );
    // The create happened all the same (the client gave up during the delay after it).
    wait_until("the create", || handle.stats().creates == 1).await?;

    let begun = Instant::now();
    let id = c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    assert!(begun.elapsed() >= Duration::from_millis(200));
    assert!(!id.is_empty());
    assert_eq!(handle.stats().faults.slow, 2);
    handle.shutdown().await
}

#[tokio::test]
async fn slow_first_delays_only_the_first_answers() -> anyhow::Result<()> {
    let handle = sim(RunwayOptions {
        slow_first: 1,
        slow_ms: 300,
        ..fast()
    })
    .await?;
    let c = Client::new(&handle)?;
    let begun = Instant::now();
    let first = c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    assert!(
        begun.elapsed() >= Duration::from_millis(300),
        "the first is slow"
    );
    let begun = Instant::now();
    c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    c.task(&first).await?;
    assert!(
        begun.elapsed() < Duration::from_millis(300),
        "the rest are not"
    );
    let stats = handle.stats();
    assert_eq!((stats.creates, stats.faults.slow), (2, 1), "{stats:?}");
    handle.shutdown().await
}

/// `read_429_rate` and `read_5xx_rate` answer task reads only, before they take effect; every
/// read is in the request log with the status it got, the same for the same seed.
#[tokio::test]
async fn read_faults_answer_reads_only_and_the_log_holds_every_read() -> anyhow::Result<()> {
    let run = |seed| async move {
        let handle = sim(RunwayOptions {
            seed,
            read_429_rate: 0.3,
            read_5xx_rate: 0.3,
            ..frozen()
        })
        .await?;
        let c = Client::new(&handle)?;
        let mut ids = Vec::new();
        for _ in 0..5 {
            ids.push(c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?);
        }
        let mut answered = Vec::new();
        for i in 0..40 {
            let id = &ids[i % ids.len()];
            let (status, body) = c.task(id).await?;
            match status.as_u16() {
                200 => assert_eq!(body["id"], json!(id), "{body}"),
                429 | 502..=504 => assert!(body["error"].is_string(), "{body}"),
                other => bail!("unexpected {other}: {body}"),
            }
            answered.push((id.clone(), status.as_u16()));
        }
        let stats = handle.stats();
        let reads = handle.reads();
        handle.shutdown().await?;
        anyhow::Ok((answered, stats, reads))
    };
    let (answered, stats, reads) = run(3).await?;
    let (again, _, _) = run(3).await?;
    assert_eq!(answered, again, "same seed, same read faults");
    let logged: Vec<(String, u16)> = reads
        .iter()
        .map(|r| (r.task_id.clone(), r.status))
        .collect();
    assert_eq!(logged, answered, "the log holds every read and its answer");
    assert!(reads.windows(2).all(|w| w[0].at <= w[1].at), "{reads:?}");
    let count = |f: fn(u16) -> bool| answered.iter().filter(|(_, s)| f(*s)).count() as u64;
    let (too_many, failed, ok) = (
        count(|s| s == 429),
        count(|s| (502..=504).contains(&s)),
        count(|s| s == 200),
    );
    assert!(too_many > 0 && failed > 0 && ok > 0, "{answered:?}");
    // A faulted read never reached the task: only the answered ones were counted as reads.
    assert_eq!(stats.gets, ok, "{stats:?}");
    assert_eq!(
        (stats.faults.http_429, stats.faults.http_5xx),
        (too_many, failed)
    );
    // Creates are never refused by read faults.
    assert_eq!(stats.creates, 5);
    assert!(stats.creates_refused.is_empty(), "{stats:?}");
    Ok(())
}

/// `create_429_rate` answers creates only, 429 "Too many requests" before they take effect:
/// the rate limit, not the daily limit. Nothing is created, the day's count that
/// `GET /v1/organization` reports counts only the accepted creates, and reads are never
/// refused by it; the same seed refuses the same creates.
#[tokio::test]
async fn create_429s_refuse_creates_only_and_leave_the_days_count_alone() -> anyhow::Result<()> {
    let run = |seed| async move {
        let handle = sim(RunwayOptions {
            seed,
            create_429_rate: 0.3,
            ..frozen()
        })
        .await?;
        let c = Client::new(&handle)?;
        let mut answered = Vec::new();
        let mut ids = Vec::new();
        for _ in 0..30 {
            let (status, body) = c.post("/v1/image_to_video", &i2v("gen4_turbo")).await?;
            match status.as_u16() {
                200 => ids.push(body["id"].as_str().unwrap_or_default().to_owned()),
                429 => assert!(
                    body["error"]
                        .as_str()
                        .is_some_and(|e| e.contains("Too many requests")),
                    "{body}"
                ),
                other => bail!("unexpected {other}: {body}"),
            }
            answered.push(status.as_u16());
        }
        for id in &ids {
            assert_eq!(c.task(id).await?.0, StatusCode::OK);
        }
        let (_, org) = c.get("/v1/organization").await?;
        let stats = handle.stats();
        handle.shutdown().await?;
        anyhow::Ok((answered, stats, org))
    };
    let (answered, stats, org) = run(5).await?;
    let (again, _, _) = run(5).await?;
    assert_eq!(answered, again, "same seed, same refused creates");
    let refused = answered.iter().filter(|s| **s == 429).count() as u64;
    let ok = answered.iter().filter(|s| **s == 200).count() as u64;
    assert!(refused > 0 && ok > 0, "{answered:?}");
    assert_eq!(stats.creates, ok, "{stats:?}");
    assert_eq!(stats.daily_limit_refusals, 0, "{stats:?}");
    assert_eq!(
        (stats.faults.http_429, stats.faults.rate_limited_creates),
        (refused, refused)
    );
    assert_eq!(stats.creates_refused.get("429"), Some(&refused));
    assert_eq!(
        org["usage"]["models"]["gen4_turbo"]["dailyGenerations"],
        json!(ok),
        "{org}"
    );
    assert_eq!(stats.gets, ok, "reads are not refused by it");
    Ok(())
}
