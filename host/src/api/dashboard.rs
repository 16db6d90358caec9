//! `GET /`: a live dashboard (pools, handler versions, recent tasks), one static page that reads
//! the same API a client uses, so it shows nothing the API would not. The API key, when one is
//! configured, is typed into the page and kept in the browser's local storage.

use axum::Router;
use axum::response::Html;
use axum::routing::get;

use crate::services::Services;

const PAGE: &str = include_str!("dashboard.html");

/// Route `/`.
pub fn router() -> Router<Services> {
    Router::new().route("/", get(|| async { Html(PAGE) }))
}
