//! A handler's configuration (`[handlers.<name>]`) read through the host, with errors that
//! name the key to set, so a misconfiguration reads the same in every handler.

use std::str::FromStr;

use crate::host::Host;

/// The settings of one handler.
#[derive(Clone, Copy)]
pub struct Settings<'h> {
    host: &'h dyn Host,
    handler: &'h str,
}

impl<'h> Settings<'h> {
    /// The settings of `handler` (its name, used in messages).
    pub fn new(host: &'h dyn Host, handler: &'h str) -> Settings<'h> {
        Settings { host, handler }
    }

    /// A setting as configured, if present.
    pub fn get(&self, key: &str) -> Option<String> {
        self.host.config(key)
    }

    /// A setting that must be present and not blank (returned as configured).
    pub fn required(&self, key: &str) -> Result<String, String> {
        let handler = self.handler;
        self.get(key)
            .filter(|v| !v.trim().is_empty())
            .ok_or_else(|| format!("{key} is not configured (set handlers.{handler}.{key})"))
    }

    /// An optional setting parsed (trimmed) as `T`; `what` completes "must be …" in the error,
    /// e.g. `"an integer"`.
    pub fn parsed<T: FromStr>(&self, key: &str, what: &str) -> Result<Option<T>, String> {
        self.checked(key, what, |_: &T| true)
    }

    /// An optional positive, finite number (e.g. a scale factor).
    pub fn positive(&self, key: &str) -> Result<Option<f64>, String> {
        self.checked(key, "a positive number", |f: &f64| {
            f.is_finite() && *f > 0.0
        })
    }

    /// An optional setting parsed as `T` and accepted by `ok`.
    pub fn checked<T: FromStr>(
        &self,
        key: &str,
        what: &str,
        ok: impl Fn(&T) -> bool,
    ) -> Result<Option<T>, String> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.trim().parse::<T>() {
            Ok(parsed) if ok(&parsed) => Ok(Some(parsed)),
            _ => Err(format!(
                "handlers.{}.{key} must be {what}, got {v:?}",
                self.handler
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::ScriptedHost;

    #[test]
    fn errors_name_the_key_to_set() {
        let host = ScriptedHost::new()
            .with_config("blank", "  ")
            .with_config("n", " 42 ")
            .with_config("scale", "0");
        let s = Settings::new(&host, "h");
        assert_eq!(
            s.required("base_url"),
            Err("base_url is not configured (set handlers.h.base_url)".into())
        );
        assert!(s.required("blank").is_err());
        assert_eq!(s.parsed::<u32>("n", "an integer"), Ok(Some(42)));
        assert_eq!(s.parsed::<u32>("absent", "an integer"), Ok(None));
        assert_eq!(
            s.positive("scale"),
            Err("handlers.h.scale must be a positive number, got \"0\"".into())
        );
    }
}
