//! The REST API. STUB.

/// STUB router (the real one is being built).
pub fn router(_services: crate::services::Services) -> axum::Router {
    axum::Router::new()
}
