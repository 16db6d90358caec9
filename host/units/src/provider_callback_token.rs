//! Callback tokens (docs/trust-model.md): callbacks are authenticated by construction.
//!
//! The callback URL a handler hands its provider is `{public_url}/v1/callbacks/{handler}/{token}`.
//! The token names the units a callback through it may change, and carries an HMAC-SHA256 by the
//! host's callback key ([`KEY_NAME`] in the database, so every instance mints and accepts the
//! same tokens). Nobody without the key can make one, and a token cannot be stretched to other
//! units: the receiving side applies a callback's changes only to units its [`Scope`] covers.
//!
//! A scope is one handler call's submissions: the handler, the pool, and the `submitted_at` of
//! the submit attempts the call may create provider jobs for (the units a tick marks submitted
//! in one call share `submitted_at = now`; an in-doubt unit the call may resubmit keeps its
//! older one). Per-unit tokens would be tighter, but the handler contract gives one
//! `callback-url` per call, and the call's batch is what the handler can submit anyway. A
//! resubmission gets a new `submitted_at`, so an old token cannot touch the new attempt, and a
//! unit that left `submitted` is out of every scope: replays change nothing.
//!
//! Wire form: `base64url(payload) "." base64url(mac)`, unpadded, where the payload is the JSON
//! `{"v":1,"h":handler,"p":pool,"s":[submitted_at ms, …]}` and the MAC is over the encoded
//! payload text (as in a JWT). The version lets the format change without accepting old
//! tokens by accident.

use std::fmt;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use slotd_core::model::{Unit, UnitStatus};
use slotd_store::{DynServiceStore, StoreError, StoreResult};

/// The name of the callback key in the host key table.
pub const KEY_NAME: &str = "callbacks";
/// Length of the callback key, bytes.
pub const KEY_BYTES: usize = 32;
/// Longest token looked at; anything longer is refused before any work.
pub const TOKEN_MAX_BYTES: usize = 2048;
/// Most submit attempts one token names (the call's own plus in-doubt units it may resubmit,
/// newest first); units beyond it are left to polling.
pub const SCOPE_MAX_ATTEMPTS: usize = 16;
/// The payload version this host mints and accepts.
const VERSION: u32 = 1;
/// Domain separation: the key signs nothing else, but a MAC that says what it is costs nothing.
const MAC_CONTEXT: &[u8] = b"slotd callback token.";

/// The host's callback key. Never printed.
#[derive(Clone)]
pub struct ProviderCallbackKey(Arc<[u8; KEY_BYTES]>);

impl fmt::Debug for ProviderCallbackKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ProviderCallbackKey(***)")
    }
}

impl ProviderCallbackKey {
    /// A key from stored bytes (exactly [`KEY_BYTES`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<ProviderCallbackKey, TokenError> {
        let key: [u8; KEY_BYTES] = bytes
            .try_into()
            .map_err(|_| TokenError::KeyLength(bytes.len()))?;
        Ok(ProviderCallbackKey(Arc::new(key)))
    }

    /// A fresh random key (the candidate a first instance stores; tests).
    pub fn random() -> ProviderCallbackKey {
        ProviderCallbackKey(Arc::new(rand::random::<[u8; KEY_BYTES]>()))
    }

    /// The key every instance shares: read from the database, created there by the first
    /// instance that needs it.
    pub async fn load(store: &DynServiceStore, now: i64) -> StoreResult<ProviderCallbackKey> {
        let candidate = ProviderCallbackKey::random();
        let stored = store
            .host_key_get_or_create(KEY_NAME, candidate.0.as_slice(), now)
            .await?;
        ProviderCallbackKey::from_bytes(&stored)
            .map_err(|e| StoreError::Corrupt(format!("host key {KEY_NAME:?}: {e}")))
    }

    fn mac(&self) -> Hmac<Sha256> {
        // HMAC takes keys of any length; this cannot fail for 32 bytes.
        let mut mac = <Hmac<Sha256> as Mac>::new_from_slice(self.0.as_slice())
            .unwrap_or_else(|_| unreachable!("HMAC-SHA256 accepts a 32-byte key"));
        mac.update(MAC_CONTEXT);
        mac
    }
}

/// The units a token may change: `submitted` units of `handler`'s task types in `pool` whose
/// current submit attempt was marked at one of `submitted_at`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scope {
    pub handler: String,
    pub pool: String,
    /// Unix ms of the submit markers, newest first, at most [`SCOPE_MAX_ATTEMPTS`].
    pub submitted_at: Vec<i64>,
    /// The first [`RELEASE_PREFIX`] hex digits of the handler release that created the jobs:
    /// their callbacks go through it while it drains (docs/handlers.md, "Releases").
    pub release: Option<String>,
}

/// Hex digits of a release's sha256 a token carries.
pub const RELEASE_PREFIX: usize = 16;

