//! `GET /`: a live dashboard (pools, handler versions, recent tasks), one static page that reads
//! the same API a client uses, so it shows nothing the API would not. The API key, when one is
//! configured, is typed into the page and kept in the browser's local storage.

use axum::response::Html;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::services::Services;

const PAGE: &str = include_str!("dashboard.html");

/// Route `/`.
pub fn router() -> OpenApiRouter<Services> {
    OpenApiRouter::new().routes(routes!(page))
}

/// The console
///
/// The operator console: one HTML page that reads this API.
#[utoipa::path(
    get,
    path = "/",
    tag = "operations",
    operation_id = "console",
    security(()),
    responses((status = 200, description = "The page", body = String, content_type = "text/html")),
)]
async fn page() -> Html<&'static str> {
    Html(PAGE)
}
