//! Binding a routed unit to one of its route's targets (docs/routes.md), in the submit
//! marker's transaction: the unit leaves its route's pool for the target's pool, task type,
//! first stage, spec and state, with the target's cost estimate, only while it is still
//! `pending` on the route. A second scheduler that granted the same unit in another target's
//! pool finds nothing to bind and nothing to mark, and gives its slot back.

use crate::StoreResult;
use crate::shared::on_both_drivers;

/// What binding a granted routed unit writes.
#[derive(Clone, Debug, PartialEq)]
pub struct Bind {
    /// The route's pool the unit waits in (`route:NAME`): the guard.
    pub route_pool: String,
    pub pool: String,
    pub task_type: String,
    pub stage: String,
    pub spec: String,
    pub state: String,
    pub estimate: Option<f64>,
    /// The unit's routing with the chosen option bound (JSON `UnitRouting`).
    pub routing: String,
    /// The event row's text ("route clip: bound to kling-video/kling-v1-6 in pool …").
    pub detail: String,
}

on_both_drivers! {
    /// Bind the units of `grants` (by index `fit`) that carry a [`Bind`], each with an event
    /// row; the ids bound.
    pub(crate) async fn bind_routed(
        conn: &mut Conn,
        grants: &[crate::Grant],
        fit: &[usize],
        now: i64,
    ) -> StoreResult<Vec<String>> {
        let mut bound = Vec::new();
        for g in fit.iter().filter_map(|&i| grants.get(i)) {
            let Some(b) = &g.bind else { continue };
            sqlx::query(
                "INSERT INTO unit_events \
                     (unit_id, task_id, at, from_status, to_status, stage, detail) \
                 SELECT id, task_id, $2, 'pending', 'pending', $3, $4 FROM units \
                 WHERE id = $1 AND status = 'pending' AND pool = $5",
            )
            .bind(&g.unit_id)
            .bind(now)
            .bind(&b.stage)
            .bind(&b.detail)
            .bind(&b.route_pool)
            .execute(&mut *conn)
            .await?;
            let done = sqlx::query(
                "UPDATE units SET pool = $2, task_type = $3, stage = $4, spec = $5, \
                     state = $6, cost_estimate = $7, routing = $8, updated_at = $9 \
                 WHERE id = $1 AND status = 'pending' AND pool = $10",
            )
            .bind(&g.unit_id)
            .bind(&b.pool)
            .bind(&b.task_type)
            .bind(&b.stage)
            .bind(&b.spec)
            .bind(&b.state)
            .bind(b.estimate)
            .bind(&b.routing)
            .bind(now)
            .bind(&b.route_pool)
            .execute(&mut *conn)
            .await?;
            if done.rows_affected() > 0 {
                bound.push(g.unit_id.clone());
            }
        }
        Ok(bound)
    }
}
