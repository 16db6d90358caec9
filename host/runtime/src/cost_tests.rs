//! Contract 1.2 `costs`: real compiled handlers estimate each planned unit's provider cost in
//! `plan` (Kling resource-pack units, Runway credits); components without the export (1.0.0,
//! the core-world fixture) plan without estimates; the host keeps only usable estimates.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::json;

use super::checks::checked_estimates;
use super::{Runtime, kling_tests, runway_tests};
use slotd_core::config::RuntimeLimits;
use slotd_sim::kling::SimOptions;
use slotd_sim::runway::API_KEY_DEFAULT;

async fn costs(
    h: &super::Handler,
    task_type: &str,
    payload: &serde_json::Value,
) -> Vec<Option<f64>> {
    h.plan(task_type, &payload.to_string())
        .await
        .expect("plan runs")
        .expect("payload accepted")
        .into_iter()
        .map(|u| u.cost)
        .collect()
}

#[tokio::test]
async fn kling_video_estimates_each_shot_in_units_and_avatar_leaves_it_unknown() {
    let sim = kling_tests::sim(SimOptions::default()).await;
    let (video, avatar) = kling_tests::load(&sim, "SK").await;
    assert_eq!(video.contract, "1.5.0");
    assert!(video.features.costs, "{:?}", video.features);
    // std 5 s, std 5 s from an image, pro 10 s.
    let got = costs(&video, "video", &kling_tests::video_payload()).await;
    assert_eq!(got, [Some(1.0), Some(1.0), Some(7.0)]);
    let mixed = json!({"shots": [{"prompt": "a", "mode": "pro", "duration": "5"},
                                 {"prompt": "b", "duration": "10"}]});
    assert_eq!(costs(&video, "video", &mixed).await, [Some(3.5), Some(2.0)]);
    assert!(
        avatar.features.costs,
        "the export is there, the price unknown"
    );
    let got = costs(&avatar, "avatar_clone", &kling_tests::avatar_payload()).await;
    assert_eq!(got, [None]);
    sim.shutdown().await.expect("sim stops");
}

#[tokio::test]
async fn runway_video_estimates_credits_per_second_in_plan_routed() {
    let sim = runway_tests::sim().await;
    let h = runway_tests::load(&sim, API_KEY_DEFAULT).await;
    assert!(h.features.costs && h.features.routing, "{:?}", h.features);
    let payload = json!({"model": "gen4_turbo", "ratio": "1280:720", "duration": 5, "shots": [
        {"prompt_image": "https://example.com/a.png"},
        {"prompt_image": "https://example.com/b.png", "duration": 10}]});
    let got = costs(&h, "runway_video", &payload).await;
    assert_eq!(got, [Some(25.0), Some(50.0)], "gen4_turbo: 5 credits/s");
    let gen45 = json!({"model": "gen4.5", "ratio": "1280:720", "duration": 5,
                       "shots": [{"prompt_text": "waves"}]});
    assert_eq!(costs(&h, "runway_video", &gen45).await, [Some(60.0)]);
    sim.shutdown().await.expect("sim stops");
}

#[tokio::test]
async fn components_without_the_costs_export_plan_without_estimates() {
    let runtime = Runtime::new(RuntimeLimits::default(), BTreeMap::new()).expect("runtime");
    let old = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/contract-1.0/kling-video.wasm");
    let old = runtime
        .load_file(&old)
        .await
        .expect("the 1.0.0 kling-video loads");
    assert_eq!(
        (old.contract.as_str(), old.features.costs),
        ("1.0.0", false)
    );
    let got = costs(&old, "video", &kling_tests::video_payload()).await;
    assert_eq!(got, [None, None, None]);

    // The fixture binds only the core world (1.4.0): no extensions, no costs.
    let fixture = runtime
        .load_file(&kling_tests::built("fixture.wasm"))
        .await
        .expect("the fixture loads");
    assert_eq!(fixture.contract, "1.5.0");
    assert_eq!(fixture.features, super::Features::default());
}

#[test]
fn only_finite_non_negative_estimates_of_the_right_length_are_kept() {
    let kept = checked_estimates("h", vec![Some(1.5), None, Some(0.0)], 3);
    assert_eq!(kept, [Some(1.5), None, Some(0.0)]);
    let kept = checked_estimates(
        "h",
        vec![Some(-1.0), Some(f64::NAN), Some(f64::INFINITY), Some(2.0)],
        4,
    );
    assert_eq!(kept, [None, None, None, Some(2.0)]);
    assert_eq!(checked_estimates("h", vec![Some(1.0)], 2), [None, None]);
    assert_eq!(checked_estimates("h", vec![Some(1.0); 3], 2), [None, None]);
}

/// `POST /_sim/account` on the Kling simulator.
async fn set_account(sim: &slotd_sim::kling::SimHandle, body: serde_json::Value) {
    let answer = reqwest::Client::builder()
        .no_proxy()
        .build()
        .expect("client")
        .post(format!("{}/_sim/account", sim.base_url()))
        .json(&body)
        .send()
        .await
        .expect("the simulator answers");
    assert!(answer.status().is_success(), "{}", answer.status());
}

/// The real kling-video against the simulator's account controls: revoked credentials at
/// submit and at poll are `account_refused`, an exhausted balance `account_exhausted`, each
/// with Kling's code in the message, and the same units go through once restored.
#[tokio::test]
async fn kling_account_refusals_are_retried_with_the_account_codes() {
    use slotd_core::model::Outcome;
    let sim = kling_tests::sim(SimOptions::default()).await;
    let (video, _) = kling_tests::load(&sim, "SK").await;
    let specs = kling_tests::specs(&video, "video", &kling_tests::video_payload()).await;
    let unit = |id: &str, spec: &str| (kling_tests::unit(id, "video", "video", spec), false);
    let code = |o: &Outcome| match o {
        Outcome::RetryAfter { error, .. } => (error.code.clone(), error.message.clone()),
        other => panic!("expected retry-after, got {other:?}"),
    };

    let first = kling_tests::tick(&video, &[unit("k0", &specs[0])]).await;
    let Outcome::Accepted { job_id } = &first[0] else {
        panic!("expected accepted, got {first:?}");
    };
    let mut running = kling_tests::unit("k0", "video", "video", &specs[0]);
    running.provider_job_id = Some(job_id.clone());

    set_account(&sim, json!({"revoked": true})).await;
    let got = kling_tests::tick(&video, &[unit("k1", &specs[1]), (running.clone(), false)]).await;
    for o in &got {
        let (c, message) = code(o);
        assert_eq!(c.as_deref(), Some("account_refused"));
        assert!(message.starts_with("kling 1002: "), "{message}");
    }
    set_account(&sim, json!({"revoked": false, "balance": 6.5})).await;
    // The pro 10 s shot needs 7 units.
    let got = kling_tests::tick(&video, &[unit("k2", &specs[2])]).await;
    let (c, message) = code(&got[0]);
    assert_eq!(c.as_deref(), Some("account_exhausted"));
    assert!(message.starts_with("kling 1102: "), "{message}");
    let stats = sim.stats();
    assert_eq!((stats.revoked_refusals, stats.balance_refusals), (2, 1));

    set_account(&sim, json!({"balance": null})).await;
    let got = kling_tests::tick(&video, &[unit("k2", &specs[2]), (running, false)]).await;
    assert!(matches!(got[0], Outcome::Accepted { .. }), "{got:?}");
    assert!(
        matches!(got[1], Outcome::Running { .. } | Outcome::Succeeded { .. }),
        "{got:?}"
    );
    sim.shutdown().await.expect("sim stops");
}
