//! Contract 1.2 costs (US dollars by fal's listed Pika prices) and 1.3 expected durations (by
//! model, resolution and length, times the scale); fal publishes no limits.

use serde_json::{Value, json};
use slotd_sdk::testing::ScriptedHost;
use slotd_sdk::{ExpectedDuration, Handler};

use super::plan::{FRAMES, I2V, IMG, SCENES};
use super::support::*;
use crate::FalVideoHandler;
use crate::models::TASK_TYPE;

#[test]
fn costs_follow_the_price_table() {
    let cost =
        |model: &str, shot: Value| FalVideoHandler::estimate(TASK_TYPE, &spec_of(model, shot));
    assert_eq!(cost(T2V, json!({"prompt": "x"})), Some(0.20));
    assert_eq!(
        cost(T2V, json!({"prompt": "x", "resolution": "1080p"})),
        Some(0.45)
    );
    assert_eq!(
        cost(T2V, json!({"prompt": "x", "duration": 10})),
        Some(0.40)
    );
    assert_eq!(
        cost(
            I2V,
            json!({"image_url": IMG, "prompt": "x", "resolution": "1080p", "duration": 10})
        ),
        Some(0.90)
    );
    assert_eq!(
        cost(SCENES, json!({"image_urls": [IMG], "prompt": "x"})),
        Some(0.45)
    );
    assert_eq!(
        cost(
            SCENES,
            json!({"image_urls": [IMG], "prompt": "x", "resolution": "720p"})
        ),
        Some(0.20)
    );
    assert_eq!(
        cost(FRAMES, json!({"image_urls": [IMG, IMG, IMG]})),
        Some(0.40)
    );
    assert_eq!(
        FalVideoHandler::estimate("other", &spec_of(T2V, json!({"prompt": "x"}))),
        None
    );
    assert_eq!(FalVideoHandler::estimate(TASK_TYPE, "{}"), None);
}

#[test]
fn durations_by_model_resolution_and_length_times_the_scale() {
    let host = ScriptedHost::new();
    let expected = |host: &ScriptedHost, model: &str, shot: Value| {
        FalVideoHandler::expected_duration(host, TASK_TYPE, &spec_of(model, shot)).unwrap_or(
            ExpectedDuration {
                p50_ms: 0,
                p95_ms: 0,
            },
        )
    };
    let t2v = expected(&host, T2V, json!({"prompt": "x"}));
    let i2v = expected(&host, I2V, json!({"image_url": IMG, "prompt": "x"}));
    let hd = expected(&host, T2V, json!({"prompt": "x", "resolution": "1080p"}));
    let long = expected(&host, T2V, json!({"prompt": "x", "duration": 10}));
    assert_eq!((t2v.p50_ms, t2v.p95_ms), (75_000, 150_000));
    assert!(i2v.p50_ms < t2v.p50_ms && i2v.p50_ms >= 10_000);
    assert!(hd.p50_ms > t2v.p50_ms && long.p50_ms > t2v.p50_ms);
    assert!(long.p95_ms <= 600_000, "a few minutes at most: {long:?}");
    let fast = ScriptedHost::new().with_config("expected_duration_scale", "0.01");
    assert_eq!(expected(&fast, T2V, json!({"prompt": "x"})).p50_ms, 750);
    let limits = FalVideoHandler::limits(
        &host,
        &slotd_sdk::LimitsContext {
            now_ms: NOW,
            account: None,
        },
    );
    assert_eq!(limits, Ok(Vec::new()));
}
