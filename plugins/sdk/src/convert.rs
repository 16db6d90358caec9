//! Conversions between the SDK's plain records and the generated bindings, in one place so no
//! handler writes them. Only the directions the contract needs exist: what the host gives
//! (units, contexts, answers) comes in, what the handler returns goes out.

use crate::bindings::exports::slotd::handler::extensions as ext;
use crate::bindings::exports::slotd::handler::routes;
use crate::bindings::slotd::handler::{http, log, types as wit};
use crate::host::{AuthorizedRequest, Credential, HttpError, Level, Request, Response};
use crate::info::{
    CancelChange, CancelOutcome, Features, HandlerInfo, PoolInfo, RoutedUnit, StageInfo, StagePool,
    TaskTypeInfo,
};
use crate::route::RoutedShot;
use crate::types::{
    Artifact, CallbackChange, Change, Finalized, Outcome, PlanError, PlannedUnit, ProviderError,
    TickContext, Unit, UnitStatus,
};

impl From<wit::UnitStatus> for UnitStatus {
    fn from(s: wit::UnitStatus) -> UnitStatus {
        match s {
            wit::UnitStatus::Pending => UnitStatus::Pending,
            wit::UnitStatus::Submitted => UnitStatus::Submitted,
            wit::UnitStatus::Succeeded => UnitStatus::Succeeded,
            wit::UnitStatus::Finalizing => UnitStatus::Finalizing,
            wit::UnitStatus::Completed => UnitStatus::Completed,
            wit::UnitStatus::Failed => UnitStatus::Failed,
            wit::UnitStatus::Cancelled => UnitStatus::Cancelled,
        }
    }
}

impl From<wit::Unit> for Unit {
    fn from(u: wit::Unit) -> Unit {
        Unit {
            id: u.id,
            task_id: u.task_id,
            index: u.index,
            task_type: u.task_type,
            tenant: u.tenant,
            stage: u.stage,
            status: u.status.into(),
            spec: u.spec,
            state: u.state,
            provider_job_id: u.provider_job_id,
            idempotency_key: u.idempotency_key,
            in_doubt: u.in_doubt,
            polls: u.polls,
            submitted_at_ms: u.submitted_at_ms,
            result: u.result,
        }
    }
}

impl From<wit::TickContext> for TickContext {
    fn from(c: wit::TickContext) -> TickContext {
        TickContext {
            pool: c.pool,
            now_ms: c.now_ms,
            callback_url: c.callback_url,
        }
    }
}

impl From<ProviderError> for wit::ProviderError {
    fn from(e: ProviderError) -> wit::ProviderError {
        wit::ProviderError {
            code: e.code,
            message: e.message,
        }
    }
}

impl From<Outcome> for wit::Outcome {
    fn from(o: Outcome) -> wit::Outcome {
        match o {
            Outcome::Accepted(id) => wit::Outcome::Accepted(id),
            Outcome::Running(hint) => wit::Outcome::Running(hint),
            Outcome::Succeeded(result) => wit::Outcome::Succeeded(result),
            Outcome::NextStage(stage) => wit::Outcome::NextStage(stage),
            Outcome::CapacityRejected(hint) => wit::Outcome::CapacityRejected(hint),
            Outcome::RetryAfter { after_ms, error } => wit::Outcome::RetryAfter(wit::Retry {
                after_ms,
                error: error.into(),
            }),
            Outcome::Fail(e) => wit::Outcome::Fail(e.into()),
        }
    }
}

impl From<Change> for wit::Change {
    fn from(c: Change) -> wit::Change {
        wit::Change {
            unit_id: c.unit_id,
            outcome: c.outcome.into(),
            state: c.state,
            cost: c.cost,
        }
    }
}

impl From<CallbackChange> for wit::CallbackChange {
    fn from(c: CallbackChange) -> wit::CallbackChange {
        wit::CallbackChange {
            provider_job_id: c.provider_job_id,
            idempotency_key: c.idempotency_key,
            outcome: c.outcome.into(),
            state: c.state,
            cost: c.cost,
        }
    }
}

