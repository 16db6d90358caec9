//! `GET /`: the operator console (pools with a live slot timeline, routes, tasks, handlers,
//! webhook deliveries). Plain HTML, CSS and JavaScript compiled into the binary (no build step); the
//! page reads the same API a client uses, so it shows nothing the API would not, and routes
//! with URL hashes (`/#/tasks/ID`), so the back button and shared links work without the
//! server knowing the console's paths. The API key, when one is configured, is typed into
//! the page and kept in the browser's local storage.
//!
//! Everything the page renders from the API goes through `textContent` or an escaping
//! helper (a task type or provider error is attacker-controlled); the Content-Security-Policy
//! allows only the console's own script and style as a second line of defence.

use axum::extract::Path;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::ApiError;
use slotd_units::services::Services;

const PAGE: &str = include_str!("console/index.html");
/// The scripts, by name under `/console/`, in the order the page loads them: helpers, the
/// pools and routes pages, the releases and rollouts, then URL routing and the other pages.
const SCRIPTS: [(&str, &str); 4] = [
    ("core.js", include_str!("console/core.js")),
    ("pools.js", include_str!("console/pools.js")),
    ("releases.js", include_str!("console/releases.js")),
    ("app.js", include_str!("console/app.js")),
];
const STYLE: &str = include_str!("console/app.css");

/// No inline script, no inline style attribute, no other origin: what the page needs, only.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
     connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Routes `/` and the console's assets.
pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new()
        .routes(routes!(page))
        .routes(routes!(asset))
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

/// A console asset
///
/// The console's scripts and style sheet, compiled into the binary.
#[utoipa::path(
    get,
    path = "/console/{file}",
    tag = "operations",
    operation_id = "console_asset",
    security(()),
    params(("file" = String, Path, description = "`core.js`, `pools.js`, `releases.js`, `app.js` or `app.css`")),
    responses(
        (status = 200, description = "The file", content(
            (String = "text/javascript"),
            (String = "text/css"),
        )),
        (status = 404, description = "No such file"),
    ),
)]
async fn asset(Path(file): Path<String>) -> Result<Response, ApiError> {
    let (kind, source) = if file == "app.css" {
        ("text/css; charset=utf-8", STYLE)
    } else {
        let (_, source) = SCRIPTS
            .iter()
            .find(|(name, _)| *name == file)
            .ok_or_else(|| ApiError::NotFound(format!("no console file {file:?}")))?;
        ("text/javascript; charset=utf-8", *source)
    };
    Ok((
        [
            (header::CONTENT_TYPE, kind),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        ],
        source,
    )
        .into_response())
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
