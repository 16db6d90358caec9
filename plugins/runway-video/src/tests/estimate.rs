//! Contract 1.2 `costs`: each planned unit's credits by Runway's per-second rates.

use serde_json::json;
use slotd_sdk::Handler;
use slotd_sdk::testing::ScriptedHost;

use super::support::*;
use crate::RunwayVideo;

#[test]
fn planned_shots_are_estimated_in_credits_per_second() {
    let payload = json!({"model": "gen4_turbo", "ratio": "1280:720", "duration": 5, "shots": [
        {"prompt_image": IMAGE},
        {"prompt_image": IMAGE, "duration": 10}]});
    let host = ScriptedHost::new();
    let units = RunwayVideo::plan_routed(&host, "runway_video", &payload.to_string())
        .unwrap_or_else(|e| panic!("{e:?}"));
    let costs: Vec<Option<f64>> = units
        .iter()
        .map(|u| RunwayVideo::estimate("runway_video", &u.spec))
        .collect();
    assert_eq!(costs, [Some(25.0), Some(50.0)], "gen4_turbo: 5 credits/s");
    let veo = spec_of(json!({"model": "veo3", "ratio": "1280:720", "duration": 8,
                             "shots": [{"prompt_text": "waves"}]}));
    assert_eq!(RunwayVideo::estimate("runway_video", &veo), Some(320.0));
    assert_eq!(
        RunwayVideo::estimate("video", &veo),
        None,
        "another task type"
    );
    assert_eq!(RunwayVideo::estimate("runway_video", "{}"), None);
}
