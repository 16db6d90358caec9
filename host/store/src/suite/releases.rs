//! Handler releases: content-addressed, one file per handler version, bytes returned exactly.

use crate::{DynStore, NewRelease, Published, release_key};

use super::fixtures::T0;

fn release(name: &str, version: &str, bytes: &[u8], now: i64) -> NewRelease {
    NewRelease {
        name: name.into(),
        version: version.into(),
        contract: "1.3.0".into(),
        bytes: bytes.to_vec(),
        published_by: "team-kling".into(),
        now,
    }
}

pub(crate) async fn handler_releases(store: DynStore) {
    // A component of a realistic size, every byte value present.
    let a: Vec<u8> = (0..(1 << 20)).map(|i: u32| (i % 251) as u8).collect();
    let b = b"\0asm another build".to_vec();
    let (key_a, key_b) = (release_key(&a), release_key(&b));
    assert_eq!(key_a.len(), 64, "hex sha256");

    let first = store
        .release_put(&release("kling-video", "1.0.0", &a, T0))
        .await;
    assert_eq!(first.unwrap(), Published::New(key_a.clone()));

    // The same file again, by anyone: stored once, nothing changes.
    let mut again = release("kling-video", "1.0.0", &a, T0 + 5);
    again.published_by = "plugins directory".into();
    let again = store.release_put(&again).await.unwrap();
    assert_eq!(again, Published::Already(key_a.clone()));

    // Another file under a published version: refused, naming the file that has it.
    let taken = store
        .release_put(&release("kling-video", "1.0.0", &b, T0 + 6))
        .await;
    assert_eq!(
        taken.unwrap(),
        Published::VersionTaken {
            name: "kling-video".into(),
            version: "1.0.0".into(),
            sha256: key_a.clone(),
        }
    );
    assert!(
        store.release_get(&key_b).await.unwrap().is_none(),
        "not stored"
    );

    // A new version is a new release; another handler's are its own.
    let second = store
        .release_put(&release("kling-video", "1.1.0", &b, T0 + 10))
        .await;
    assert_eq!(second.unwrap(), Published::New(key_b.clone()));
    let runway = store
        .release_put(&release("runway-video", "1.0.0", b"\0asm runway", T0 + 20))
        .await;
    assert!(matches!(runway.unwrap(), Published::New(_)));

    // Listed newest first, without their bytes.
    let kling = store.release_list(Some("kling-video")).await.unwrap();
    let listed: Vec<(&str, &str, i64)> = kling
        .iter()
        .map(|r| (r.version.as_str(), r.sha256.as_str(), r.size))
        .collect();
    assert_eq!(
        listed,
        [
            ("1.1.0", key_b.as_str(), b.len() as i64),
            ("1.0.0", key_a.as_str(), 1 << 20)
        ]
    );
    assert_eq!(
        kling[1].published_by, "team-kling",
        "the first publisher is kept"
    );
    assert_eq!(kling[1].published_at, T0);
    assert_eq!(store.release_list(None).await.unwrap().len(), 3);
    assert_eq!(store.release_list(Some("fal-video")).await.unwrap(), []);

    // The bytes come back exactly, with what was recorded of them.
    let (meta, bytes) = store.release_get(&key_a).await.unwrap().expect("stored");
    assert_eq!(bytes, a);
    assert_eq!(meta, kling[1]);
    assert_eq!(meta.contract, "1.3.0");
    assert!(store.release_get(&"0".repeat(64)).await.unwrap().is_none());
}
