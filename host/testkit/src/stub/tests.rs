//! The stub's capacity, duplicate-key and slot-release rules, over real HTTP.

use serde_json::{Value, json};

use super::{FILE_BYTES, StubOptions, StubProvider, StubStats, file_bytes};

async fn create(client: &reqwest::Client, base: &str, key: &str, polls: u32) -> (u16, Value) {
    let resp = client
        .post(format!("{base}/jobs"))
        .json(&json!({"key": key, "polls": polls, "outcome": "succeed"}))
        .send()
        .await
        .expect("stub answers creates");
    let status = resp.status().as_u16();
    (status, resp.json().await.expect("create answers JSON"))
}

async fn get(client: &reqwest::Client, url: String) -> (u16, Value) {
    let resp = client.get(url).send().await.expect("stub answers");
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn capacity_duplicates_and_slot_release() {
    let stub = StubProvider::start(StubOptions { limit: 2 })
        .await
        .expect("stub starts");
    let base = stub.base_url().to_string();
    let client = reqwest::Client::new();

    let (s1, a) = create(&client, &base, "k1", 1).await;
    let (s2, _) = create(&client, &base, "k2", 0).await;
    assert_eq!((s1, s2), (200, 200));
    // Over the limit: refused, not created.
    let (s3, _) = create(&client, &base, "k3", 0).await;
    assert_eq!(s3, 429);
    // Same key again: the existing id, not a new job.
    let (s4, dup) = create(&client, &base, "k1", 1).await;
    assert_eq!(s4, 409);
    assert_eq!(dup["id"], a["id"]);
    // Refused, but counted: a double submission attempt must show in the stats.
    let stats = stub.stats();
    assert_eq!((stats.creates, stats.duplicate_creates), (2, 1));
    assert_eq!(stats.creates_by_key.get("k1"), Some(&2));

    let id = a["id"].as_str().expect("create returns an id").to_string();
    // polls = 1: one `running`, then the poll that ends it and frees the slot.
    let (_, p1) = get(&client, format!("{base}/jobs/{id}")).await;
    assert_eq!(p1["status"], "running");
    assert_eq!(stub.stats().in_flight, 2);
    let (_, p2) = get(&client, format!("{base}/jobs/{id}")).await;
    assert_eq!(p2["status"], "succeeded");
    assert_eq!(stub.stats().in_flight, 1);
    let url = p2["url"]
        .as_str()
        .expect("succeeded job has a url")
        .to_string();

    let (s5, _) = create(&client, &base, "k3", 0).await;
    assert_eq!(s5, 200, "a freed slot takes a new job");

    let (found, by_key) = get(&client, format!("{base}/jobs/by-key/k1")).await;
    assert_eq!((found, by_key["id"].clone()), (200, a["id"].clone()));
    let (missing, _) = get(&client, format!("{base}/jobs/by-key/nope")).await;
    assert_eq!(missing, 404);

    let bytes = client
        .get(url)
        .send()
        .await
        .expect("file served")
        .bytes()
        .await
        .expect("file body");
    assert_eq!(bytes.len(), FILE_BYTES);
    assert_eq!(bytes.as_ref(), file_bytes(&id).as_slice());

    let stats = stub.stats();
    assert_eq!(stats.creates, 3);
    assert_eq!(stats.capacity_refusals, 1);
    assert_eq!(stats.max_in_flight, 2);
    assert_eq!(stats.polls, 2);
    assert_eq!(stats.downloads, 1);
    // k1 was sent twice (the 409 above); every other key once.
    assert_eq!(stats.duplicate_creates, 1);
    assert!(
        stats
            .creates_by_key
            .iter()
            .all(|(k, n)| *n == if k == "k1" { 2 } else { 1 })
    );

    let (_, over_http) = get(&client, format!("{base}/stats")).await;
    let over_http: StubStats = serde_json::from_value(over_http).expect("stats JSON");
    assert_eq!(over_http, stats);
    stub.shutdown().await;
}

#[tokio::test]
async fn failing_jobs_report_their_code() {
    let stub = StubProvider::start(StubOptions::default())
        .await
        .expect("stub starts");
    let base = stub.base_url().to_string();
    let client = reqwest::Client::new();
    let resp: Value = client
        .post(format!("{base}/jobs"))
        .json(&json!({"key": "f", "polls": 0, "outcome": "fail", "code": "E42", "message": "nope"}))
        .send()
        .await
        .expect("create")
        .json()
        .await
        .expect("json");
    let id = resp["id"].as_str().expect("id");
    let (_, p) = get(&client, format!("{base}/jobs/{id}")).await;
    assert_eq!(
        (p["status"].as_str(), p["code"].as_str()),
        (Some("failed"), Some("E42"))
    );
    assert_eq!(stub.stats().in_flight, 0);
}
