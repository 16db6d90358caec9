//! The `kling-avatar` handler: an avatar clone is one unit in two stages on the `kling:avatar`
//! pool — a custom voice, then an advanced custom element speaking with it (the voice id is
//! carried in the unit state). The logic lives in `kling_common` (`avatar`, `flow`,
//! `webhook`); this component only binds it to the WIT world.
//!
//! Configuration (`[handlers.kling-avatar]`): as for `kling-video` (`base_url`, `access_key`,
//! secrets `secret_key` and optionally `webhook_secret`, `request_timeout_ms`,
//! `expected_duration_scale`).

wit_bindgen::generate!({ path: "../../wit", world: "slotd-handler-core" });

#[path = "../../kling-common/src/guest_bridge.rs"]
mod wit_host;

use exports::slotd::handler::handler::Guest;
use kling_common::avatar;
use kling_common::client::Client;
use kling_common::flow::{self, Job, Settings};
use kling_common::webhook;
use slotd::handler::types::{
    CallbackChange, Change, Finalized, HandlerInfo, PlanError, PlannedUnit, PoolInfo, StageInfo,
    TaskTypeInfo, TickContext, Unit,
};
use wit_host::WitHost;

struct KlingAvatar;

export!(KlingAvatar);

impl Guest for KlingAvatar {
    fn describe() -> HandlerInfo {
        let stage = |name: &str| StageInfo {
            name: name.into(),
            pool: avatar::POOL.into(),
        };
        HandlerInfo {
            name: avatar::HANDLER.into(),
            version: avatar::VERSION.into(),
            task_types: vec![TaskTypeInfo {
                name: avatar::TASK_TYPE.into(),
                stages: vec![stage(avatar::STAGE_VOICE), stage(avatar::STAGE_ELEMENT)],
            }],
            pools: vec![PoolInfo {
                name: avatar::POOL.into(),
                default_max_slots: avatar::DEFAULT_SLOTS,
            }],
        }
    }

    fn plan(task_type: String, payload: String) -> Result<Vec<PlannedUnit>, PlanError> {
        let specs = avatar::plan(&task_type, &payload).map_err(wit_host::plan_error)?;
        Ok(specs
            .into_iter()
            .map(|spec| PlannedUnit {
                spec,
                state: "{}".into(),
            })
            .collect())
    }

    fn tick(ctx: TickContext, batch: Vec<Unit>) -> Result<Vec<Change>, String> {
        let host = WitHost;
        let hint_scale = wit_host::hint_scale(avatar::HANDLER)?;
        let mut client = Client::new(&host, avatar::HANDLER, ctx.now_ms)?;
        let units: Vec<_> = batch.iter().map(wit_host::unit).collect();
        let mut changes = Vec::with_capacity(batch.len());
        let mut jobs = Vec::with_capacity(batch.len());
        for (wit_unit, unit) in batch.iter().zip(&units) {
            match avatar::job_of(&unit.stage, &unit.spec, &unit.state) {
                Ok((collection, body)) => jobs.push(Job {
                    unit,
                    collection,
                    body,
                    expected_secs: avatar::expected_secs(&unit.stage),
                    page_size_max: avatar::page_size_max(collection),
                }),
                Err(why) => changes.push(wit_host::unusable(wit_unit, why)),
            }
        }
        let settings = Settings {
            now_ms: ctx.now_ms,
            callback_url: ctx.callback_url.as_deref(),
            hint_scale,
        };
        let done = flow::run(&mut client, &jobs, &settings, &|unit, task| {
            avatar::success(task, Some(&unit.state))
        });
        changes.extend(done.into_iter().map(wit_host::change));
        Ok(changes)
    }

    fn finalize(_ctx: TickContext, unit: Unit) -> Result<Finalized, String> {
        let result = avatar::finalized_result(unit.result.as_deref())
            .map_err(|e| format!("unit {}: {e}", unit.id))?;
        Ok(Finalized {
            artifacts: Vec::new(),
            result: Some(result),
        })
    }

    fn on_callback(
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Result<Vec<CallbackChange>, String> {
        let changes = webhook::changes(&WitHost, &headers, &body, &|task| {
            avatar::success(task, None)
        })?;
        Ok(changes.into_iter().map(wit_host::callback_change).collect())
    }
}
