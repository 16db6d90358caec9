//! What single requests get: auth and the submit checks in their order, a request from submit
//! to downloaded file, paths and other accounts' requests, the request history.

use sha2::{Digest, Sha256};

use super::*;

#[tokio::test]
async fn keys_are_checked_first_and_a_locked_account_gets_403() -> anyhow::Result<()> {
    let handle = sim(frozen().with_account("broke", "k-broke:s", 2)).await?;
    let c = Client::new(&handle)?;
    let body = prompt();
    for key in [
        None,
        Some("nobody:secret"),
        Some(KEY_DEFAULT.split(':').next().unwrap_or("")),
    ] {
        let anon = c.with_key(key);
        // A bad key wins over an unknown model and a bad body.
        for (path, body) in [
            (format!("/{T2V}"), &body),
            ("/fal-ai/nope".into(), &json!([])),
        ] {
            let a = anon.post(&path, body).await?;
            assert_eq!(
                a.status,
                StatusCode::UNAUTHORIZED,
                "{key:?} {path}: {}",
                a.body
            );
            assert!(a.body["detail"].is_string(), "{}", a.body);
        }
        let a = anon.status("3086d332-1963-4c9d-8103-0f90efa72e20").await?;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED);
        let a = anon
            .get(&format!(
                "/v1/models/requests/by-endpoint?endpoint_id={T2V}"
            ))
            .await?;
        assert_eq!(a.status, StatusCode::UNAUTHORIZED);
    }
    let broke = c.with_key(Some("k-broke:s"));
    assert!(handle.set_exhausted("broke", true));
    for path in [format!("/{T2V}"), "/fal-ai/nope".into()] {
        let a = broke.post(&path, &body).await?;
        assert_eq!(a.status, StatusCode::FORBIDDEN, "{}", a.body);
        let detail = a.body["detail"].as_str().unwrap_or_default();
        assert!(
            detail.starts_with("User is locked. Reason: Exhausted balance"),
            "{detail}"
        );
    }
    // Reads still work for a locked account; unlocking lets it submit again.
    let a = broke.status("3086d332-1963-4c9d-8103-0f90efa72e20").await?;
    assert_eq!(a.status, StatusCode::NOT_FOUND);
    assert!(handle.set_exhausted("broke", false));
    broke.submit(T2V, &body).await?;
    let stats = handle.stats();
    assert_eq!(
        (stats.auth_refusals, stats.locked_refusals, stats.submits),
        (12, 2, 1)
    );
    assert_eq!(stats.submits_refused.get("unauthorized"), Some(&6));
    assert_eq!(stats.submits_refused.get("locked"), Some(&2));
    handle.shutdown().await
}

/// One submit of the check-order test and what must answer it.
struct Case {
    path: String,
    body: &'static [u8],
    header: (&'static str, &'static str),
    want: u16,
    /// A text the answer contains (the problem's type, mostly).
    names: &'static str,
}

impl Case {
    fn new(
        path: &str,
        body: &'static [u8],
        header: (&'static str, &'static str),
        want: u16,
        names: &'static str,
    ) -> Case {
        Case {
            path: path.to_owned(),
            body,
            header,
            want,
            names,
        }
    }
}

