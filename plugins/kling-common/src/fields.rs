//! Payload validation: the SDK's helpers (every refusal names the field by its JSON path, so
//! the API caller's 422 says what to fix) and Kling's image rule.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use slotd_sdk::PlanError;
pub use slotd_sdk::fields::*;

/// Largest image Kling accepts (10 MB), for raw base64 images.
pub const IMAGE_MAX_BYTES: usize = 10 * 1024 * 1024;

/// An image as Kling takes it: an http(s) URL, or raw base64 without a `data:` prefix.
pub fn check_image(value: &str, field: &str) -> Result<(), PlanError> {
    if value.starts_with("data:") {
        return Err(PlanError::at(
            field,
            "must be a URL or raw base64 without a data: prefix (remove \"data:…;base64,\")",
        ));
    }
    if value.starts_with("http://") || value.starts_with("https://") {
        return check_url(value, field);
    }
    let decoded = STANDARD.decode(value.trim()).map_err(|_| {
        PlanError::at(
            field,
            format!(
                "must be an http(s) URL or raw base64, got {:?}",
                shorten(value)
            ),
        )
    })?;
    if decoded.is_empty() {
        return Err(PlanError::at(field, "is empty"));
    }
    if decoded.len() > IMAGE_MAX_BYTES {
        return Err(PlanError::at(
            field,
            format!(
                "is {} bytes; Kling accepts images up to {IMAGE_MAX_BYTES}",
                decoded.len()
            ),
        ));
    }
    Ok(())
}
