//! Contract compatibility end to end (docs/interfaces.md): the Kling video handler built against
//! `slotd:handler@1.0.0` (`tests/fixtures/contract-1.0/kling-video.wasm`, kept as a binary)
//! serves the Kling video flow in the same slotd as today's 1.4.0 `kling-avatar` and
//! `runway-video`, each against its simulator.

use std::time::Duration;

use serde_json::{Value, json};
use sha2::Digest;
use slotd_core::config::{HandlerConfig, Secret};
use slotd_sim::runway::{API_KEY_DEFAULT, RunwayOptions, RunwaySimHandle};

use crate::kling::{
    Run, avatar_payload, check_stored_files, contract_1_0, sim_options, video_payload,
};
use crate::support::built_plugin;

/// `runway-video` against the Runway simulator: tier 3 (5 slots per model), hints scaled to the
/// simulator's speed.
fn runway_handler(sim: &RunwaySimHandle) -> HandlerConfig {
    let mut h = HandlerConfig::default();
    h.settings
        .insert("base_url".into(), sim.base_url().to_string());
    h.settings.insert("tier".into(), "3".into());
    h.settings
        .insert("expected_duration_scale".into(), "0.001".into());
    h.secrets
        .insert("api_key".into(), Secret::new(API_KEY_DEFAULT));
    h.allowed_hosts.push(sim.addr().to_string());
    h
}

fn runway_payload(shots: usize) -> Value {
    let shots: Vec<Value> = (0..shots)
        .map(|i| json!({"prompt_image": "https://example.com/frame.png", "prompt_text": format!("shot {i}")}))
        .collect();
    json!({"model": "gen4_turbo", "ratio": "1280:720", "duration": 5, "shots": shots})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kling_video_built_against_1_0_serves_beside_1_1_handlers() {
    let runway = slotd_sim::runway::spawn(RunwayOptions {
        listen: "127.0.0.1:0".parse().expect("addr"),
        time_scale: 0.001,
        long_tail_rate: 0.0,
        ..RunwayOptions::default()
    })
    .await
    .expect("Runway simulator");
    let old_video = contract_1_0("kling-video.wasm");
    let components = [
        ("kling-video", old_video.clone()),
        ("kling-avatar", built_plugin("kling-avatar")),
        ("runway-video", built_plugin("runway-video")),
    ];
    let run = Run::start_loading(sim_options(8), 18, false, &components, |c| {
        c.handlers
            .insert("runway-video".into(), runway_handler(&runway));
    })
    .await;

    // Which contract each handler speaks, as an operator sees it.
    let handlers: Value = run
        .client
        .get(format!("{}/v1/handlers", run.base))
        .send()
        .await
        .expect("GET /v1/handlers")
        .json()
        .await
        .expect("json");
    let handler = |name: &str| {
        handlers
            .as_array()
            .and_then(|a| a.iter().find(|h| h["name"] == name))
            .cloned()
            .unwrap_or_else(|| panic!("{name} not loaded: {handlers}"))
    };
    let video = handler("kling-video");
    assert_eq!(video["contract"], "1.0.0", "{video}");
    let fixture_sha = hex::encode(sha2::Sha256::digest(
        std::fs::read(&old_video).expect("read the 1.0.0 component"),
    ));
    assert_eq!(video["sha256"], fixture_sha, "the 1.0.0 binary serves");
    assert_eq!(
        video["features"],
        json!({"cancel": false, "routing": false, "costs": false, "provider": false, "routes": false})
    );
    for name in ["kling-avatar", "runway-video"] {
        assert_eq!(handler(name)["contract"], "1.5.0", "{}", handler(name));
        assert_eq!(
            handler(name)["features"]["costs"],
            true,
            "{}",
            handler(name)
        );
    }

    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(run.submit("video", video_payload(20)).await);
    }
    ids.push(run.submit("avatar_clone", avatar_payload()).await);
    ids.push(run.submit("runway_video", runway_payload(4)).await);
    let views = run.wait_terminal(&ids, Duration::from_secs(120)).await;
    for v in &views {
        assert_eq!(v["status"], "completed", "{v}");
    }

    // Kling video (1.0.0) and Runway (1.1.0): every shot stored with its provider's bytes.
    assert_eq!(check_stored_files(&run, &views[..3]).await, 60);
    assert_eq!(check_stored_files(&run, &views[4..]).await, 4);
    // Kling avatar (1.1.0): the cloned voice went into the element.
    let voice = views[3]["results"][0]["voice_id"]
        .as_str()
        .unwrap_or_else(|| panic!("no voice_id: {}", views[3]))
        .to_string();

    let kling = run.sim.stats();
    assert_eq!(kling.creates_by_kind.get("text2video").copied(), Some(60));
    assert_eq!(kling.creates_by_kind.get("custom-voices").copied(), Some(1));
    assert!(kling.element_voice_ids.values().any(|v| *v == voice));
    assert!(
        kling.creates_by_external_id.values().all(|&n| n == 1),
        "a Kling job was created twice"
    );
    // 18 video slots + 2 avatar slots: the account's 20, never exceeded.
    assert!(kling.max_running <= 20, "{} at once", kling.max_running);
    assert_eq!(kling.rate_limited_1303, 0);
    assert_eq!((kling.validation_refusals, kling.auth_refusals), (0, 0));
    let rw = runway.stats();
    assert_eq!(rw.creates, 4, "{rw:?}");
    assert_eq!((rw.validation_refusals, rw.auth_refusals), (0, 0));
    run.stop().await;
}
