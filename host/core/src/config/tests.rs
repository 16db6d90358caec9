//! The configuration suite: reading the file, the environment overrides, and validation.

use super::*;
use std::path::Path;
use std::time::Duration;

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
    let publish =
        "[[api_keys]]\nkey = \"key-of-a-team\"\ntenant = \"a\"\npublish = [\"Kling Video\"]";
    assert!(bad(publish, &[]).contains("api_keys[0].publish"));
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

// ---- The file deserialized straight into `Config`, and the table of overrides. ----

/// Look `pairs` up, for tests whose pairs are built at run time.
fn lookup<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

fn error_of(file: &str, env: &[(&str, &str)]) -> String {
    match Config::from_parts(Some(file), &lookup(env)) {
        Ok(_) => panic!("accepted: {file:?} with {env:?}"),
        Err(e) => format!("{e:#}"),
    }
}

/// An override's test: the file's value for its key, the variable's value, and what the
/// variable must give.
struct OverrideCase {
    var: &'static str,
    in_file: &'static str,
    in_env: &'static str,
    applied: fn(&Config) -> bool,
}

const OVERRIDE_CASES: &[OverrideCase] = &[
    OverrideCase {
        var: "SLOTD_LISTEN",
        in_file: "\"127.0.0.1:9000\"",
        in_env: "127.0.0.1:9001",
        applied: |c| c.listen.port() == 9001,
    },
    OverrideCase {
        var: "SLOTD_DATABASE_URL",
        in_file: "\"sqlite://f.db\"",
        in_env: "postgres://h/db",
        applied: |c| c.database_url == "postgres://h/db",
    },
    OverrideCase {
        var: "SLOTD_REDIS_URL",
        in_file: "\"redis://file\"",
        in_env: "redis://env",
        applied: |c| c.redis_url.as_deref() == Some("redis://env"),
    },
    OverrideCase {
        var: "SLOTD_REDIS_PREFIX",
        in_file: "\"file:\"",
        in_env: "env:",
        applied: |c| c.redis_prefix == "env:",
    },
    OverrideCase {
        var: "SLOTD_PLUGINS_DIR",
        in_file: "\"file-plugins\"",
        in_env: "env-plugins",
        applied: |c| c.plugins_dir == Path::new("env-plugins"),
    },
    OverrideCase {
        var: "SLOTD_CACHE_DIR",
        in_file: "\"file-cache\"",
        in_env: "env-cache",
        applied: |c| c.cache_dir.as_deref() == Some(Path::new("env-cache")),
    },
    OverrideCase {
        var: "SLOTD_OBJECT_STORE",
        in_file: "\"file://./f\"",
        in_env: "s3://bucket/p",
        applied: |c| c.object_store == "s3://bucket/p",
    },
    OverrideCase {
        var: "SLOTD_PUBLIC_URL",
        in_file: "\"http://file\"",
        in_env: "http://env",
        applied: |c| c.public_url.as_deref() == Some("http://env"),
    },
    OverrideCase {
        var: "SLOTD_LOG_JSON",
        in_file: "false",
        in_env: "yes",
        applied: |c| c.log_json,
    },
    OverrideCase {
        var: "SLOTD_TICK_INTERVAL",
        in_file: "\"1s\"",
        in_env: "50ms",
        applied: |c| c.scheduler.tick_interval == Duration::from_millis(50),
    },
];

#[test]
fn every_environment_override_applies_and_beats_the_file() {
    assert_eq!(
        OVERRIDE_CASES.len(),
        env::OVERRIDES.len(),
        "one case per override"
    );
    for o in env::OVERRIDES {
        let case = OVERRIDE_CASES
            .iter()
            .find(|case| case.var == o.var)
            .unwrap_or_else(|| panic!("no test case for {}", o.var));
        // A dotted key is TOML too: this also proves `key` names a real file key.
        let file = format!("{} = {}", o.key, case.in_file);
        let from_file = Config::from_parts(Some(&file), &lookup(&[])).expect(&file);
        assert!(
            !(case.applied)(&from_file),
            "{}: the case must differ from the file",
            o.var
        );
        let pairs = [(o.var, case.in_env)];
        let both = Config::from_parts(Some(&file), &lookup(&pairs)).expect(o.var);
        assert!((case.applied)(&both), "{} does not beat {}", o.var, o.key);
        let alone = Config::from_parts(None, &lookup(&pairs)).expect(o.var);
        assert!((case.applied)(&alone), "{} alone does not apply", o.var);
    }
}

