//! Routed units (docs/routes.md): a unit waiting on its route is bound to a target in the
//! submit marker's transaction, once, whichever pool's grant comes first; a refusal sends it
//! back to the route with the route's name, pool and stage; binds and refusals are found among
//! the newest events by their prefix.

use slotd_core::model::{UnitStatus, route_pool};

use super::*;
use crate::{Bind, Field, Grant, UnitUpdate};

const ROUTE: &str = "clip";

fn routed_task(id: &str) -> NewTask {
    let mut t = task(id, "a", ROUTE, &route_pool(ROUTE), 2, 0);
    for u in &mut t.units {
        u.stage = "route".into();
        u.routing = Some(r#"{"route":"clip","options":[]}"#.into());
    }
    t
}

fn bind(pool: &str, detail: &str) -> Bind {
    Bind {
        route_pool: route_pool(ROUTE),
        pool: pool.into(),
        task_type: "video".into(),
        stage: "main".into(),
        spec: r#"{"model":"m"}"#.into(),
        state: r#"{"s":1}"#.into(),
        estimate: Some(2.5),
        routing: r#"{"route":"clip","options":[],"bound":0}"#.into(),
        detail: detail.into(),
    }
}

fn routed_grant(unit: &str, pool: &str) -> Grant {
    Grant {
        unit_id: unit.into(),
        tenant: "a".into(),
        account: None,
        estimate: 2.5,
        submission: "main-0".into(),
        budget_retry_at: T0,
        quota_pool: None,
        spend: None,
        bind: Some(bind(
            pool,
            &format!("route clip: bound to h/m in pool {pool}"),
        )),
    }
}

pub(crate) async fn routed_units_bind_once_and_go_back_to_their_route(store: DynStore) {
    create(&store, routed_task("t1")).await;
    let fill = store
        .unit_list_fill(&route_pool(ROUTE), &types(&[ROUTE]), T0, 10, &[])
        .await
        .unwrap();
    assert_eq!(fill.len(), 2, "routed units wait on the route's pool");
    // Two target pools granted the same unit: the first binds it, the second finds it gone.
    let first = store
        .unit_mark_granted(
            &[routed_grant("t1-u0", "kling:video")],
            T0 + 1,
            T0 + 9,
            None,
        )
        .await
        .unwrap();
    assert_eq!(first.units.len(), 1);
    let u = &first.units[0];
    assert_eq!(
        (
            u.status,
            u.pool.as_str(),
            u.task_type.as_str(),
            u.stage.as_str()
        ),
        (UnitStatus::Submitted, "kling:video", "video", "main")
    );
    assert_eq!(u.spec, r#"{"model":"m"}"#);
    assert_eq!(u.state, r#"{"s":1}"#);
    assert_eq!(u.terms.cost_estimate, Some(2.5));
    assert_eq!(
        u.routing.as_deref(),
        Some(r#"{"route":"clip","options":[],"bound":0}"#)
    );
    let second = store
        .unit_mark_granted(&[routed_grant("t1-u0", "fal:x")], T0 + 2, T0 + 9, None)
        .await
        .unwrap();
    assert!(second.units.is_empty(), "bound twice: {:?}", second.units);
    assert_eq!(unit(&store, "t1", 0).await.pool, "kling:video");
    // The target refused it: back to the route under its name, pool and stage.
    let back = UnitUpdate {
        unit_id: "t1-u0".into(),
        from: Some(UnitStatus::Submitted),
        from_stage: Some("main".into()),
        to: Some(UnitStatus::Pending),
        stage: Some("route".into()),
        pool: Some(route_pool(ROUTE)),
        task_type: Some(ROUTE.into()),
        routing: Some(r#"{"route":"clip","options":[]}"#.into()),
        submitted_at: Field::Clear,
        next_at: Some(T0 + 3),
        detail: Some("route clip: h/m refused it (capacity: full); back to the route".into()),
        ..UnitUpdate::default()
    };
    let report = store.unit_apply(&[back], T0 + 3, None).await.unwrap();
    assert_eq!(report.applied, ["t1-u0"]);
    let u = unit(&store, "t1", 0).await;
    assert_eq!(
        (
            u.status,
            u.pool.as_str(),
            u.task_type.as_str(),
            u.stage.as_str()
        ),
        (
            UnitStatus::Pending,
            route_pool(ROUTE).as_str(),
            ROUTE,
            "route"
        )
    );
    assert_eq!(
        u.routing.as_deref(),
        Some(r#"{"route":"clip","options":[]}"#)
    );
    let fill = store
        .unit_list_fill(&route_pool(ROUTE), &types(&[ROUTE]), T0 + 4, 10, &[])
        .await
        .unwrap();
    assert_eq!(fill.len(), 2, "back among the route's waiting units");
    // Both events are found by the route's prefix among the newest; another prefix is not.
    let recent = store
        .unit_events_recent_with("route clip: ", 100)
        .await
        .unwrap();
    let details: Vec<&str> = recent.iter().filter_map(|e| e.detail.as_deref()).collect();
    assert_eq!(
        details,
        [
            "route clip: bound to h/m in pool kling:video",
            "route clip: h/m refused it (capacity: full); back to the route"
        ]
    );
    // `_` in a prefix is a character, not a wildcard.
    assert!(
        store
            .unit_events_recent_with("route c_ip", 100)
            .await
            .unwrap()
            .is_empty()
    );
    // Only the newest events are read.
    assert!(
        store
            .unit_events_recent_with("route clip: ", 1)
            .await
            .unwrap()
            .len()
            <= 1
    );
}
