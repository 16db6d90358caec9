//! Binding a routed unit to one of its route's targets (docs/routes.md), in the submit
//! marker's transaction: the unit leaves its route's pool for the target's pool, task type,
//! first stage, spec and state, with the target's cost estimate, only while it is still
//! `pending` on the route. A second scheduler that granted the same unit in another target's
//! pool finds nothing to bind and nothing to mark, and gives its slot back.

use super::grant::Bind;
use crate::StoreResult;

/// The binds of `grants` at `fit`, in order.
fn binds<'a>(grants: &'a [crate::Grant], fit: &[usize]) -> Vec<(&'a str, &'a Bind)> {
    fit.iter()
        .filter_map(|&i| grants.get(i))
        .filter_map(|g| Some((g.unit_id.as_str(), g.bind.as_ref()?)))
        .collect()
}

/// Bind the units of `grants` (by index `fit`) that carry a [`Bind`], each with an event row,
/// in two statements whatever their number; the ids bound. SQLite: the binds travel as one
/// JSON array.
pub(crate) mod sqlite {
    use super::*;

    pub(crate) async fn bind_routed(
        conn: &mut sqlx::SqliteConnection,
        grants: &[crate::Grant],
        fit: &[usize],
        now: i64,
    ) -> StoreResult<Vec<String>> {
        let binds = binds(grants, fit);
        if binds.is_empty() {
            return Ok(Vec::new());
        }
        let rows: Vec<serde_json::Value> = binds
            .iter()
            .map(|(id, b)| {
                serde_json::json!({
                    "id": id, "route_pool": b.route_pool, "pool": b.pool,
                    "task_type": b.task_type, "stage": b.stage, "spec": b.spec,
                    "state": b.state, "estimate": b.estimate, "routing": b.routing,
                    "detail": b.detail,
                })
            })
            .collect();
        let json = serde_json::to_string(&rows)
            .map_err(|e| crate::StoreError::Other(format!("encoding route binds: {e}")))?;
        sqlx::query(
            "INSERT INTO unit_events (unit_id, task_id, at, from_status, to_status, stage, detail) \
             SELECT u.id, u.task_id, ?2, 'pending', 'pending', b.value ->> '$.stage', \
                 b.value ->> '$.detail' \
             FROM json_each(?1) AS b JOIN units AS u ON u.id = b.value ->> '$.id' \
             WHERE u.status = 'pending' AND u.pool = b.value ->> '$.route_pool' \
             ORDER BY b.key",
        )
        .bind(&json)
        .bind(now)
        .execute(&mut *conn)
        .await?;
        Ok(sqlx::query_scalar(
            "WITH b AS MATERIALIZED (SELECT value ->> '$.id' AS id, \
                 value ->> '$.route_pool' AS route_pool, value ->> '$.pool' AS pool, \
                 value ->> '$.task_type' AS task_type, value ->> '$.stage' AS stage, \
                 value ->> '$.spec' AS spec, value ->> '$.state' AS state, \
                 value ->> '$.estimate' AS estimate, value ->> '$.routing' AS routing \
                 FROM json_each(?1)) \
             UPDATE units SET pool = b.pool, task_type = b.task_type, stage = b.stage, \
                 spec = b.spec, state = b.state, cost_estimate = b.estimate, \
                 routing = b.routing, updated_at = ?2 \
             FROM b WHERE units.id = b.id AND units.status = 'pending' \
                 AND units.pool = b.route_pool \
             RETURNING units.id",
        )
        .bind(&json)
        .bind(now)
        .fetch_all(&mut *conn)
        .await?)
    }
}

/// PostgreSQL: the binds travel as parallel arrays; the event rows read the units as they were
/// before the update (one snapshot for the whole statement).
pub(crate) mod postgres {
    use super::*;

    pub(crate) async fn bind_routed(
        conn: &mut sqlx::PgConnection,
        grants: &[crate::Grant],
        fit: &[usize],
        now: i64,
    ) -> StoreResult<Vec<String>> {
        let binds = binds(grants, fit);
        if binds.is_empty() {
            return Ok(Vec::new());
        }
        let col = |f: fn(&Bind) -> &str| -> Vec<&str> { binds.iter().map(|(_, b)| f(b)).collect() };
        Ok(sqlx::query_scalar(
            "WITH b AS ( \
                 SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], \
                     $5::text[], $6::text[], $7::text[], $8::float8[], $9::text[], \
                     $10::text[]) WITH ORDINALITY \
                 AS b (id, route_pool, pool, task_type, stage, spec, state, estimate, \
                     routing, detail, ord) \
             ), ev AS ( \
                 INSERT INTO unit_events \
                     (unit_id, task_id, at, from_status, to_status, stage, detail) \
                 SELECT u.id, u.task_id, $11, 'pending', 'pending', b.stage, b.detail \
                 FROM b JOIN units AS u ON u.id = b.id \
                 WHERE u.status = 'pending' AND u.pool = b.route_pool ORDER BY b.ord \
             ) \
             UPDATE units SET pool = b.pool, task_type = b.task_type, stage = b.stage, \
                 spec = b.spec, state = b.state, cost_estimate = b.estimate, \
                 routing = b.routing, updated_at = $11 \
             FROM b WHERE units.id = b.id AND units.status = 'pending' \
                 AND units.pool = b.route_pool \
             RETURNING units.id",
        )
        .bind(binds.iter().map(|(id, _)| *id).collect::<Vec<&str>>())
        .bind(col(|b| &b.route_pool))
        .bind(col(|b| &b.pool))
        .bind(col(|b| &b.task_type))
        .bind(col(|b| &b.stage))
        .bind(col(|b| &b.spec))
        .bind(col(|b| &b.state))
        .bind(
            binds
                .iter()
                .map(|(_, b)| b.estimate)
                .collect::<Vec<Option<f64>>>(),
        )
        .bind(col(|b| &b.routing))
        .bind(col(|b| &b.detail))
        .bind(now)
        .fetch_all(&mut *conn)
        .await?)
    }
}