#[test]
fn empty_urls_are_unset_in_file_and_environment() {
    let c = Config::from_parts(Some("redis_url = \"\"\npublic_url = \"\""), &lookup(&[]));
    let c = c.expect("valid");
    assert_eq!((c.redis_url, c.public_url), (None, None));
    let file = "redis_url = \"redis://h\"\npublic_url = \"http://h\"";
    let env = [("SLOTD_REDIS_URL", ""), ("SLOTD_PUBLIC_URL", "")];
    let c = Config::from_parts(Some(file), &lookup(&env)).expect("valid");
    assert_eq!((c.redis_url, c.public_url), (None, None));
}

#[test]
fn unknown_keys_are_refused_in_every_section_naming_them() {
    let key = "[[api_keys]]\nkey = \"key-of-tenant-a\"\ntenant = \"a\"";
    let cases = [
        ("bogus_key = 1".to_string(), ""),
        ("[scheduler]\nbogus_key = 1".into(), "scheduler"),
        ("[limits]\nbogus_key = 1".into(), "limits"),
        ("[api]\nbogus_key = 1".into(), "api"),
        (
            "[api]\nrate_limit = { bogus_key = 1 }".into(),
            "api.rate_limit",
        ),
        ("[pools.p]\nmax_slots = 1\nbogus_key = 1".into(), "pools.p"),
        (format!("{key}\nbogus_key = 1"), "api_keys"),
    ];
    for (file, section) in cases {
        let err = error_of(&file, &[]);
        assert!(err.contains("bogus_key"), "{file:?}: {err}");
        assert!(err.contains(section), "{file:?}: {err}");
    }
    // Fields that are not file keys: set in code or on the command line only.
    for file in [
        "allow_unauthenticated = true",
        "[scheduler]\nartifact_timeout = \"1s\"",
        "[scheduler]\ncallback_safety_poll = \"1s\"",
        "[limits]\nmemory_bytes = 1",
    ] {
        assert!(error_of(file, &[]).contains("unknown field"), "{file:?}");
    }
}

#[test]
fn malformed_values_name_their_key() {
    let durations = [
        "scheduler.tick_interval",
        "scheduler.min_rest",
        "scheduler.poll_initial",
        "scheduler.poll_max",
        "scheduler.stage_deadline",
        "scheduler.retry_base",
        "scheduler.retry_max",
        "scheduler.reconcile_interval",
        "scheduler.finalize_lease",
        "scheduler.lease_ttl",
        "limits.call_deadline",
        "limits.http_timeout",
        "limits.cpu_budget",
        "api.header_read_timeout",
    ];
    for key in durations {
        let err = error_of(&format!("{key} = \"soon\""), &[]);
        assert!(
            err.contains(key) && err.contains("is not a duration"),
            "{err}"
        );
    }
    for (file, key) in [
        ("listen = \"nowhere\"", "listen"),
        ("listen = 8080", "listen"),
        ("role = \"boss\"", "role"),
        ("log_json = \"yes\"", "log_json"),
        ("[scheduler]\nmax_batch = \"x\"", "scheduler.max_batch"),
        ("[scheduler]\npoll_factor = \"x\"", "scheduler.poll_factor"),
        ("[limits]\nquarantine_after = -1", "limits.quarantine_after"),
        ("[limits]\nmemory_mb = \"x\"", "limits.memory_mb"),
        ("[pools.p]\nmax_slots = \"x\"", "pools.p.max_slots"),
        ("[pools.p]", "pools.p"),
        (
            "[api]\nmax_concurrent_requests = -1",
            "api.max_concurrent_requests",
        ),
        ("[api]\nrate_limit = 5", "api.rate_limit"),
        (
            "[handlers.h]\nallowed_hosts = \"a\"",
            "handlers.h.allowed_hosts",
        ),
        ("[handlers.h]\ns = [1]", "handlers.h.s"),
        ("[[api_keys]]\nkey = [1]\ntenant = \"a\"", "api_keys.key"),
        // No setting is a date-time (a table would hand one over as a string).
        ("redis_prefix = 1979-05-27", "redis_prefix"),
        (
            "[[api_keys]]\nkey = \"key-of-a\"\ntenant = 1979-05-27",
            "api_keys[0].tenant",
        ),
        ("[handlers.h]\nsince = 1979-05-27", "handlers.h.since"),
    ] {
        let err = error_of(file, &[]);
        assert!(err.contains(key), "{file:?}: {err}");
    }
    let err = error_of("", &[("SLOTD_LISTEN", "nowhere")]);
    assert!(err.contains("SLOTD_LISTEN"), "{err}");
}

