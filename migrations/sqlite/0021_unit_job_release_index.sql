-- The units whose jobs one release created: what a staged rollout's judgement reads every
-- second and a rollback retries (docs/handlers.md, "Staged rollout"), without a scan of every
-- unit. Only `job_release` is indexed (set with a new job), so a poll's narrow update, which
-- writes neither it nor any other indexed column but `next_at`, stays as cheap as before.
CREATE INDEX units_by_job_release ON units (job_release) WHERE job_release IS NOT NULL;
