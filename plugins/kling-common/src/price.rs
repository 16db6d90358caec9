//! What a Kling job is expected to cost, in resource-pack units (what a succeeded task reports
//! as `final_unit_deduction`).
//!
//! KLING_API.md has no price table, so this follows Kling's public resource-pack unit rule for
//! video: a `std` clip of 5 s costs 1 unit and of 10 s 2 units; a `pro` clip of 5 s 3.5 units
//! and of 10 s 7 units, whatever the model. The bundled simulator deducts by the same rule
//! (`slotd-sim`), so estimates and reported costs agree against it. Avatar clones (custom
//! voice and element) have no published unit price: their estimate is unknown.

use serde_json::Value;

/// Units of a video job by mode and duration (seconds); `None` outside the documented values.
pub fn video_units(mode: &str, duration_secs: &str) -> Option<f64> {
    Some(match (mode, duration_secs) {
        ("std", "5") => 1.0,
        ("std", "10") => 2.0,
        ("pro", "5") => 3.5,
        ("pro", "10") => 7.0,
        _ => return None,
    })
}

/// Units of the job a `kling-video` spec (the resolved create body) describes. `plan` always
/// writes `mode` and `duration`; a spec without them (or unreadable) is unknown.
pub fn video_spec_units(spec: &str) -> Option<f64> {
    let body: Value = serde_json::from_str(spec).ok()?;
    let mode = body.get("mode")?.as_str()?;
    let duration = body.get("duration")?.as_str()?;
    video_units(mode, duration)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::video;

    #[test]
    fn the_unit_rule_by_mode_and_duration() {
        assert_eq!(video_units("std", "5"), Some(1.0));
        assert_eq!(video_units("std", "10"), Some(2.0));
        assert_eq!(video_units("pro", "5"), Some(3.5));
        assert_eq!(video_units("pro", "10"), Some(7.0));
        assert_eq!(video_units("turbo", "5"), None);
        assert_eq!(video_units("std", "7"), None);
    }

    #[test]
    fn planned_specs_are_priced_per_shot() {
        let payload = r#"{"model_name":"kling-v1-6","shots":[
            {"prompt":"a"},
            {"prompt":"b","mode":"pro","duration":"10"},
            {"prompt":"c","duration":"10"},
            {"prompt":"d","mode":"pro","image":"https://img.test/x.png"}]}"#;
        let specs = video::plan(video::TASK_TYPE, payload).unwrap_or_default();
        let costs: Vec<Option<f64>> = specs.iter().map(|s| video_spec_units(s)).collect();
        assert_eq!(costs, [Some(1.0), Some(7.0), Some(2.0), Some(3.5)]);
    }

    #[test]
    fn unreadable_specs_are_unknown() {
        for spec in [
            "",
            "nope",
            "[]",
            r#"{"mode":"std"}"#,
            r#"{"mode":"std","duration":5}"#,
        ] {
            assert_eq!(video_spec_units(spec), None, "{spec}");
        }
    }
}
