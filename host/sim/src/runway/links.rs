//! Signed output links, the stand-in for Runway's CloudFront URLs: `{base}/_files/{task}/
//! video.mp4?_jwt=…&exp=…`, where `exp` is the expiry in Unix milliseconds and `_jwt` an
//! HMAC-SHA256 (base64url) over the task id and `exp`. Each `GET` of a task mints a fresh one;
//! an expired link, or one with any part altered, answers 403.

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// Why a link is refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LinkError {
    /// Missing or wrong signature, or an `exp` that is not a number.
    Altered,
    Expired,
}

impl LinkError {
    pub(crate) fn message(self) -> &'static str {
        match self {
            LinkError::Altered => "Access denied: invalid signature",
            LinkError::Expired => "Access denied: the link has expired",
        }
    }
}

/// Signs and checks links with a key of this simulator's own.
pub(crate) struct Signer {
    key: [u8; 32],
}

impl Signer {
    /// A key derived from the seed and the API key: stable for one configuration, never the
    /// API key itself.
    pub(crate) fn new(seed: u64, api_key: &str) -> Signer {
        let mut h = Sha256::new();
        h.update(b"slotd sim runway links\0");
        h.update(seed.to_le_bytes());
        h.update(api_key.as_bytes());
        let mut key = [0u8; 32];
        key.copy_from_slice(&h.finalize());
        Signer { key }
    }

    fn mac(&self, task_id: &str, exp: &str) -> Hmac<Sha256> {
        // HMAC takes keys of any length; only fixed-size MACs can refuse one.
        let mut mac = match Hmac::<Sha256>::new_from_slice(&self.key) {
            Ok(m) => m,
            Err(_) => unreachable!("HMAC accepts a 32-byte key"),
        };
        mac.update(task_id.as_bytes());
        mac.update(b"/video.mp4?exp=");
        mac.update(exp.as_bytes());
        mac
    }

    /// The link to `task_id`'s video valid until `exp_ms` (Unix milliseconds).
    pub(crate) fn link(&self, base_url: &str, task_id: &str, exp_ms: u64) -> String {
        let exp = exp_ms.to_string();
        let sig = URL_SAFE_NO_PAD.encode(self.mac(task_id, &exp).finalize().into_bytes());
        format!("{base_url}/_files/{task_id}/video.mp4?_jwt={sig}&exp={exp}")
    }

    /// Checks a link's query (`_jwt`, `exp`) for `task_id` at `now_ms`.
    pub(crate) fn verify(&self, task_id: &str, query: &str, now_ms: u64) -> Result<(), LinkError> {
        let mut jwt = None;
        let mut exp = None;
        for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
            match k.as_ref() {
                "_jwt" => jwt = Some(v.into_owned()),
                "exp" => exp = Some(v.into_owned()),
                _ => {}
            }
        }
        let (Some(jwt), Some(exp)) = (jwt, exp) else {
            return Err(LinkError::Altered);
        };
        let sig = URL_SAFE_NO_PAD
            .decode(jwt)
            .map_err(|_| LinkError::Altered)?;
        self.mac(task_id, &exp)
            .verify_slice(&sig)
            .map_err(|_| LinkError::Altered)?;
        let exp_ms: u64 = exp.parse().map_err(|_| LinkError::Altered)?;
        if now_ms >= exp_ms {
            return Err(LinkError::Expired);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_verify_expire_and_refuse_changes() {
        let s = Signer::new(1, "key_x");
        let link = s.link("http://h", "t1", 2_000);
        let query = link.split_once('?').map(|(_, q)| q).unwrap_or_default();
        assert_eq!(s.verify("t1", query, 1_999), Ok(()));
        assert_eq!(s.verify("t1", query, 2_000), Err(LinkError::Expired));
        assert_eq!(s.verify("t2", query, 0), Err(LinkError::Altered));
        let later = query.replace("exp=2000", "exp=9000");
        assert_eq!(s.verify("t1", &later, 0), Err(LinkError::Altered));
        assert_eq!(s.verify("t1", "exp=2000", 0), Err(LinkError::Altered));
        let other = Signer::new(2, "key_x");
        assert_eq!(other.verify("t1", query, 0), Err(LinkError::Altered));
    }
}