impl From<PlannedUnit> for wit::PlannedUnit {
    fn from(u: PlannedUnit) -> wit::PlannedUnit {
        wit::PlannedUnit {
            spec: u.spec,
            state: u.state,
        }
    }
}

impl From<PlanError> for wit::PlanError {
    fn from(e: PlanError) -> wit::PlanError {
        wit::PlanError {
            field: e.field,
            message: e.message,
        }
    }
}

impl From<Finalized> for wit::Finalized {
    fn from(f: Finalized) -> wit::Finalized {
        let artifacts = f.artifacts.into_iter().map(|a: Artifact| wit::Artifact {
            name: a.name,
            url: a.url,
            content_type: a.content_type,
        });
        wit::Finalized {
            artifacts: artifacts.collect(),
            result: f.result,
        }
    }
}

impl From<PoolInfo> for wit::PoolInfo {
    fn from(p: PoolInfo) -> wit::PoolInfo {
        wit::PoolInfo {
            name: p.name,
            default_max_slots: p.default_max_slots,
        }
    }
}

impl From<HandlerInfo> for wit::HandlerInfo {
    fn from(h: HandlerInfo) -> wit::HandlerInfo {
        let stage = |s: StageInfo| wit::StageInfo {
            name: s.name,
            pool: s.pool,
        };
        let task_type = |t: TaskTypeInfo| wit::TaskTypeInfo {
            name: t.name,
            stages: t.stages.into_iter().map(stage).collect(),
        };
        wit::HandlerInfo {
            name: h.name,
            version: h.version,
            task_types: h.task_types.into_iter().map(task_type).collect(),
            pools: h.pools.into_iter().map(Into::into).collect(),
        }
    }
}

impl From<Features> for ext::FeatureSet {
    fn from(f: Features) -> ext::FeatureSet {
        let mut set = ext::FeatureSet::empty();
        set.set(ext::FeatureSet::CANCEL, f.cancel);
        set.set(ext::FeatureSet::ROUTING, f.routing);
        set
    }
}

impl From<CancelChange> for ext::CancelChange {
    fn from(c: CancelChange) -> ext::CancelChange {
        let outcome = match c.outcome {
            CancelOutcome::Ended => ext::CancelOutcome::Ended,
            CancelOutcome::Running(hint) => ext::CancelOutcome::Running(hint),
            CancelOutcome::RetryAfter { after_ms, error } => {
                ext::CancelOutcome::RetryAfter(wit::Retry {
                    after_ms,
                    error: error.into(),
                })
            }
        };
        ext::CancelChange {
            unit_id: c.unit_id,
            outcome,
            state: c.state,
            cost: c.cost,
        }
    }
}

impl From<StagePool> for ext::StagePool {
    fn from(p: StagePool) -> ext::StagePool {
        ext::StagePool {
            task_type: p.task_type,
            stage: p.stage,
            pool: p.pool.into(),
        }
    }
}

impl From<RoutedUnit> for ext::RoutedUnit {
    fn from(u: RoutedUnit) -> ext::RoutedUnit {
        ext::RoutedUnit {
            spec: u.spec,
            state: u.state,
            pools: u.pools,
        }
    }
}

impl From<RoutedShot> for routes::RoutedShot {
    fn from(r: RoutedShot) -> routes::RoutedShot {
        routes::RoutedShot {
            task_type: r.task_type,
            pool: r.pool,
            spec: r.spec,
            state: r.state,
        }
    }
}

impl From<Request> for http::Request {
    fn from(r: Request) -> http::Request {
        http::Request {
            method: r.method,
            url: r.url,
            headers: r.headers,
            body: r.body,
            timeout_ms: r.timeout_ms,
        }
    }
}

impl From<AuthorizedRequest> for http::AuthorizedRequest {
    fn from(r: AuthorizedRequest) -> http::AuthorizedRequest {
        let credential = |c: Credential| http::Credential {
            header: c.header,
            secret: c.secret,
            prefix: c.prefix,
        };
        http::AuthorizedRequest {
            request: r.request.into(),
            credentials: r.credentials.into_iter().map(credential).collect(),
        }
    }
}

