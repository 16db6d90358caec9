-- Keys the host itself holds, shared by every instance through the database (SPEC section 17):
-- e.g. `callbacks`, the HMAC key of the tokens in callback URLs. Created once, atomically, by
-- whichever instance needs it first (INSERT … ON CONFLICT DO NOTHING, then read), never rotated
-- by slotd itself.
CREATE TABLE host_keys (
    name TEXT PRIMARY KEY,
    key BYTEA NOT NULL,
    created_at BIGINT NOT NULL    -- Unix ms
);
