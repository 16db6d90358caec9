//! End-to-end tests of the simulator over real HTTP on 127.0.0.1:0, with reqwest. Waiting is
//! polling with a deadline, never a fixed sleep.

use std::time::Duration;

use anyhow::{Context, bail};
use reqwest::StatusCode;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::*;

const DEADLINE: Duration = Duration::from_secs(20);

fn now_secs() -> i64 {
    state::unix_secs()
}

async fn sim(opts: SimOptions) -> anyhow::Result<SimHandle> {
    start(SimOptions {
        listen: "127.0.0.1:0".parse()?,
        ..opts
    })
    .await
}

/// Options for fast tests: 2000x faster, no long tail.
fn fast() -> SimOptions {
    SimOptions {
        time_scale: 0.0005,
        long_tail_rate: 0.0,
        ..SimOptions::default()
    }
}

/// Options where nothing ends during a test.
fn frozen() -> SimOptions {
    SimOptions {
        time_scale: 1.0,
        ..SimOptions::default()
    }
}

struct Client {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Client {
    fn new(handle: &SimHandle) -> anyhow::Result<Client> {
        Ok(Client {
            http: reqwest::Client::builder().no_proxy().build()?,
            base: handle.base_url().to_owned(),
            token: issue_token(ACCESS_KEY_DEFAULT, SECRET_KEY_DEFAULT, now_secs()),
        })
    }

