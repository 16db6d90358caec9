//! Tasks over time: running to `succeed`, results, the avatar stages, callbacks.

use reqwest::StatusCode;
use serde_json::{Value, json};

use super::*;
use slotd_core::standard_webhooks as webhook;

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

#[tokio::test]
async fn serve_stops_when_its_shutdown_future_resolves() -> anyhow::Result<()> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let opts = SimOptions {
        listen: "127.0.0.1:0".parse()?,
        ..SimOptions::default()
    };
    let served = tokio::spawn(serve(opts, async {
        let _ = rx.await;
    }));
    let _ = tx.send(());
    tokio::time::timeout(DEADLINE, served).await??
}

#[test]
fn the_documented_command_line_parses() -> anyhow::Result<()> {
    use clap::Parser;
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        sim: SimOptions,
    }
    let cli = Cli::try_parse_from([
        "kling",
        "--listen",
        "127.0.0.1:18090",
        "--concurrency",
        "20",
        "--time-scale",
        "0.01",
        "--access-key",
        "AK",
        "--secret-key",
        "SK",
        "--fail-5xx-rate",
        "0.1",
        "--malformed-rate",
        "0.05",
        "--slow-rate",
        "0.1",
        "--slow-ms",
        "500",
        "--failure-after-accept-rate",
        "0.02",
        "--webhook-secret",
        "whsec_dGVzdHNlY3JldHRlc3RzZWNyZXR0ZXN0c2VjcmV0MTI=",
        "--seed",
        "7",
    ])?;
    cli.sim.validate()?;
    assert_eq!(
        (cli.sim.concurrency, cli.sim.time_scale, cli.sim.seed),
        (20, 0.01, 7)
    );
    assert!(
        Cli::try_parse_from(["kling", "--time-scale", "0"])?
            .sim
            .validate()
            .is_err()
    );
    assert!(
        Cli::try_parse_from(["kling", "--slow-rate", "1.5"])?
            .sim
            .validate()
            .is_err()
    );
    let bad_secret = Cli::try_parse_from(["kling", "--webhook-secret", "nope"])?;
    assert!(bad_secret.sim.validate().is_err());
    Ok(())
}
