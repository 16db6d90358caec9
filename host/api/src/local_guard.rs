//! The loopback default's web rules (docs/trust-model.md). With no API keys, every request acts
//! for the single local tenant, so anything that can make the operator's browser send a
//! request could act too. Two such attacks need no key:
//!
//! - **DNS rebinding**: a page on `evil.example` points its name at 127.0.0.1 and then reads
//!   slotd's answers as same-origin. The browser still sends `Host: evil.example`, so only
//!   loopback names are answered (`localhost`, `*.localhost`, `127.0.0.0/8`, `[::1]`, any
//!   port); anything else gets 421 Misdirected Request: slotd will not answer for that name.
//!   A request with no `Host` at all is let through: browsers always send one.
//! - **Cross-site writes**: a page posts a form, or a no-cors `fetch`, to 127.0.0.1. A page
//!   can send a JSON `Content-Type` only after a CORS preflight, which slotd never grants, so a
//!   write (`POST`/`PUT`/`PATCH`) with a body must declare `application/json` or `…+json`
//!   (415 otherwise); a bodyless write (cancel, retry) is refused when its `Origin` is not a
//!   loopback origin (403), which is what a browser sends cross-site.
//!
//! `/v1/callbacks/…` is exempt: providers reach it through the public URL with their own
//! `Host`, and the callback itself is authenticated. With API keys none of this applies: a
//! browser never attaches a bearer key to a request by itself.

use std::net::{IpAddr, Ipv6Addr};

use axum::body::HttpBody;
use axum::extract::{Request, State};
use axum::http::{Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use slotd_core::config::Config;

/// Where the rules do not apply: provider webhooks.
pub const CALLBACKS_PREFIX: &str = "/v1/callbacks/";

/// Which of the rules are on for this configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LocalGuard {
    /// Only loopback `Host` names. Off when the operator listens beyond loopback without keys
    /// (`--allow-unauthenticated`): the names it is reached by are then its own business.
    pub check_host: bool,
}

impl LocalGuard {
    /// The rules for `config`: `None` when API keys are configured.
    pub fn for_config(config: &Config) -> Option<LocalGuard> {
        config.api_keys.is_empty().then(|| LocalGuard {
            check_host: config.listen.ip().is_loopback(),
        })
    }

    /// The refusal for this request, if any.
    pub fn check(&self, req: &Request) -> Result<(), ApiError> {
        if req.uri().path().starts_with(CALLBACKS_PREFIX) {
            return Ok(());
        }
        if self.check_host {
            let host = req
                .headers()
                .get(header::HOST)
                .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
                .or_else(|| req.uri().authority().map(|a| a.to_string()));
            if let Some(host) = host.filter(|h| !is_loopback_host(h)) {
                return Err(ApiError::MisdirectedHost { host });
            }
        }
        let method = req.method();
        let writes = [Method::POST, Method::PUT, Method::PATCH, Method::DELETE];
        if !writes.contains(method) {
            return Ok(());
        }
        if let Some(origin) = req.headers().get(header::ORIGIN) {
            let origin = String::from_utf8_lossy(origin.as_bytes()).into_owned();
            if !is_loopback_origin(&origin) {
                return Err(ApiError::CrossOrigin { origin });
            }
        }
        if *method == Method::DELETE {
            return Ok(());
        }
        match req.headers().get(header::CONTENT_TYPE) {
            Some(v) if is_json_media_type(&String::from_utf8_lossy(v.as_bytes())) => Ok(()),
            // A handler upload (`POST /v1/handlers`): no HTML form can send these types either.
            Some(v) if is_binary_media_type(&String::from_utf8_lossy(v.as_bytes())) => Ok(()),
            Some(v) => Err(ApiError::UnsupportedMediaType {
                found: format!("{:?}", String::from_utf8_lossy(v.as_bytes())),
            }),
            None if req.body().size_hint().exact() == Some(0) => Ok(()),
            None => Err(ApiError::UnsupportedMediaType {
                found: "no Content-Type".into(),
            }),
        }
    }
}

/// Middleware applying [`LocalGuard::check`].
pub async fn enforce(State(guard): State<LocalGuard>, req: Request, next: Next) -> Response {
    match guard.check(&req) {
        Ok(()) => next.run(req).await,
        Err(refusal) => {
            tracing::info!(reason = %refusal, "request refused by the loopback rules");
            refusal.into_response()
        }
    }
}

