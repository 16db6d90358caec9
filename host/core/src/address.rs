//! The address policy for every outbound call slotd makes, in one place:
//!
//! - **Allowlists** ([`host_allowed`]): a handler's HTTP requests and the host's artifact
//!   downloads go only to the handler's (or account's) `allowed_hosts`, default deny, on every
//!   hop (redirects are followed by hand and checked again by the callers).
//! - **The SSRF rule** ([`is_public`], [`check_target`], [`names_internal_host`]): completion
//!   webhooks go only to public addresses unless `[webhooks] allow_private = true`; the
//!   request connects to the addresses checked (no second lookup). Names are resolved through
//!   a [`Resolve`]: the system's ([`SystemResolver`]) everywhere but in tests, which substitute
//!   their own to say what a name resolves to at delivery time; the check itself is the same.
//!
//! The trust model behind these rules is in docs/trust-model.md.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;

/// Is `url` allowed by `allowed`? An entry `host` allows that host on any port; `host:port`
/// only that port. Hosts compare case-insensitively.
pub fn host_allowed(url: &url::Url, allowed: &[String]) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let host = host.to_ascii_lowercase();
    let with_port = url.port_or_known_default().map(|p| format!("{host}:{p}"));
    allowed.iter().any(|entry| {
        let entry = entry.to_ascii_lowercase();
        entry == host || Some(&entry) == with_port.as_ref()
    })
}

/// Whether a URL's host names an internal address on its face: an IP literal that is not
/// [public](is_public), or `localhost` and its subdomains. Names that resolve to internal
/// addresses are caught when the target is checked ([`check_target`]).
pub fn names_internal_host(host: &str) -> bool {
    let bare = host.trim_start_matches('[').trim_end_matches(']');
    match bare.parse::<IpAddr>() {
        Ok(ip) => !is_public(ip),
        Err(_) => bare.eq_ignore_ascii_case("localhost") || bare.ends_with(".localhost"),
    }
}

/// Whether `ip` is public under the SSRF rule: not loopback, private, link-local, shared,
/// documentation, multicast, broadcast or unspecified (IPv4-mapped IPv6 judged as IPv4).
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_multicast()
                || v4.is_documentation()
                // Shared address space (carrier-grade NAT), 100.64.0.0/10.
                || (a == 100 && (64..128).contains(&b))
                // "This network", 0.0.0.0/8.
                || a == 0)
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public(IpAddr::V4(v4));
            }
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                // Unique local fc00::/7, link-local fe80::/10.
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80)
        }
    }
}

/// Turns a host name into addresses for [`check_target_with`].
pub trait Resolve: Send + Sync {
    /// The addresses `host` (a name, not an IP literal) resolves to, each with `port`.
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>>;
}

/// The system's resolver (`getaddrinfo`, through tokio): the one slotd uses.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        Box::pin(async move { Ok(tokio::net::lookup_host((host, port)).await?.collect()) })
    }
}

/// The addresses `url` may be reached at under the rule, or why not (names resolved by the
/// system: [`SystemResolver`]).
pub async fn check_target(url: &url::Url, allow_private: bool) -> Result<Vec<SocketAddr>, String> {
    check_target_with(url, allow_private, &SystemResolver).await
}

