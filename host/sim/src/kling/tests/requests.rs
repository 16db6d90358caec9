//! What a single request gets: auth, validation, duplicates, the quota, paging, faults.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::*;

#[tokio::test]
async fn jwt_accepted_expired_and_wrong_key() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let mut c = Client::new(&handle)?;
    let path = "/v1/videos/text2video?pageNum=1&pageSize=10";
    let (status, v) = c.get(path).await?;
    assert_eq!(
        (status, v["code"].clone()),
        (StatusCode::OK, json!(0)),
        "{v}"
    );

    let now = now_secs();
    c.token = issue_token_with(
        SECRET_KEY_DEFAULT,
        &Claims {
            iss: ACCESS_KEY_DEFAULT.into(),
            exp: now - 10,
            nbf: Some(now - 1000),
        },
    );
    let (status, v) = c.get(path).await?;
    assert_eq!(
        (status, v["code"].clone()),
        (StatusCode::UNAUTHORIZED, json!(1004)),
        "{v}"
    );

    c.token = issue_token(ACCESS_KEY_DEFAULT, "not-the-secret", now);
    let (status, v) = c.get(path).await?;
    assert_eq!(
        (status, v["code"].clone()),
        (StatusCode::UNAUTHORIZED, json!(1000)),
        "{v}"
    );

    c.token = issue_token("someone-else", SECRET_KEY_DEFAULT, now);
    let (status, v) = c.get(path).await?;
    assert_eq!(
        (status, v["code"].clone()),
        (StatusCode::UNAUTHORIZED, json!(1000)),
        "{v}"
    );

    let resp = c.http.get(format!("{}{path}", c.base)).send().await?;
    assert_eq!(resp.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(resp.json::<Value>().await?["code"], 1001);

    assert_eq!(handle.stats().auth_refusals, 4);
    handle.shutdown().await
}

#[tokio::test]
async fn bad_parameters_are_refused_naming_the_field() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    let cases = [
        (
            "/v1/videos/text2video",
            json!({"prompt": "x", "duration": 5}),
            "duration",
        ),
        (
            "/v1/videos/text2video",
            json!({"prompt": "x", "duration": "7"}),
            "duration",
        ),
        ("/v1/videos/text2video", json!({"duration": "5"}), "prompt"),
        (
            "/v1/videos/text2video",
            json!({"prompt": "x".repeat(2501)}),
            "prompt",
        ),
        (
            "/v1/videos/text2video",
            json!({"prompt": "x", "mode": "max"}),
            "mode",
        ),
        (
            "/v1/videos/text2video",
            json!({"prompt": "x", "aspect_ratio": "4:3"}),
            "aspect_ratio",
        ),
        (
            "/v1/videos/text2video",
            json!({"prompt": "x", "cfg_scale": 1.5}),
            "cfg_scale",
        ),
        ("/v1/videos/image2video", json!({"prompt": "x"}), "image"),
        (
            "/v1/general/custom-voices",
            json!({"voice_name": "v"}),
            "voice_url",
        ),
    ];
    for (path, body, field) in cases {
        let (status, v) = c.post(path, body.clone()).await?;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body} → {v}");
        assert_eq!(v["code"], 1201, "{body} → {v}");
        let msg = v["message"].as_str().unwrap_or_default();
        assert!(
            msg.starts_with(field),
            "{body}: message {msg:?} should name {field}"
        );
    }
    let stats = handle.stats();
    assert_eq!((stats.creates, stats.validation_refusals), (0, 9));
    handle.shutdown().await
}

#[tokio::test]
async fn duplicate_external_task_id_is_refused() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    c.create("/v1/videos/text2video", video("one", "dup"))
        .await?;
    let (status, v) = c
        .post(
            "/v1/videos/image2video",
            json!({"image": "https://x/i.png", "external_task_id": "dup"}),
        )
        .await?;
    assert_eq!(
        (status, v["code"].clone()),
        (StatusCode::BAD_REQUEST, json!(1201)),
        "{v}"
    );
    assert!(
        v["message"]
            .as_str()
            .unwrap_or_default()
            .contains("external_task_id"),
        "{v}"
    );
    let stats = handle.stats();
    assert_eq!(stats.creates, 1);
    assert_eq!(stats.creates_by_external_id.get("dup"), Some(&2));
    assert_eq!(stats.duplicate_refusals, 1);
    handle.shutdown().await
}

