//! Requests over time: queue positions, the account's concurrency, cancel, bodies refused when a
//! runner picks them up, `X-Fal-Request-Timeout`.

use super::*;

async fn position(c: &Client, id: &str) -> anyhow::Result<Value> {
    let a = c.status(id).await?;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);
    Ok(a.body["queue_position"].clone())
}

#[tokio::test]
async fn queue_positions_count_the_accounts_requests_ahead() -> anyhow::Result<()> {
    let handle = sim(frozen().with_account("other", "k-other:s", 2)).await?;
    let c = Client::new(&handle)?;
    let low = c.send(
        c.request(Method::POST, &format!("/{T2V}"))
            .header("x-fal-queue-priority", "low")
            .json(&prompt()),
    );
    let low = id_of(&low.await?.body)?;
    let mut normal = Vec::new();
    for want in [0, 1, 2] {
        let a = c.submit(T2V, &prompt()).await?;
        assert_eq!(a["queue_position"], want, "normal before low: {a}");
        normal.push(id_of(&a)?);
    }
    // Another account's request is not ahead of anyone here.
    let theirs = c.with_key(Some("k-other:s")).submit(T2V, &prompt()).await?;
    assert_eq!(theirs["queue_position"], 0);
    assert_eq!(position(&c, &low).await?, 3);
    let a = c.cancel(&normal[0]).await?;
    assert_eq!(
        (a.status, a.body),
        (
            StatusCode::ACCEPTED,
            json!({"status": "CANCELLATION_REQUESTED"})
        )
    );
    assert_eq!(position(&c, &normal[1]).await?, 0);
    assert_eq!(position(&c, &low).await?, 2);
    let jobs = handle.jobs();
    assert_eq!(jobs[0].priority, "low");
    assert_eq!(handle.stats().accounts[ACCOUNT_DEFAULT].max_unfinished, 4);
    handle.shutdown().await
}

#[tokio::test]
async fn concurrency_two_runs_five_requests_two_at_a_time() -> anyhow::Result<()> {
    let handle = sim(FalOptions {
        concurrency: 2,
        ..brisk()
    })
    .await?;
    let c = Client::new(&handle)?;
    let mut ids = Vec::new();
    for _ in 0..5 {
        ids.push(id_of(&c.submit(TURBO_I2V, &turbo_body()).await?)?);
    }
    for id in &ids {
        c.wait_status(id, "COMPLETED").await?;
    }
    let account = &handle.stats().accounts[ACCOUNT_DEFAULT];
    assert_eq!(
        (account.max_in_progress, account.in_progress, account.queued),
        (2, 0, 0)
    );
    assert_eq!((account.completed, account.succeeded), (5, 5));
    assert!(account.max_unfinished >= 3, "{account:?}");
    let jobs = handle.jobs();
    let spans: Vec<(f64, f64)> = jobs
        .iter()
        .map(|j| (j.started.unwrap_or(f64::NAN), j.ended.unwrap_or(f64::NAN)))
        .collect();
    for (s, _) in &spans {
        let running = spans.iter().filter(|(a, b)| a <= s && s < b).count();
        assert!(running <= 2, "{running} running at {s}: {spans:?}");
    }
    // The requests that waited for a slot take the slots in submission order. The first two
    // to start took the free slots and started after their own draw of fal's dispatch delay:
    // when the five arrive within that delay (an optimized build submits them in a few
    // milliseconds), those two can be any of the five, so they are left out by start time,
    // not by position.
    let mut first = (0..spans.len()).collect::<Vec<_>>();
    first.sort_by(|a, b| spans[*a].0.total_cmp(&spans[*b].0));
    let waited: Vec<f64> = (0..spans.len())
        .filter(|i| !first[..2].contains(i))
        .map(|i| spans[i].0)
        .collect();
    assert!(
        waited.windows(2).all(|w| w[0] <= w[1]),
        "submission order: {spans:?}"
    );
    for j in &jobs {
        let waited = j.started.unwrap_or_default() - j.submitted;
        assert!(
            waited >= 0.4,
            "a dispatch delay even under the limit: {j:?}"
        );
    }
    handle.shutdown().await
}

