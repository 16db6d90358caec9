//! The `SLOTD_*` environment overrides (docs/interfaces.md): one table, each entry beating the
//! file's key. (`SLOTD_CONFIG`, which names the file, is read by [`super::Config::load`].)

use std::path::PathBuf;

use anyhow::anyhow;

use super::Config;
use super::values::{duration_text, listen_text};

/// One environment variable and what it sets.
pub(super) struct Override {
    pub var: &'static str,
    /// The file key it beats (dotted for a section's key).
    pub key: &'static str,
    /// Set the value from the variable's text, or say what is wrong with the text.
    pub set: fn(&mut Config, &str) -> Result<(), String>,
}

/// Every `SLOTD_*` override. An empty `SLOTD_REDIS_URL` or `SLOTD_PUBLIC_URL` unsets the
/// file's value, like an empty value in the file. `SLOTD_TICK_INTERVAL` sets the interval
/// only; the timings the file leaves out follow it (`SchedulerConfig::follow_tick`).
pub(super) const OVERRIDES: &[Override] = &[
    Override {
        var: "SLOTD_LISTEN",
        key: "listen",
        set: |c, v| {
            c.listen = listen_text(v)?;
            Ok(())
        },
    },
    Override {
        var: "SLOTD_DATABASE_URL",
        key: "database_url",
        set: |c, v| {
            c.database_url = v.into();
            Ok(())
        },
    },
    Override {
        var: "SLOTD_REDIS_URL",
        key: "redis_url",
        set: |c, v| {
            c.redis_url = Some(v.to_owned()).filter(|s| !s.is_empty());
            Ok(())
        },
    },
    Override {
        var: "SLOTD_REDIS_PREFIX",
        key: "redis_prefix",
        set: |c, v| {
            c.redis_prefix = v.into();
            Ok(())
        },
    },
    Override {
        var: "SLOTD_PLUGINS_DIR",
        key: "plugins_dir",
        set: |c, v| {
            c.plugins_dir = v.into();
            Ok(())
        },
    },
    Override {
        var: "SLOTD_CACHE_DIR",
        key: "cache_dir",
        set: |c, v| {
            c.cache_dir = Some(PathBuf::from(v));
            Ok(())
        },
    },
    Override {
        var: "SLOTD_OBJECT_STORE",
        key: "object_store",
        set: |c, v| {
            c.object_store = v.into();
            Ok(())
        },
    },
    Override {
        var: "SLOTD_PUBLIC_URL",
        key: "public_url",
        set: |c, v| {
            c.public_url = Some(v.to_owned()).filter(|s| !s.is_empty());
            Ok(())
        },
    },
    Override {
        var: "SLOTD_LOG_JSON",
        key: "log_json",
        // Anything else is false: a variable meant to turn JSON on never fails a start.
        set: |c, v| {
            c.log_json = matches!(v, "1" | "true" | "yes");
            Ok(())
        },
    },
    Override {
        var: "SLOTD_TICK_INTERVAL",
        key: "scheduler.tick_interval",
        set: |c, v| {
            c.scheduler.tick_interval = duration_text(v)?;
            Ok(())
        },
    },
];

impl Config {
    /// Apply every override whose variable is set, naming the variable (and the key it
    /// stands for) on error.
    pub(super) fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        for o in OVERRIDES {
            if let Some(text) = env(o.var) {
                (o.set)(self, &text)
                    .map_err(|problem| anyhow!("{} (for {}): {problem}", o.var, o.key))?;
            }
        }
        Ok(())
    }
}
