//! [`Caller`]: who a request acts for and whether it may see every tenant (an admin).
//!
//! A key marked `admin = true` in `[[api_keys]]` acts for its tenant like any other key, and
//! may also list, read, cancel and retry every tenant's tasks (the operator console). With no
//! keys configured (the loopback default) every caller is the local tenant and an admin: there
//! is only one caller. [`super::auth::Tenant`] stays the extractor of routes that never look
//! beyond the caller's own tenant.

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use sha2::{Digest, Sha256};

use super::auth::{Tenant, bearer_token, constant_time_eq};
use super::error::{ApiError, log_store_error};
use slotd_core::config::ApiKey;
use slotd_units::services::Services;

/// The caller of a request: its tenant, and whether it is an admin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    pub tenant: String,
    pub admin: bool,
}

impl FromRequestParts<Services> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        services: &Services,
    ) -> Result<Self, Self::Rejection> {
        // The tenant (and the 401) exactly as every other route decides it.
        let Tenant(tenant) = Tenant::from_request_parts(parts, services).await?;
        let keys = &services.config.api_keys;
        let admin = keys.is_empty() || presents_admin_key(&parts.headers, keys);
        Ok(Caller { tenant, admin })
    }
}

/// Whether the request's bearer key is one marked `admin`. Every admin key is compared, over
/// fixed-length digests, so timing says nothing about which one (or how much of one) matched.
fn presents_admin_key(headers: &HeaderMap, keys: &[ApiKey]) -> bool {
    let Some(presented) = headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
    else {
        return false;
    };
    let presented = Sha256::digest(presented.as_bytes());
    let mut admin = false;
    for k in keys.iter().filter(|k| k.admin) {
        admin |= constant_time_eq(&presented, &Sha256::digest(k.key.expose()));
    }
    admin
}

impl Caller {
    /// The tenant whose records a list shows: `requested` (`?tenant=`) or, when absent, every
    /// tenant's (`None`) for an admin and the caller's own for anyone else. A tenant asking for
    /// another tenant's list is refused (403): naming the rule, unlike a task id (404), reveals
    /// nothing, since the caller chose the name.
    pub fn list_scope(&self, requested: Option<&str>) -> Result<Option<String>, ApiError> {
        match requested.filter(|t| !t.is_empty()) {
            Some(t) if self.admin || t == self.tenant => Ok(Some(t.to_string())),
            Some(t) => Err(ApiError::Forbidden(format!(
                "tenant {t:?}: only an admin API key (admin = true in [[api_keys]]) may list \
                 another tenant's records; leave tenant out for your own"
            ))),
            None if self.admin => Ok(None),
            None => Ok(Some(self.tenant.clone())),
        }
    }

    /// The tenant to look task `id` up under: the caller's own, or for an admin the task's
    /// owner (a missing task then stays a 404 under the caller's tenant).
    pub async fn tenant_of_task(&self, services: &Services, id: &str) -> Result<String, ApiError> {
        if !self.admin {
            return Ok(self.tenant.clone());
        }
        let owner = services
            .store
            .task_tenant(id)
            .await
            .map_err(log_store_error("finding the task's tenant"))?;
        Ok(owner.unwrap_or_else(|| self.tenant.clone()))
    }

    /// Whether records of `tenant` may be shown to this caller as they are (not anonymized).
    pub fn sees(&self, tenant: &str) -> bool {
        self.admin || tenant == self.tenant
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use slotd_core::config::Secret;

    fn key(k: &str, tenant: &str, admin: bool) -> ApiKey {
        ApiKey {
            key: Secret::new(k),
            tenant: tenant.into(),
            admin,
            publish: Vec::new(),
        }
    }

    fn bearer(k: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        if let Ok(v) = format!("Bearer {k}").parse() {
            h.insert(AUTHORIZATION, v);
        }
        h
    }

    #[test]
    fn only_keys_marked_admin_are_admins() {
        let keys = [key("key-of-ops", "ops", true), key("key-of-a", "a", false)];
        assert!(presents_admin_key(&bearer("key-of-ops"), &keys));
        assert!(!presents_admin_key(&bearer("key-of-a"), &keys));
        assert!(!presents_admin_key(&bearer("key-of-op"), &keys));
        assert!(!presents_admin_key(&HeaderMap::new(), &keys));
    }

    #[test]
    fn list_scope_follows_the_rule() {
        let a = Caller {
            tenant: "a".into(),
            admin: false,
        };
        assert_eq!(a.list_scope(None).ok(), Some(Some("a".into())));
        assert_eq!(a.list_scope(Some("a")).ok(), Some(Some("a".into())));
        assert_eq!(a.list_scope(Some("")).ok(), Some(Some("a".into())));
        match a.list_scope(Some("b")) {
            Err(ApiError::Forbidden(detail)) => assert!(detail.contains("admin"), "{detail}"),
            other => panic!("expected 403, got {other:?}"),
        }
        let ops = Caller {
            tenant: "ops".into(),
            admin: true,
        };
        assert_eq!(ops.list_scope(None).ok(), Some(None));
        assert_eq!(ops.list_scope(Some("b")).ok(), Some(Some("b".into())));
        assert!(ops.sees("b") && a.sees("a") && !a.sees("b"));
    }
}
