-- Hot reload: the append-only history of handler versions (SPEC section 7). One row per state a
-- version of a handler file entered: active (loaded and serving), refused (never loaded, with
-- the reason), quarantined (crashed K calls in a row), unloaded (replaced or file removed).
CREATE TABLE handler_versions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,          -- Unix ms
    path TEXT NOT NULL,           -- the file it came from
    name TEXT,                    -- declared handler name; NULL if refused before describe
    version TEXT,                 -- declared version; NULL if refused before describe
    sha256 TEXT NOT NULL,         -- content hash of the file, hex
    state TEXT NOT NULL CHECK (state IN ('active', 'refused', 'quarantined', 'unloaded')),
    reason TEXT
);

CREATE INDEX handler_versions_by_name ON handler_versions (name, id);
