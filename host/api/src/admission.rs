//! Admission: how much work the API takes on before it does any.
//!
//! - A bound on requests in flight (`[api] max_concurrent_requests`). Past it a request is
//!   answered 503 with `Retry-After` at once: a client that retries is better served than one
//!   queued behind a line that only grows. A request counts until its handler has answered
//!   (a streaming body, such as an event stream, no longer counts once it flows).
//! - With API keys, a token bucket per tenant (`[api] rate_limit`), in process: past it, 429
//!   with `Retry-After` saying when the next request will be accepted. The single local
//!   tenant of a loopback slotd is not limited: it is the operator.
//!
//! Probes (`/healthz`, `/readyz`, `/metrics`) are exempt from both, so a busy instance is not
//! taken for a dead one.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::time::Instant;

use super::auth::{self, Tenant};
use super::error::ApiError;
use slotd_core::config::{ApiKey, Config, RateLimit};

/// Paths outside admission control.
const PROBES: [&str; 3] = ["/healthz", "/readyz", "/metrics"];

/// The shared admission state of one router.
#[derive(Clone)]
pub struct Admission {
    in_flight: Arc<Semaphore>,
    /// `None`: no API keys, or `rate_limit = false`.
    limiter: Option<Arc<RateLimiter>>,
    keys: Arc<Vec<ApiKey>>,
}

impl Admission {
    /// Admission for `config`.
    pub fn for_config(config: &Config) -> Admission {
        let limiter = if config.api_keys.is_empty() {
            None
        } else {
            config.api.rate_limit.map(|l| Arc::new(RateLimiter::new(l)))
        };
        Admission {
            in_flight: Arc::new(Semaphore::new(config.api.max_concurrent_requests)),
            limiter,
            keys: Arc::new(config.api_keys.clone()),
        }
    }
}

/// Middleware: the concurrency bound, then the tenant's bucket. The tenant found here is left
/// in the request's extensions for the [`Tenant`] extractor, so a key is matched once.
pub async fn admit(State(admission): State<Admission>, mut req: Request, next: Next) -> Response {
    if PROBES.contains(&req.uri().path()) {
        return next.run(req).await;
    }
    let Ok(_permit) = admission.in_flight.clone().try_acquire_owned() else {
        tracing::warn!("request refused: too many requests in flight");
        return ApiError::Overloaded.into_response();
    };
    if let Some(limiter) = &admission.limiter
        && let Some(tenant) = auth::tenant_of(req.headers(), &admission.keys)
    {
        if let Err(wait) = limiter.take(&tenant, Instant::now()) {
            tracing::info!(%tenant, ?wait, "request refused: tenant rate limit");
            let retry_after_secs = wait.as_secs_f64().ceil().max(1.0) as u64;
            return ApiError::RateLimited { retry_after_secs }.into_response();
        }
        req.extensions_mut().insert(Tenant(tenant));
    }
    next.run(req).await
}

/// One token bucket per tenant. Tenants come from the configured keys, so the map is bounded.
pub struct RateLimiter {
    limit: RateLimit,
    buckets: Mutex<HashMap<String, Bucket>>,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

impl RateLimiter {
    /// Buckets that start full.
    pub fn new(limit: RateLimit) -> RateLimiter {
        RateLimiter {
            limit,
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Take one token from `tenant`'s bucket at `now`, or say how long until one is there.
    pub fn take(&self, tenant: &str, now: Instant) -> Result<(), Duration> {
        let burst = f64::from(self.limit.burst);
        let mut buckets = self.buckets.lock();
        let bucket = buckets.entry(tenant.to_string()).or_insert(Bucket {
            tokens: burst,
            at: now,
        });
        let refill = now.saturating_duration_since(bucket.at).as_secs_f64() * self.limit.per_second;
        bucket.tokens = (bucket.tokens + refill).min(burst);
        bucket.at = now;
        if bucket.tokens >= 1.0 {
            bucket.tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64(
                (1.0 - bucket.tokens) / self.limit.per_second,
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_refill_at_the_rate_and_are_per_tenant() {
        let limiter = RateLimiter::new(RateLimit {
            per_second: 2.0,
            burst: 3,
        });
        let t0 = Instant::now();
        for _ in 0..3 {
            assert!(limiter.take("a", t0).is_ok());
        }
        let wait = limiter.take("a", t0).expect_err("the burst is spent");
        assert_eq!(wait, Duration::from_millis(500));
        assert!(
            limiter.take("b", t0).is_ok(),
            "another tenant has its own bucket"
        );
        let later = t0 + Duration::from_millis(500);
        assert!(limiter.take("a", later).is_ok(), "one token refilled");
        assert!(limiter.take("a", later).is_err());
        // A long pause refills to the burst, not beyond.
        let much_later = later + Duration::from_secs(3600);
        for _ in 0..3 {
            assert!(limiter.take("a", much_later).is_ok());
        }
        assert!(limiter.take("a", much_later).is_err());
    }
}