#[tokio::test]
async fn submit_checks_come_in_the_contract_order() -> anyhow::Result<()> {
    let handle = sim(FalOptions {
        validate_at_submit: true,
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    let send = |path: String, body: &[u8], headers: &[(&str, &str)]| {
        let mut req = c.request(Method::POST, &path).body(body.to_vec());
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        c.send(req)
    };
    let priority = ("x-fal-queue-priority", "urgent");
    let hooked = format!("/{T2V}?fal_webhook=https://example.com/hook");
    let max0 = format!("/{T2V}?fal_max_queue_length=0");
    // Each case also breaks every later check: the earliest one answers.
    let cases = [
        Case::new("/fal-ai/pika/v9/dream", b"nope", priority, 404, "detail"),
        Case::new(&hooked, b"nope", priority, 422, "json_invalid"),
        Case::new(&hooked, b"[1]", priority, 422, "model_attributes_type"),
        Case::new(&hooked, b"{}", priority, 422, "value_error"),
        Case::new(
            &format!("/{T2V}?fal_max_queue_length=-1"),
            b"{}",
            priority,
            422,
            "int_parsing",
        ),
        Case::new(&max0, b"{}", priority, 400, "bad_request"),
        Case::new(
            &max0,
            b"{}",
            ("x-fal-request-timeout", "1"),
            400,
            "bad_request",
        ),
        Case::new(
            &max0,
            b"{}",
            ("x-fal-object-lifecycle-preference", "7"),
            400,
            "bad_request",
        ),
        Case::new(&max0, b"{}", ("x-fal-store-io", "1"), 422, "missing"),
        Case::new(
            &max0,
            br#"{"prompt": "p"}"#,
            ("x-fal-store-io", "0"),
            429,
            "queue_full",
        ),
    ];
    for case in cases {
        let a = send(case.path.clone(), case.body, &[case.header]).await?;
        assert_eq!(a.status.as_u16(), case.want, "{}: {}", case.path, a.body);
        let named = a.body.to_string().contains(case.names);
        assert!(named, "{}: {}", case.path, a.body);
    }
    let ok = send(
        format!("/{T2V}?fal_max_queue_length=1"),
        br#"{"prompt": "p"}"#,
        &[
            ("x-fal-queue-priority", "low"),
            ("x-fal-request-timeout", "30"),
        ],
    )
    .await?;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    let full = send(
        format!("/{T2V}?fal_max_queue_length=1"),
        br#"{"prompt": "p"}"#,
        &[],
    )
    .await?;
    assert_eq!(
        full.status,
        StatusCode::TOO_MANY_REQUESTS,
        "one waits already: {}",
        full.body
    );
    assert_eq!(
        full.headers.get("x-fal-error-type").map(|v| v.as_bytes()),
        Some(&b"queue_full"[..])
    );
    let refused = handle.stats().submits_refused;
    let count = |r: &str| refused.get(r).copied().unwrap_or(0);
    assert_eq!(
        [
            count("unknown_model"),
            count("bad_body"),
            count("bad_query"),
            count("bad_header"),
            count("schema"),
            count("queue_full")
        ],
        [1, 2, 2, 3, 1, 2],
        "{refused:?}"
    );
    handle.shutdown().await
}

#[tokio::test]
async fn a_request_from_submit_to_downloaded_file() -> anyhow::Result<()> {
    let handle = sim(fast()).await?;
    let c = Client::new(&handle)?;
    let a = c
        .post(
            &format!("/{T2V}"),
            &json!({"prompt": "a fox", "style": "anime"}),
        )
        .await?;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    let id = id_of(&a.body)?;
    assert!(uuid::Uuid::parse_str(&id).is_ok(), "{id}");
    assert_eq!(
        a.headers.get("x-fal-request-id").map(|v| v.as_bytes()),
        Some(id.as_bytes())
    );
    let base = format!("{}/fal-ai/pika/requests/{id}", handle.base_url());
    assert_eq!(a.body["status"], "IN_QUEUE");
    assert_eq!(a.body["queue_position"], 0);
    assert_eq!(a.body["response_url"], json!(base));
    assert_eq!(a.body["status_url"], json!(format!("{base}/status")));
    assert_eq!(a.body["cancel_url"], json!(format!("{base}/cancel")));

    let early = c.result(&id).await?;
    if early.status != StatusCode::OK {
        assert_eq!(
            (early.status, early.body.clone()),
            (
                StatusCode::BAD_REQUEST,
                json!({"detail": "Request is still in progress"})
            )
        );
    }
    let first = c.status(&id).await?;
    assert!(
        first.status == StatusCode::ACCEPTED || first.body["status"] == "COMPLETED",
        "{}",
        first.body
    );
    let done = c.wait_status(&id, "COMPLETED").await?;
    assert!(
        done["metrics"]["inference_time"]
            .as_f64()
            .is_some_and(|t| (60.0..=121.0).contains(&t)),
        "{done}"
    );
    assert!(done.get("error_type").is_none(), "{done}");
    let logs = c
        .get(&format!("/fal-ai/pika/requests/{id}/status?logs=1"))
        .await?;
    assert_eq!(logs.status, StatusCode::OK);
    assert_eq!(
        logs.body["logs"].as_array().map(Vec::len),
        Some(2),
        "{}",
        logs.body
    );

    let result = c.result(&id).await?;
    assert_eq!(result.status, StatusCode::OK, "{}", result.body);
    let video = &result.body["video"];
    assert_eq!(
        (video["content_type"].clone(), video["file_size"].clone()),
        (json!("video/mp4"), json!(file_len(&id)))
    );
    let url = video["url"].as_str().context("video url")?;
    assert!(
        url.starts_with(&format!("{}/_cdn/files/", handle.base_url())),
        "{url}"
    );
    // Public: no key needed.
    let file = reqwest::Client::builder()
        .no_proxy()
        .build()?
        .get(url)
        .send()
        .await?;
    assert_eq!(file.status(), StatusCode::OK);
    assert_eq!(
        file.headers().get("content-type").map(|v| v.as_bytes()),
        Some(&b"video/mp4"[..])
    );
    let bytes = file.bytes().await?;
    let job = handle
        .jobs()
        .into_iter()
        .find(|j| j.request_id == id)
        .context("job")?;
    assert_eq!(
        job.file_sha256.as_deref(),
        Some(hex::encode(Sha256::digest(&bytes)).as_str())
    );
    assert_eq!(job.file_sha256, Some(file_sha256(&id)));
    assert_eq!(
        (
            job.status.as_str(),
            job.status_code,
            job.unknown_keys.clone()
        ),
        ("COMPLETED", Some(200), vec!["style".to_owned()])
    );
    assert_eq!((job.price_usd, job.billed_usd), (0.20, 0.20));
    let stats = handle.stats();
    assert_eq!(
        (
            stats.unknown_input_keys,
            stats.file_downloads,
            stats.succeeded
        ),
        (1, 1, 1)
    );
    assert!((stats.accounts[ACCOUNT_DEFAULT].billed_usd - 0.20).abs() < 1e-9);
    handle.shutdown().await
}

#[tokio::test]
async fn requests_live_under_owner_and_app_of_their_account_only() -> anyhow::Result<()> {
    let handle = sim(frozen().with_account("other", "k-other:s", 2)).await?;
    let c = Client::new(&handle)?;
    let id = id_of(&c.submit(T2V, &prompt()).await?)?;
    let other = c.with_key(Some("k-other:s"));
    for (client, path, want) in [
        (
            &c,
            format!("/fal-ai/pika/requests/{id}/status"),
            StatusCode::ACCEPTED,
        ),
        (
            &c,
            format!("/{T2V}/requests/{id}/status"),
            StatusCode::NOT_FOUND,
        ),
        (
            &c,
            format!("/fal-ai/kling-video/requests/{id}/status"),
            StatusCode::NOT_FOUND,
        ),
        (
            &c,
            format!("/fal-ai/pika/requests/{id}/status/stream"),
            StatusCode::NOT_FOUND,
        ),
        (
            &c,
            "/fal-ai/pika/requests/3086d332-1963-4c9d-8103-0f90efa72e20".into(),
            StatusCode::NOT_FOUND,
        ),
        (
            &other,
            format!("/fal-ai/pika/requests/{id}/status"),
            StatusCode::NOT_FOUND,
        ),
        (
            &other,
            format!("/fal-ai/pika/requests/{id}"),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let a = client.get(&path).await?;
        assert_eq!(a.status, want, "{path}: {}", a.body);
        assert!(
            a.body["detail"].is_string() || a.body["status"].is_string(),
            "{}",
            a.body
        );
    }
    let a = other.cancel(&id).await?;
    assert_eq!(
        (a.status, a.body),
        (StatusCode::NOT_FOUND, json!({"status": "NOT_FOUND"}))
    );
    let a = c
        .send(c.request(Method::DELETE, &format!("/fal-ai/pika/requests/{id}")))
        .await?;
    assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED);
    handle.shutdown().await?;

    // With the flag, the model path inserted works too.
    let handle = sim(FalOptions {
        allow_model_path: true,
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    let id = id_of(&c.submit(T2V, &prompt()).await?)?;
    let a = c.get(&format!("/{T2V}/requests/{id}/status")).await?;
    assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);
    handle.shutdown().await
}

#[tokio::test]
async fn the_history_lists_the_accounts_finished_requests_newest_end_first() -> anyhow::Result<()> {
    let handle = sim(fast().with_account("other", "k-other:s", 2)).await?;
    let c = Client::new(&handle)?;
    let other = c.with_key(Some("k-other:s"));
    let mut ids = Vec::new();
    for body in [prompt(), json!({"prompt": ""}), prompt()] {
        ids.push(id_of(&c.submit(T2V, &body).await?)?);
    }
    let theirs = id_of(&other.submit(T2V, &prompt()).await?)?;
    let turbo = id_of(&c.submit(TURBO_I2V, &turbo_body()).await?)?;
    for id in &ids {
        c.wait_status(id, "COMPLETED").await?;
    }
    other.wait_status(&theirs, "COMPLETED").await?;
    let page = |q: String| {
        let c = c.clone();
        async move {
            c.get(&format!(
                "/v1/models/requests/by-endpoint?endpoint_id={T2V}{q}"
            ))
            .await
        }
    };
    let all = page(String::new()).await?;
    assert_eq!(all.status, StatusCode::OK, "{}", all.body);
    let items = all.body["items"].as_array().cloned().unwrap_or_default();
    let listed: Vec<&str> = items
        .iter()
        .filter_map(|i| i["request_id"].as_str())
        .collect();
    assert_eq!(listed.len(), 3, "ours only, this endpoint only: {items:?}");
    assert!(!listed.contains(&theirs.as_str()) && !listed.contains(&turbo.as_str()));
    let ends: Vec<String> = items.iter().map(|i| i["ended_at"].to_string()).collect();
    assert!(
        ends.windows(2).all(|w| w[0] >= w[1]),
        "newest end first: {ends:?}"
    );
    assert!(
        items[0].get("json_input").is_none(),
        "payloads only on request"
    );

    let errors = page("&status=user_error&expand=payloads".into()).await?;
    let item = &errors.body["items"][0];
    assert_eq!(
        (item["request_id"].clone(), item["status_code"].clone()),
        (json!(ids[1]), json!(422)),
        "{}",
        errors.body
    );
    assert_eq!(item["json_input"], json!({"prompt": ""}));
    assert_eq!(item["json_output"]["detail"][0]["type"], "string_too_short");

    // Paging: one at a time, following the cursor.
    let mut seen = Vec::new();
    let mut cursor = String::new();
    loop {
        let p = page(format!("&limit=1{cursor}")).await?;
        seen.extend(p.body["items"].as_array().cloned().unwrap_or_default());
        match p.body["next_cursor"].as_str() {
            Some(next) => cursor = format!("&cursor={next}"),
            None => break,
        }
    }
    assert_eq!(seen, items);
    let one = page(format!("&request_id={}", ids[2])).await?;
    assert_eq!(one.body["items"].as_array().map(Vec::len), Some(1));
    let future = page("&start=2099-01-01T00:00:00Z&end=2099-01-02T00:00:00%2B01:00".into()).await?;
    assert_eq!(future.body["items"], json!([]));
    let bad = page("&limit=0".into()).await?;
    assert_eq!(bad.status, StatusCode::UNPROCESSABLE_ENTITY, "{}", bad.body);
    assert_eq!(
        handle.stats().history_reads,
        7,
        "a refused query is not a read"
    );
    handle.shutdown().await
}
