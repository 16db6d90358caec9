-- Handler releases: a handler file published once, kept where every process of a cluster can
-- read it. Content-addressed: the sha256 of the bytes is the key, so publishing the same file
-- twice stores it once. A handler's version names one file: (name, version) is unique, and a
-- different file under a published version is refused, never replaced.
CREATE TABLE handler_releases (
    sha256 TEXT PRIMARY KEY,      -- hex sha256 of bytes
    name TEXT NOT NULL,           -- the handler name the file declares
    version TEXT NOT NULL,        -- the version the file declares
    contract TEXT NOT NULL,       -- the handler contract version it was checked against
    size BIGINT NOT NULL,         -- bytes, for listings without reading the file
    bytes BYTEA NOT NULL,         -- the component itself
    published_by TEXT NOT NULL,   -- who published it: an API key's tenant, the plugins directory
    published_at BIGINT NOT NULL, -- Unix ms
    UNIQUE (name, version)
);

CREATE INDEX handler_releases_by_name ON handler_releases (name, published_at);