impl Scope {
    /// The scope of one handler call: the submit attempts of the units it may create jobs for.
    pub fn for_call(
        handler: &str,
        pool: &str,
        submitted_at: impl IntoIterator<Item = i64>,
    ) -> Scope {
        let mut at: Vec<i64> = submitted_at.into_iter().collect();
        at.sort_unstable_by(|a, b| b.cmp(a));
        at.dedup();
        at.truncate(SCOPE_MAX_ATTEMPTS);
        Scope {
            handler: handler.to_string(),
            pool: pool.to_string(),
            submitted_at: at,
            release: None,
        }
    }

    /// This scope, for jobs created by release `sha256`.
    pub fn with_release(self, sha256: &str) -> Scope {
        Scope {
            release: Some(sha256.chars().take(RELEASE_PREFIX).collect()),
            ..self
        }
    }

    /// Whether a callback through this token may change `unit` now. The task type is checked
    /// by the lookup (only the handler's own types are searched).
    pub fn covers(&self, unit: &Unit) -> bool {
        unit.status == UnitStatus::Submitted
            && unit.pool == self.pool
            && unit
                .submitted_at
                .is_some_and(|t| self.submitted_at.contains(&t))
    }
}

/// Why a token was refused. The messages are safe to show the caller.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("callback token is longer than {TOKEN_MAX_BYTES} bytes")]
    TooLong,
    #[error("callback token is malformed (expected <payload>.<mac>, base64url)")]
    Malformed,
    #[error("callback token signature does not match")]
    BadMac,
    #[error("callback token payload is unreadable")]
    BadPayload,
    #[error("callback token version {0} is not supported")]
    Version(u32),
    #[error("callback token was issued for another handler")]
    OtherHandler,
    #[error("the callback key must be {KEY_BYTES} bytes, found {0}")]
    KeyLength(usize),
}

/// The payload as it travels (short field names keep URLs short).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Wire {
    v: u32,
    h: String,
    p: String,
    s: Vec<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    r: Option<String>,
}

/// The token for `scope`.
pub fn mint(key: &ProviderCallbackKey, scope: &Scope) -> String {
    let wire = Wire {
        v: VERSION,
        h: scope.handler.clone(),
        p: scope.pool.clone(),
        s: scope.submitted_at.clone(),
        r: scope.release.clone(),
    };
    // A struct of strings and integers always serializes.
    let json = serde_json::to_vec(&wire).unwrap_or_default();
    let payload = URL_SAFE_NO_PAD.encode(json);
    let mut mac = key.mac();
    mac.update(payload.as_bytes());
    let tag = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
    format!("{payload}.{tag}")
}

