//! Injected faults (before a submit takes effect, lost answers after it, read failures,
//! failures when a request runs) and expiry of results and files.

use super::*;

/// The status of each of `n` sequential submits (`None`: no answer at all).
async fn outcomes(opts: FalOptions, n: usize) -> anyhow::Result<(Vec<Option<u16>>, FalStats)> {
    let handle = sim(opts).await?;
    let c = Client::new(&handle)?;
    let mut out = Vec::new();
    for _ in 0..n {
        let sent = c
            .request(Method::POST, &format!("/{T2V}"))
            .json(&prompt())
            .send()
            .await;
        out.push(match sent {
            Ok(resp) => {
                let status = resp.status().as_u16();
                resp.bytes().await.ok().map(|_| status)
            }
            Err(_) => None,
        });
    }
    let stats = handle.stats();
    handle.shutdown().await?;
    Ok((out, stats))
}

#[tokio::test]
async fn submit_faults_are_determined_by_the_seed() -> anyhow::Result<()> {
    let opts = |seed| FalOptions {
        seed,
        submit_5xx_rate: 0.3,
        submit_429_rate: 0.2,
        lost_answer_rate: 0.3,
        ..frozen()
    };
    let (a, stats) = outcomes(opts(7), 40).await?;
    let (b, _) = outcomes(opts(7), 40).await?;
    let (other, _) = outcomes(opts(8), 40).await?;
    assert_eq!(a, b, "same seed, same faults");
    assert_ne!(a, other, "another seed, other faults");
    let count = |f: &dyn Fn(&Option<u16>) -> bool| a.iter().filter(|s| f(s)).count() as u64;
    let ok = count(&|s| *s == Some(200));
    let lost = count(&|s| matches!(s, None | Some(502 | 504)));
    let before = count(&|s| matches!(s, Some(500 | 503 | 429)));
    assert!(ok > 0 && lost > 0 && before > 0, "{a:?}");
    assert_eq!(ok + lost + before, 40, "{a:?}");
    // Refused before any check: nothing made; lost: made all the same.
    assert_eq!(
        (stats.submits, stats.faults.lost_answers),
        (ok + lost, lost)
    );
    assert_eq!(stats.faults.submit_5xx + stats.faults.submit_429, before);
    let refused: u64 = ["fault_500", "fault_503", "fault_429"]
        .iter()
        .filter_map(|r| stats.submits_refused.get(*r))
        .sum();
    assert_eq!(refused, before);
    Ok(())
}

#[tokio::test]
async fn a_lost_answer_leaves_a_request_the_history_finds() -> anyhow::Result<()> {
    let handle = sim(FalOptions {
        lost_answer_rate: 1.0,
        lost_answer_as: LostAs::Drop,
        ..fast()
    })
    .await?;
    let c = Client::new(&handle)?;
    let body = json!({"prompt": "the one that got away"});
    let sent = c
        .request(Method::POST, &format!("/{T2V}"))
        .json(&body)
        .send()
        .await;
    assert!(sent.is_err(), "no status line arrives: {sent:?}");
    let jobs = handle.jobs();
    assert_eq!(jobs.len(), 1, "the submit took effect");
    assert!(jobs[0].lost_answer);
    let stats = handle.stats();
    assert_eq!((stats.submits, stats.faults.lost_answers), (1, 1));
    assert_eq!(stats.accounts[ACCOUNT_DEFAULT].max_unfinished, 1);

    // The client reconciles through the history: the request is there, input and all.
    let id = jobs[0].request_id.clone();
    wait_until("the lost request ends", || {
        handle.jobs()[0].status == "COMPLETED"
    })
    .await?;
    let h = c
        .get(&format!(
            "/v1/models/requests/by-endpoint?endpoint_id={T2V}&expand=payloads"
        ))
        .await?;
    assert_eq!(h.body["items"][0]["request_id"], json!(id), "{}", h.body);
    assert_eq!(h.body["items"][0]["json_input"], body);

    handle.set_lost_answer_rate(0.0);
    c.submit(T2V, &prompt()).await?;
    assert_eq!(handle.stats().duplicate_inputs, 0);
    // A client that submits the lost input again makes a second request: counted.
    c.submit(T2V, &body).await?;
    let stats = handle.stats();
    assert_eq!((stats.faults.lost_answers, stats.duplicate_inputs), (1, 1));
    let jobs = handle.jobs();
    assert_eq!(jobs[2].input_sha256, jobs[0].input_sha256);
    assert_eq!(jobs[2].prompt.as_deref(), Some("the one that got away"));
    handle.shutdown().await?;

    for (kind, code) in [(LostAs::BadGateway, 502), (LostAs::GatewayTimeout, 504)] {
        let handle = sim(FalOptions {
            lost_answer_rate: 1.0,
            lost_answer_as: kind,
            ..frozen()
        })
        .await?;
        let c = Client::new(&handle)?;
        let a = c.post(&format!("/{T2V}"), &prompt()).await?;
        assert_eq!(a.status.as_u16(), code);
        assert!(
            a.headers.get("x-fal-request-id").is_none(),
            "an ingress page"
        );
        assert!(
            a.body.as_str().is_some_and(|t| t.contains("nginx")),
            "{}",
            a.body
        );
        assert_eq!(handle.jobs().len(), 1);
        handle.shutdown().await?;
    }
    Ok(())
}

