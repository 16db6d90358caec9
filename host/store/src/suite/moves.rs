//! The state machine enforced where rows are written (docs/state-machine.md): `unit_apply` refuses and
//! counts an update whose move is illegal, whoever built it, and writes the rest of its batch;
//! the database's own trigger refuses an illegal status change from any writer, and its table
//! of legal moves equals the model's.

use super::fixtures::{POOL, T0, VIDEO, create, task, unit, update};
use crate::{DynStore, UnitUpdate};
use slotd_core::model::UnitStatus;

pub(crate) async fn illegal_moves_are_refused(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 3, 0)).await;
    let unguarded = UnitUpdate {
        unit_id: "t1-u2".into(),
        to: Some(UnitStatus::Succeeded),
        ..UnitUpdate::default()
    };
    let batch = [
        update("t1-u0", UnitStatus::Pending, UnitStatus::Completed),
        update("t1-u1", UnitStatus::Pending, UnitStatus::Cancelled),
        unguarded,
    ];
    let report = store.unit_apply(&batch, T0 + 1, None).await.unwrap();
    assert_eq!(
        report.applied,
        ["t1-u1"],
        "the legal move of the batch is written"
    );
    let refused: Vec<&str> = report.refused.iter().map(|r| r.unit_id.as_str()).collect();
    assert_eq!(refused, ["t1-u0", "t1-u2"]);
    assert!(
        report.refused[0].reason.contains("pending -> completed"),
        "{:?}",
        report.refused[0]
    );
    assert!(report.refused[1].reason.contains("without a `from` guard"));
    assert_eq!(unit(&store, "t1", 0).await.status, UnitStatus::Pending);
    assert_eq!(unit(&store, "t1", 2).await.status, UnitStatus::Pending);
    // No event row for what was refused.
    let events = store.unit_events("t1").await.unwrap();
    assert!(
        events
            .iter()
            .all(|e| e.unit_id == "t1-u1" || e.from_status.is_none()),
        "{events:?}"
    );
}

/// The database's table of legal moves (`unit_moves`, as `(from, to)` rows) is exactly the
/// model's `can_move_to` without the same-status writes, which are not moves.
pub(crate) fn assert_moves_match_the_model(rows: &[(String, String)]) {
    let mut table: Vec<(String, String)> = rows.to_vec();
    table.sort();
    let mut model = Vec::new();
    for from in UnitStatus::ALL {
        for to in UnitStatus::ALL {
            if from != to && from.can_move_to(to) {
                model.push((from.as_str().to_string(), to.as_str().to_string()));
            }
        }
    }
    model.sort();
    assert_eq!(
        table, model,
        "unit_moves differs from UnitStatus::can_move_to"
    );
}

/// A submitted unit's `wait_reason` is written and cleared through `unit_apply` (contract 1.4
/// `observe.queued`: the provider holds its job in its own queue), and counted per pool and
/// account; a plain poll leaves it alone.
pub(crate) async fn provider_queue_is_written_and_counted(store: DynStore) {
    create(&store, task("t1", "acme", VIDEO, POOL, 3, 0)).await;
    super::submit(&store, &["t1-u0", "t1-u1", "t1-u2"], T0).await;
    let wait = |id: &str, reason: crate::Field<String>| UnitUpdate {
        wait_reason: reason,
        polls: Some(1),
        ..update(id, UnitStatus::Submitted, UnitStatus::Submitted)
    };
    let report = store
        .unit_apply(
            &[
                wait("t1-u0", crate::Field::Set("provider_queue 2".into())),
                wait("t1-u1", crate::Field::Set("provider_queue".into())),
                wait("t1-u2", crate::Field::Keep),
            ],
            T0 + 1,
            None,
        )
        .await
        .expect("apply");
    assert_eq!(report.applied.len(), 3);
    let reason = async |i| unit(&store, "t1", i).await.terms.wait_reason;
    assert_eq!(reason(0).await.as_deref(), Some("provider_queue 2"));
    assert_eq!(reason(1).await.as_deref(), Some("provider_queue"));
    assert_eq!(reason(2).await, None);
    let count = |account: Option<&'static str>| store.unit_count_provider_queued(POOL, account);
    assert_eq!(count(None).await.expect("count"), 2);
    assert_eq!(count(Some("other")).await.expect("count"), 0);
    assert_eq!(
        store
            .unit_count_provider_queued("elsewhere", None)
            .await
            .expect("count"),
        0
    );
    store
        .unit_apply(&[wait("t1-u0", crate::Field::Clear)], T0 + 2, None)
        .await
        .expect("apply");
    assert_eq!(reason(0).await, None);
    assert_eq!(count(None).await.expect("count"), 1);
}

/// The statuses a unit passes through, by legal moves from `pending`, to reach `status`.
fn path_to(status: UnitStatus) -> &'static [UnitStatus] {
    use UnitStatus::*;
    match status {
        Pending => &[],
        Submitted => &[Submitted],
        Succeeded => &[Submitted, Succeeded],
        Finalizing => &[Submitted, Succeeded, Finalizing],
        Completed => &[Submitted, Succeeded, Finalizing, Completed],
        Failed => &[Failed],
        Cancelled => &[Cancelled],
    }
}

/// Every pair of distinct statuses through the database alone (`update` runs one hand-written
/// statement, past every guard of the store, `Ok` when the database took it): for each pair a
/// unit of `task_id` (one per pair, in order, `{task_id}-u{n}`, all `pending`) is walked to
/// `from` by legal moves, then asked to move to `to`. The database must take exactly the
/// model's moves and refuse every other one, naming it an illegal transition.
pub(crate) async fn every_pair_is_held_to_the_model<F, Fut>(task_id: &str, update: F)
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let mut n = 0;
    for from in UnitStatus::ALL {
        for to in UnitStatus::ALL.into_iter().filter(|t| *t != from) {
            let id = format!("{task_id}-u{n}");
            n += 1;
            let set = |s: UnitStatus| {
                format!(
                    "UPDATE units SET status = '{}' WHERE id = '{id}'",
                    s.as_str()
                )
            };
            for step in path_to(from) {
                if let Err(e) = update(set(*step)).await {
                    panic!("walking {id} to {from:?}: {step:?} refused: {e}");
                }
            }
            match (from.can_move_to(to), update(set(to)).await) {
                (true, Ok(())) => {}
                (false, Err(e)) => assert!(
                    e.contains("illegal unit transition"),
                    "{from:?} -> {to:?} refused for another reason: {e}"
                ),
                (true, Err(e)) => panic!("the legal move {from:?} -> {to:?} was refused: {e}"),
                (false, Ok(())) => panic!("the illegal move {from:?} -> {to:?} was taken"),
            }
        }
    }
}

/// How many units [`every_pair_is_held_to_the_model`] needs.
pub(crate) const PAIRS: usize = UnitStatus::ALL.len() * (UnitStatus::ALL.len() - 1);
