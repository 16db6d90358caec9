//! What a single request gets: the key and version checks in their order, unknown tasks, the
//! daily limit, the organization.

use super::*;

#[tokio::test]
async fn key_then_version_header() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let mut c = Client::new(&handle)?;
    let body = i2v("gen4_turbo");
    let cases: [(Option<&str>, Option<&str>, StatusCode, &str); 5] = [
        (
            None,
            Some(RUNWAY_VERSION),
            StatusCode::UNAUTHORIZED,
            "API key",
        ),
        (
            Some("key_wrong"),
            Some(RUNWAY_VERSION),
            StatusCode::UNAUTHORIZED,
            "Invalid API key",
        ),
        (
            Some("key_wrong"),
            None,
            StatusCode::UNAUTHORIZED,
            "Invalid API key",
        ),
        (
            Some(API_KEY_DEFAULT),
            None,
            StatusCode::BAD_REQUEST,
            VERSION_HEADER,
        ),
        (
            Some(API_KEY_DEFAULT),
            Some("2024-09-13"),
            StatusCode::BAD_REQUEST,
            VERSION_HEADER,
        ),
    ];
    for (key, version, want, names) in cases {
        c.key = key.map(str::to_owned);
        c.version = version.map(str::to_owned);
        for (status, v) in [
            c.post("/v1/image_to_video", &body).await?,
            c.get("/v1/organization").await?,
        ] {
            assert_eq!(status, want, "{key:?} {version:?}: {v}");
            let error = v["error"].as_str().unwrap_or_default();
            assert!(error.contains(names), "{key:?} {version:?}: {v}");
        }
    }
    // A body that would fail validation still gets the header errors first.
    c.key = None;
    let (status, _) = c.post("/v1/image_to_video", &json!({})).await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED);

    let stats = handle.stats();
    assert_eq!(
        (stats.auth_refusals, stats.version_refusals, stats.creates),
        (7, 4, 0)
    );
    assert_eq!(stats.creates_refused.get("401"), Some(&4));
    assert_eq!(stats.creates_refused.get("400"), Some(&2));
    handle.shutdown().await
}

#[tokio::test]
async fn unknown_tasks_routes_and_methods() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    for id in ["3086d332-1963-4c9d-8103-0f90efa72e20", "not-a-uuid"] {
        let (status, v) = c.task(id).await?;
        assert_eq!(
            (status, v),
            (
                StatusCode::NOT_FOUND,
                json!({"error": "Could not find Task"})
            )
        );
        let (status, v) = c.delete(&format!("/v1/tasks/{id}")).await?;
        assert_eq!(
            (status, v),
            (
                StatusCode::NOT_FOUND,
                json!({"error": "Could not find Task"})
            )
        );
    }
    let (status, v) = c.get("/v1/nothing").await?;
    assert_eq!(status, StatusCode::NOT_FOUND, "{v}");
    assert!(v["error"].is_string());
    let (status, v) = c.get("/v1/image_to_video").await?;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{v}");
    assert!(v["error"].is_string());
    let stats = handle.stats();
    assert_eq!((stats.gets, stats.deletes, stats.not_found), (2, 2, 4));
    handle.shutdown().await
}

