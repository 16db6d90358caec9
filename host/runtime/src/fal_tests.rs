//! Contract 1.4 `signing.verify-ed25519` through the built fal handler (`plugins/fal-video`):
//! the host reads the signing keys a provider publishes through the handler's allowlist,
//! keeps them between calls, and does not let forged webhooks turn it into a flood against
//! the key URL.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use ed25519_dalek::Signer as _;
use serde_json::json;

use super::kling_tests::built;
use super::{Handler, Runtime};
use slotd_core::config::{HandlerConfig, RuntimeLimits, Secret};
use slotd_core::model::Outcome;
use slotd_sim::fal::webhook::Signer;

/// A JWKS server publishing `signer`'s keys, counting its reads.
async fn keys_server(signer: &Signer) -> (String, Arc<AtomicU32>) {
    let reads = Arc::new(AtomicU32::new(0));
    let jwks = signer.jwks();
    let counted = reads.clone();
    let app = axum::Router::new().route(
        "/.well-known/jwks.json",
        axum::routing::get(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            let jwks = jwks.clone();
            async move { axum::Json(jwks) }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr.to_string(), reads)
}

async fn load(keys_host: &str, allowed: &str) -> Arc<Handler> {
    let mut c = HandlerConfig::default();
    c.settings.insert(
        "jwks_url".into(),
        format!("http://{keys_host}/.well-known/jwks.json"),
    );
    c.secrets.insert("api_key".into(), Secret::new("id:secret"));
    c.allowed_hosts = vec![allowed.to_string()];
    let runtime = Runtime::new(
        RuntimeLimits::default(),
        BTreeMap::from([("fal-video".to_string(), c)]),
    )
    .expect("runtime builds");
    runtime
        .load_file(&built("fal_video.wasm"))
        .await
        .expect("fal-video loads")
}

fn now_s() -> i64 {
    i64::try_from(super::kling_tests::now_ms() / 1000).expect("seconds")
}

type Delivery = (Vec<(String, String)>, Vec<u8>);

fn body_for(request_id: &str) -> Vec<u8> {
    serde_json::to_vec(&json!({"request_id": request_id, "status": "OK",
        "payload": {"video": {"url": "https://v3.fal.media/x.mp4"}}, "error": null}))
    .expect("json")
}

/// A delivery for `request_id` as fal (here: the simulator's key) signs it.
fn genuine(signer: &Signer, request_id: &str) -> Delivery {
    let body = body_for(request_id);
    let headers = signer
        .headers(request_id, "acct", now_s(), &body)
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
    (headers, body)
}

/// A delivery for `request_id` signed over fal's message by `sign`.
fn delivery(request_id: &str, sign: impl Fn(&[u8]) -> Vec<u8>) -> Delivery {
    let body = body_for(request_id);
    let at = now_s();
    let message = slotd_sim::fal::webhook::message(request_id, "acct", at, &body);
    let headers = vec![
        ("x-fal-webhook-request-id".into(), request_id.into()),
        ("x-fal-webhook-user-id".into(), "acct".into()),
        ("x-fal-webhook-timestamp".into(), at.to_string()),
        (
            "x-fal-webhook-signature".into(),
            hex::encode(sign(message.as_bytes())),
        ),
    ];
    (headers, body)
}

#[tokio::test]
async fn keys_are_read_once_and_forgeries_do_not_read_them_again() {
    let signer = Signer::from_seed(3);
    let (host, reads) = keys_server(&signer).await;
    let h = load(&host, &host).await;
    let (headers, body) = genuine(&signer, "req-1");
    let changes = h
        .on_callback(&headers, &body)
        .await
        .expect("a genuine delivery");
    assert_eq!(changes.len(), 1);
    assert_eq!(changes[0].provider_job_id.as_deref(), Some("req-1"));
    assert_eq!(changes[0].outcome, Outcome::Running { after_ms: Some(0) });
    assert_eq!(reads.load(Ordering::SeqCst), 1, "the keys were read once");

    let stranger = ed25519_dalek::SigningKey::from_bytes(&[9u8; 32]);
    for i in 0..5 {
        let (headers, body) = delivery(&format!("forged-{i}"), |m| {
            stranger.sign(m).to_bytes().to_vec()
        });
        let err = h
            .on_callback(&headers, &body)
            .await
            .expect_err("a stranger's signature is refused");
        assert!(err.to_string().contains("does not verify"), "{err}");
    }
    let (headers, body) = genuine(&signer, "req-2");
    h.on_callback(&headers, &body).await.expect("still genuine");
    assert_eq!(
        reads.load(Ordering::SeqCst),
        1,
        "kept keys served every check; forgeries within a minute read nothing"
    );
}

#[tokio::test]
async fn keys_outside_the_allowlist_are_never_read() {
    let signer = Signer::from_seed(4);
    let (host, reads) = keys_server(&signer).await;
    let h = load(&host, "queue.fal.run").await;
    let (headers, body) = genuine(&signer, "req-1");
    let err = h
        .on_callback(&headers, &body)
        .await
        .expect_err("keys behind a host not allowed");
    assert!(err.to_string().contains("allowed_hosts"), "{err}");
    assert_eq!(reads.load(Ordering::SeqCst), 0);
}
