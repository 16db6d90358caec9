//! The `kling-video` handler: Kling text-to-video and image-to-video, one unit per shot on the
//! `kling:video` pool. The logic lives in `kling_common` (`video`, `flow`, `webhook`); this
//! component only binds it to the WIT world.
//!
//! Configuration (`[handlers.kling-video]`): `base_url`, `access_key`, the secret `secret_key`
//! (signs the JWT in the host), optionally the secret `webhook_secret`, `request_timeout_ms`
//! and `expected_duration_scale` (poll hints × this; 0.01 against a 100× simulator).

wit_bindgen::generate!({ path: "../../wit", world: "slotd-handler-core" });

#[path = "../../kling-common/src/guest_bridge.rs"]
mod wit_host;

use exports::slotd::handler::handler::Guest;
use kling_common::client::Client;
use kling_common::flow::{self, Job, Settings};
use kling_common::{video, webhook};
use slotd::handler::types::{
    Artifact, CallbackChange, Change, Finalized, HandlerInfo, PlanError, PlannedUnit, PoolInfo,
    StageInfo, TaskTypeInfo, TickContext, Unit,
};
use wit_host::WitHost;

struct KlingVideo;

export!(KlingVideo);

/// The version the `next` build declares.
const NEXT_VERSION: &str = "1.1.0";

impl Guest for KlingVideo {
    fn describe() -> HandlerInfo {
        HandlerInfo {
            name: video::HANDLER.into(),
            // The `next` build (crate `kling-video-next`) is the same handler under another
            // version, so reload tests can alternate two real versions against the simulator.
            version: if cfg!(feature = "next") {
                NEXT_VERSION.into()
            } else {
                video::VERSION.into()
            },
            task_types: vec![TaskTypeInfo {
                name: video::TASK_TYPE.into(),
                stages: vec![StageInfo {
                    name: video::STAGE.into(),
                    pool: video::POOL.into(),
                }],
            }],
            pools: vec![PoolInfo {
                name: video::POOL.into(),
                default_max_slots: video::DEFAULT_SLOTS,
            }],
        }
    }

    fn plan(task_type: String, payload: String) -> Result<Vec<PlannedUnit>, PlanError> {
        let specs = video::plan(&task_type, &payload).map_err(wit_host::plan_error)?;
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
        let hint_scale = wit_host::hint_scale(video::HANDLER)?;
        let mut client = Client::new(&host, video::HANDLER, ctx.now_ms)?;
        let units: Vec<_> = batch.iter().map(wit_host::unit).collect();
        let mut changes = Vec::with_capacity(batch.len());
        let mut jobs = Vec::with_capacity(batch.len());
        for (wit_unit, unit) in batch.iter().zip(&units) {
            match video::job_of(&unit.spec) {
                Ok((collection, body)) => jobs.push(Job {
                    unit,
                    collection,
                    expected_secs: video::expected_secs(&body),
                    body,
                    page_size_max: video::PAGE_SIZE_MAX,
                }),
                Err(why) => changes.push(wit_host::unusable(wit_unit, why)),
            }
        }
        let settings = Settings {
            now_ms: ctx.now_ms,
            callback_url: ctx.callback_url.as_deref(),
            hint_scale,
        };
        let done = flow::run(&mut client, &jobs, &settings, &|_, task| {
            video::success(task)
        });
        changes.extend(done.into_iter().map(wit_host::change));
        Ok(changes)
    }

    fn finalize(_ctx: TickContext, unit: Unit) -> Result<Finalized, String> {
        let url = video::artifact_url(unit.result.as_deref())
            .map_err(|e| format!("unit {}: {e}", unit.id))?;
        Ok(Finalized {
            artifacts: vec![Artifact {
                name: "video.mp4".into(),
                url,
                content_type: Some("video/mp4".into()),
            }],
            result: None,
        })
    }

    fn on_callback(
        headers: Vec<(String, String)>,
        body: Vec<u8>,
    ) -> Result<Vec<CallbackChange>, String> {
        let changes = webhook::changes(&WitHost, &headers, &body, &video::success)?;
        Ok(changes.into_iter().map(wit_host::callback_change).collect())
    }
}