/// Check a token presented on `handler`'s callback route and return what it may change. The
/// MAC is checked (in constant time) before the payload is even decoded.
pub fn verify(key: &ProviderCallbackKey, handler: &str, token: &str) -> Result<Scope, TokenError> {
    if token.len() > TOKEN_MAX_BYTES {
        return Err(TokenError::TooLong);
    }
    let (payload, tag) = token.split_once('.').ok_or(TokenError::Malformed)?;
    let tag = URL_SAFE_NO_PAD
        .decode(tag)
        .map_err(|_| TokenError::Malformed)?;
    let mut mac = key.mac();
    mac.update(payload.as_bytes());
    mac.verify_slice(&tag).map_err(|_| TokenError::BadMac)?;
    let json = URL_SAFE_NO_PAD
        .decode(payload)
        .map_err(|_| TokenError::BadPayload)?;
    let wire: Wire = serde_json::from_slice(&json).map_err(|_| TokenError::BadPayload)?;
    if wire.v != VERSION {
        return Err(TokenError::Version(wire.v));
    }
    if wire.h != handler {
        return Err(TokenError::OtherHandler);
    }
    Ok(Scope {
        handler: wire.h,
        pool: wire.p,
        submitted_at: wire.s,
        release: wire.r,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(b: u8) -> ProviderCallbackKey {
        ProviderCallbackKey::from_bytes(&[b; KEY_BYTES]).unwrap_or_else(|e| panic!("{e}"))
    }

    fn scope() -> Scope {
        Scope::for_call("kling-video", "kling:video", [1_000, 3_000, 1_000, 2_000])
    }

    #[test]
    fn round_trip_names_the_call_s_attempts_newest_first() {
        let token = mint(&key(1), &scope());
        assert!(
            token
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b)),
            "URL-safe: {token}"
        );
        let got = verify(&key(1), "kling-video", &token);
        assert_eq!(
            got.as_ref().map(|s| &s.submitted_at),
            Ok(&vec![3_000, 2_000, 1_000])
        );
        assert_eq!(got, Ok(scope()));
    }

    #[test]
    fn a_token_names_the_release_that_created_the_jobs() {
        let sha = "ab".repeat(32);
        let token = mint(&key(1), &scope().with_release(&sha));
        let back = verify(&key(1), "kling-video", &token).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(back.release.as_deref(), Some(&sha[..RELEASE_PREFIX]));
        // A token minted before releases (no release in it) still verifies, naming none.
        let old = verify(&key(1), "kling-video", &mint(&key(1), &scope()));
        assert_eq!(old.map(|s| s.release), Ok(None));
    }

    #[test]
    fn tampering_and_other_keys_are_refused() {
        let token = mint(&key(1), &scope());
        let (payload, tag) = token.split_once('.').unwrap_or_default();
        // A payload naming another pool, with the original MAC.
        let forged =
            URL_SAFE_NO_PAD.encode(br#"{"v":1,"h":"kling-video","p":"kling:avatar","s":[3000]}"#);
        assert_eq!(
            verify(&key(1), "kling-video", &format!("{forged}.{tag}")),
            Err(TokenError::BadMac)
        );
        // One changed character of the MAC (not the last, whose low bits are padding).
        let mut bad_tag = tag.to_string();
        let other = if bad_tag.as_bytes()[5] == b'A' {
            "B"
        } else {
            "A"
        };
        bad_tag.replace_range(5..6, other);
        assert_eq!(
            verify(&key(1), "kling-video", &format!("{payload}.{bad_tag}")),
            Err(TokenError::BadMac)
        );
        // A truncated MAC is refused too (no prefix matching).
        assert_eq!(
            verify(&key(1), "kling-video", &format!("{payload}.{}", &tag[..12])),
            Err(TokenError::BadMac)
        );
        assert_eq!(
            verify(&key(2), "kling-video", &token),
            Err(TokenError::BadMac)
        );
        assert_eq!(
            verify(&key(1), "kling-video", "garbage"),
            Err(TokenError::Malformed)
        );
        assert_eq!(
            verify(&key(1), "kling-video", "a.b!c"),
            Err(TokenError::Malformed)
        );
        assert_eq!(
            verify(&key(1), "kling-video", ""),
            Err(TokenError::Malformed)
        );
        let long = "a".repeat(TOKEN_MAX_BYTES + 1);
        assert_eq!(
            verify(&key(1), "kling-video", &long),
            Err(TokenError::TooLong)
        );
    }

    #[test]
    fn a_token_works_only_on_its_own_handler_s_route() {
        let token = mint(&key(1), &scope());
        assert_eq!(
            verify(&key(1), "kling-avatar", &token),
            Err(TokenError::OtherHandler)
        );
    }

    #[test]
    fn a_validly_signed_payload_of_another_version_is_refused() {
        let payload =
            URL_SAFE_NO_PAD.encode(br#"{"v":2,"h":"kling-video","p":"kling:video","s":[1]}"#);
        let mut mac = key(1).mac();
        mac.update(payload.as_bytes());
        let tag = URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes());
        assert_eq!(
            verify(&key(1), "kling-video", &format!("{payload}.{tag}")),
            Err(TokenError::Version(2))
        );
    }

    #[test]
    fn scope_covers_only_submitted_units_of_its_pool_and_attempts() {
        let s = scope();
        let mut u = Unit {
            id: "u".into(),
            task_id: "t".into(),
            index: 0,
            tenant: "acme".into(),
            task_type: "video".into(),
            pool: "kling:video".into(),
            stage: "video".into(),
            status: UnitStatus::Submitted,
            priority: 0,
            spec: "{}".into(),
            state: "{}".into(),
            provider_job_id: Some("j".into()),
            submit_attempt: 0,
            attempts: 0,
            polls: 0,
            next_at: 0,
            submitted_at: Some(2_000),
            error: None,
            result: None,
            cost: None,
            created_at: 0,
            updated_at: 0,
            cancel_requested_at: None,
            routes: None,
            routing: None,
            terms: Default::default(),
            releases: Default::default(),
        };
        assert!(s.covers(&u));
        u.submitted_at = Some(4_000);
        assert!(!s.covers(&u), "a later submit attempt");
        u.submitted_at = Some(2_000);
        u.pool = "kling:avatar".into();
        assert!(!s.covers(&u), "another pool");
        u.pool = "kling:video".into();
        u.status = UnitStatus::Succeeded;
        assert!(!s.covers(&u), "a unit that moved on");
        let many = Scope::for_call("h", "p", 0..100);
        assert_eq!(many.submitted_at.len(), SCOPE_MAX_ATTEMPTS);
        assert_eq!(many.submitted_at[0], 99);
    }

    #[test]
    fn keys_are_never_printed_and_must_have_the_right_length() {
        assert_eq!(format!("{:?}", key(7)), "ProviderCallbackKey(***)");
        assert_eq!(
            ProviderCallbackKey::from_bytes(&[1; 16]).err(),
            Some(TokenError::KeyLength(16))
        );
    }
}