#[tokio::test]
async fn reads_can_fail_before_their_effect() -> anyhow::Result<()> {
    let handle = sim(FalOptions {
        read_5xx_rate: 1.0,
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    let id = id_of(&c.submit(T2V, &prompt()).await?)?;
    for a in [
        c.status(&id).await?,
        c.result(&id).await?,
        c.cancel(&id).await?,
    ] {
        assert_eq!(a.status, StatusCode::SERVICE_UNAVAILABLE);
    }
    let stats = handle.stats();
    assert_eq!(
        (stats.faults.read_5xx, stats.cancelled, stats.status_reads),
        (3, 0, 0)
    );
    handle.shutdown().await
}

#[tokio::test]
async fn failures_after_acceptance_come_back_as_the_model_returned_them() -> anyhow::Result<()> {
    let cases = [
        (FailureKind::RunnerServerError, T2V, 500),
        (FailureKind::ContentPolicyViolation, T2V, 422),
        (FailureKind::FileDownloadError, TURBO_I2V, 422),
    ];
    for (kind, model, code) in cases {
        let handle = sim(FalOptions {
            failure_rate: 1.0,
            failure_kinds: vec![kind],
            ..fast()
        })
        .await?;
        let c = Client::new(&handle)?;
        let body = if model == T2V { prompt() } else { turbo_body() };
        let id = id_of(&c.submit(model, &body).await?)?;
        let done = c.wait_status(&id, "COMPLETED").await?;
        assert_eq!(done["error_type"], kind.as_str(), "{done}");
        let r = c.result(&id).await?;
        assert_eq!(r.status.as_u16(), code, "{}", r.body);
        let typed =
            r.body["error_type"] == kind.as_str() || r.body["detail"][0]["type"] == kind.as_str();
        assert!(typed, "{}", r.body);
        assert!(r.headers.get("x-fal-retryable").is_some());
        let stats = handle.stats();
        assert_eq!(
            (stats.faults.failed_after_accept, stats.billed_usd),
            (1, 0.0)
        );
        assert_eq!(stats.failed_by_type.get(kind.as_str()), Some(&1));
        handle.shutdown().await?;
    }
    Ok(())
}

#[tokio::test]
async fn results_and_files_expire() -> anyhow::Result<()> {
    let handle = sim(FalOptions {
        media_ttl: Duration::from_secs(1),
        result_ttl: Duration::from_secs(1),
        ..fast()
    })
    .await?;
    let c = Client::new(&handle)?;
    let submit = |pref: Option<&'static str>| {
        let mut req = c.request(Method::POST, &format!("/{T2V}")).json(&prompt());
        if let Some(p) = pref {
            req = req.header("x-fal-object-lifecycle-preference", p);
        }
        c.send(req)
    };
    let default = id_of(&submit(None).await?.body)?;
    let at_once = id_of(
        &submit(Some(r#"{"expiration_duration_seconds": 0}"#))
            .await?
            .body,
    )?;
    let never = id_of(&submit(Some("null")).await?.body)?;
    let mut urls = Vec::new();
    for id in [&default, &at_once, &never] {
        c.wait_status(id, "COMPLETED").await?;
        let r = c.result(id).await?;
        urls.push(r.body["video"]["url"].as_str().context("url")?.to_owned());
    }
    let http = reqwest::Client::builder().no_proxy().build()?;
    let code = |url: String| {
        let http = http.clone();
        async move { Ok::<u16, anyhow::Error>(http.get(url).send().await?.status().as_u16()) }
    };
    assert_eq!(code(urls[1].clone()).await?, 404, "expired at completion");
    let deadline = Instant::now() + DEADLINE;
    while code(urls[0].clone()).await? == 200 {
        anyhow::ensure!(Instant::now() < deadline, "the file never expired");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(code(urls[2].clone()).await?, 200, "no expiry asked");
    assert_eq!(
        code(format!(
            "{}/_cdn/files/{default}/other.mp4",
            handle.base_url()
        ))
        .await?,
        404
    );
    while c.result(&default).await?.status == StatusCode::OK {
        anyhow::ensure!(Instant::now() < deadline, "the result never expired");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(c.result(&default).await?.status, StatusCode::NOT_FOUND);
    assert_eq!(
        c.status(&default).await?.status,
        StatusCode::OK,
        "the status stays"
    );
    handle.shutdown().await
}
