//! Kling's JWT check: HS256, `iss` = access key, `exp` and `nbf` in Unix seconds. Failures map
//! to HTTP 401 with codes 1000–1004 exactly as KLING_API.md lists them. Also the token maker
//! tests (and anything else talking to the simulator) use.

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::{Deserialize, Serialize};
use sha2::Sha256;

use super::error::SimError;
use super::state::Sim;
use crate::clock::unix_secs_now;

/// The claims Kling expects, exactly: who signed, until when, from when.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Claims {
    /// The access key.
    pub iss: String,
    /// Expiry, Unix seconds.
    pub exp: i64,
    /// Not valid before, Unix seconds (optional on input; clients send now − 5 s).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub nbf: Option<i64>,
}

/// A token the way Kling clients make one: valid from `now − 5 s` for 30 minutes.
pub fn issue_token(access_key: &str, secret_key: &str, now_secs: i64) -> String {
    issue_token_with(
        secret_key,
        &Claims {
            iss: access_key.to_owned(),
            exp: now_secs + 1800,
            nbf: Some(now_secs - 5),
        },
    )
}

/// A token with arbitrary claims (for tests of expired or not-yet-valid tokens).
pub fn issue_token_with(secret_key: &str, claims: &Claims) -> String {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"HS256","typ":"JWT"}"#);
    // Serializing a struct of strings and integers cannot fail.
    let payload = URL_SAFE_NO_PAD.encode(serde_json::to_vec(claims).unwrap_or_default());
    let signing_input = format!("{header}.{payload}");
    let sig = URL_SAFE_NO_PAD.encode(hs256(secret_key.as_bytes(), signing_input.as_bytes()));
    format!("{signing_input}.{sig}")
}

fn hs256(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC accepts keys of any length; `new_from_slice` only errs for fixed-size MACs.
    match Hmac::<Sha256>::new_from_slice(key) {
        Ok(mut mac) => {
            mac.update(data);
            mac.finalize().into_bytes().to_vec()
        }
        Err(_) => Vec::new(),
    }
}

#[derive(Deserialize)]
struct Header {
    alg: String,
}

/// Checks a bearer token against the account's keys at `now_secs`.
pub(crate) fn check_token(
    header_value: Option<&str>,
    access_key: &str,
    secret_key: &str,
    now_secs: i64,
) -> Result<(), SimError> {
    let value = header_value.map(str::trim).unwrap_or_default();
    if value.is_empty() {
        return Err(SimError::auth(1001, "Authorization header is empty"));
    }
    let Some(token) = value
        .strip_prefix("Bearer ")
        .or_else(|| value.strip_prefix("bearer "))
    else {
        return Err(SimError::auth(
            1002,
            "Authorization header is not `Bearer <jwt>`",
        ));
    };
    let invalid =
        |why: &str| SimError::auth(1002, format!("Authorization token is invalid: {why}"));
    let mut parts = token.trim().split('.');
    let (Some(h), Some(p), Some(s), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(invalid("not three dot-separated parts"));
    };
    let header: Header = URL_SAFE_NO_PAD
        .decode(h)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| invalid("the header is not base64url JSON"))?;
    if header.alg != "HS256" {
        return Err(invalid("alg must be HS256"));
    }
    let claims: Claims = URL_SAFE_NO_PAD
        .decode(p)
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .ok_or_else(|| invalid("the claims are not base64url JSON with iss and exp"))?;
    let sig = URL_SAFE_NO_PAD
        .decode(s)
        .map_err(|_| invalid("the signature is not base64url"))?;
    let mut mac = Hmac::<Sha256>::new_from_slice(secret_key.as_bytes())
        .map_err(|_| SimError::auth(1000, "Authorization failed"))?;
    mac.update(format!("{h}.{p}").as_bytes());
    if claims.iss != access_key || mac.verify_slice(&sig).is_err() {
        return Err(SimError::auth(
            1000,
            "Authorization failed: unknown access key or bad signature",
        ));
    }
    if let Some(nbf) = claims.nbf
        && now_secs < nbf
    {
        return Err(SimError::auth(1003, "Authorization token is not yet valid"));
    }
    if now_secs >= claims.exp {
        return Err(SimError::auth(1004, "Authorization token has expired"));
    }
    Ok(())
}

/// Middleware in front of every `/v1/…` route.
pub(crate) async fn require_jwt(State(sim): State<Sim>, req: Request, next: Next) -> Response {
    let agent = req
        .headers()
        .get(axum::http::header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    sim.count(|s| {
        s.requests += 1;
        *s.requests_by_agent.entry(agent).or_default() += 1;
    });
    if sim.refuse_revoked() {
        return super::account::revoked().into_response();
    }
    let header = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    match check_token(
        header,
        &sim.opts.access_key,
        &sim.opts.secret_key,
        unix_secs_now(),
    ) {
        Ok(()) => next.run(req).await,
        Err(e) => {
            sim.count(|s| s.auth_refusals += 1);
            e.into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<(), SimError>) -> Option<u32> {
        r.err().map(|e| e.code)
    }

    #[test]
    fn token_checks() {
        let now = 1_700_000_000;
        let good = issue_token("AK", "SK", now);
        let bearer = format!("Bearer {good}");
        assert_eq!(code(check_token(Some(&bearer), "AK", "SK", now)), None);
        assert_eq!(code(check_token(None, "AK", "SK", now)), Some(1001));
        assert_eq!(
            code(check_token(Some("Basic x"), "AK", "SK", now)),
            Some(1002)
        );
        assert_eq!(
            code(check_token(Some("Bearer a.b"), "AK", "SK", now)),
            Some(1002)
        );
        assert_eq!(
            code(check_token(Some(&bearer), "AK", "other", now)),
            Some(1000)
        );
        assert_eq!(
            code(check_token(Some(&bearer), "AK2", "SK", now)),
            Some(1000)
        );
        assert_eq!(
            code(check_token(Some(&bearer), "AK", "SK", now + 1800)),
            Some(1004)
        );
        assert_eq!(
            code(check_token(Some(&bearer), "AK", "SK", now - 6)),
            Some(1003)
        );
    }
}
