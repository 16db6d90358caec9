//! The demo's Kling accounts and its tenants' spending: `kling-video` draws on two accounts,
//! `main` (the first simulator, 20 at once, shared with `kling-avatar` as one provider account:
//! video min 14 max 20, avatars min 2 max 6) and `backup` (a second simulator with its own keys
//! and a limit of 10), and studio-b has a budget. The summary shows what each account ran, what
//! each pool borrowed of the shared one, and what each tenant spent.

use serde_json::Value;

use slotd_core::config::{BudgetConfig, Config, ProviderAccountConfig, ShareConfig, TenantConfig};
use slotd_sim::kling::{SimHandle, SimOptions, SimStats};

/// The backup account's keys and limit.
const BACKUP_ACCESS_KEY: &str = "demo-backup-access-key";
const BACKUP_SECRET_KEY: &str = "demo-backup-secret-key";
pub const BACKUP_SLOTS: u32 = 10;
/// The main Kling account's limit, over both pools.
pub const MAIN_SLOTS: u32 = 20;
/// `kling:video`'s share of the main account: (min, max).
pub const VIDEO_SHARE: (u32, u32) = (14, 20);
/// `kling:avatar`'s share of the main account: (min, max).
pub const AVATAR_SHARE: (u32, u32) = (2, 6);
/// studio-b's budget per day, in Kling units.
const STUDIO_B_BUDGET: f64 = 100.0;

/// Start the backup account's simulator.
pub async fn start_backup(
    time_scale: f64,
    seed: u64,
    failure_rate: f64,
) -> anyhow::Result<SimHandle> {
    slotd_sim::kling::start(SimOptions {
        listen: "127.0.0.1:0".parse()?,
        concurrency: BACKUP_SLOTS,
        time_scale,
        seed: seed.wrapping_add(1),
        access_key: BACKUP_ACCESS_KEY.into(),
        secret_key: BACKUP_SECRET_KEY.into(),
        failure_after_accept_rate: failure_rate,
        ..SimOptions::default()
    })
    .await
}

/// `[[handlers.kling-video.accounts]]` for both accounts, the main one shared with
/// `kling-avatar` (`[provider_accounts.kling-main]`), and studio-b's budget.
pub fn configure(c: &mut Config, backup: &SimHandle) -> anyhow::Result<()> {
    let accounts: toml::Table = toml::from_str(&format!(
        r#"[[accounts]]
name = "main"
max_slots = {MAIN_SLOTS}
[[accounts]]
name = "backup"
max_slots = {BACKUP_SLOTS}
base_url = "{}"
access_key = "{BACKUP_ACCESS_KEY}"
secret_key = {{ value = "{BACKUP_SECRET_KEY}" }}
allowed_hosts = ["{}"]
"#,
        backup.base_url(),
        backup.addr()
    ))?;
    if let Some(h) = c.handlers.get_mut("kling-video") {
        h.set_accounts("kling-video", &accounts["accounts"])?;
    }
    let share = |(min, max): (u32, u32), account: Option<&str>| ShareConfig {
        min,
        max: Some(max),
        account: account.map(str::to_string),
    };
    c.provider_accounts.insert(
        "kling-main".into(),
        ProviderAccountConfig {
            max_slots: MAIN_SLOTS,
            pools: [
                ("kling:video".to_string(), share(VIDEO_SHARE, Some("main"))),
                ("kling:avatar".to_string(), share(AVATAR_SHARE, None)),
            ]
            .into(),
        },
    );
    c.tenants.insert(
        "studio-b".into(),
        TenantConfig {
            budget: Some(BudgetConfig {
                limit: STUDIO_B_BUDGET,
                period: std::time::Duration::from_secs(86_400),
            }),
            ..TenantConfig::default()
        },
    );
    Ok(())
}

/// The provider requests of both accounts, as one account's figures (the summary's counts).
pub fn combined(main: &SimStats, backup: &SimStats) -> SimStats {
    let mut s = main.clone();
    s.requests += backup.requests;
    s.creates += backup.creates;
    s.single_queries += backup.single_queries;
    s.list_queries += backup.list_queries;
    s.downloads += backup.downloads;
    s.callbacks_sent += backup.callbacks_sent;
    s.rate_limited_1303 += backup.rate_limited_1303;
    s.validation_refusals += backup.validation_refusals;
    s.auth_refusals += backup.auth_refusals;
    s.balance_refusals += backup.balance_refusals;
    s
}

/// What each pool held at most of the shared main account, from its simulator's job log:
/// (video, avatars, both).
pub fn shared_peaks(main: &[slotd_sim::kling::SimJob]) -> (usize, usize, usize) {
    let of = |pool: &str| -> Vec<&slotd_sim::kling::SimJob> {
        main.iter()
            .filter(|j| crate::report::pool_of_kind(&j.kind) == pool)
            .collect()
    };
    let all: Vec<&slotd_sim::kling::SimJob> = main.iter().collect();
    (
        crate::report::peak_running(&of("kling:video")),
        crate::report::peak_running(&of("kling:avatar")),
        crate::report::peak_running(&all),
    )
}

/// Per-account use, the shared account's shares, and per-tenant spend, for the summary.
pub fn print(
    main: &SimStats,
    backup: &SimStats,
    main_jobs: &[slotd_sim::kling::SimJob],
    usage: &[Value],
) {
    let (video, avatar, both) = shared_peaks(main_jobs);
    println!(
        "provider account kling-main ({MAIN_SLOTS} at once): most at once {both}; kling:video \
         (min {}, max {}) up to {video}, {} borrowed beyond its min; kling:avatar (min {}, max {}) \
         up to {avatar}, {} borrowed",
        VIDEO_SHARE.0,
        VIDEO_SHARE.1,
        video.saturating_sub(VIDEO_SHARE.0 as usize),
        AVATAR_SHARE.0,
        AVATAR_SHARE.1,
        avatar.saturating_sub(AVATAR_SHARE.0 as usize),
    );
    println!(
        "accounts (kling-video): main {} jobs, most at once {} of {MAIN_SLOTS} (with kling:avatar) | backup {} jobs, most at once {} of {BACKUP_SLOTS}",
        main.creates_by_kind.get("text2video").copied().unwrap_or(0)
            + main
                .creates_by_kind
                .get("image2video")
                .copied()
                .unwrap_or(0),
        main.max_running,
        backup.creates,
        backup.max_running,
    );
    println!("spend per tenant:");
    for u in usage {
        let tenant = u["tenant"].as_str().unwrap_or("?");
        let mut line = format!(
            "  {tenant:<9} cost {:>6.1} as the providers reported it (estimated {:>6.1}; Kling units, Runway credits and fal dollars add up as they are)",
            u["total_cost"].as_f64().unwrap_or(0.0),
            u["total_estimated"].as_f64().unwrap_or(0.0)
        );
        if let (Some(limit), Some(remaining)) =
            (u["budget"]["limit"].as_f64(), u["remaining"].as_f64())
        {
            line.push_str(&format!(
                " | budget {limit:.1} per day, {remaining:.1} left"
            ));
        }
        println!("{line}");
    }
}
