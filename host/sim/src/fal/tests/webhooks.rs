//! Webhooks: the body fal sends, signed by the published recipe against the served JWKS;
//! retries; the bad-signature and duplicate flags.

use super::*;
use crate::fal::webhook::{self, Refused};

fn header(r: &Received) -> impl Fn(&str) -> Option<String> + '_ {
    |name| {
        r.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    }
}

fn now_s() -> i64 {
    crate::clock::unix_ms_now() / 1000
}

#[tokio::test]
async fn webhooks_carry_fals_body_and_verify_against_the_served_jwks() -> anyhow::Result<()> {
    let handle = sim(fast()).await?;
    let hooks = Receiver::start(0).await?;
    let c = Client::new(&handle)?;
    let ok = id_of(&c.post(&hooks.submit_path(T2V), &prompt()).await?.body)?;
    let bad = id_of(
        &c.post(&hooks.submit_path(T2V), &json!({"prompt": 3}))
            .await?
            .body,
    )?;
    wait_until("two webhooks, counted", || {
        handle.stats().webhooks_sent == 2
    })
    .await?;
    assert_eq!(hooks.received().len(), 2);

    let jwks = c.get("/.well-known/jwks.json").await?.body;
    assert_eq!(jwks, c.with_key(None).get("/_sim/jwks").await?.body);
    assert_eq!(jwks, handle.jwks());
    assert_eq!(
        jwks["keys"].as_array().map(Vec::len),
        Some(2),
        "a decoy first"
    );
    for r in hooks.received() {
        assert_eq!(webhook::verify(&jwks, header(&r), &r.body, now_s()), Ok(()));
        assert_eq!(
            header(&r)(webhook::HEADER_USER_ID).as_deref(),
            Some(ACCOUNT_DEFAULT)
        );
        let text = String::from_utf8(r.body.clone())?;
        assert!(
            text.starts_with(r#"{"error": "#),
            "keys sorted, Python's separators: {text}"
        );
        let body: Value = serde_json::from_str(&text)?;
        let id = body["request_id"].as_str().unwrap_or_default().to_owned();
        assert_eq!(header(&r)(webhook::HEADER_REQUEST_ID), Some(id.clone()));
        assert_eq!(body["gateway_request_id"], json!(id));
        if id == ok {
            assert_eq!(
                (body["status"].clone(), body["error"].clone()),
                (json!("OK"), Value::Null)
            );
            let result = c.result(&ok).await?;
            assert_eq!(body["payload"], result.body, "the payload is the result");
        } else {
            assert_eq!(id, bad);
            assert_eq!(body["status"], "ERROR");
            assert_eq!(body["error"], "Invalid status code: 422");
            assert_eq!(
                body["payload"]["detail"][0]["loc"],
                json!(["body", "prompt"])
            );
            assert_eq!(body["payload"]["detail"][0]["type"], "string_type");
        }
    }
    let stats = handle.stats();
    assert_eq!(
        (
            stats.webhook_attempts,
            stats.webhooks_sent,
            stats.webhooks_failed
        ),
        (2, 2, 0)
    );
    handle.shutdown().await
}

#[tokio::test]
async fn failed_deliveries_are_retried_then_given_up() -> anyhow::Result<()> {
    let handle = sim(fast()).await?;
    let hooks = Receiver::start(2).await?;
    let c = Client::new(&handle)?;
    let id = id_of(&c.post(&hooks.submit_path(T2V), &prompt()).await?.body)?;
    wait_until("the third attempt", || hooks.received().len() == 3).await?;
    wait_until("the delivery counted", || handle.stats().webhooks_sent == 1).await?;
    let got = hooks.received();
    assert!(
        got.iter().all(|r| r.body == got[0].body),
        "the same body each time"
    );
    let job = handle
        .jobs()
        .into_iter()
        .find(|j| j.request_id == id)
        .context("job")?;
    assert_eq!((job.webhook_attempts, job.webhook_deliveries), (3, 1));
    assert_eq!(handle.stats().webhooks_failed, 2);
    handle.shutdown().await?;

    let handle = sim(FalOptions {
        webhook_attempts: 2,
        ..fast()
    })
    .await?;
    let hooks = Receiver::start(usize::MAX).await?;
    let c = Client::new(&handle)?;
    c.post(&hooks.submit_path(T2V), &prompt()).await?;
    wait_until("given up", || handle.stats().webhooks_given_up == 1).await?;
    assert_eq!(hooks.received().len(), 2);
    // A receiver that does not even listen.
    let port = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await?
        .local_addr()?
        .port();
    let path = format!("/{T2V}?fal_webhook=http%3A%2F%2F127.0.0.1%3A{port}%2Fhook");
    c.post(&path, &prompt()).await?;
    wait_until("given up again", || handle.stats().webhooks_given_up == 2).await?;
    handle.shutdown().await
}

#[tokio::test]
async fn the_flags_send_bad_signatures_and_duplicates() -> anyhow::Result<()> {
    let handle = sim(FalOptions {
        webhook_bad_signature_rate: 1.0,
        webhook_duplicate_rate: 1.0,
        ..fast()
    })
    .await?;
    let hooks = Receiver::start(0).await?;
    let c = Client::new(&handle)?;
    c.post(&hooks.submit_path(T2V), &prompt()).await?;
    wait_until("two copies, counted", || handle.stats().webhooks_sent == 2).await?;
    assert_eq!(hooks.received().len(), 2);
    let jwks = handle.jwks();
    for r in hooks.received() {
        assert_eq!(
            webhook::verify(&jwks, header(&r), &r.body, now_s()),
            Err(Refused::NoKeyMatches)
        );
    }
    let stats = handle.stats();
    assert_eq!(
        (
            stats.webhooks_bad_signature,
            stats.webhooks_duplicated,
            stats.webhooks_sent
        ),
        (2, 1, 2)
    );
    handle.shutdown().await
}
