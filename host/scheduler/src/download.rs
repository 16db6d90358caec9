//! The host's own artifact downloads (docs/unit-journey.md, docs/trust-model.md): every hop of a download is
//! checked against the handler's `allowed_hosts` before a request is sent to it.
//!
//! The client follows no redirects itself (reqwest's default policy would follow ten, to any
//! host); [`get_allowed`] follows at most [`MAX_REDIRECTS`] by hand, checking each `Location`
//! first, so an allowed host cannot bounce the host's download to an address outside the
//! allowlist: the refused address receives nothing.

use std::time::{Duration, Instant};

use reqwest::header::LOCATION;
use url::Url;

/// Redirects one download may follow (each to an allowed host).
pub(crate) const MAX_REDIRECTS: usize = 5;

/// The download client: redirects are followed by [`get_allowed`], never by reqwest.
pub(crate) fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        // Fails only when the TLS backend cannot start, as `reqwest::Client::new` assumes.
        .expect("building the artifact download client")
}

/// `host:port` of a URL, for error messages.
fn host_port(url: &Url) -> String {
    let host = url.host_str().unwrap_or("(no host)");
    match url.port_or_known_default() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_string(),
    }
}

/// Whether a request may go to `url`: http(s) to a host in the allowlist. `Err` names the
/// refused host and the config key that would allow it.
fn check(url: &Url, allowed: &[String], allow_key: &str) -> Result<(), String> {
    if !matches!(url.scheme(), "http" | "https") {
        return Err(format!(
            "{url} is not an http(s) URL; only http and https are downloaded"
        ));
    }
    if !slotd_core::address::host_allowed(url, allowed) {
        return Err(format!("host {} is not in {allow_key}", host_port(url)));
    }
    Ok(())
}

/// GET `url` under the allowlist, following redirects by hand: each hop's host is checked
/// before anything is sent to it. `timeout` bounds the whole download, every hop and the body
/// included. The answer is the final hop's (any status; the caller checks it).
pub(crate) async fn get_allowed(
    client: &reqwest::Client,
    url: Url,
    allowed: &[String],
    allow_key: &str,
    timeout: Duration,
) -> Result<reqwest::Response, String> {
    let deadline = Instant::now() + timeout;
    let mut url = url;
    check(&url, allowed, allow_key)?;
    for hop in 0..=MAX_REDIRECTS {
        let left = deadline.saturating_duration_since(Instant::now());
        let resp = client
            .get(url.clone())
            .timeout(left)
            .send()
            .await
            .map_err(|e| format!("download of {url} failed: {e}"))?;
        let status = resp.status();
        let redirect = matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308);
        if !redirect {
            return Ok(resp);
        }
        if hop == MAX_REDIRECTS {
            break;
        }
        let location = resp
            .headers()
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| format!("{url} answered {status} without a usable Location"))?;
        let next = url
            .join(location)
            .map_err(|e| format!("{url} redirected to a bad Location {location:?}: {e}"))?;
        check(&next, allowed, allow_key)
            .map_err(|why| format!("redirect from {url} refused: {why}"))?;
        url = next;
    }
    Err(format!(
        "download of {url} gave up after {MAX_REDIRECTS} redirects"
    ))
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use axum::Router;
    use axum::http::{StatusCode, header};
    use axum::response::IntoResponse;
    use axum::routing::get;

    use super::*;

    fn found(to: &'static str) -> axum::response::Response {
        (StatusCode::FOUND, [(header::LOCATION, to)]).into_response()
    }

    /// `/a` → `/b` (relative) → 200; `/loop` → itself; `/file` → a `file:` URL. Counts hits.
    async fn server() -> Result<(SocketAddr, Arc<AtomicUsize>), std::io::Error> {
        let hits = Arc::new(AtomicUsize::new(0));
        let h = hits.clone();
        let app = Router::new()
            .route("/a", get(|| async { found("/b") }))
            .route("/b", get(|| async { "landed" }))
            .route("/loop", get(|| async { found("/loop") }))
            .route("/file", get(|| async { found("file:///etc/passwd") }))
            .layer(axum::middleware::from_fn(
                move |req, next: axum::middleware::Next| {
                    h.fetch_add(1, Ordering::SeqCst);
                    async move { next.run(req).await }
                },
            ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok((addr, hits))
    }

    async fn fetch(addr: SocketAddr, path: &str) -> Result<reqwest::Response, String> {
        let url = Url::parse(&format!("http://{addr}{path}")).map_err(|e| e.to_string())?;
        let allowed = [addr.to_string()];
        get_allowed(&client(), url, &allowed, "k", Duration::from_secs(10)).await
    }

    #[tokio::test]
    async fn redirects_within_the_allowlist_are_followed() -> Result<(), Box<dyn std::error::Error>>
    {
        let (addr, hits) = server().await?;
        let resp = fetch(addr, "/a").await?;
        assert_eq!(resp.status(), 200);
        assert_eq!(resp.text().await?, "landed");
        assert_eq!(hits.load(Ordering::SeqCst), 2);
        Ok(())
    }

    #[tokio::test]
    async fn a_redirect_loop_gives_up() -> Result<(), Box<dyn std::error::Error>> {
        let (addr, hits) = server().await?;
        let err = fetch(addr, "/loop").await.err().unwrap_or_default();
        assert!(err.contains("gave up after 5 redirects"), "{err}");
        assert_eq!(hits.load(Ordering::SeqCst), MAX_REDIRECTS + 1);
        Ok(())
    }

    #[tokio::test]
    async fn only_http_is_followed() -> Result<(), Box<dyn std::error::Error>> {
        let (addr, _) = server().await?;
        let err = fetch(addr, "/file").await.err().unwrap_or_default();
        assert!(
            err.contains("file:///etc/passwd is not an http(s) URL"),
            "{err}"
        );
        let first = client();
        let url = Url::parse("http://127.0.0.2:9/x")?;
        let err = get_allowed(
            &first,
            url,
            &[],
            "handlers.h.allowed_hosts",
            Duration::from_secs(1),
        )
        .await
        .err()
        .unwrap_or_default();
        assert_eq!(err, "host 127.0.0.2:9 is not in handlers.h.allowed_hosts");
        Ok(())
    }
}