/// `localhost`, `*.localhost`, a loopback IPv4 address or `[::1]`, with or without a port.
pub fn is_loopback_host(host: &str) -> bool {
    let host = host.trim();
    let name = if let Some(rest) = host.strip_prefix('[') {
        // `[v6]` or `[v6]:port`
        let Some((v6, after)) = rest.split_once(']') else {
            return false;
        };
        if !(after.is_empty() || is_port_suffix(after)) {
            return false;
        }
        return v6.parse::<Ipv6Addr>().is_ok_and(|ip| ip.is_loopback());
    } else {
        match host.rsplit_once(':') {
            Some((name, port)) if is_port_suffix(&format!(":{port}")) => name,
            Some(_) => return false,
            None => host,
        }
    };
    let name = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if name == "localhost" || name.ends_with(".localhost") {
        return true;
    }
    // Only a dotted IPv4 address here: bare IPv6 needs brackets in a Host.
    name.parse::<IpAddr>()
        .is_ok_and(|ip| ip.is_ipv4() && ip.is_loopback())
}

/// `:` followed by 1 to 5 digits.
fn is_port_suffix(s: &str) -> bool {
    s.strip_prefix(':')
        .is_some_and(|p| (1..=5).contains(&p.len()) && p.bytes().all(|b| b.is_ascii_digit()))
}

/// An `Origin` (`scheme://host[:port]`) whose host is a loopback name. `null` (sandboxed
/// frames, `file:` pages) is not.
fn is_loopback_origin(origin: &str) -> bool {
    origin
        .split_once("://")
        .is_some_and(|(_, host)| !host.contains('/') && is_loopback_host(host))
}

/// `application/wasm` or `application/octet-stream`, parameters ignored: a handler upload.
pub fn is_binary_media_type(value: &str) -> bool {
    value.split(';').next().is_some_and(|essence| {
        let essence = essence.trim();
        essence.eq_ignore_ascii_case("application/wasm")
            || essence.eq_ignore_ascii_case("application/octet-stream")
    })
}

/// `application/json` or `application/<anything>+json`, parameters (`; charset=utf-8`)
/// allowed, case-insensitive.
pub fn is_json_media_type(value: &str) -> bool {
    let essence = value
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|sub| sub.len() > "+json".len() && sub.ends_with("+json"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_names() {
        for ok in [
            "localhost",
            "localhost:8080",
            "LOCALHOST.",
            "app.localhost:3000",
            "127.0.0.1",
            "127.0.0.1:8080",
            "127.1.2.3:80",
            "[::1]",
            "[::1]:8080",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example",
            "evil.example:8080",
            "localhost.evil.example",
            "notlocalhost",
            "10.0.0.1:8080",
            "0.0.0.0:8080",
            "[::2]:8080",
            "[::1]x",
            "::1",
            "127.0.0.1:99999999",
            "127.0.0.1:",
            "",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
        assert!(is_loopback_origin("http://localhost:5173"));
        assert!(is_loopback_origin("http://[::1]:8080"));
        assert!(!is_loopback_origin("null"));
        assert!(!is_loopback_origin("https://evil.example"));
    }

    #[test]
    fn which_rules_apply() {
        let mut config = Config::default();
        assert_eq!(
            LocalGuard::for_config(&config),
            Some(LocalGuard { check_host: true })
        );
        // `--allow-unauthenticated` beyond loopback: the names it is reached by are unknown,
        // but a browser's cross-site writes are still refused.
        config.listen = ([0, 0, 0, 0], 8080).into();
        assert_eq!(
            LocalGuard::for_config(&config),
            Some(LocalGuard { check_host: false })
        );
        config.api_keys.push(slotd_core::config::ApiKey {
            key: slotd_core::config::Secret::new("key-of-tenant-a"),
            tenant: "a".into(),
            admin: false,
            publish: Vec::new(),
        });
        assert_eq!(LocalGuard::for_config(&config), None);
    }

    #[test]
    fn json_media_types() {
        for ok in [
            "application/json",
            "Application/JSON; charset=utf-8",
            "application/merge-patch+json",
            "application/problem+json",
        ] {
            assert!(is_json_media_type(ok), "{ok}");
        }
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/+json",
            "text/json",
            "",
        ] {
            assert!(!is_json_media_type(bad), "{bad}");
        }
    }

    #[test]
    fn binary_media_types_are_only_the_upload_types() {
        for ok in ["application/wasm", "Application/Octet-Stream; x=y"] {
            assert!(is_binary_media_type(ok), "{ok}");
        }
        // What an HTML form can send is never one of them.
        for bad in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/wasm-ish",
            "",
        ] {
            assert!(!is_binary_media_type(bad), "{bad}");
        }
    }
}
