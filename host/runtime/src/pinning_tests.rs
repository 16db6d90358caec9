//! Jobs pinned to the release that created them (docs/handlers.md, "Releases"): a version
//! replaced while its jobs are in flight keeps serving those jobs (and its provider callbacks)
//! until it is drained; new work and jobs of unknown releases go to the serving version; a
//! version that takes over keeps nothing draining; a quarantined draining version hands its
//! jobs over. The real built fixture components, `fixture` 1.0.0 and `fixture-next` 2.0.0.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::{Handler, Registry, Runtime};
use slotd_core::config::RuntimeLimits;

async fn load(runtime: &Runtime, file: &str) -> Arc<Handler> {
    let path = super::kling_tests::built(file);
    runtime
        .load_file(&path)
        .await
        .unwrap_or_else(|e| panic!("{e:#}"))
}

async fn two_versions() -> (Registry, Arc<Handler>, Arc<Handler>, Arc<Runtime>) {
    let runtime =
        Runtime::new(RuntimeLimits::default(), BTreeMap::new()).unwrap_or_else(|e| panic!("{e:#}"));
    let v1 = load(&runtime, "fixture.wasm").await;
    let v2 = load(&runtime, "fixture_next.wasm").await;
    assert_eq!(v1.info.name, v2.info.name);
    assert_ne!(v1.info.version, v2.info.version);
    (Registry::new(), v1, v2, runtime)
}

fn sha(h: Option<Arc<Handler>>) -> Option<String> {
    h.map(|h| h.sha256.clone())
}

#[tokio::test]
async fn a_replaced_version_serves_its_own_jobs_until_drained() {
    let (registry, v1, v2, _rt) = two_versions().await;
    registry
        .insert(v1.clone())
        .unwrap_or_else(|e| panic!("{e}"));
    registry
        .insert(v2.clone())
        .unwrap_or_else(|e| panic!("{e}"));
    let (s1, s2) = (Some(v1.sha256.clone()), Some(v2.sha256.clone()));
    // New work and jobs of the serving version: v2. Jobs v1 created: v1.
    assert_eq!(sha(registry.for_job("fixture", None)), s2);
    assert_eq!(sha(registry.for_job("fixture", s2.as_deref())), s2);
    assert_eq!(sha(registry.for_job("fixture", s1.as_deref())), s1);
    // A job of a release this process never had, or of another task type: the serving one.
    assert_eq!(sha(registry.for_job("fixture", Some("ab12"))), s2);
    assert_eq!(registry.for_job("video", s1.as_deref()).map(|_| ()), None);
    // Its provider callbacks too (the token carries a prefix of the release's sha256).
    assert_eq!(
        sha(registry.for_release("fixture", Some(&v1.sha256[..16]))),
        s1
    );
    assert_eq!(sha(registry.for_release("fixture", None)), s2);
    assert_eq!(
        registry
            .draining()
            .iter()
            .map(|h| h.sha256.clone())
            .collect::<Vec<_>>(),
        vec![v1.sha256.clone()]
    );
    // Its last job ended: dropped; what is left of its jobs goes to v2.
    assert!(
        registry
            .drained(&v1.sha256, "its last provider job ended")
            .await
            .is_some()
    );
    assert!(registry.draining().is_empty());
    assert_eq!(sha(registry.for_job("fixture", s1.as_deref())), s2);
    let record = registry
        .versions()
        .into_iter()
        .find(|r| r.sha256 == v1.sha256)
        .expect("v1's record");
    assert_eq!(
        record.reason.as_deref(),
        Some("its last provider job ended")
    );
    // Promoting v1 again takes it out of draining and serves it.
    registry
        .insert(v1.clone())
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sha(registry.for_job("fixture", None)), s1);
    assert_eq!(registry.draining().len(), 1, "now v2 drains");
}

#[tokio::test]
async fn a_version_that_takes_over_keeps_nothing_draining() {
    let (registry, v1, v2, _rt) = two_versions().await;
    registry
        .insert(v1.clone())
        .unwrap_or_else(|e| panic!("{e}"));
    registry
        .insert_taking_over(v2.clone())
        .unwrap_or_else(|e| panic!("{e}"));
    assert!(registry.draining().is_empty());
    assert_eq!(
        sha(registry.for_job("fixture", Some(&v1.sha256))),
        Some(v2.sha256.clone())
    );
}

#[tokio::test]
async fn an_unloaded_handler_takes_its_draining_versions_with_it() {
    let (registry, v1, v2, _rt) = two_versions().await;
    registry
        .insert(v1.clone())
        .unwrap_or_else(|e| panic!("{e}"));
    registry
        .insert(v2.clone())
        .unwrap_or_else(|e| panic!("{e}"));
    registry.remove("fixture");
    assert!(registry.draining().is_empty());
    assert!(
        registry.for_job("fixture", Some(&v1.sha256)).is_none(),
        "units wait"
    );
}
