-- What each process of a cluster has done with each handler release: loaded it (serving),
-- unloaded it (replaced), or failed to load it (with the reason). A process rewrites its rows
-- at every look at the releases, so `at` also says when it was last heard of.
CREATE TABLE handler_loads (
    process TEXT NOT NULL,        -- the process: host, pid and a random suffix
    role TEXT NOT NULL,           -- api, scheduler or all
    sha256 TEXT NOT NULL,         -- the release
    name TEXT NOT NULL,
    version TEXT NOT NULL,
    state TEXT NOT NULL,          -- loaded, unloaded, failed
    reason TEXT,                  -- why it failed or was unloaded
    at INTEGER NOT NULL,          -- Unix ms of the process's last word on it
    PRIMARY KEY (process, sha256)
);

CREATE INDEX handler_loads_by_at ON handler_loads (at);

-- The processes following the releases, each rewriting its row at every look: which are alive
-- (a process with no release to its name yet is listed too).
CREATE TABLE handler_processes (
    process TEXT PRIMARY KEY,
    role TEXT NOT NULL,
    at INTEGER NOT NULL                -- Unix ms of its last look
);

-- Which release of a handler is current: the newest promoted one not withdrawn. Publishing
-- promotes; the plugins directory promotes a file it sees change (a file dropped back in is
-- meant to serve) and withdraws the releases of a file removed from it.
ALTER TABLE handler_releases ADD COLUMN promoted_at INTEGER;
ALTER TABLE handler_releases ADD COLUMN withdrawn_at INTEGER;
ALTER TABLE handler_releases ADD COLUMN withdrawn_reason TEXT;
UPDATE handler_releases SET promoted_at = published_at;
