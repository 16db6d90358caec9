//! The host side of the WIT imports, one file per interface. Each runs on the per-call
//! [`CallState`](super::engine::CallState), which knows the handler it serves: a handler reaches
//! only its own settings, secrets and allowed hosts.

mod config;
mod http;
pub(crate) mod key_cache;
mod keys;
mod log;
mod observe;
mod signing;

use super::bindings::types;
use super::engine::CallState;

/// `types` declares no functions; the trait exists only so the linker accepts the interface.
impl types::Host for CallState {}
