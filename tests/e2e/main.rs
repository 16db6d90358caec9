//! End-to-end tests: real SQLite, the real compiled fixture handler, the stub provider over
//! HTTP, the real API router, and (in `crash`) the real `slotd` binary killed mid-run.

mod pg;
mod support;

mod accounts;
mod adaptive_capacity;
mod api_http;
mod budgets;
mod callbacks_auth;
mod cancel_slots;
mod chaos;
mod check_cli;
mod cluster_wake;
mod console_browser;
mod contract_1_0;
mod core_flow;
mod crash;
mod deadlines;
mod events_sse;
mod fal;
mod fal_cancel;
mod fal_recordings;
mod fal_webhooks;
mod fencing;
mod finalize_trust;
mod handler_faults;
mod kling;
mod metrics_dashboard;
mod openapi_fuzz;
mod plugin_new;
mod quotas_cluster;
mod releases_cluster;
mod reload_hot;
mod routes;
mod runway;
mod runway_cancel;
mod runway_crash;
mod runway_key;
mod runway_quotas;
mod runway_recordings;
mod scale_cluster;
mod scale_pg_outage;
mod soak;
mod tenant_shares;
mod trust_runtime;
mod webhooks_delivery;