    async fn raw(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> anyhow::Result<(StatusCode, bytes::Bytes)> {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(&self.token);
        if let Some(b) = body {
            req = req.json(b);
        }
        let resp = req
            .send()
            .await
            .with_context(|| format!("calling {path}"))?;
        Ok((resp.status(), resp.bytes().await?))
    }

    async fn get(&self, path: &str) -> anyhow::Result<(StatusCode, Value)> {
        let (status, body) = self.raw(reqwest::Method::GET, path, None).await?;
        Ok((
            status,
            serde_json::from_slice(&body)
                .with_context(|| format!("GET {path}: body is not JSON"))?,
        ))
    }

    async fn post(&self, path: &str, body: Value) -> anyhow::Result<(StatusCode, Value)> {
        let (status, bytes) = self.raw(reqwest::Method::POST, path, Some(&body)).await?;
        Ok((
            status,
            serde_json::from_slice(&bytes)
                .with_context(|| format!("POST {path}: body is not JSON"))?,
        ))
    }

    /// Creates and returns the task id, failing on any refusal.
    async fn create(&self, path: &str, body: Value) -> anyhow::Result<String> {
        let (status, v) = self.post(path, body).await?;
        if status != StatusCode::OK || v["code"] != 0 {
            bail!("create at {path} refused: {status} {v}");
        }
        v["data"]["task_id"]
            .as_str()
            .map(str::to_owned)
            .context("create answer without data.task_id")
    }

    /// Polls `path` until its task reaches `want`, or fails at the deadline.
    async fn wait_status(&self, path: &str, want: &str) -> anyhow::Result<Value> {
        let deadline = Instant::now() + DEADLINE;
        loop {
            let (status, v) = self.get(path).await?;
            if status != StatusCode::OK {
                bail!("GET {path}: {status} {v}");
            }
            if v["data"]["task_status"] == want {
                return Ok(v["data"].clone());
            }
            if Instant::now() > deadline {
                bail!("{path} did not reach {want} in {DEADLINE:?}: {v}");
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

fn video(prompt: &str, ext: &str) -> Value {
    json!({"model_name": "kling-v1-6", "prompt": prompt, "mode": "std", "duration": "5",
           "aspect_ratio": "16:9", "external_task_id": ext})
}

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
async fn text2video_runs_to_succeed_and_downloads_stable_content() -> anyhow::Result<()> {
    let handle = sim(fast()).await?;
    let c = Client::new(&handle)?;
    let (status, v) = c
        .post("/v1/videos/text2video", video("a cat", "shot-1"))
        .await?;
    assert_eq!(status, StatusCode::OK, "{v}");
    assert_eq!(v["message"], "SUCCEED");
    assert!(v["request_id"].is_string());
    let data = &v["data"];
    assert_eq!(data["task_status"], "submitted");
    assert_eq!(data["task_info"]["external_task_id"], "shot-1");
    assert!(
        data["created_at"]
            .as_i64()
            .is_some_and(|ms| ms > 1_600_000_000_000),
        "ms timestamps"
    );
    let id = data["task_id"].as_str().context("task_id")?.to_owned();
    assert!(
        id.len() >= 18 && id.chars().all(|c| c.is_ascii_digit()),
        "numeric id {id}"
    );

    let done = c
        .wait_status(&format!("/v1/videos/text2video/{id}"), "succeed")
        .await?;
    let by_ext = c
        .wait_status("/v1/videos/text2video/shot-1", "succeed")
        .await?;
    assert_eq!(by_ext["task_id"], json!(id));
    assert_eq!(done["final_unit_deduction"], "1");
    assert_eq!(done["task_result"]["videos"][0]["duration"], "5");
    let (status, _) = c.get(&format!("/v1/videos/image2video/{id}")).await?;
    assert_eq!(
        status,
        StatusCode::NOT_FOUND,
        "a text2video task is not an image2video task"
    );

    let url = done["task_result"]["videos"][0]["url"]
        .as_str()
        .context("url")?;
    assert_eq!(url, format!("{}/files/{id}.mp4", handle.base_url()));
    let first = c
        .http
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    let second = c
        .http
        .get(url)
        .send()
        .await?
        .error_for_status()?
        .bytes()
        .await?;
    assert_eq!(first, second);
    assert!((FILE_MIN_BYTES..=FILE_MAX_BYTES).contains(&first.len()));
    assert_eq!(hex::encode(Sha256::digest(&first)), file_sha256(&id));

    let stats = handle.stats();
    assert_eq!(
        (
            stats.creates,
            stats.succeeded,
            stats.running,
            stats.downloads
        ),
        (1, 1, 0, 2)
    );
    assert!(
        stats.busy_slot_seconds >= 30.0 && stats.busy_slot_seconds < 400.0,
        "{stats:?}"
    );
    assert!(
        stats.utilization > 0.0 && stats.utilization <= 1.0 / 20.0 + 1e-9,
        "{stats:?}"
    );
    let served: SimStats = c
        .http
        .get(format!("{}/_sim/stats", c.base))
        .send()
        .await?
        .json()
        .await?;
    assert_eq!(served.creates, 1);
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
async fn avatar_voice_then_element_carrying_the_voice_id() -> anyhow::Result<()> {
    let handle = sim(fast()).await?;
    let c = Client::new(&handle)?;
    let voice_task = c
        .create("/v1/general/custom-voices", json!({"voice_name": "anna", "voice_url": "https://x/a.mp3", "external_task_id": "u1-voice"}))
        .await?;
    let voice = c
        .wait_status("/v1/general/custom-voices/u1-voice", "succeed")
        .await?;
    assert_eq!(voice["task_id"], json!(voice_task));
    let voice_id = voice["task_result"]["voices"][0]["voice_id"]
        .as_str()
        .context("voice_id")?
        .to_owned();
    let element = |voice_id: &str| {
        json!({"element_name": "anna", "element_description": "a presenter", "reference_type": "image_refer",
               "element_image_list": {"frontal_image": "https://x/f.png", "refer_images": [{"image_url": "https://x/r.png"}]},
               "element_voice_id": voice_id, "tag_list": [{"tag_id": "o_102"}], "external_task_id": "u1-element"})
    };
    let (status, v) = c
        .post("/v1/general/advanced-custom-elements", element("123"))
        .await?;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "an unknown voice is refused: {v}"
    );
    assert!(
        v["message"]
            .as_str()
            .unwrap_or_default()
            .starts_with("element_voice_id"),
        "{v}"
    );

    let element_task = c
        .create("/v1/general/advanced-custom-elements", element(&voice_id))
        .await?;
    let done = c
        .wait_status(
            &format!("/v1/general/advanced-custom-elements/{element_task}"),
            "succeed",
        )
        .await?;
    let el = &done["task_result"]["elements"][0];
    assert!(el["element_id"].is_u64(), "element_id is a number: {el}");
    assert_eq!(el["element_voice_info"]["voice_id"], json!(voice_id));
    assert_eq!(
        handle.stats().element_voice_ids.get(&element_task),
        Some(&voice_id)
    );
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
async fn callbacks_carry_each_status_change_signed() -> anyhow::Result<()> {
    const SECRET: &str = "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXR0ZXN0c2VjcmV0MTI=";
    let (tx, mut rx) =
        tokio::sync::mpsc::unbounded_channel::<(axum::http::HeaderMap, bytes::Bytes)>();
    let receiver = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: bytes::Bytes| {
            let tx = tx.clone();
            async move {
                let _ = tx.send((headers, body));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook = format!("http://{}/hook", listener.local_addr()?);
    let server = tokio::spawn(async move { axum::serve(listener, receiver).await });

    let handle = sim(SimOptions {
        webhook_secret: Some(SECRET.into()),
        ..fast()
    })
    .await?;
    let c = Client::new(&handle)?;
    let mut body = video("cb", "cb1");
    body["callback_url"] = json!(hook);
    let id = c.create("/v1/videos/text2video", body).await?;

    let mut seen = Vec::new();
    let deadline = Instant::now() + DEADLINE;
    while !seen.iter().any(|s| s == "succeed") {
        let (headers, body) = tokio::time::timeout_at(deadline, rx.recv())
            .await
            .context("no succeed callback before the deadline")?
            .context("receiver closed")?;
        let h = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let ts: i64 = h("webhook-timestamp").parse()?;
        webhook::verify(
            SECRET,
            &h("webhook-id"),
            ts,
            &body,
            &h("webhook-signature"),
            now_secs(),
        )?;
        let task: Value = serde_json::from_slice(&body)?;
        assert_eq!(task["task_id"], json!(id), "a bare task object: {task}");
        assert!(task.get("code").is_none(), "no envelope: {task}");
        seen.push(task["task_status"].as_str().unwrap_or_default().to_owned());
    }
    assert_eq!(seen, ["processing", "succeed"]);
    handle.shutdown().await?;
    server.abort();
    Ok(())
}
