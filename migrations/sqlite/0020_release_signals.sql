-- What a rollout is judged on besides its units' outcomes (docs/handlers.md, "Staged
-- rollout"): per release and minute, while its handler has a rollout running, the units its
-- tick calls were given, the creates it sent and those the provider refused, its calls that
-- faulted, the changes the state machine refused, and the provider job durations it saw
-- (count, and the sum and sum of squares of their natural logs, ln ms). Every scheduler adds its ticks' counts.
CREATE TABLE release_signals (
    release TEXT NOT NULL,            -- sha256
    minute BIGINT NOT NULL,           -- Unix ms of the minute's start
    units BIGINT NOT NULL,
    creates BIGINT NOT NULL,
    create_refused BIGINT NOT NULL,
    faults BIGINT NOT NULL,
    refused_changes BIGINT NOT NULL,
    jobs BIGINT NOT NULL,
    job_log_ms REAL NOT NULL,
    job_log_ms_sq REAL NOT NULL,
    PRIMARY KEY (release, minute)
);