#[tokio::test]
async fn a_queued_request_can_be_cancelled_a_running_one_not() -> anyhow::Result<()> {
    let handle = sim(FalOptions {
        concurrency: 1,
        ..slowish()
    })
    .await?;
    let hooks = Receiver::start(0).await?;
    let c = Client::new(&handle)?;
    let running = id_of(&c.post(&hooks.submit_path(T2V), &prompt()).await?.body)?;
    c.wait_status(&running, "IN_PROGRESS").await?;
    let queued = id_of(&c.post(&hooks.submit_path(T2V), &prompt()).await?.body)?;
    assert_eq!(position(&c, &queued).await?, 0);

    let a = c.cancel(&queued).await?;
    assert_eq!(
        (a.status, a.body),
        (
            StatusCode::ACCEPTED,
            json!({"status": "CANCELLATION_REQUESTED"})
        )
    );
    let a = c.status(&queued).await?;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(
        (a.body["status"].clone(), a.body["error_type"].clone()),
        (json!("COMPLETED"), json!("client_cancelled"))
    );
    let r = c.result(&queued).await?;
    assert_eq!(r.status.as_u16(), 499, "{}", r.body);
    assert_eq!(r.body["error_type"], "client_cancelled");
    for id in [&queued, &running] {
        let a = c.cancel(id).await?;
        assert_eq!(
            (a.status, a.body),
            (
                StatusCode::BAD_REQUEST,
                json!({"status": "ALREADY_COMPLETED"})
            )
        );
    }
    let a = c.cancel("3086d332-1963-4c9d-8103-0f90efa72e20").await?;
    assert_eq!(
        (a.status, a.body),
        (StatusCode::NOT_FOUND, json!({"status": "NOT_FOUND"}))
    );

    // The running one ends and is delivered; the cancelled one never is.
    c.wait_status(&running, "COMPLETED").await?;
    wait_until("the running request's webhook", || {
        !hooks.received().is_empty()
    })
    .await?;
    let got = hooks.received();
    assert_eq!(got.len(), 1);
    let body: Value = serde_json::from_slice(&got[0].body)?;
    assert_eq!(
        (body["request_id"].clone(), body["status"].clone()),
        (json!(running), json!("OK"))
    );
    let jobs = handle.jobs();
    let cancelled = jobs
        .iter()
        .find(|j| j.request_id == queued)
        .context("job")?;
    assert!(cancelled.cancelled && cancelled.started.is_none() && cancelled.webhook_attempts == 0);
    assert_eq!(
        (cancelled.status_code, cancelled.billed_usd),
        (Some(499), 0.0)
    );
    let stats = handle.stats();
    assert_eq!((stats.cancel_requests, stats.cancelled), (4, 1));
    handle.shutdown().await
}

#[tokio::test]
async fn with_the_flag_a_running_request_is_cancelled_and_frees_its_runner() -> anyhow::Result<()> {
    let handle = sim(FalOptions {
        concurrency: 1,
        cancel_running: true,
        ..slowish()
    })
    .await?;
    let c = Client::new(&handle)?;
    let first = id_of(&c.submit(T2V, &prompt()).await?)?;
    c.wait_status(&first, "IN_PROGRESS").await?;
    let second = id_of(&c.submit(T2V, &prompt()).await?)?;
    let a = c.cancel(&first).await?;
    assert_eq!(
        (a.status, a.body),
        (
            StatusCode::ACCEPTED,
            json!({"status": "CANCELLATION_REQUESTED"})
        )
    );
    c.wait_status(&second, "IN_PROGRESS").await?;
    assert_eq!(c.result(&first).await?.status.as_u16(), 499);
    let jobs = handle.jobs();
    let ended = jobs[0].ended.context("first ended")?;
    assert!(ended < jobs[0].started.unwrap_or_default() + jobs[0].planned_seconds);
    let started = jobs[1].started.context("second started")?;
    assert!(
        started - ended < 2.5,
        "the runner is taken again at once: {jobs:?}"
    );
    handle.shutdown().await
}