#[tokio::test]
async fn daily_limit_answers_429_and_creates_nothing() -> anyhow::Result<()> {
    let handle = sim(RunwayOptions {
        daily_limit: 100,
        model_daily_limit: vec![ModelLimit {
            model: Model::Gen4Turbo,
            limit: 2,
        }],
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    let (status, v) = c.post("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("gen4_turbo")),
        "{v}"
    );
    // Another model has its own limit.
    c.create("/v1/text_to_video", &t2v("veo3.1")).await?;

    let stats = handle.stats();
    assert_eq!((stats.creates, stats.daily_limit_refusals), (3, 1));
    assert_eq!(stats.creates_refused.get("429"), Some(&1));
    assert_eq!(stats.models["gen4_turbo"].daily_used, 2);
    assert_eq!(handle.jobs().len(), 3);

    let (status, org) = c.get("/v1/organization").await?;
    assert_eq!(status, StatusCode::OK, "{org}");
    assert_eq!(
        org["tier"]["models"]["gen4_turbo"]["maxDailyGenerations"],
        2
    );
    assert_eq!(org["tier"]["models"]["veo3.1"]["maxDailyGenerations"], 100);
    assert_eq!(org["usage"]["models"]["gen4_turbo"]["dailyGenerations"], 2);
    assert_eq!(org["usage"]["models"]["veo3.1"]["dailyGenerations"], 1);
    assert_eq!(org["usage"]["models"]["veo3"]["dailyGenerations"], 0);
    handle.shutdown().await
}

#[tokio::test]
async fn organization_reports_limits_and_spends_credits_on_success() -> anyhow::Result<()> {
    let handle = sim(RunwayOptions {
        model_concurrency: vec![ModelLimit {
            model: Model::Gen45,
            limit: 3,
        }],
        credit_balance: 1_000,
        ..fast()
    })
    .await?;
    let c = Client::new(&handle)?;
    let (_, org) = c.get("/v1/organization").await?;
    assert_eq!(org["creditBalance"], 1_000);
    assert_eq!(
        org["tier"]["maxMonthlyCreditSpend"],
        MAX_MONTHLY_CREDIT_SPEND
    );
    assert_eq!(
        org["tier"]["models"]["gen4.5"]["maxConcurrentGenerations"],
        3
    );
    assert_eq!(
        org["tier"]["models"]["gen4_turbo"]["maxConcurrentGenerations"],
        CONCURRENCY_DEFAULT
    );
    assert_eq!(
        org["tier"]["models"].as_object().map(|m| m.len()),
        Some(Model::ALL.len())
    );

    let id = c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    let done = c.wait_status(&id, "SUCCEEDED").await?;
    assert_eq!(done["cost"], json!({"credits": 50}), "{done}");
    let (_, org) = c.get("/v1/organization").await?;
    assert_eq!(org["creditBalance"], 950);
    assert_eq!(handle.stats().organization_gets, 2);
    handle.shutdown().await
}

/// A shortened day (`--day-seconds`) with `--daily-retry-after`: the refusal says when the
/// oldest counted create leaves the window, and a create after that is accepted.
#[tokio::test]
async fn a_short_day_refuses_with_retry_after_and_frees_when_it_ends() -> anyhow::Result<()> {
    let handle = sim(RunwayOptions {
        daily_limit: 2,
        day_seconds: Some(1.0),
        daily_retry_after: true,
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    let r = c
        .request(Method::POST, "/v1/image_to_video")
        .json(&i2v("gen4_turbo"))
        .send()
        .await?;
    assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        r.headers().get("retry-after").and_then(|v| v.to_str().ok()),
        Some("1"),
        "a second's day, rounded up"
    );
    // Polled with a deadline: the day ends within about a second.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = c.post("/v1/image_to_video", &i2v("gen4_turbo")).await?;
        if status == StatusCode::OK {
            break;
        }
        assert!(Instant::now() < deadline, "the day never ended");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(handle.stats().creates, 3);
    handle.shutdown().await
}

/// Reads of a task sooner than Runway's five seconds (here unscaled) after its create or the
/// previous read are counted, per task and in all.
#[tokio::test]
async fn reads_sooner_than_runways_pace_are_counted() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    let id = c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    c.task(&id).await?;
    c.task(&id).await?;
    assert_eq!(handle.stats().polls_too_soon, 2);
    assert_eq!(handle.jobs()[0].reads_too_soon, 2);
    handle.shutdown().await
}

/// `GET /v1/organization` against the options, model by model: the limits each model is held
/// to (per-model overrides, else the defaults, `DAILY_LIMIT_DEFAULT` included), and
/// `dailyGenerations` as the count the daily 429 uses: K after K creates of one model, 0 for
/// the others, and 0 again (with creates accepted again) once the shortened day has passed.
#[tokio::test]
async fn organization_counts_each_models_creates_until_the_day_ends() -> anyhow::Result<()> {
    const K: u32 = 3;
    let opts = RunwayOptions {
        concurrency: 4,
        model_concurrency: vec![ModelLimit {
            model: Model::Veo3,
            limit: 2,
        }],
        model_daily_limit: vec![ModelLimit {
            model: Model::Gen4Turbo,
            limit: K,
        }],
        day_seconds: Some(2.0),
        ..frozen()
    };
    let handle = sim(opts.clone()).await?;
    let c = Client::new(&handle)?;

    let mut unkeyed = Client::new(&handle)?;
    unkeyed.key = None;
    let (status, v) = unkeyed.get("/v1/organization").await?;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{v}");
    assert!(v.get("tier").is_none(), "{v}");

    for _ in 0..K {
        c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    }
    let (status, refused) = c.post("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{refused}");

    let (status, org) = c.get("/v1/organization").await?;
    assert_eq!(status, StatusCode::OK, "{org}");
    let mut keys: Vec<&str> = org
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    assert_eq!(keys, ["creditBalance", "tier", "usage"], "{org}");
    assert_eq!(
        org["creditBalance"], opts.credit_balance,
        "nothing succeeded"
    );
    let names = |v: &Value| -> Vec<String> {
        v.as_object()
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let mut all: Vec<String> = Model::ALL.iter().map(|m| m.as_str().to_owned()).collect();
    all.sort_unstable();
    assert_eq!(names(&org["tier"]["models"]), all, "{org}");
    assert_eq!(names(&org["usage"]["models"]), all, "{org}");
    for m in Model::ALL {
        let name = m.as_str();
        let used = if m == Model::Gen4Turbo { K } else { 0 };
        assert_eq!(
            org["tier"]["models"][name],
            json!({
                "maxConcurrentGenerations": opts.concurrency_for(m),
                "maxDailyGenerations": opts.daily_limit_for(m),
            }),
            "{name}"
        );
        assert_eq!(
            org["usage"]["models"][name],
            json!({ "dailyGenerations": used }),
            "{name}"
        );
    }
    assert_eq!(org["tier"]["models"]["veo3"]["maxConcurrentGenerations"], 2);
    assert_eq!(
        org["tier"]["models"]["gen4.5"]["maxConcurrentGenerations"],
        4
    );
    assert_eq!(
        org["tier"]["models"]["gen4_turbo"]["maxDailyGenerations"],
        K
    );
    assert_eq!(
        org["tier"]["models"]["veo3.1"]["maxDailyGenerations"],
        DAILY_LIMIT_DEFAULT
    );

    // Polled with a deadline: the two-second day ends, the count falls back to 0, and the
    // daily limit lets creates through again.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, org) = c.get("/v1/organization").await?;
        assert_eq!(status, StatusCode::OK, "{org}");
        if org["usage"]["models"]["gen4_turbo"]["dailyGenerations"] == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the day never ended: {org}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    c.create("/v1/image_to_video", &i2v("gen4_turbo")).await?;
    let (_, org) = c.get("/v1/organization").await?;
    assert_eq!(org["usage"]["models"]["gen4_turbo"]["dailyGenerations"], 1);

    let stats = handle.stats();
    assert_eq!(stats.models["gen4_turbo"].daily_used, 1);
    assert_eq!(
        (stats.creates, stats.daily_limit_refusals),
        (K as u64 + 1, 1)
    );
    // Every keyed read is counted; the unkeyed one is an auth refusal, not a read.
    assert!(stats.organization_gets >= 3, "{}", stats.organization_gets);
    assert_eq!(stats.auth_refusals, 1);
    handle.shutdown().await
}
