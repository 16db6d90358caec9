//! The configuration suite: reading the file, the environment overrides, and validation.

use super::*;

fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn no_config_at_all_is_embedded() {
    let c = Config::from_parts(None, &env_of(&[])).expect("defaults are valid");
    assert_eq!(c.database_url, DATABASE_URL_DEFAULT);
    assert_eq!(c.redis_url, None);
    assert_eq!(c.listen.to_string(), LISTEN_DEFAULT);
    assert_eq!(c.scheduler.tick_interval, TICK_INTERVAL_DEFAULT);
    assert!(c.check_exposure().is_ok());
}

#[test]
fn environment_beats_file_and_scales_ticks() {
    let file = r#"
        listen = "127.0.0.1:9000"
        database_url = "sqlite://file.db"
        [pools."kling:video"]
        max_slots = 18
        [handlers.kling-video]
        base_url = "http://127.0.0.1:1"
        access_key = "AK"
        secret_key = { env = "KLING_SECRET_KEY" }
        allowed_hosts = ["127.0.0.1:1"]
        [[api_keys]]
        key = "key-of-tenant-a"
        tenant = "a"
    "#;
    let env = env_of(&[
        ("SLOTD_LISTEN", "127.0.0.1:9001"),
        ("SLOTD_TICK_INTERVAL", "50ms"),
        ("KLING_SECRET_KEY", "SK"),
    ]);
    let c = Config::from_parts(Some(file), &env).expect("valid");
    assert_eq!(c.listen.port(), 9001);
    assert_eq!(c.database_url, "sqlite://file.db");
    assert_eq!(c.scheduler.tick_interval, Duration::from_millis(50));
    assert_eq!(c.scheduler.poll_initial, Duration::from_millis(25));
    assert_eq!(c.pool_max("kling:video", 5), 18);
    assert_eq!(c.pool_max("other", 5), 5);
    let h = &c.handlers["kling-video"];
    assert_eq!(h.settings["access_key"], "AK");
    assert!(!h.settings.contains_key("secret_key"));
    assert_eq!(h.secrets["secret_key"].expose(), b"SK");
    assert_eq!(format!("{:?}", h.secrets["secret_key"]), "Secret(***)");
    assert_eq!(h.allowed_hosts, vec!["127.0.0.1:1".to_string()]);
}

#[test]
fn errors_name_the_key() {
    let bad = |file: &str, env: &'static [(&'static str, &'static str)]| {
        format!(
            "{:#}",
            Config::from_parts(Some(file), &env_of(env)).expect_err("must fail")
        )
    };
    assert!(bad("", &[("SLOTD_TICK_INTERVAL", "often")]).contains("SLOTD_TICK_INTERVAL"));
    assert!(bad("[pools.p]\nmax_slots = 0", &[]).contains("pools.\"p\".max_slots"));
    assert!(bad("[handlers.h]\ns = { env = \"NOPE\" }", &[]).contains("handlers.h.s"));
    assert!(bad("tick = 3", &[]).contains("unknown field"));
    assert!(bad("database_url = \"mysql://x\"", &[]).contains("database_url"));
    assert!(bad("[[api_keys]]\nkey = \"short\"\ntenant = \"a\"", &[]).contains("api_keys[0]"));
    assert!(bad("[scheduler]\nstage_deadline = \"1s\"", &[]).contains("scheduler.stage_deadline"));
    assert!(
        bad("[handlers.h]\nfile = \"h.wasm\"\nsha256 = \"abc\"", &[]).contains("handlers.h.sha256")
    );
    assert!(bad("[handlers.h]\nfile = \"../h.wasm\"", &[]).contains("handlers.h.file"));
    assert!(
        bad(
            "[handlers.h]\nsha256 = \"{}\""
                .replace("{}", &"a".repeat(64))
                .as_str(),
            &[]
        )
        .contains("needs handlers.h.file")
    );
}

