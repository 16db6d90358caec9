//! `http.send` / `http.send-batch`: outbound HTTP on the guest's behalf, with the handler's
//! allowlist (default deny), a per-request timeout capped by the host, a response-size cap read
//! chunk by chunk, and latency recorded as `slotd_provider_http_seconds{handler,status}`.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::config::HandlerConfig;
use crate::runtime::bindings::http::{Host, HttpError, Request, Response};
use crate::runtime::engine::CallState;

/// What one request needs, detached from the store so a batch can run concurrently.
struct Outbound {
    handler: Arc<str>,
    config: Arc<HandlerConfig>,
    client: reqwest::Client,
    timeout: Duration,
    max_bytes: u64,
}

impl Host for CallState {
    async fn send(&mut self, req: Request) -> Result<Response, HttpError> {
        // Lowered only on completion: see `CallState::http_in_flight`.
        self.http_in_flight += 1;
        let answer = self.outbound().send(req).await;
        self.http_in_flight -= 1;
        answer
    }

    async fn send_batch(&mut self, reqs: Vec<Request>) -> Vec<Result<Response, HttpError>> {
        let out = self.outbound();
        let concurrency = self.shared.limits.http_batch_concurrency.max(1);
        self.http_in_flight += 1;
        // `buffered` keeps the answers in request order.
        let answers = futures::stream::iter(reqs.into_iter().map(|r| out.send(r)))
            .buffered(concurrency)
            .collect()
            .await;
        self.http_in_flight -= 1;
        answers
    }
}

impl CallState {
    fn outbound(&self) -> Outbound {
        Outbound {
            handler: self.handler.clone(),
            config: self.config.clone(),
            client: self.shared.http.clone(),
            timeout: self.shared.limits.http_timeout,
            max_bytes: self.shared.limits.http_max_response_bytes,
        }
    }
}

/// Is `url` allowed by `allowed`? An entry `host` allows that host on any port; `host:port`
/// only that port. Hosts compare case-insensitively (the URL parser lowercases them).
pub(crate) fn host_allowed(allowed: &[String], url: &url::Url) -> bool {
    let Some(host) = url.host_str() else {
        return false;
    };
    let with_port = url.port_or_known_default().map(|p| format!("{host}:{p}"));
    allowed.iter().any(|entry| {
        let entry = entry.to_ascii_lowercase();
        entry == host || Some(&entry) == with_port.as_ref()
    })
}

impl Outbound {
    async fn send(&self, req: Request) -> Result<Response, HttpError> {
        let started = Instant::now();
        let result = self.send_inner(req).await;
        let status = match &result {
            Ok(r) => r.status.to_string(),
            Err(HttpError::Denied(_)) => "denied".into(),
            Err(HttpError::Timeout) => "timeout".into(),
            Err(HttpError::TooLarge(_)) => "too_large".into(),
            Err(HttpError::Invalid(_)) => "invalid".into(),
            Err(HttpError::Transport(_)) => "transport".into(),
        };
        metrics::histogram!(
            "slotd_provider_http_seconds",
            "handler" => self.handler.to_string(),
            "status" => status,
        )
        .record(started.elapsed().as_secs_f64());
        result
    }

    async fn send_inner(&self, req: Request) -> Result<Response, HttpError> {
        let url = url::Url::parse(&req.url)
            .map_err(|e| HttpError::Invalid(format!("url {:?}: {e}", req.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(HttpError::Invalid(format!(
                "url {:?}: only http and https are supported",
                req.url
            )));
        }
        if !host_allowed(&self.config.allowed_hosts, &url) {
            let host = match (url.host_str(), url.port()) {
                (Some(h), Some(p)) => format!("{h}:{p}"),
                (Some(h), None) => h.to_string(),
                (None, _) => req.url.clone(),
            };
            return Err(HttpError::Denied(format!(
                "{host} is not in handlers.{}.allowed_hosts",
                self.handler
            )));
        }
        let method = reqwest::Method::from_bytes(req.method.as_bytes())
            .map_err(|_| HttpError::Invalid(format!("method {:?}", req.method)))?;
        let mut headers = HeaderMap::new();
        for (name, value) in &req.headers {
            let name = HeaderName::from_bytes(name.as_bytes())
                .map_err(|_| HttpError::Invalid(format!("header name {name:?}")))?;
            let value = HeaderValue::from_str(value)
                .map_err(|_| HttpError::Invalid(format!("header {name} has an invalid value")))?;
            headers.append(name, value);
        }
        let timeout = match req.timeout_ms {
            Some(ms) => Duration::from_millis(ms.into()).min(self.timeout),
            None => self.timeout,
        };
        let mut builder = self
            .client
            .request(method, url)
            .headers(headers)
            .timeout(timeout);
        if let Some(body) = req.body {
            builder = builder.body(body);
        }
        // reqwest's timeout covers connect through the end of the body.
        let mut resp = builder.send().await.map_err(transport)?;
        if let Some(len) = resp.content_length()
            && len > self.max_bytes
        {
            return Err(HttpError::TooLarge(self.max_bytes));
        }
        let status = resp.status().as_u16();
        let headers = resp
            .headers()
            .iter()
            .map(|(k, v)| {
                (
                    k.as_str().to_string(),
                    String::from_utf8_lossy(v.as_bytes()).into_owned(),
                )
            })
            .collect();
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(transport)? {
            if (body.len() + chunk.len()) as u64 > self.max_bytes {
                return Err(HttpError::TooLarge(self.max_bytes));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Response {
            status,
            headers,
            body,
        })
    }
}

fn transport(e: reqwest::Error) -> HttpError {
    if e.is_timeout() {
        return HttpError::Timeout;
    }
    let mut text = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    HttpError::Transport(text)
}

#[cfg(test)]
mod tests {
    use super::host_allowed;

    fn allowed(list: &[&str], url: &str) -> bool {
        let list: Vec<String> = list.iter().map(|s| s.to_string()).collect();
        let url = url::Url::parse(url).expect("test url parses");
        host_allowed(&list, &url)
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
}