#[tokio::test]
async fn over_capacity_rate_refuses_creates_with_room_left() -> anyhow::Result<()> {
    let handle = sim(SimOptions {
        over_capacity_rate: 1.0,
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    let (status, v) = c.post("/v1/videos/text2video", video("a", "a")).await?;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["code"], 1303);
    let stats = handle.stats();
    assert_eq!((stats.creates, stats.rate_limited_1303), (0, 1));
    handle.shutdown().await
}

#[tokio::test]
async fn over_the_limit_is_1303_and_creates_nothing() -> anyhow::Result<()> {
    let handle = sim(SimOptions {
        concurrency: 2,
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    c.create("/v1/videos/text2video", video("a", "a")).await?;
    // Voices share the account's quota with videos.
    c.create(
        "/v1/general/custom-voices",
        json!({"voice_name": "v", "voice_url": "https://x/v.mp3", "external_task_id": "b"}),
    )
    .await?;
    let (status, v) = c.post("/v1/videos/text2video", video("c", "c")).await?;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["code"], 1303);
    let (status, v) = c.get("/v1/videos/text2video/c").await?;
    assert_eq!(
        (status, v["code"].clone()),
        (StatusCode::NOT_FOUND, json!(1203)),
        "{v}"
    );
    let (_, list) = c.get("/v1/videos/text2video").await?;
    assert_eq!(list["data"].as_array().map(Vec::len), Some(1));
    let stats = handle.stats();
    assert_eq!(
        (
            stats.creates,
            stats.rate_limited_1303,
            stats.running,
            stats.max_running
        ),
        (2, 1, 2, 2)
    );
    assert!(!stats.creates_by_external_id.contains_key("c"));
    handle.shutdown().await?;

    // The slot comes back the moment a task ends.
    let handle = sim(SimOptions {
        concurrency: 1,
        ..fast()
    })
    .await?;
    let c = Client::new(&handle)?;
    let first = c.create("/v1/videos/text2video", video("a", "x1")).await?;
    let (status, _) = c.post("/v1/videos/text2video", video("b", "x2")).await?;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    c.wait_status(&format!("/v1/videos/text2video/{first}"), "succeed")
        .await?;
    c.create("/v1/videos/text2video", video("b", "x2")).await?;
    handle.shutdown().await
}

#[tokio::test]
async fn list_pages_newest_first_with_validated_ranges() -> anyhow::Result<()> {
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    let mut ids = Vec::new();
    for i in 0..5 {
        ids.push(
            c.create("/v1/videos/text2video", video("p", &format!("l{i}")))
                .await?,
        );
    }
    let page = |num: u32| format!("/v1/videos/text2video?pageNum={num}&pageSize=2");
    let task_ids = |v: &Value| -> Vec<String> {
        v["data"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|t| t["task_id"].as_str().map(str::to_owned))
            .collect()
    };
    assert_eq!(
        task_ids(&c.get(&page(1)).await?.1),
        vec![ids[4].clone(), ids[3].clone()]
    );
    assert_eq!(task_ids(&c.get(&page(3)).await?.1), vec![ids[0].clone()]);
    assert!(task_ids(&c.get(&page(4)).await?.1).is_empty());
    for (query, field) in [
        ("pageSize=0", "pageSize"),
        ("pageSize=501", "pageSize"),
        ("pageNum=1001", "pageNum"),
        ("pageNum=x", "pageNum"),
    ] {
        let (status, v) = c.get(&format!("/v1/videos/text2video?{query}")).await?;
        assert_eq!(
            (status, v["code"].clone()),
            (StatusCode::BAD_REQUEST, json!(1201)),
            "{query}: {v}"
        );
        assert!(
            v["message"].as_str().unwrap_or_default().starts_with(field),
            "{query}: {v}"
        );
    }
    let (status, _) = c.get("/v1/general/custom-voices?pageSize=1000").await?;
    assert_eq!(status, StatusCode::OK, "custom voices allow pageSize 1000");
    assert_eq!(handle.stats().list_queries, 4);
    handle.shutdown().await
}

#[tokio::test]
async fn malformed_rate_one_gives_unparsable_bodies() -> anyhow::Result<()> {
    let handle = sim(SimOptions {
        malformed_rate: 1.0,
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    let (status, body) = c
        .raw(
            reqwest::Method::POST,
            "/v1/videos/text2video",
            Some(&video("m", "m1")),
        )
        .await?;
    assert_eq!(status, StatusCode::OK);
    assert!(serde_json::from_slice::<Value>(&body).is_err(), "{body:?}");
    let (_, body) = c
        .raw(reqwest::Method::GET, "/v1/videos/text2video", None)
        .await?;
    assert!(serde_json::from_slice::<Value>(&body).is_err(), "{body:?}");
    let stats = handle.stats();
    assert_eq!(stats.faults.malformed, 2);
    assert_eq!(
        stats.creates, 1,
        "a malformed create answer still created its task"
    );
    handle.shutdown().await
}

#[tokio::test]
async fn fail_5xx_rate_one_refuses_before_any_effect() -> anyhow::Result<()> {
    let handle = sim(SimOptions {
        fail_5xx_rate: 1.0,
        ..frozen()
    })
    .await?;
    let c = Client::new(&handle)?;
    let (status, v) = c.post("/v1/videos/text2video", video("f", "f1")).await?;
    assert!(status.is_server_error(), "{status}");
    assert!(
        v["code"]
            .as_u64()
            .is_some_and(|code| (5000..=5002).contains(&code)),
        "{v}"
    );
    let stats = handle.stats();
    assert_eq!((stats.creates, stats.faults.http_5xx), (0, 1));
    handle.shutdown().await
}

#[tokio::test]
async fn queries_sooner_than_the_pace_are_counted_per_task() -> anyhow::Result<()> {
    // Real time: the pace is 5 s per task, far longer than this test.
    let handle = sim(frozen()).await?;
    let c = Client::new(&handle)?;
    let a = c.create("/v1/videos/text2video", video("a", "a")).await?;
    let b = c.create("/v1/videos/text2video", video("b", "b")).await?;
    let page = "/v1/videos/text2video?pageNum=1&pageSize=10";
    // A list page reads no task of its own: any number of them count nothing.
    c.get(page).await?;
    c.get(page).await?;
    assert_eq!(handle.stats().single_reads_too_soon, 0);
    // A task queried at once after its create, then again: each is too soon, for that task.
    c.get(&format!("/v1/videos/text2video/{a}")).await?;
    c.get(&format!("/v1/videos/text2video/{a}")).await?;
    assert_eq!(handle.stats().single_reads_too_soon, 2);
    // By its external id, the same task.
    c.get("/v1/videos/text2video/b").await?;
    assert_eq!(handle.stats().single_reads_too_soon, 3);
    assert_ne!(a, b);
    handle.shutdown().await
}