#[test]
fn pins_and_stage_deadline_are_read() {
    let sha = "AB".repeat(32);
    let file = format!(
        "[scheduler]\nstage_deadline = \"3h\"\n[handlers.kling-video]\nfile = \"kling-video.wasm\"\nsha256 = \"{sha}\"\nbase_url = \"http://x\""
    );
    let c = Config::from_parts(Some(&file), &env_of(&[])).expect("valid");
    assert_eq!(c.scheduler.stage_deadline, Duration::from_secs(3 * 3600));
    let h = &c.handlers["kling-video"];
    assert_eq!(h.file.as_deref(), Some("kling-video.wasm"));
    assert_eq!(h.sha256.as_deref(), Some("ab".repeat(32).as_str()));
    // The pin is the host's, not a setting the guest can read.
    assert!(!h.settings.contains_key("file") && !h.settings.contains_key("sha256"));
    let d = Config::from_parts(None, &env_of(&[])).expect("defaults");
    assert_eq!(d.scheduler.stage_deadline, STAGE_DEADLINE_DEFAULT);
}

#[test]
fn whsec_secrets_are_decoded_and_malformed_ones_refused_by_key() {
    // base64("hello") = "aGVsbG8="
    let key = |v: &str| Secret::new(v).signing_key().map(|k| k.into_owned());
    assert_eq!(key("whsec_aGVsbG8="), Ok(b"hello".to_vec()));
    assert_eq!(
        key("SK"),
        Ok(b"SK".to_vec()),
        "other secrets are used as written"
    );
    assert!(key("whsec_not base64!").is_err_and(|e| e.contains("base64")));
    assert!(key("whsec_").is_err_and(|e| e.contains("empty")));
    let bad = |value: &str| {
        let file = format!("[handlers.kling-video]\nwebhook_secret = \"{value}\"");
        Config::from_parts(Some(&file), &env_of(&[]))
            .map(|_| ())
            .map_err(|e| format!("{e:#}"))
    };
    assert!(bad("whsec_aGVsbG8=").is_ok());
    for value in ["whsec_%%%", "whsec_"] {
        let err = bad(value).expect_err("refused at start-up");
        assert!(err.contains("handlers.kling-video.webhook_secret"), "{err}");
        assert!(
            !err.contains(value) || value == "whsec_",
            "secret echoed: {err}"
        );
    }
}

#[test]
fn tenant_names_are_checked_naming_the_key() {
    let keys = |tenants: &[&str]| {
        let mut file = String::new();
        for (i, t) in tenants.iter().enumerate() {
            file.push_str(&format!(
                "[[api_keys]]\nkey = \"key-number-{i}\"\ntenant = {t:?}\n"
            ));
        }
        Config::from_parts(Some(&file), &env_of(&[])).map_err(|e| format!("{e:#}"))
    };
    let long = "t".repeat(TENANT_NAME_MAX);
    assert!(keys(&["team-a", "Team_B", "7", &long]).is_ok());
    let too_long = "t".repeat(TENANT_NAME_MAX + 1);
    for bad in ["", "a b", "../etc", "a/b", "tëam", "a.b", too_long.as_str()] {
        let err = keys(&["ok", "fine", bad]).expect_err(bad);
        assert!(err.contains("api_keys[2].tenant"), "{bad:?}: {err}");
    }
}

#[test]
fn debug_output_shows_no_secret() {
    let file = r#"
        database_url = "postgres://slotd:db-pass-123@db.internal:5432/slotd"
        redis_url = "redis://:redis-pass-456@cache.internal:6379/0"
        [handlers.kling-video]
        access_key = "AK"
        secret_key = { env = "KLING_SECRET_KEY" }
        webhook_secret = "whsec-value-789"
        [[api_keys]]
        key = "api-key-value-000"
        tenant = "a"
    "#;
    let env = env_of(&[("KLING_SECRET_KEY", "kling-secret-abc")]);
    let c = Config::from_parts(Some(file), &env).expect("valid");
    let shown = format!("{c:?} {c:#?}");
    for secret in [
        "db-pass-123",
        "redis-pass-456",
        "kling-secret-abc",
        "whsec-value-789",
        "api-key-value-000",
    ] {
        assert!(!shown.contains(secret), "{secret} leaked in {shown}");
    }
    assert!(shown.contains("postgres://slotd:***@db.internal:5432/slotd"));
    assert!(shown.contains("redis://:***@cache.internal:6379/0"));
}

#[test]
fn loopback_rule() {
    let mut c =
        Config::from_parts(None, &env_of(&[("SLOTD_LISTEN", "0.0.0.0:8080")])).expect("valid");
    assert!(c.check_exposure().is_err());
    c.allow_unauthenticated = true;
    assert!(c.check_exposure().is_ok());
}
