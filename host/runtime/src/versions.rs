//! The versions of handler files seen by this process, and their state: every file the host
//! tried to load gets a [`VersionRecord`] (shown by `GET /v1/handlers?all=true`), and every
//! change of state is appended to the database's `handler_versions` history.

use serde::Serialize;

/// Where a version of a handler file stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum VersionState {
    /// Serving its task types now.
    Active,
    /// Never served: the file could not be loaded (see the reason).
    Refused,
    /// Served, crashed K calls in a row, and was taken out of service.
    Quarantined,
    /// Served, then was replaced by another version or its file was removed.
    Unloaded,
}

impl VersionState {
    /// The name stored in the database and shown by the API.
    pub fn as_str(self) -> &'static str {
        match self {
            VersionState::Active => "active",
            VersionState::Refused => "refused",
            VersionState::Quarantined => "quarantined",
            VersionState::Unloaded => "unloaded",
        }
    }
}

/// One version of one handler file, as the API shows it.
#[derive(Clone, Debug, Serialize, utoipa::ToSchema)]
pub struct VersionRecord {
    /// The file it came from.
    pub path: String,
    /// Declared handler name; `None` when refused before `describe` answered.
    pub name: Option<String>,
    /// Declared version; `None` when refused before `describe` answered.
    pub version: Option<String>,
    /// sha256 of the file's content, hex.
    pub sha256: String,
    /// When this version was first seen (Unix ms).
    pub seen_at: i64,
    /// When it last changed state (Unix ms).
    pub changed_at: i64,
    pub state: VersionState,
    /// Why it was refused, quarantined or unloaded.
    pub reason: Option<String>,
}

/// Records kept in memory (the database keeps the whole history).
pub(crate) const RECORDS_KEPT: usize = 256;
