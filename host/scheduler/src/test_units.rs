//! A unit as the scheduler's tests start from: `submitted` in pool `p1`, task `t1`, with the
//! given provider job and stage.

use slotd_core::model::{Unit, UnitStatus};

/// Unit `id`, submitted, with provider job `job`, in `stage`.
pub(crate) fn unit(id: &str, job: Option<&str>, stage: &str) -> Unit {
    Unit {
        id: id.into(),
        task_id: "t1".into(),
        index: 0,
        tenant: "x".into(),
        task_type: "t".into(),
        pool: "p1".into(),
        stage: stage.into(),
        status: UnitStatus::Submitted,
        priority: 0,
        spec: "{}".into(),
        state: "{}".into(),
        provider_job_id: job.map(String::from),
        submit_attempt: 0,
        attempts: 0,
        polls: 0,
        next_at: 0,
        submitted_at: Some(0),
        error: None,
        result: None,
        cost: None,
        cancel_requested_at: None,
        routes: None,
        routing: None,
        terms: Default::default(),
        releases: Default::default(),
        created_at: 0,
        updated_at: 0,
    }
}
