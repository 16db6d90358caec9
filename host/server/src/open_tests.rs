//! Start-up failures print no password: the database, the whole build and the Redis keyspace
//! each name the URL they could not use with its password redacted ([`slotd_core::redact`]).

/// Nothing listens on port 1; the URL is valid, so the connect itself fails.
const UNREACHABLE: &str = "postgres://slotd:pg-pass-4711@127.0.0.1:1/slotd";
/// Not a valid PostgreSQL URL (port), so parsing fails.
const MALFORMED: &str = "postgres://slotd:pg-pass-4711@127.0.0.1:port/slotd";

#[tokio::test]
async fn open_failures_show_no_password() {
    for url in [UNREACHABLE, MALFORMED, "mysql://u:pg-pass-4711@host/db"] {
        let err = match slotd_store::open(url).await {
            Ok(_) => panic!("{url} must not open"),
            Err(e) => format!("{e:#} {e:?}"),
        };
        assert!(!err.contains("pg-pass-4711"), "{err}");
        assert!(err.contains("***") || err.contains("slotd:"), "{err}");
    }
    let mut config = slotd_core::config::Config::default();
    config.database_url = UNREACHABLE.into();
    let err = match crate::app::build(config).await {
        Ok(_) => panic!("must not build"),
        Err(e) => format!("{e:#} {e:?}"),
    };
    assert!(!err.contains("pg-pass-4711"), "{err}");
    let err = match slotd_coord::keyspace::Keyspace::new("redis://:r-pass-99@host:notaport", "p") {
        Ok(_) => panic!("must not parse"),
        Err(e) => format!("{e:#}"),
    };
    assert!(!err.contains("r-pass-99"), "{err}");
}
