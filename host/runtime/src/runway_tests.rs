//! The built Runway handler (`plugins/runway-video`, contract 1.2) against the real Runway
//! simulator (`slotd_sim::runway`), called through the runtime: it claims cancel and routing,
//! routes each shot to its model's pool sized by the tier, authenticates with a bearer key
//! the host inserts (the guest never holds it), runs a shot to success, and cancels a running
//! job with DELETE.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;

use super::kling_tests::{built, ctx, unit};
use super::{BatchUnit, CancelOutcome, Handler, Runtime};
use slotd_core::config::{HandlerConfig, RuntimeLimits, Secret};
use slotd_core::model::Outcome;
use slotd_sim::runway::{API_KEY_DEFAULT, RunwayOptions, RunwaySimHandle};

pub(super) async fn sim() -> RunwaySimHandle {
    slotd_sim::runway::spawn(RunwayOptions {
        listen: "127.0.0.1:0".parse().expect("literal address"),
        time_scale: 0.001,
        ..RunwayOptions::default()
    })
    .await
    .expect("the Runway simulator starts")
}

pub(super) async fn load(sim: &RunwaySimHandle, key: &str) -> Arc<Handler> {
    let mut c = HandlerConfig::default();
    c.settings.insert("base_url".into(), sim.base_url().into());
    c.settings.insert("tier".into(), "3".into());
    c.settings
        .insert("expected_duration_scale".into(), "0.001".into());
    c.secrets.insert("api_key".into(), Secret::new(key));
    c.allowed_hosts = vec![sim.addr().to_string()];
    let runtime = Runtime::new(
        RuntimeLimits::default(),
        BTreeMap::from([("runway-video".to_string(), c)]),
    )
    .expect("runtime builds");
    runtime
        .load_file(&built("runway_video.wasm"))
        .await
        .expect("runway-video loads")
}

fn batch(units: &[slotd_core::model::Unit]) -> Vec<BatchUnit> {
    units
        .iter()
        .map(|u| BatchUnit {
            unit: u.clone(),
            in_doubt: false,
        })
        .collect()
}

#[tokio::test]
async fn runway_routes_authenticates_by_host_credential_runs_and_cancels() {
    let sim = sim().await;
    let h = load(&sim, API_KEY_DEFAULT).await;
    assert_eq!(h.contract, "1.5.0");
    assert!(h.features.cancel && h.features.routing, "{:?}", h.features);
    let turbo = h.info.pools.iter().find(|p| p.name == "runway:gen4_turbo");
    assert_eq!(
        turbo.map(|p| p.default_max_slots),
        Some(5),
        "tier 3: 5 per model"
    );

    let payload = json!({"model": "gen4.5", "ratio": "1280:720", "duration": 5, "shots": [
        {"prompt_image": "https://example.com/a.png", "prompt_text": "a cat"},
        {"prompt_image": "https://example.com/b.png", "prompt_text": "a dog"}]});
    let planned = h
        .plan("runway_video", &payload.to_string())
        .await
        .expect("plan runs")
        .expect("payload accepted");
    assert_eq!(planned.len(), 2);
    assert!(
        planned[0].pools.iter().any(|(_, p)| p == "runway:gen4.5"),
        "{:?}",
        planned[0].pools
    );

    let stage = h.info.task_types[0].stages[0].name.clone();
    let mut units: Vec<_> = planned
        .iter()
        .enumerate()
        .map(|(i, p)| unit(&format!("r{i}"), "runway_video", &stage, &p.spec))
        .collect();
    let changes = h.tick(&ctx(), &batch(&units)).await.expect("tick runs");
    for (u, c) in units.iter_mut().zip(&changes) {
        match &c.outcome {
            Outcome::Accepted { job_id } => u.provider_job_id = Some(job_id.clone()),
            other => panic!("expected accepted, got {other:?}"),
        }
        if let Some(s) = &c.state {
            u.state = s.clone();
        }
    }
    assert_eq!(
        sim.stats().creates,
        2,
        "the bearer key the host inserted was accepted"
    );

    // Cancel the second: DELETE, and the slot may go once the job has ended.
    let mut cancelled = units[1].clone();
    cancelled.cancel_requested_at = Some(1);
    let answer = h
        .cancel(&ctx(), &batch(&[cancelled]))
        .await
        .expect("runway-video cancels")
        .expect("cancel runs");
    assert_eq!(answer.len(), 1);
    assert_eq!(answer[0].outcome, CancelOutcome::Ended, "{answer:?}");
    assert_eq!(sim.stats().deletes, 1);

    // Poll the first to success.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let changes = h
            .tick(&ctx(), &batch(&units[..1]))
            .await
            .expect("tick runs");
        match &changes[0].outcome {
            Outcome::Succeeded { .. } => break,
            Outcome::Running { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
        assert!(Instant::now() < deadline, "the job did not finish");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A wrong key is the provider's 401: the account is refused, not the job (contract 1.2),
    // and the guest never saw a key.
    let wrong = load(&sim, "key_wrong").await;
    let u = unit("w0", "runway_video", &stage, &planned[0].spec);
    let changes = wrong.tick(&ctx(), &batch(&[u])).await.expect("tick runs");
    assert!(
        matches!(&changes[0].outcome, Outcome::RetryAfter { error, .. }
            if error.code.as_deref() == Some("account_refused")),
        "{changes:?}"
    );
    sim.shutdown().await.expect("sim stops");
}
