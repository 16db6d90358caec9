//! `finalize`: what to store for a succeeded unit. fal's video files are plain public URLs on
//! its CDN (`v3.fal.media`, …; no token), which live until their expiry: the artifact is the
//! `video.url` recorded at success, and the host downloads it through the allowlist. No
//! request is made here.

use serde_json::Value;
use slotd_sdk::{Artifact, Finalized, Unit};

/// The artifact's name within the unit.
pub const ARTIFACT: &str = "video.mp4";
/// The content type when fal's result does not say.
pub const CONTENT_TYPE: &str = "video/mp4";

/// The artifact of a succeeded unit.
pub fn run(unit: &Unit) -> Result<Finalized, String> {
    let text = unit
        .result
        .as_deref()
        .ok_or_else(|| format!("unit {} has no recorded result", unit.id))?;
    let result: Value = serde_json::from_str(text)
        .map_err(|e| format!("unit {}: the recorded result is not JSON: {e}", unit.id))?;
    let video = result.get("video");
    let url = video
        .and_then(|v| v.get("url"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| format!("unit {}: the recorded result has no video.url", unit.id))?;
    let content_type = video
        .and_then(|v| v.get("content_type"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .unwrap_or(CONTENT_TYPE);
    Ok(Finalized {
        artifacts: vec![Artifact {
            name: ARTIFACT.into(),
            url: url.to_string(),
            content_type: Some(content_type.to_string()),
        }],
        result: None,
    })
}