/// An answer or transport error from the bindings.
pub(crate) fn answer(a: Result<http::Response, http::HttpError>) -> Result<Response, HttpError> {
    match a {
        Ok(r) => Ok(Response {
            status: r.status,
            headers: r.headers,
            body: r.body,
        }),
        Err(e) => Err(match e {
            http::HttpError::Denied(h) => HttpError::Denied(h),
            http::HttpError::Timeout => HttpError::Timeout,
            http::HttpError::TooLarge(n) => HttpError::TooLarge(n),
            http::HttpError::Invalid(m) => HttpError::Invalid(m),
            http::HttpError::Transport(m) => HttpError::Transport(m),
        }),
    }
}

impl From<Level> for log::Level {
    fn from(l: Level) -> log::Level {
        match l {
            Level::Trace => log::Level::Trace,
            Level::Debug => log::Level::Debug,
            Level::Info => log::Level::Info,
            Level::Warn => log::Level::Warn,
            Level::Error => log::Level::Error,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_and_features_reach_the_generated_types() {
        let error = ProviderError::new(Some("timeout"), "slow");
        let out: wit::Outcome = Outcome::RetryAfter {
            after_ms: Some(5),
            error: error.clone(),
        }
        .into();
        assert!(matches!(
            out,
            wit::Outcome::RetryAfter(wit::Retry { after_ms: Some(5), error: e })
                if e.code.as_deref() == Some("timeout") && e.message == "slow"
        ));
        let set: ext::FeatureSet = Features {
            cancel: true,
            routing: false,
        }
        .into();
        assert_eq!(set, ext::FeatureSet::CANCEL);
        let set: ext::FeatureSet = Features::default().into();
        assert!(set.is_empty());
        let cancel: ext::CancelChange = CancelChange {
            unit_id: "u".into(),
            outcome: CancelOutcome::RetryAfter {
                after_ms: None,
                error,
            },
            state: None,
            cost: Some("1".into()),
        }
        .into();
        assert!(matches!(cancel.outcome, ext::CancelOutcome::RetryAfter(_)));
    }

    #[test]
    fn routed_shots_go_out_whole() {
        let shot: routes::RoutedShot = RoutedShot {
            task_type: "video".into(),
            pool: "kling:video".into(),
            spec: "{\"prompt\":\"p\"}".into(),
            state: "{}".into(),
        }
        .into();
        assert_eq!(
            (shot.task_type, shot.pool, shot.spec, shot.state),
            (
                "video".to_string(),
                "kling:video".to_string(),
                "{\"prompt\":\"p\"}".to_string(),
                "{}".to_string()
            )
        );
    }

    #[test]
    fn units_and_answers_come_in_whole() {
        let unit: Unit = wit::Unit {
            id: "u".into(),
            task_id: "t".into(),
            index: 2,
            task_type: "video".into(),
            tenant: "local".into(),
            stage: "main".into(),
            status: wit::UnitStatus::Submitted,
            spec: "{}".into(),
            state: "{}".into(),
            provider_job_id: Some("j".into()),
            idempotency_key: "k".into(),
            in_doubt: true,
            polls: 3,
            submitted_at_ms: Some(9),
            result: None,
        }
        .into();
        assert_eq!(
            (unit.index, unit.status, unit.in_doubt, unit.polls),
            (2, UnitStatus::Submitted, true, 3)
        );
        assert_eq!(unit.provider_job_id.as_deref(), Some("j"));
        let ok = answer(Ok(http::Response {
            status: 429,
            headers: vec![("retry-after".into(), "1".into())],
            body: b"x".to_vec(),
        }));
        assert_eq!(
            ok.map(|r| r.header("Retry-After").map(String::from)),
            Ok(Some("1".into()))
        );
        assert_eq!(
            answer(Err(http::HttpError::Timeout)),
            Err(HttpError::Timeout)
        );
    }
}
