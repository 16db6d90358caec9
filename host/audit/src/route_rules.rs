//! `slotd check`'s rule for routes (docs/routes.md): no unit has accepted provider jobs at two
//! targets. A routed unit's events name each binding (`route R: bound to H/M in pool P`,
//! written with the submit marker) and each accepted job (`accepted as provider job J`); a
//! unit whose jobs were accepted under two bindings was sent to a second provider while the
//! first had its job: billed twice.

use std::collections::BTreeMap;

use super::history::ACCEPTED_PREFIX;
use super::rows::{Finding, Snapshot};

/// The event detail of a binding: `route R: bound to TARGET in pool P`.
const BOUND: &str = ": bound to ";

/// Units with accepted jobs at more than one route target.
pub fn two_providers(snap: &Snapshot) -> Vec<Finding> {
    let mut out = Vec::new();
    for unit in &snap.units {
        let events = snap.events.get(&unit.id).map(Vec::as_slice).unwrap_or(&[]);
        let mut target: Option<&str> = None;
        let mut jobs: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for e in events {
            let Some(detail) = e.detail.as_deref() else {
                continue;
            };
            if detail.starts_with("route ")
                && let Some((_, rest)) = detail.split_once(BOUND)
            {
                target = rest.split(" in pool ").next();
            } else if let (Some(t), Some(rest)) = (target, detail.strip_prefix(ACCEPTED_PREFIX))
                && let Some(job) = rest.split_whitespace().next()
            {
                let list = jobs.entry(t).or_default();
                if !list.contains(&job) {
                    list.push(job);
                }
            }
        }
        if jobs.len() > 1 {
            let named: Vec<String> = jobs
                .iter()
                .map(|(t, js)| format!("{t} ({})", js.join(", ")))
                .collect();
            out.push(Finding {
                kind: "two providers",
                task_id: Some(unit.task_id.clone()),
                unit_id: Some(unit.id.clone()),
                message: format!(
                    "the unit has accepted jobs at {} route targets: {}",
                    jobs.len(),
                    named.join("; ")
                ),
            });
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EventRow, UnitRow};

    fn ev(id: i64, from: &str, to: &str, detail: &str) -> EventRow {
        EventRow {
            id,
            at: id,
            from_status: Some(from.into()),
            to_status: to.into(),
            detail: Some(detail.into()),
        }
    }

    fn snap(events: Vec<EventRow>) -> Snapshot {
        let mut s = Snapshot::default();
        s.units.push(UnitRow {
            id: "u1".into(),
            task_id: "t1".into(),
            status: "submitted".into(),
            ..UnitRow::default()
        });
        s.events.insert("u1".into(), events);
        s
    }

    #[test]
    fn a_failover_before_acceptance_is_clean_and_a_second_accepted_job_is_found() {
        let bound = |id, t: &str| {
            ev(
                id,
                "pending",
                "pending",
                &format!("route clip: bound to {t} in pool p"),
            )
        };
        let clean = snap(vec![
            bound(1, "kling-video/kling-v1-6"),
            ev(
                2,
                "submitted",
                "pending",
                "route clip: kling-video/kling-v1-6 refused it (capacity: x); back to the route",
            ),
            bound(3, "fal-video/pika"),
            ev(4, "submitted", "submitted", "accepted as provider job f1"),
            ev(
                5,
                "submitted",
                "submitted",
                "accepted as provider job f1 (callback)",
            ),
        ]);
        assert!(two_providers(&clean).is_empty());
        let twice = snap(vec![
            bound(1, "kling-video/kling-v1-6"),
            ev(2, "submitted", "submitted", "accepted as provider job k1"),
            bound(3, "fal-video/pika"),
            ev(4, "submitted", "submitted", "accepted as provider job f1"),
        ]);
        let found = two_providers(&twice);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, "two providers");
        assert!(
            found[0].message.contains("kling-video/kling-v1-6 (k1)"),
            "{}",
            found[0]
        );
        assert!(
            found[0].message.contains("fal-video/pika (f1)"),
            "{}",
            found[0]
        );
    }
}
