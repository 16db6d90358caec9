//! `[provider_accounts]` read and checked from a file, each mistake named by its key.
use crate::config::Config;

fn parse(file: &str) -> anyhow::Result<Config> {
    Config::from_parts(Some(file), &|_| None)
}

fn refused(file: &str) -> String {
    match parse(file) {
        Ok(_) => panic!("must be refused:\n{file}"),
        Err(e) => format!("{e:#}"),
    }
}

#[test]
fn shares_are_read_with_their_defaults() {
    let c = parse(
        r#"
[provider_accounts.kling]
max_slots = 20
pools."kling:video" = { min = 14, account = "main" }
pools."kling:avatar" = { min = 2, max = 6 }
"#,
    )
    .expect("valid");
    let a = &c.provider_accounts["kling"];
    assert_eq!(a.max_slots, 20);
    let video = &a.pools["kling:video"];
    assert_eq!(
        (video.min, video.max_of(20), video.account.as_deref()),
        (14, 20, Some("main"))
    );
    let avatar = &a.pools["kling:avatar"];
    assert_eq!(
        (avatar.min, avatar.max_of(20), avatar.account.as_deref()),
        (2, 6, None)
    );
}

#[test]
fn bad_shares_are_refused_naming_the_key() {
    let e = refused(
        "[provider_accounts.kling]\nmax_slots = 20\npools.\"kling:video\" = { min = 14 }\npools.\"kling:avatar\" = { min = 8 }",
    );
    assert!(
        e.contains("provider_accounts.kling.pools") && e.contains("add up to 22"),
        "{e}"
    );
    let e = refused("[provider_accounts.kling]\nmax_slots = 20\npools.\"v\" = { max = 25 }");
    assert!(
        e.contains("provider_accounts.kling.pools.\"v\".max (25)"),
        "{e}"
    );
    let e =
        refused("[provider_accounts.kling]\nmax_slots = 20\npools.\"v\" = { min = 5, max = 4 }");
    assert!(
        e.contains("provider_accounts.kling.pools.\"v\".min (5)"),
        "{e}"
    );
    let e = refused("[provider_accounts.kling]\nmax_slots = 0\npools.\"v\" = {}");
    assert!(e.contains("provider_accounts.kling.max_slots"), "{e}");
    let e = refused("[provider_accounts.kling]\nmax_slots = 3\npools = {}");
    assert!(
        e.contains("provider_accounts.kling.pools names no pool"),
        "{e}"
    );
    let e = refused("[provider_accounts.kling]\nmax_slots = 3\npools.\"v\" = { mni = 1 }");
    assert!(e.contains("unknown field") && e.contains("mni"), "{e}");
    let e = refused(
        "[provider_accounts.a]\nmax_slots = 3\npools.\"v\" = {}\n[provider_accounts.b]\nmax_slots = 3\npools.\"v\" = {}",
    );
    assert!(
        e.contains("provider_accounts.b.pools.\"v\"") && e.contains("provider account \"a\""),
        "{e}"
    );
    let e = refused("[provider_accounts.\"a b\"]\nmax_slots = 3\npools.\"v\" = {}");
    assert!(e.contains("provider_accounts.a b"), "{e}");
    let e = refused("[provider_accounts.k]\nmax_slots = 3\npools.\"v\" = { account = \"../x\" }");
    assert!(e.contains("provider_accounts.k.pools.\"v\".account"), "{e}");
}
