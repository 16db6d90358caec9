//! The JWKS reading of [`crate::testing::ScriptedHost::verify_ed25519`], as the host reads it
//! (`host/runtime/src/host_impl/keys.rs`): Ed25519 keys (`kty` OKP, `crv` Ed25519, `x`
//! base64url) of a 2xx JSON answer; other keys skipped; none usable is an error.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use ed25519_dalek::VerifyingKey;

use crate::host::Response;

/// The usable keys of a JWKS answer, or what is wrong with it.
pub(crate) fn ed25519_keys(url: &str, resp: &Response) -> Result<Vec<VerifyingKey>, String> {
    if !(200..300).contains(&resp.status) {
        return Err(format!(
            "the signing keys at {url} answered HTTP {}",
            resp.status
        ));
    }
    let doc: serde_json::Value = serde_json::from_slice(&resp.body)
        .map_err(|e| format!("the signing keys at {url} are not JSON: {e}"))?;
    let Some(entries) = doc.get("keys").and_then(|k| k.as_array()) else {
        return Err(format!("the signing keys at {url} have no \"keys\" list"));
    };
    let keys: Vec<VerifyingKey> = entries
        .iter()
        .filter(|k| {
            k.get("kty").and_then(|v| v.as_str()) == Some("OKP")
                && k.get("crv").and_then(|v| v.as_str()) == Some("Ed25519")
        })
        .filter_map(|k| k.get("x").and_then(|v| v.as_str()))
        .filter_map(|x| URL_SAFE_NO_PAD.decode(x.trim_end_matches('=')).ok())
        .filter_map(|raw| <[u8; 32]>::try_from(raw.as_slice()).ok())
        .filter_map(|raw| VerifyingKey::from_bytes(&raw).ok())
        .collect();
    if keys.is_empty() {
        return Err(format!(
            "the signing keys at {url} hold no usable Ed25519 key"
        ));
    }
    Ok(keys)
}
