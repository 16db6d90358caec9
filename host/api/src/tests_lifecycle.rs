//! The task lifecycle through the API: create (idempotent, refused plans), cancel and retry,
//! with their effects on the store and the slots checked directly.

use super::*;

#[tokio::test]
async fn cancel_keeps_the_slots_of_submitted_units() {
    let h = harness().await;
    let id = h.seed("a", 3).await;
    let units = h.unit_ids(&id).await;
    let submitted = vec![units[0].clone()];
    match h
        .store
        .unit_mark_submitted(&submitted, 1_000_001, 1_000_001, None)
        .await
    {
        Ok(moved) => assert_eq!(moved.len(), 1),
        Err(e) => panic!("marking submitted: {e}"),
    }
    // The slot is named by its submission, as a tick's grant names it.
    let held = vec![slotd_coord::slots::holder(&units[0], 1_000_001)];
    match h.slots.acquire(FIXTURE_POOL, &held, 3).await {
        Ok(granted) => assert_eq!(granted, held),
        Err(e) => panic!("acquiring: {e}"),
    }

    for _ in 0..2 {
        let r = h
            .send("POST", &format!("/v1/tasks/{id}/cancel"), Some(KEY_A), None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{}", r.json);
        assert_eq!(r.json["status"], "running", "{}", r.json);
        assert_eq!(r.json["cancel_requested"], true);
        assert_eq!(
            r.json["message"],
            "cancelling: 1 unit waiting for its provider job to end, 0/3 completed, 2 cancelled"
        );
        assert_eq!(r.json["results"][0]["status"], "submitted");
        assert_eq!(h.slots.used(FIXTURE_POOL).await.ok(), Some(1));
    }

    let r = h
        .send("GET", &format!("/v1/tasks/{id}/events"), Some(KEY_A), None)
        .await;
    let events = r.json["events"].as_array().cloned().unwrap_or_default();
    let cancelled = events
        .iter()
        .filter(|e| e["to_status"] == "cancelled")
        .count();
    let requested = events
        .iter()
        .filter(|e| e["detail"] == slotd_store::CANCEL_WAIT_DETAIL)
        .count();
    assert_eq!((cancelled, requested), (2, 1), "{}", r.json);
    h.send("POST", "/v1/tasks/nope/cancel", Some(KEY_A), None)
        .await
        .problem(404);
}

#[tokio::test]
async fn retry_moves_failed_units_back() {
    let h = harness().await;
    let id = h.seed("a", 2).await;
    let units = h.unit_ids(&id).await;
    let fail = UnitUpdate {
        error: Field::Set(r#"{"code":"1201","message":"bad prompt"}"#.into()),
        ..Default::default()
    };
    h.drive(&units[1], UnitStatus::Failed, fail).await;
    h.drive(&units[0], UnitStatus::Completed, UnitUpdate::default())
        .await;
    let r = h
        .send("GET", &format!("/v1/tasks/{id}"), Some(KEY_A), None)
        .await;
    assert_eq!(r.json["status"], "failed");
    assert_eq!(r.json["error"]["code"], "1201");
    assert_eq!(r.json["results"][1]["error"]["message"], "bad prompt");

    let woken = h
        .wake
        .listener(slotd_coord::wake::WakeKey::Pool(FIXTURE_POOL));
    let r = h
        .send("POST", &format!("/v1/tasks/{id}/retry"), Some(KEY_A), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    assert_eq!(r.json, json!({ "task_id": id, "retried": 1 }));
    let wait = tokio::time::timeout(std::time::Duration::from_secs(5), woken.notified()).await;
    assert!(wait.is_ok(), "retry must wake the pool");
    let r = h
        .send("GET", &format!("/v1/tasks/{id}"), Some(KEY_A), None)
        .await;
    assert_eq!(r.json["status"], "running");
    assert_eq!(r.json["error"], Value::Null);

    let r = h
        .send("POST", &format!("/v1/tasks/{id}/retry"), Some(KEY_A), None)
        .await;
    assert_eq!(r.json["retried"], 0);
}

#[tokio::test]
async fn create_is_202_and_idempotent() {
    let h = harness().await;
    let woken = h
        .wake
        .listener(slotd_coord::wake::WakeKey::Pool(FIXTURE_POOL));
    let body = r#"{"payload": {"count": 3, "behavior": "succeed"}, "idempotency_key": "k1",
                   "priority": 5}"#;
    let first = h
        .send("POST", "/v1/tasks/fixture", Some(KEY_A), Some(body))
        .await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.json);
    assert_eq!(first.json["status"], "pending");
    let id = first.json["task_id"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(uuid::Uuid::parse_str(&id).is_ok_and(|u| u.get_version_num() == 7));
    let wait = tokio::time::timeout(std::time::Duration::from_secs(5), woken.notified()).await;
    assert!(wait.is_ok(), "creating a task must wake its pool");

    let again = h
        .send("POST", "/v1/tasks/fixture", Some(KEY_A), Some(body))
        .await;
    assert_eq!(again.status, StatusCode::ACCEPTED);
    assert_eq!(again.json["task_id"], id.as_str(), "same key, same task");
    // Another tenant's identical key is a different task.
    let other = h
        .send("POST", "/v1/tasks/fixture", Some(KEY_B), Some(body))
        .await;
    assert_eq!(other.status, StatusCode::ACCEPTED);
    assert_ne!(other.json["task_id"], id.as_str());
    assert_eq!(h.task_count("a").await, 1);

    let units = h.unit_ids(&id).await;
    assert_eq!(units.len(), 3);
    let r = h
        .send(
            "GET",
            &format!("/v1/tasks/{id}?units=true"),
            Some(KEY_A),
            None,
        )
        .await;
    assert_eq!(r.json["units"][0]["pool"], FIXTURE_POOL);
    assert_eq!(r.json["units"][0]["priority"], 5);
    // A repeated key answers where the task is now.
    assert_eq!(again.json["status"], "pending");
    let cancel = h
        .send("POST", &format!("/v1/tasks/{id}/cancel"), Some(KEY_A), None)
        .await;
    assert_eq!(cancel.status, StatusCode::OK, "{}", cancel.json);
    let after = h
        .send("POST", "/v1/tasks/fixture", Some(KEY_A), Some(body))
        .await;
    assert_eq!(
        (
            after.json["task_id"].as_str(),
            after.json["status"].as_str()
        ),
        (Some(id.as_str()), Some("cancelled"))
    );
}

#[tokio::test]
async fn plan_rejection_is_422_and_stores_nothing() {
    let h = harness().await;
    let r = h
        .send(
            "POST",
            "/v1/tasks/fixture",
            Some(KEY_A),
            Some(r#"{"payload": {"count": 1, "reject": "count must be even"}}"#),
        )
        .await;
    let body = r.problem(422);
    assert_eq!(body["detail"], "count must be even");
    assert_eq!(h.task_count("a").await, 0);

    // Zero units: the fixture refuses `count: 0` itself; either way nothing is stored.
    let zero = h
        .send(
            "POST",
            "/v1/tasks/fixture",
            Some(KEY_A),
            Some(r#"{"payload": {"count": 0}}"#),
        )
        .await;
    zero.problem(422);
    assert_eq!(h.task_count("a").await, 0);

    // More units than `max_units_per_task`: refused by the API after `plan`.
    let capped = harness_with(Config {
        max_units_per_task: 2,
        ..Config::default()
    })
    .await;
    let too_many = capped
        .send(
            "POST",
            "/v1/tasks/fixture",
            None,
            Some(r#"{"payload": {"count": 3}}"#),
        )
        .await;
    let body = too_many.problem(422);
    assert!(
        body["detail"].as_str().unwrap_or("").contains("at most 2"),
        "{body}"
    );
    assert_eq!(capped.task_count(crate::LOCAL_TENANT).await, 0);
    assert_eq!(h.task_count("a").await, 0);
}

/// A cancel that ends units wakes the completion-webhook loop at once (their task may have
/// ended with them): before the lifecycle's follow-ups did, the webhook waited for the loop's
/// interval.
#[tokio::test]
async fn a_cancel_that_ends_units_wakes_the_completion_webhooks() {
    let h = harness().await;
    let id = h.seed("a", 2).await;
    let woken = h.wake.listener(slotd_coord::wake::WakeKey::Webhooks);
    let r = h
        .send("POST", &format!("/v1/tasks/{id}/cancel"), Some(KEY_A), None)
        .await;
    assert_eq!(r.status, StatusCode::OK, "{}", r.json);
    let wait = tokio::time::timeout(std::time::Duration::from_secs(5), woken.notified()).await;
    assert!(
        wait.is_ok(),
        "a cancel that ended units must wake the completion webhooks"
    );
}

/// The follow-ups of changes applied through the lifecycle: a unit that failed wakes the
/// completion webhooks; a unit made due now (a provider callback's "read it now") wakes its
/// pool. Both used to be the callers' to remember.
#[tokio::test]
async fn applied_changes_wake_the_completion_webhooks_and_the_pool_of_a_unit_due_now() {
    let h = harness().await;
    let id = h.seed("a", 2).await;
    let units = h.unit_ids(&id).await;
    match h
        .store
        .unit_mark_submitted(&units, 1_000_001, 1_000_001, None)
        .await
    {
        Ok(moved) => assert_eq!(moved.len(), 2),
        Err(e) => panic!("marking submitted: {e}"),
    }
    let origin = slotd_units::lifecycle::Origin {
        task_id: &id,
        pool: FIXTURE_POOL,
        account: None,
        submitted_at: Some(1_000_001),
    };
    let origins = units.iter().map(|u| (u.as_str(), origin)).collect();
    let now = 1_000_002;
    let apply = async |update: UnitUpdate| match slotd_units::lifecycle::apply_changes(
        &h.services,
        &[update],
        &origins,
        now,
        None,
    )
    .await
    {
        Ok(c) => assert_eq!(c.applied, 1, "{c:?}"),
        Err(e) => panic!("applying: {e}"),
    };
    let wait = async |n: std::sync::Arc<tokio::sync::Notify>| {
        tokio::time::timeout(std::time::Duration::from_secs(5), n.notified())
            .await
            .is_ok()
    };

    let pool = h
        .wake
        .listener(slotd_coord::wake::WakeKey::Pool(FIXTURE_POOL));
    apply(UnitUpdate {
        unit_id: units[0].clone(),
        from: Some(UnitStatus::Submitted),
        to: Some(UnitStatus::Submitted),
        next_at: Some(now),
        ..Default::default()
    })
    .await;
    assert!(wait(pool).await, "a unit made due now must wake its pool");

    let webhooks = h.wake.listener(slotd_coord::wake::WakeKey::Webhooks);
    apply(UnitUpdate {
        unit_id: units[1].clone(),
        from: Some(UnitStatus::Submitted),
        to: Some(UnitStatus::Failed),
        error: Field::Set(r#"{"code":"1201","message":"bad prompt"}"#.into()),
        ..Default::default()
    })
    .await;
    assert!(
        wait(webhooks).await,
        "a unit that failed must wake the completion webhooks"
    );
}