#[tokio::test]
async fn a_body_that_breaks_the_schema_is_accepted_then_refused_422() -> anyhow::Result<()> {
    let handle = sim(fast()).await?;
    let c = Client::new(&handle)?;
    let a = c
        .submit(T2V, &json!({"duration": 7, "resolution": "720p"}))
        .await?;
    let id = id_of(&a)?;
    let done = c.wait_status(&id, "COMPLETED").await?;
    assert_eq!(
        (done["error"].clone(), done["error_type"].clone()),
        (json!("Invalid status code: 422"), json!("missing"))
    );
    let r = c.result(&id).await?;
    assert_eq!(r.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", r.body);
    let detail = r.body["detail"].as_array().cloned().unwrap_or_default();
    let found: Vec<(Value, Value)> = detail
        .iter()
        .map(|d| (d["loc"].clone(), d["type"].clone()))
        .collect();
    assert_eq!(
        found,
        [
            (json!(["body", "prompt"]), json!("missing")),
            (json!(["body", "duration"]), json!("literal_error"))
        ]
    );
    assert!(detail.iter().all(|d| d["msg"].is_string()));
    let job = &handle.jobs()[0];
    assert_eq!(
        (
            job.status_code,
            job.error_type.as_deref(),
            job.file_sha256.as_deref()
        ),
        (Some(422), Some("missing"), None)
    );
    handle.shutdown().await?;

    // Refusing unknown keys, with the errors hidden from the status as once captured.
    let handle = sim(FalOptions {
        refuse_unknown_keys: true,
        status_hides_errors: true,
        ..fast()
    })
    .await?;
    let c = Client::new(&handle)?;
    let id = id_of(
        &c.submit(T2V, &json!({"prompt": "p", "style": "anime"}))
            .await?,
    )?;
    let done = c.wait_status(&id, "COMPLETED").await?;
    assert!(
        done.get("error").is_none() && done.get("error_type").is_none(),
        "{done}"
    );
    let r = c.result(&id).await?;
    assert_eq!(r.body["detail"][0]["type"], "extra_forbidden", "{}", r.body);
    assert_eq!(r.body["detail"][0]["loc"], json!(["body", "style"]));
    handle.shutdown().await
}

#[tokio::test]
async fn a_request_still_queued_at_its_timeout_ends_504() -> anyhow::Result<()> {
    let handle = sim(FalOptions {
        concurrency: 1,
        ..slowish()
    })
    .await?;
    let c = Client::new(&handle)?;
    let busy = id_of(&c.submit(T2V, &prompt()).await?)?;
    c.wait_status(&busy, "IN_PROGRESS").await?;
    // 3 simulated seconds: 30 ms here, while the runner is busy for 0.6 s or more.
    let a = c.send(
        c.request(Method::POST, &format!("/{T2V}"))
            .header("x-fal-request-timeout", "3")
            .json(&prompt()),
    );
    let late = id_of(&a.await?.body)?;
    let done = c.wait_status(&late, "COMPLETED").await?;
    assert_eq!(done["error_type"], "request_timeout", "{done}");
    let r = c.result(&late).await?;
    assert_eq!(r.status, StatusCode::GATEWAY_TIMEOUT, "{}", r.body);
    assert_eq!(
        r.headers
            .get("x-fal-request-timeout-type")
            .map(|v| v.as_bytes()),
        Some(&b"user"[..])
    );
    let job = handle
        .jobs()
        .into_iter()
        .find(|j| j.request_id == late)
        .context("job")?;
    assert!(job.started.is_none());
    let waited = job.ended.unwrap_or_default() - job.submitted;
    assert!((2.99..6.0).contains(&waited), "{job:?}");
    handle.shutdown().await
}

#[tokio::test]
async fn unfinished_requests_are_in_the_history_only_with_the_flag() -> anyhow::Result<()> {
    for flag in [false, true] {
        let handle = sim(FalOptions {
            history_includes_unfinished: flag,
            ..frozen()
        })
        .await?;
        let c = Client::new(&handle)?;
        let id = id_of(&c.submit(T2V, &prompt()).await?)?;
        let h = c
            .get(&format!(
                "/v1/models/requests/by-endpoint?endpoint_id={T2V}"
            ))
            .await?;
        let items = h.body["items"].as_array().cloned().unwrap_or_default();
        if flag {
            assert_eq!(items.len(), 1, "{}", h.body);
            assert_eq!(items[0]["request_id"], json!(id));
            assert_eq!(
                (
                    items[0]["ended_at"].clone(),
                    items[0]["status_code"].clone()
                ),
                (Value::Null, Value::Null)
            );
        } else {
            assert!(items.is_empty(), "{}", h.body);
        }
        handle.shutdown().await?;
    }
    Ok(())
}
