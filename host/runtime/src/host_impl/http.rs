//! `http.send` / `http.send-batch` / `http.send-authorized`: outbound HTTP on the guest's
//! behalf, with the handler's allowlist (default deny), a per-request timeout capped by the
//! host, a response-size cap read chunk by chunk, and latency recorded as
//! `slotd_provider_http_seconds{handler,status}`.
//!
//! `send-authorized` (contract 1.1) inserts credential headers from the handler's secrets on
//! the way out: the guest names the secret, the host writes `prefix + value` into the header,
//! marked sensitive, so the value never enters guest memory.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};

use crate::bindings::http::{AuthorizedRequest, Credential, Host, HttpError, Request, Response};
use crate::engine::CallState;
use crate::tape::{Redactor, Tape};
use slotd_core::config::HandlerConfig;

/// What one request needs, detached from the store so a batch can run concurrently.
struct Outbound {
    handler: Arc<str>,
    config: Arc<HandlerConfig>,
    client: reqwest::Client,
    timeout: Duration,
    max_bytes: u64,
    metrics: slotd_core::telemetry::Metrics,
    /// The call's recording, if `[handlers.X] record` is set.
    tape: Option<(Arc<Tape>, Arc<Redactor>)>,
    /// `User-Agent` for requests that set none (see `CallState::user_agent`).
    user_agent: Option<Arc<str>>,
}

impl Host for CallState {
    async fn send(&mut self, req: Request) -> Result<Response, HttpError> {
        if let Some(answer) = self.replayed(&req) {
            return answer;
        }
        // Lowered only on completion: see `CallState::http_in_flight`.
        self.http_in_flight += 1;
        let answer = self.outbound().send(req, Vec::new()).await;
        self.http_in_flight -= 1;
        answer
    }

    async fn send_batch(&mut self, reqs: Vec<Request>) -> Vec<Result<Response, HttpError>> {
        if self.replaying() {
            return reqs.iter().filter_map(|r| self.replayed(r)).collect();
        }
        let out = self.outbound();
        let concurrency = self.shared.limits.http_batch_concurrency.max(1);
        self.http_in_flight += 1;
        // `buffered` keeps the answers in request order.
        let answers = futures::stream::iter(reqs.into_iter().map(|r| out.send(r, Vec::new())))
            .buffered(concurrency)
            .collect()
            .await;
        self.http_in_flight -= 1;
        answers
    }

    async fn send_authorized(
        &mut self,
        reqs: Vec<AuthorizedRequest>,
    ) -> Vec<Result<Response, HttpError>> {
        if self.replaying() {
            // Recorded without the inserted credentials: replayed the same way.
            return reqs
                .iter()
                .filter_map(|r| self.replayed(&r.request))
                .collect();
        }
        let out = self.outbound();
        let concurrency = self.shared.limits.http_batch_concurrency.max(1);
        self.http_in_flight += 1;
        let answers = futures::stream::iter(reqs.into_iter().map(|r| {
            let inserted = credential_headers(&out, &r.request, &r.credentials);
            let out = &out;
            async move {
                match inserted {
                    Ok(headers) => {
                        let secrets: Vec<Vec<u8>> = r
                            .credentials
                            .iter()
                            .filter_map(|c| out.config.secrets.get(&c.secret))
                            .map(|s| s.expose().to_vec())
                            .collect();
                        out.send(r.request, headers)
                            .await
                            .map(|resp| scrub(resp, &secrets))
                    }
                    Err(e) => Err(e),
                }
            }
        }))
        .buffered(concurrency)
        .collect()
        .await;
        self.http_in_flight -= 1;
        answers
    }
}

/// `resp` with every occurrence of a secret the host inserted replaced by `***`, in its
/// headers and body: a provider (or a host on the allowlist) that echoes request headers must
/// not hand the key to the guest through the answer.
fn scrub(mut resp: Response, secrets: &[Vec<u8>]) -> Response {
    for secret in secrets.iter().filter(|s| s.len() >= 4) {
        resp.body = replace_bytes(&resp.body, secret, b"***");
        let text = String::from_utf8_lossy(secret).into_owned();
        for (_, v) in &mut resp.headers {
            if v.contains(&text) {
                *v = v.replace(&text, "***");
            }
        }
    }
    resp
}