#[test]
fn timings_follow_the_tick_unless_the_file_sets_them() {
    // At the default tick, following it changes nothing.
    let at_default = SchedulerConfig::scaled_to(TICK_INTERVAL_DEFAULT);
    assert_eq!(
        format!("{at_default:?}"),
        format!("{:?}", SchedulerConfig::default())
    );
    let read = |file: &str, env: &[(&str, &str)]| {
        Config::from_parts(Some(file), &lookup(env))
            .expect(file)
            .scheduler
    };
    let ms = Duration::from_millis;
    // The file's own tick scales what it leaves out, not what it sets.
    let s = read(
        "[scheduler]\ntick_interval = \"1s\"\nmin_rest = \"2s\"",
        &[],
    );
    assert_eq!(
        (s.min_rest, s.poll_initial, s.poll_max),
        (ms(2000), ms(500), ms(3000))
    );
    // The environment's tick beats the file's, and the file's timings still stand.
    let file = "[scheduler]\ntick_interval = \"1s\"\nmin_rest = \"1s\"\npoll_initial = \"70ms\"";
    let s = read(file, &[("SLOTD_TICK_INTERVAL", "100ms")]);
    assert_eq!(s.tick_interval, ms(100));
    assert_eq!(
        (s.min_rest, s.poll_initial, s.poll_max),
        (ms(1000), ms(70), ms(300))
    );
    assert_eq!(s.finalize_lease, ms(3000));
    // A scaled finalizer lease stops at its floor; a configured one does not.
    let s = read("", &[("SLOTD_TICK_INTERVAL", "1ms")]);
    assert_eq!(s.finalize_lease, ms(500));
    let s = read(
        "[scheduler]\nfinalize_lease = \"200ms\"",
        &[("SLOTD_TICK_INTERVAL", "1ms")],
    );
    assert_eq!(s.finalize_lease, ms(200));
    // A tick of ages saturates instead of panicking.
    let huge = [("SLOTD_TICK_INTERVAL", "500000000000years")];
    let _ = Config::from_parts(None, &lookup(&huge));
}

#[test]
fn secret_forms_of_handlers_and_api_keys() {
    let file = r#"
        [handlers.h]
        n = 5
        f = 1.5
        b = true
        plain = "p"
        literal = { value = "v" }
        from_env = { env = "E" }
        [[api_keys]]
        key = { env = "K" }
        tenant = "a"
        [[api_keys]]
        key = { value = "literal-key" }
        tenant = "b"
        [[api_keys]]
        key = 123456789
        tenant = "c"
    "#;
    let env = [("E", "from-e"), ("K", "key-from-k")];
    let c = Config::from_parts(Some(file), &lookup(&env)).expect("valid");
    let h = &c.handlers["h"];
    let settings: Vec<_> = h.settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
    assert_eq!(settings, ["b=true", "f=1.5", "n=5", "plain=p"]);
    assert_eq!(h.secrets["literal"].expose(), b"v");
    assert_eq!(h.secrets["from_env"].expose(), b"from-e");
    let keys: Vec<_> = c.api_keys.iter().map(|k| k.key.expose()).collect();
    assert_eq!(keys, [&b"key-from-k"[..], b"literal-key", b"123456789"]);
    let missing = format!("{file}\n[[api_keys]]\nkey = {{ env = \"NOPE\" }}\ntenant = \"d\"");
    assert!(error_of(&missing, &env).contains("api_keys[3].key"));
}

