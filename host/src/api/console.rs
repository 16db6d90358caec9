//! `GET /`: the operator console (pools with a live slot timeline, tasks, handlers, webhook
//! deliveries). Plain HTML, CSS and JavaScript compiled into the binary (no build step); the
//! page reads the same API a client uses, so it shows nothing the API would not, and routes
//! with URL hashes (`/#/tasks/ID`), so the back button and shared links work without the
//! server knowing the console's paths. The API key, when one is configured, is typed into
//! the page and kept in the browser's local storage.
//!
//! Everything the page renders from the API goes through `textContent` or an escaping
//! helper (a task type or provider error is attacker-controlled); the Content-Security-Policy
//! allows only the console's own script and style as a second line of defence.

use axum::Router;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;

use crate::services::Services;

const PAGE: &str = include_str!("console/index.html");
const SCRIPT: &str = include_str!("console/app.js");
const STYLE: &str = include_str!("console/app.css");

/// No inline script, no inline style attribute, no other origin: what the page needs, only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Routes `/` and the console's two assets.
pub fn router() -> Router<Services> {
    Router::new()
        .route("/", get(page))
        .route("/console/app.js", get(script))
        .route("/console/app.css", get(style))
}

async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::REFERRER_POLICY, "no-referrer"),
        ],
        PAGE,
    )
}

async fn script() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        SCRIPT,
    )
}

async fn style() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/css; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        STYLE,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The script builds the page from text nodes only: no API value can become markup.
    #[test]
    fn the_script_never_parses_html() {
        for sink in [
            ".innerHTML",
            ".outerHTML",
            "insertAdjacentHTML",
            "document.write",
            "eval(",
            "new Function",
        ] {
            assert!(!SCRIPT.contains(sink), "app.js uses {sink}");
        }
        assert!(
            !PAGE.contains("<script>") && !PAGE.contains(" style="),
            "no inline script or style: the CSP forbids them"
        );
    }
}