fn replace_bytes(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

/// The headers `credentials` ask for, filled from the handler's secrets and marked sensitive.
/// A credential naming an unconfigured secret, an invalid header name, or a header the request
/// already carries makes the request `invalid` (not sent).
fn credential_headers(
    out: &Outbound,
    req: &Request,
    credentials: &[Credential],
) -> Result<Vec<(HeaderName, HeaderValue)>, HttpError> {
    let handler = &*out.handler;
    let mut headers = Vec::with_capacity(credentials.len());
    for c in credentials {
        let Some(secret) = out.config.secrets.get(&c.secret) else {
            return Err(HttpError::Invalid(format!(
                "no secret {:?} is configured for handler {handler:?} (set handlers.{handler}.{})",
                c.secret, c.secret
            )));
        };
        let name = HeaderName::from_bytes(c.header.as_bytes())
            .map_err(|_| HttpError::Invalid(format!("credential header name {:?}", c.header)))?;
        if req
            .headers
            .iter()
            .any(|(n, _)| n.eq_ignore_ascii_case(name.as_str()))
        {
            return Err(HttpError::Invalid(format!(
                "the request sets header {name} itself and also asks the host to fill it with                  secret {:?}",
                c.secret
            )));
        }
        let mut value = c.prefix.as_bytes().to_vec();
        value.extend_from_slice(secret.expose());
        let mut value = HeaderValue::from_bytes(&value).map_err(|_| {
            HttpError::Invalid(format!(
                "secret {:?} of handler {handler:?} (with its prefix) is not a valid value for                  header {name}",
                c.secret
            ))
        })?;
        value.set_sensitive(true);
        headers.push((name, value));
    }
    Ok(headers)
}

impl CallState {
    fn outbound(&self) -> Outbound {
        Outbound {
            handler: self.handler.clone(),
            config: self.config.clone(),
            client: self.shared.http.clone(),
            timeout: self.shared.limits.http_timeout,
            max_bytes: self.shared.limits.http_max_response_bytes,
            metrics: self.shared.metrics.clone(),
            tape: self.tape.clone().zip(self.redactor.clone()),
            user_agent: self.user_agent.clone(),
        }
    }

    fn replaying(&self) -> bool {
        matches!(self.tape.as_deref(), Some(Tape::Replay(_)))
    }

    /// The recorded answer to `req` when replaying.
    fn replayed(&self, req: &Request) -> Option<Result<Response, HttpError>> {
        let (tape, redactor) = (self.tape.as_ref()?, self.redactor.as_ref()?);
        tape.serve(redactor, req)
    }

    /// The recorded answer to `req` when replaying; `None` otherwise (for host functions that
    /// read on the guest's behalf, such as `signing.verify-ed25519`'s keys).
    pub(crate) fn replayed_request(&self, req: &Request) -> Option<Result<Response, HttpError>> {
        self.replayed(req)
    }

    /// Send `req` as the guest's own `http.send` would (allowlist, caps, recording, metrics),
    /// without the replay check. Detached from the store, so the future is `Send`.
    pub(crate) fn outbound_send(
        &self,
        req: Request,
    ) -> impl std::future::Future<Output = Result<Response, HttpError>> + Send + 'static {
        let out = self.outbound();
        async move { out.send(req, Vec::new()).await }
    }
}

impl Outbound {
    /// Send `req` with `inserted` (host-filled credential headers) added to its own headers.
    async fn send(
        &self,
        req: Request,
        inserted: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<Response, HttpError> {
        let started = Instant::now();
        // The place is taken before the first await: a batch records in request order.
        let recorded = self.tape.as_ref().map(|(tape, _)| {
            let copy = Request {
                method: req.method.clone(),
                url: req.url.clone(),
                headers: req.headers.clone(),
                body: req.body.clone(),
                timeout_ms: req.timeout_ms,
            };
            (tape.reserve(), copy)
        });
        let result = self.send_inner(req, inserted).await;
        if let (Some((tape, redactor)), Some((place, req))) = (&self.tape, &recorded) {
            tape.record(*place, redactor, req, &result);
        }
        let status = match &result {
            Ok(r) => r.status.to_string(),
            Err(HttpError::Denied(_)) => "denied".into(),
            Err(HttpError::Timeout) => "timeout".into(),
            Err(HttpError::TooLarge(_)) => "too_large".into(),
            Err(HttpError::Invalid(_)) => "invalid".into(),
            Err(HttpError::Transport(_)) => "transport".into(),
        };
        self.metrics.record(|| {
            metrics::histogram!(
                "slotd_provider_http_seconds",
                "handler" => self.handler.to_string(),
                "status" => status,
            )
            .record(started.elapsed().as_secs_f64())
        });
        result
    }

    async fn send_inner(
        &self,
        req: Request,
        inserted: Vec<(HeaderName, HeaderValue)>,
    ) -> Result<Response, HttpError> {
        let url = url::Url::parse(&req.url)
            .map_err(|e| HttpError::Invalid(format!("url {:?}: {e}", req.url)))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(HttpError::Invalid(format!(
                "url {:?}: only http and https are supported",
                req.url
            )));
        }
        if !slotd_core::address::host_allowed(&url, &self.config.allowed_hosts) {
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
        for (name, value) in inserted {
            headers.insert(name, value);
        }
        if !headers.contains_key(reqwest::header::USER_AGENT)
            && let Some(agent) = self
                .user_agent
                .as_deref()
                .and_then(|a| HeaderValue::from_str(a).ok())
        {
            headers.insert(reqwest::header::USER_AGENT, agent);
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
    use super::{Response, scrub};

    #[test]
    fn an_echoed_secret_is_scrubbed_from_the_answer() {
        let key = b"key_0123456789abcdef".to_vec();
        let resp = Response {
            status: 200,
            headers: vec![("x-echo".into(), "Bearer key_0123456789abcdef".into())],
            body: br#"{"headers":{"authorization":"Bearer key_0123456789abcdef"},"n":1}"#.to_vec(),
        };
        let clean = scrub(resp, std::slice::from_ref(&key));
        assert_eq!(clean.headers[0].1, "Bearer ***");
        assert_eq!(
            clean.body,
            br#"{"headers":{"authorization":"Bearer ***"},"n":1}"#.to_vec()
        );
    }
}