#[test]
fn host_keys_of_a_handler_take_no_secret_form() {
    for key in handler::HOST_KEYS {
        for form in ["{ env = \"E\" }", "{ value = \"x\" }"] {
            let file = format!("[handlers.h]\n{key} = {form}");
            let err = error_of(&file, &[("E", "x")]);
            assert!(err.contains(&format!("handlers.h.{key}")), "{file}: {err}");
        }
    }
}

#[test]
fn api_keys_are_not_admins_unless_marked() {
    let file = r#"
        [[api_keys]]
        key = "key-of-tenant-a"
        tenant = "a"
        [[api_keys]]
        key = "key-of-the-operators"
        tenant = "ops"
        admin = true
    "#;
    let c = Config::from_parts(Some(file), &lookup(&[])).expect("valid");
    let admins: Vec<(&str, bool)> = c
        .api_keys
        .iter()
        .map(|k| (k.tenant.as_str(), k.admin))
        .collect();
    assert_eq!(admins, [("a", false), ("ops", true)]);
    let bad = "[[api_keys]]\nkey = \"key-of-tenant-a\"\ntenant = \"a\"\nadmin = \"yes\"";
    assert!(
        error_of(bad, &[]).contains("admin"),
        "{}",
        error_of(bad, &[])
    );
}

#[test]
fn pools_take_quotas_beside_slots() {
    let file = r#"
        [pools."runway:gen4_turbo"]
        daily = { limit = 6, window = "40s" }
        rate = "100/min"
        [pools."kling:video"]
        max_slots = 18
        daily = 500
    "#;
    let c = Config::from_parts(Some(file), &env_of(&[])).expect("valid");
    let p = &c.pools["runway:gen4_turbo"];
    assert_eq!(p.max_slots, None);
    assert_eq!(
        c.pool_max("runway:gen4_turbo", 5),
        5,
        "no max_slots: the proposal"
    );
    assert_eq!(
        p.daily.map(|q| (q.limit, q.window.len_ms())),
        Some((6, 40_000))
    );
    assert_eq!(
        p.rate.map(|q| (q.limit, q.window.len_ms())),
        Some((100, 60_000))
    );
    assert_eq!(c.pools["kling:video"].daily.map(|q| q.limit), Some(500));
    let bad = |file: &str| {
        format!(
            "{:#}",
            Config::from_parts(Some(file), &env_of(&[])).expect_err("must fail")
        )
    };
    let e = bad("[pools.p]\nrate = \"100 per minute\"");
    assert!(e.contains("pools") && e.contains("100 per minute"), "{e}");
    let e = bad("[pools.p]\ndaily = { limit = 6, window = \"2d\" }");
    assert!(e.contains("at most a day"), "{e}");
    let e = bad("[pools.p]\ndaily = \"lots\"");
    assert!(e.contains("daily"), "{e}");
}

#[test]
fn accounts_take_their_own_quotas() {
    let file = r#"
        [handlers.h]
        base_url = "http://127.0.0.1:1"
        [[handlers.h.accounts]]
        name = "main"
        max_slots = 5
        rate = "10/min"
        daily = { limit = 100, window = "1h" }
        [[handlers.h.accounts]]
        name = "spare"
        max_slots = 2
    "#;
    let c = Config::from_parts(Some(file), &env_of(&[])).expect("valid");
    let a = &c.handlers["h"].accounts;
    assert_eq!(
        a[0].rate.map(|q| (q.limit, q.window.len_ms())),
        Some((10, 60_000))
    );
    assert_eq!(
        a[0].daily.map(|q| (q.limit, q.window.len_ms())),
        Some((100, 3_600_000))
    );
    assert_eq!((a[1].rate, a[1].daily), (None, None));
    // Not handler settings: the handler does not see them.
    assert!(!a[0].config.settings.contains_key("rate"));
    let bad = |accounts: &str| {
        let file = format!("[handlers.h]\n{accounts}");
        format!(
            "{:#}",
            Config::from_parts(Some(&file), &env_of(&[])).expect_err("must fail")
        )
    };
    let e = bad("[[handlers.h.accounts]]\nname = \"m\"\nmax_slots = 1\nrate = \"often\"");
    assert!(e.contains("handlers.h.accounts[0].rate"), "{e}");
    let e = bad("[[handlers.h.accounts]]\nname = \"m\"\nmax_slots = 1\ndaily = 0");
    assert!(e.contains("handlers.h.accounts[0].daily"), "{e}");
}

