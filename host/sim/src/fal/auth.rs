//! The key check every queue API and history request passes first (FAL_API.md "Host, auth"):
//! `Authorization: Key <key_id>:<key_secret>`, a key the simulator knows, else 401.

use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, StatusCode};

use super::error::FalError;
use super::state::Sim;

/// The caller's account, or the 401 to answer (counted).
pub(crate) fn authenticate(sim: &Sim, headers: &HeaderMap) -> Result<String, FalError> {
    let found = match headers.get(AUTHORIZATION).map(|v| v.to_str()) {
        None => Err("Missing Authorization header: send Authorization: Key <key_id>:<key_secret>"),
        Some(Err(_)) => Err("The Authorization header is not valid text"),
        Some(Ok(v)) => match v.trim().split_once(' ') {
            Some((scheme, key)) if scheme.eq_ignore_ascii_case("key") => {
                sim.account_of(key.trim()).ok_or("Invalid API key")
            }
            _ => Err("The Authorization header must be Key <key_id>:<key_secret>"),
        },
    };
    found.map_err(|why| {
        sim.count(|s| s.auth_refusals += 1);
        FalError::detail(StatusCode::UNAUTHORIZED, why)
    })
}