/// [`check_target`] with names resolved by `resolver`.
pub async fn check_target_with(
    url: &url::Url,
    allow_private: bool,
    resolver: &dyn Resolve,
) -> Result<Vec<SocketAddr>, String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!("scheme {:?} is not http or https", url.scheme()));
    }
    let host = url.host_str().ok_or("the URL has no host")?;
    let port = url.port_or_known_default().ok_or("the URL has no port")?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addrs: Vec<SocketAddr> = match host.parse::<IpAddr>() {
        Ok(ip) => vec![SocketAddr::new(ip, port)],
        Err(_) => resolver
            .lookup(host, port)
            .await
            .map_err(|e| format!("resolving {host}: {e}"))?,
    };
    if addrs.is_empty() {
        return Err(format!("{host} resolves to no address"));
    }
    if !allow_private && let Some(bad) = addrs.iter().find(|a| !is_public(a.ip())) {
        return Err(format!(
            "{host} resolves to {}, a loopback, private or link-local address \
             (set [webhooks] allow_private = true to allow it)",
            bad.ip()
        ));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ssrf_rule_refuses_internal_addresses() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "::",
        ] {
            let ip: IpAddr = internal.parse().expect("ip");
            assert!(!is_public(ip), "{internal} passed as public");
        }
        for public in ["8.8.8.8", "1.1.1.1", "2606:4700::1111", "100.128.0.1"] {
            let ip: IpAddr = public.parse().expect("ip");
            assert!(is_public(ip), "{public} refused");
        }
    }

    #[tokio::test]
    async fn targets_are_checked_by_address_and_scheme() {
        let url = |s: &str| url::Url::parse(s).expect("url");
        let e = check_target(&url("http://127.0.0.1:9/x"), false)
            .await
            .expect_err("loopback");
        assert!(e.contains("allow_private"), "{e}");
        let e = check_target(&url("http://localhost:9/x"), false)
            .await
            .expect_err("localhost resolves to loopback");
        assert!(e.contains("loopback"), "{e}");
        assert!(
            check_target(&url("http://127.0.0.1:9/x"), true)
                .await
                .is_ok()
        );
        let e = check_target(&url("ftp://example.com/x"), true)
            .await
            .expect_err("scheme");
        assert!(e.contains("scheme"), "{e}");
    }

    /// A resolver that answers every name with `self.0` (on the asked port).
    struct Fixed(Vec<IpAddr>);

    impl Resolve for Fixed {
        fn lookup<'a>(
            &'a self,
            _host: &'a str,
            port: u16,
        ) -> Pin<Box<dyn Future<Output = std::io::Result<Vec<SocketAddr>>> + Send + 'a>> {
            let addrs = self.0.iter().map(|ip| SocketAddr::new(*ip, port)).collect();
            Box::pin(async move { Ok(addrs) })
        }
    }

    #[tokio::test]
    async fn a_name_is_refused_when_any_of_its_addresses_is_internal() {
        let url = url::Url::parse("https://hooks.example.com:8443/x").expect("url");
        let public: IpAddr = "93.184.215.14".parse().expect("ip");
        let addrs = check_target_with(&url, false, &Fixed(vec![public]))
            .await
            .expect("a public address passes");
        assert_eq!(addrs, vec![SocketAddr::new(public, 8443)]);
        for internal in ["127.0.0.1", "10.0.0.7", "169.254.169.254", "::1"] {
            let ip: IpAddr = internal.parse().expect("ip");
            let e = check_target_with(&url, false, &Fixed(vec![public, ip]))
                .await
                .expect_err("one internal address is enough to refuse");
            assert!(
                e.contains("hooks.example.com") && e.contains(internal),
                "the error names the host and the address: {e}"
            );
            assert!(
                check_target_with(&url, true, &Fixed(vec![public, ip]))
                    .await
                    .is_ok()
            );
        }
        // An IP literal is not looked up.
        let e = check_target_with(
            &url::Url::parse("http://10.0.0.7/x").expect("url"),
            false,
            &Fixed(vec![public]),
        )
        .await
        .expect_err("a private literal");
        assert!(e.contains("10.0.0.7"), "{e}");
    }

    fn allowed(list: &[&str], url: &str) -> bool {
        let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        let url = url::Url::parse(url).expect("test url parses");
        host_allowed(&url, &list)
    }

    #[test]
    fn allowlist_matches_host_or_host_and_port() {
        assert!(allowed(&["api.example.com"], "https://api.example.com/x"));
        assert!(allowed(
            &["API.example.com"],
            "https://api.example.com:8443/x"
        ));
        assert!(allowed(&["127.0.0.1:9000"], "http://127.0.0.1:9000/jobs"));
        assert!(!allowed(&["127.0.0.1:9000"], "http://127.0.0.1:9001/jobs"));
        assert!(allowed(&["example.com:443"], "https://example.com/"));
        assert!(!allowed(&[], "https://api.example.com/x"));
        assert!(!allowed(&["example.com"], "https://api.example.com.evil/x"));
    }

    #[test]
    fn internal_names_are_seen_on_their_face() {
        for internal in [
            "127.0.0.1",
            "[::1]",
            "localhost",
            "api.localhost",
            "10.0.0.1",
        ] {
            assert!(names_internal_host(internal), "{internal}");
        }
        for public in ["example.com", "8.8.8.8", "[2606:4700::1111]"] {
            assert!(!names_internal_host(public), "{public}");
        }
    }
}