/// The `[api]` section: its defaults, its values, and a clear error for each bad one.
#[test]
fn api_section() {
    let c = Config::from_parts(None, &env_of(&[])).expect("defaults");
    assert_eq!(c.api.header_read_timeout, HEADER_READ_TIMEOUT_DEFAULT);
    assert_eq!(
        c.api.max_concurrent_requests,
        MAX_CONCURRENT_REQUESTS_DEFAULT
    );
    assert_eq!(c.api.rate_limit, Some(RateLimit::default()));
    let file = r#"
        [api]
        header_read_timeout = "3s"
        max_concurrent_requests = 64
        rate_limit = { per_second = 5, burst = 10 }
    "#;
    let c = Config::from_parts(Some(file), &env_of(&[])).expect("valid");
    assert_eq!(c.api.header_read_timeout, Duration::from_secs(3));
    assert_eq!(c.api.max_concurrent_requests, 64);
    assert_eq!(
        c.api.rate_limit,
        Some(RateLimit {
            per_second: 5.0,
            burst: 10
        })
    );
    let off = Config::from_parts(Some("[api]\nrate_limit = false"), &env_of(&[]));
    assert_eq!(off.expect("valid").api.rate_limit, None);
    let bad = |file: &str| {
        format!(
            "{:#}",
            Config::from_parts(Some(file), &env_of(&[])).expect_err(file)
        )
    };
    assert!(bad("[api]\nrate_limit = { per_second = 0 }").contains("api.rate_limit.per_second"));
    assert!(bad("[api]\nrate_limit = { burst = 0 }").contains("api.rate_limit.burst"));
    assert!(bad("[api]\nrate_limit = { rate = 1 }").contains("api.rate_limit"));
    assert!(bad("[api]\nmax_concurrent_requests = 0").contains("api.max_concurrent_requests"));
    assert!(bad("[api]\nheader_read_timeout = \"soon\"").contains("api.header_read_timeout"));
}

/// A file with spend limits, no environment.
fn parse_spend(file: &str) -> anyhow::Result<Config> {
    Config::from_parts(Some(file), &|_| None)
}

#[test]
fn pools_and_accounts_take_a_spend_limit() {
    let c = parse_spend(
        r#"
        [pools."runway:gen4_turbo"]
        spend = { limit = 500.0, period = "30d" }
        [handlers.h]
        base_url = "http://127.0.0.1:1"
        [[handlers.h.accounts]]
        name = "studio"
        max_slots = 5
        spend = { limit = 20000, period = "30d" }
        "#,
    )
    .expect("config");
    let p = c.pools["runway:gen4_turbo"].spend.expect("pool spend");
    assert_eq!((p.limit, p.period_ms()), (500.0, 30 * 86_400_000));
    let a = c.handlers["h"].accounts[0].spend.expect("account spend");
    assert_eq!(a.limit, 20_000.0);
    assert!(
        !c.handlers["h"].accounts[0]
            .config
            .settings
            .contains_key("spend"),
        "spend is the account's limit, not a handler setting"
    );
}

#[test]
fn a_bad_spend_is_refused_by_name() {
    let e = |file: &str| format!("{:#}", parse_spend(file).expect_err("must fail"));
    let zero = e("[pools.p]\nspend = { limit = 0.0, period = \"1d\" }");
    assert!(zero.contains("pools.\"p\".spend.limit"), "{zero}");
    let long = e("[pools.p]\nspend = { limit = 5.0, period = \"400d\" }");
    assert!(long.contains("spend.period"), "{long}");
    let acct = e(
        "[handlers.h]\nbase_url = \"http://127.0.0.1:1\"\n[[handlers.h.accounts]]\n\
                  name = \"a\"\nmax_slots = 1\nspend = 5",
    );
    assert!(acct.contains("accounts[0].spend"), "{acct}");
    let typo = e("[pools.p]\nspend = { limit = 5.0, every = \"1d\" }");
    assert!(typo.contains("every"), "{typo}");
}
