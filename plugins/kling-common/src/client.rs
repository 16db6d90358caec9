//! An authenticated Kling client for one handler call: reads `base_url` and `access_key` from
//! the handler's config, signs one token for the call (`now` from the tick context), and sends
//! rounds of requests through the SDK's client (one `send-batch` each), so every request of a
//! round goes out concurrently. Requests answered 1003/1004 are re-signed once (with the
//! guest's wall clock, since the tick's `now` is what produced the refused token) and resent in
//! the same round. Still refused after the re-sign, they are account refusals
//! ([`crate::answer::ACCOUNT_REFUSED`]).
//!
//! The token is an HS256 JWT with exactly `iss` (access key), `exp` (now + 1800 s) and `nbf`
//! (now − 5 s), signed by the host with the `secret_key` secret, so the SecretKey never enters
//! the component.

use serde_json::Value;
use slotd_sdk::client::{self as http, Call};
use slotd_sdk::settings::Settings;
use slotd_sdk::{Host, signing};

use crate::answer::{self, Class, Problem};

/// The secret the token is signed with (`[handlers.<name>] secret_key = { env = … }`).
pub const SECRET_NAME: &str = "secret_key";
/// Token lifetime Kling clients use.
pub const LIFETIME_SECS: u64 = 1800;
/// `nbf` lies this far in the past so that a provider clock slightly behind still accepts it.
pub const NOT_BEFORE_SKEW_SECS: u64 = 5;

/// The claims of a token valid from `now_secs`.
pub fn claims(access_key: &str, now_secs: u64) -> Value {
    serde_json::json!({
        "iss": access_key,
        "exp": now_secs.saturating_add(LIFETIME_SECS),
        "nbf": now_secs.saturating_sub(NOT_BEFORE_SKEW_SECS),
    })
}

/// A token valid from `now_secs`, signed by the host.
pub fn token(host: &dyn Host, access_key: &str, now_secs: u64) -> Result<String, String> {
    signing::hs256_jwt(host, SECRET_NAME, &claims(access_key, now_secs))
        .map_err(|e| format!("signing the Kling JWT failed: {e}"))
}

/// A Kling client bound to one handler call.
pub struct Client<'h> {
    http: http::Client<'h>,
    access_key: String,
    /// A call re-signs at most once.
    resigned: bool,
    /// The re-sign happened (a fresh token was sent).
    resigned_ok: bool,
}

impl<'h> Client<'h> {
    /// Reads the configuration and signs the call's token. An error names the missing setting.
    pub fn new(host: &'h dyn Host, handler: &str, now_ms: u64) -> Result<Client<'h>, String> {
        let settings = Settings::new(host, handler);
        let base_url = settings.required("base_url")?;
        let access_key = settings.required("access_key")?;
        let timeout_ms = settings.parsed::<u32>("request_timeout_ms", "an integer")?;
        let token = token(host, &access_key, now_ms / 1000)?;
        let mut http = http::Client::new(host, &base_url).with_timeout_ms(timeout_ms);
        http.set_header("authorization", format!("Bearer {token}"));
        Ok(Client {
            http,
            access_key,
            resigned: false,
            resigned_ok: false,
        })
    }

    /// Send a round concurrently; one parsed answer per call, in order.
    pub fn round(&mut self, calls: &[Call]) -> Vec<Result<Value, Problem>> {
        let mut answers = self.send(calls);
        let stale: Vec<usize> = answers
            .iter()
            .enumerate()
            .filter(|(_, a)| matches!(a, Err(p) if p.class == Class::TokenTime))
            .map(|(i, _)| i)
            .collect();
        if stale.is_empty() {
            return answers;
        }
        if !self.resigned && self.resign() {
            self.resigned_ok = true;
            let again: Vec<Call> = stale.iter().map(|&i| calls[i].clone()).collect();
            for (i, answer) in stale.iter().zip(self.send(&again)) {
                answers[*i] = answer;
            }
        }
        // Still refused after one re-sign: the account's credentials are refused (contract
        // 1.2 `account_refused`), not the job. Without a wall clock to re-sign by, it is the
        // guest's limitation, not the account's: try again on a later tick.
        for answer in &mut answers {
            if let Err(p) = answer
                && p.class == Class::TokenTime
            {
                if self.resigned_ok {
                    let kling_code = p.error.code.clone().unwrap_or_default();
                    *p = Problem::account(Class::AccountRefused, &kling_code, &p.error.message);
                } else {
                    p.class = Class::Transient;
                }
            }
        }
        answers
    }

    fn resign(&mut self) -> bool {
        self.resigned = true;
        let host = self.http.host();
        let Some(now_ms) = host.wall_clock_ms() else {
            return false;
        };
        match token(host, &self.access_key, now_ms / 1000) {
            Ok(token) => {
                self.http
                    .set_header("authorization", format!("Bearer {token}"));
                true
            }
            Err(e) => {
                host.warn(&e);
                false
            }
        }
    }

    fn send(&self, calls: &[Call]) -> Vec<Result<Value, Problem>> {
        let answers = self.http.send(calls).into_iter();
        answers
            .map(|answer| match answer {
                Ok(r) => answer::parse(&r),
                Err(e) => Err(answer::transport(&e)),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_exactly_iss_exp_nbf_in_a_signed_token() {
        assert_eq!(
            claims("AK", 1_700_000_000),
            serde_json::json!({"iss": "AK", "exp": 1_700_001_800u64, "nbf": 1_699_999_995u64})
        );
        let host = slotd_sdk::testing::ScriptedHost::new().with_secret(SECRET_NAME, "SK");
        let token = token(&host, "AK", 1_700_000_000).unwrap_or_default();
        let (input, _) = token.rsplit_once('.').unwrap_or_default();
        let claims = claims("AK", 1_700_000_000).to_string();
        assert_eq!(input, signing::signing_input(&claims));
    }
}
