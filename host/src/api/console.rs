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

use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::services::Services;

const PAGE: &str = include_str!("console/index.html");
/// The scripts, by name under `/console/`, in the order the page loads them: helpers, the
/// pools page, then routing and the other pages.
const SCRIPTS: [(&str, &str); 3] = [
    ("core.js", include_str!("console/core.js")),
    ("pools.js", include_str!("console/pools.js")),
    ("app.js", include_str!("console/app.js")),
];
const STYLE: &str = include_str!("console/app.css");

/// No inline script, no inline style attribute, no other origin: what the page needs, only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Routes `/` (described in the OpenAPI document) and the console's assets.
pub fn router() -> OpenApiRouter<Services> {
    let mut router = OpenApiRouter::new()
        .routes(routes!(page))
        .route("/console/app.css", get(style));
    for (name, source) in SCRIPTS {
        router = router.route(&format!("/console/{name}"), get(move || script(source)));
    }
    router
}

/// The console
///
/// The operator console (pools with a live slot timeline, tasks, handlers, webhook
/// deliveries): one HTML page that reads this API.
#[utoipa::path(
    get,
    path = "/",
    tag = "operations",
    operation_id = "console",
    security(()),
    responses((status = 200, description = "The page", body = String, content_type = "text/html")),
)]
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

async fn script(source: &'static str) -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        source,
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

    /// The scripts build the page from text nodes only: no API value can become markup.
    #[test]
    fn the_scripts_never_parse_html() {
        for (name, source) in SCRIPTS {
            for sink in [
                ".innerHTML",
                ".outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
                "new Function",
            ] {
                assert!(!source.contains(sink), "{name} uses {sink}");
            }
            assert!(
                PAGE.contains(&format!("/console/{name}")),
                "{name} is loaded"
            );
        }
        assert!(
            !PAGE.contains("<script>") && !PAGE.contains(" style="),
            "no inline script or style: the CSP forbids them"
        );
    }
}
