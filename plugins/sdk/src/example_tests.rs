//! The README's example handler and its test, kept compiling and passing here (the README's
//! handler block is also a doctest).

use crate::client::{self, Call, Client};
use crate::settings::Settings;
use crate::{
    Change, Credential, Finalized, HandlerInfo, Host, Outcome, PlanError, PlannedUnit, PoolInfo,
    ProviderError, StageInfo, TaskTypeInfo, TickContext, Unit,
};
use serde_json::{Value, json};

pub struct Echo;

impl slotd_sdk::Handler for Echo {
    fn describe() -> HandlerInfo {
        HandlerInfo {
            name: "echo".into(),
            version: "0.1.0".into(),
            task_types: vec![TaskTypeInfo {
                name: "echo".into(),
                stages: vec![StageInfo::new("main", "echo")],
            }],
            pools: vec![PoolInfo::new("echo", 4)],
        }
    }

    fn plan(_: &dyn Host, _: &str, payload: &str) -> Result<Vec<PlannedUnit>, PlanError> {
        let payload = slotd_sdk::fields::payload(payload)?;
        let Some(Value::Array(prompts)) = payload.get("prompts") else {
            return Err(PlanError::at("prompts", "is required (a list of strings)"));
        };
        Ok(prompts
            .iter()
            .map(|p| PlannedUnit::new(p.to_string()))
            .collect())
    }

    fn tick(host: &dyn Host, ctx: &TickContext, batch: Vec<Unit>) -> Result<Vec<Change>, String> {
        let base_url = Settings::new(host, "echo").required("base_url")?;
        let client = Client::new(host, &base_url).with_credential(Credential::bearer("api_key"));
        let calls: Vec<Call> = batch
            .iter()
            .map(|u| match &u.provider_job_id {
                None => Call::Post(
                    "/jobs".into(),
                    json!({"prompt": u.spec, "key": u.idempotency_key}),
                ),
                Some(id) => Call::Get(format!("/jobs/{id}")),
            })
            .collect();
        let answers = client.send(&calls);
        Ok(batch
            .iter()
            .zip(answers)
            .map(|(unit, answer)| {
                let outcome = client::failure(&answer, ctx.now_ms).unwrap_or_else(|| {
                    let job = answer.as_ref().ok().and_then(|r| client::json(r).ok());
                    outcome_of(unit, job.unwrap_or_default())
                });
                Change::of(unit, outcome)
            })
            .collect())
    }

    fn finalize(_: &dyn Host, _: &TickContext, unit: Unit) -> Result<Finalized, String> {
        Ok(Finalized {
            artifacts: Vec::new(),
            result: unit.result,
        })
    }
}

fn outcome_of(unit: &Unit, job: Value) -> Outcome {
    match (
        &unit.provider_job_id,
        job["id"].as_str(),
        job["status"].as_str(),
    ) {
        (None, Some(id), _) => Outcome::Accepted(id.into()),
        (Some(_), _, Some("done")) => Outcome::Succeeded(job["output"].to_string()),
        (Some(_), _, Some("running")) => Outcome::Running(Some(1_000)),
        _ => Outcome::retry(ProviderError::new(
            Some("malformed"),
            format!("unexpected {job}"),
        )),
    }
}

use crate::Handler;
use crate::testing::{ScriptedHost, json_answer};

#[test]
fn submits_then_polls() {
    let host = ScriptedHost::new()
        .with_config("base_url", "http://provider.test")
        .with_secret("api_key", "test-key")
        .on_request("POST", "/jobs", |_| {
            json_answer(201, &serde_json::json!({"id": "j1"}))
        });
    let unit = Unit {
        id: "u1".into(),
        spec: "\"hi\"".into(),
        ..Unit::default()
    };
    let changes = Echo::tick(&host, &TickContext::default(), vec![unit]).unwrap();
    assert_eq!(changes[0].outcome, Outcome::Accepted("j1".into()));
    let sent = host.requests();
    assert_eq!(sent[0].header("authorization"), Some("Bearer test-key"));
}

#[test]
fn polls_until_done_and_claims_no_features() {
    let host = ScriptedHost::new()
        .with_config("base_url", "http://provider.test/")
        .with_secret("api_key", "test-key")
        .on_request("GET", "/jobs/j1", |_| {
            json_answer(
                200,
                &serde_json::json!({"id": "j1", "status": "done", "output": 7}),
            )
        })
        .on_request("GET", "/jobs/j2", |_| {
            json_answer(503, &serde_json::json!({}))
        });
    let unit = |id: &str, job: &str| Unit {
        id: id.into(),
        provider_job_id: Some(job.into()),
        ..Unit::default()
    };
    let batch = vec![unit("u1", "j1"), unit("u2", "j2")];
    let changes = Echo::tick(&host, &TickContext::default(), batch).unwrap_or_default();
    assert_eq!(changes[0].outcome, Outcome::Succeeded("7".into()));
    assert!(matches!(changes[1].outcome, Outcome::RetryAfter { .. }));
    assert_eq!(host.batches().len(), 1, "both polls in one round");
    assert_eq!(crate::features::<Echo>(), crate::Features::default());
    let refused = Echo::on_callback(&host, &[], b"{}");
    assert!(refused.is_err(), "no callbacks by default");
}

#[test]
fn a_handler_without_route_models_serves_no_routes() {
    assert!(Echo::route_models().is_empty());
    let shot = r#"{"prompt": "p", "duration": 5, "aspect_ratio": "16:9"}"#;
    let refused = Echo::plan_shot(&ScriptedHost::new(), "any", shot);
    assert!(
        refused.is_err_and(|e| e.field.is_none() && e.message.contains("serves no routes")),
        "plan_shot refuses by default"
    );
}
