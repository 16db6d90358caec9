//! What the handler tests share: a scripted host with the key configured, units in each
//! situation, fal's answers and webhook signing, over the SDK's test support for submit →
//! poll → result handlers (`slotd_sdk::testing::jobs`: ticks, [`Spy`], which sees requests as
//! the guest made them, and what a change says).

use serde_json::{Value, json};
use slotd_sdk::testing::{ScriptedHost, jobs};
use slotd_sdk::{Change, Host, TickContext, Unit};

use crate::FalVideoHandler;
use crate::models::TASK_TYPE;
use crate::payload::plan;

pub use slotd_sdk::testing::jobs::{Spy, answer, code, sent, state, warnings};

/// The key the scripted host holds; the guest never sees it.
pub const KEY: &str = "key-id-1234:key-secret-abcdef";
/// slotd's clock in the tests (the scripted host's wall clock too).
pub const NOW: u64 = slotd_sdk::testing::DEFAULT_NOW_MS;
pub const BASE: &str = "https://queue.fal.run";
pub const APP: &str = "https://queue.fal.run/fal-ai/pika/requests";
pub const T2V: &str = "fal-ai/pika/v2.2/text-to-video";
pub const JWKS: &str = "https://rest.alpha.fal.ai/.well-known/jwks.json";
pub const HISTORY: &str = "https://api.fal.ai/v1/models/requests/by-endpoint";
pub const VIDEO: &str = "https://v3.fal.media/files/rabbit/abc.mp4";
pub const CALLBACK: &str = "https://slotd.example.com/v1/callbacks/fal-video?token=t0k&x=1";

/// A host with the `api_key` secret and the default configuration.
pub fn keyed_host() -> ScriptedHost {
    ScriptedHost::new().with_secret("api_key", KEY)
}

pub fn ctx(now_ms: u64) -> TickContext {
    TickContext {
        pool: format!("fal:{T2V}"),
        now_ms,
        callback_url: None,
    }
}

/// The spec `plan` makes of a one-shot payload.
pub fn spec_of(model: &str, shot: Value) -> String {
    plan(
        TASK_TYPE,
        &json!({"model": model, "shots": [shot]}).to_string(),
    )
    .ok()
    .and_then(|shots| shots.into_iter().next())
    .map(|s| s.spec)
    .unwrap_or_default()
}

/// The input of a 5 s 720p text-to-video shot with every default filled.
pub fn t2v_input() -> Value {
    json!({"prompt": "a cat surfing", "negative_prompt": "ugly, bad, terrible",
           "aspect_ratio": "16:9", "resolution": "720p", "duration": 5, "seed": 7})
}

/// A unit the host just marked submitted (at [`NOW`]), with no request id.
pub fn fresh(id: &str) -> Unit {
    let spec = spec_of(T2V, json!({"prompt": "a cat surfing", "seed": 7}));
    jobs::submitted(id, TASK_TYPE, spec, NOW)
}

/// A unit whose fal request `job` was accepted at [`NOW`].
pub fn running(id: &str, job: &str) -> Unit {
    jobs::with_job(fresh(id), job, &json!({"accepted_at_ms": NOW}))
}

/// A unit the host gives back `in-doubt` with `state`.
pub fn in_doubt(id: &str, state: &str) -> Unit {
    jobs::in_doubt(fresh(id), state)
}

/// fal's submit answer for request `id`.
pub fn queued(id: &str) -> Value {
    json!({"status": "IN_QUEUE", "request_id": id, "queue_position": 0,
           "status_url": format!("{APP}/{id}/status"), "response_url": format!("{APP}/{id}"),
           "cancel_url": format!("{APP}/{id}/cancel")})
}

/// fal's success result.
pub fn video() -> Value {
    json!({"video": {"url": VIDEO, "content_type": "video/mp4", "file_name": "abc.mp4",
                     "file_size": 1_234_567}})
}

/// Run a tick and return the changes (an `Err` fails the test with its message).
pub fn tick_with(host: &dyn Host, ctx: &TickContext, units: Vec<Unit>) -> Vec<Change> {
    jobs::tick::<FalVideoHandler>(host, ctx, units)
}

/// The single change of a one-unit tick at `now_ms`.
pub fn tick_one(host: &dyn Host, now_ms: u64, unit: Unit) -> Change {
    jobs::tick_one::<FalVideoHandler>(host, &ctx(now_ms), unit)
}

/// Webhook signing as fal does it, with the test key `[7; 32]` (or another).
pub mod signing {
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use ed25519_dalek::{Signer, SigningKey};
    use serde_json::{Value, json};
    use sha2::{Digest, Sha256};

    pub fn key(seed: u8) -> SigningKey {
        SigningKey::from_bytes(&[seed; 32])
    }

    /// A JWKS listing a decoy key first, then the keys of these seeds.
    pub fn jwks(seeds: &[u8]) -> Value {
        let mut keys = vec![json!({"kty": "RSA", "n": "decoy", "e": "AQAB"})];
        for seed in seeds {
            let x = URL_SAFE_NO_PAD.encode(key(*seed).verifying_key().as_bytes());
            keys.push(json!({"kty": "OKP", "crv": "Ed25519", "x": x, "kid": format!("k{seed}")}));
        }
        json!({ "keys": keys })
    }

    /// The four webhook headers of `body`, signed at `ts` by the key of `seed`.
    pub fn headers(request_id: &str, ts: i64, body: &[u8], seed: u8) -> Vec<(String, String)> {
        let digest = hex::encode(Sha256::digest(body));
        let message = format!("{request_id}\nuser-42\n{ts}\n{digest}");
        let signature = hex::encode(key(seed).sign(message.as_bytes()).to_bytes());
        vec![
            ("x-fal-webhook-request-id".into(), request_id.into()),
            ("X-Fal-Webhook-User-Id".into(), "user-42".into()),
            ("X-Fal-Webhook-Timestamp".into(), ts.to_string()),
            ("X-Fal-Webhook-Signature".into(), signature),
        ]
    }
}
