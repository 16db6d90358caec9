//! [`Tenant`]: who a request acts for, from `Authorization: Bearer <key>` and the configured
//! `[[api_keys]]`.
//!
//! With no keys configured every request is the single tenant [`LOCAL_TENANT`]; that mode is
//! only allowed on loopback, which `Config::check_exposure` enforces at start-up, not here.
//! Keys are compared in constant time so that response timing says nothing about a key's
//! prefix.

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};

use super::error::ApiError;
use slotd_core::config::ApiKey;
use slotd_units::services::Services;

/// The tenant of an unauthenticated (no keys configured) slotd.
pub const LOCAL_TENANT: &str = "local";

/// The tenant a request acts for. Every `/v1` handler takes one, so no route can forget auth.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tenant(pub String);

impl FromRequestParts<Services> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        services: &Services,
    ) -> Result<Self, Self::Rejection> {
        let keys = &services.config.api_keys;
        let tenant = if keys.is_empty() {
            LOCAL_TENANT.to_string()
        } else if let Some(Tenant(known)) = parts.extensions.get::<Tenant>() {
            // Admission already matched the key (to charge the tenant's rate limit).
            known.clone()
        } else {
            tenant_of(&parts.headers, keys).ok_or(ApiError::Unauthorized)?
        };
        tracing::Span::current().record("tenant", tenant.as_str());
        Ok(Tenant(tenant))
    }
}

/// The tenant whose key the request's `Authorization: Bearer` header presents, if any.
pub fn tenant_of(headers: &HeaderMap, keys: &[ApiKey]) -> Option<String> {
    let presented = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)?;
    tenant_for_key(keys, presented)
}

/// The configured key the request's `Authorization: Bearer` header presents, if any; every
/// key is compared, over fixed-length digests, as in [`tenant_of`].
pub fn key_of<'a>(headers: &HeaderMap, keys: &'a [ApiKey]) -> Option<&'a ApiKey> {
    let presented = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)?;
    let presented = Sha256::digest(presented.as_bytes());
    let mut found = None;
    for k in keys {
        let expected = Sha256::digest(k.key.expose());
        if constant_time_eq(&presented, &expected) && found.is_none() {
            found = Some(k);
        }
    }
    found
}

/// Which handler names the caller may publish: `None` for any.
pub(crate) fn publish_rights(
    services: &Services,
    headers: &HeaderMap,
) -> Result<Option<Vec<String>>, ApiError> {
    let keys = &services.config.api_keys;
    if keys.is_empty() {
        return Ok(None);
    }
    match key_of(headers, keys) {
        None => Err(ApiError::Unauthorized),
        Some(k) if k.admin => Ok(None),
        Some(k) if !k.publish.is_empty() => Ok(Some(k.publish.clone())),
        Some(k) => Err(ApiError::Forbidden(format!(
            "the key of tenant {:?} may not publish handlers: an admin key may, or a key with \
             publish = [\"<handler name>\", …] in [[api_keys]]",
            k.tenant
        ))),
    }
}

/// The token of a `Bearer` authorization value (scheme is case-insensitive, RFC 7235).
pub(super) fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// The tenant of the key that matches `presented`. Every key is compared, and each comparison
/// is over fixed-length digests, so the time taken does not depend on which key (or how much of
/// one) matched.
fn tenant_for_key(keys: &[ApiKey], presented: &str) -> Option<String> {
    let presented = Sha256::digest(presented.as_bytes());
    let mut found = None;
    for k in keys {
        let expected = Sha256::digest(k.key.expose());
        if constant_time_eq(&presented, &expected) && found.is_none() {
            found = Some(k.tenant.clone());
        }
    }
    found
}

/// Byte-slice equality whose running time depends only on the lengths.
pub(super) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let diff = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    std::hint::black_box(diff) == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotd_core::config::Secret;

    #[test]
    fn bearer_parsing() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer"), None);
    }

    #[test]
    fn keys_map_to_tenants() {
        let keys = vec![
            ApiKey {
                key: Secret::new("key-of-tenant-a"),
                tenant: "a".into(),
                admin: false,
                publish: Vec::new(),
            },
            ApiKey {
                key: Secret::new("key-of-tenant-b"),
                tenant: "b".into(),
                admin: false,
                publish: Vec::new(),
            },
        ];
        assert_eq!(
            tenant_for_key(&keys, "key-of-tenant-b").as_deref(),
            Some("b")
        );
        assert_eq!(tenant_for_key(&keys, "key-of-tenant-"), None);
        assert_eq!(tenant_for_key(&keys, ""), None);
        assert!(!constant_time_eq(b"ab", b"abc"));
        assert!(constant_time_eq(b"abc", b"abc"));
    }
}
