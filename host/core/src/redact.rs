//! Keeping credentials out of logs, errors and `Debug` output.
//!
//! Connection URLs carry passwords (`postgres://user:secret@host/db`,
//! `redis://:secret@host`), so every place that prints one prints [`redact_url`] of it instead.
//! API keys and handler secrets are [`crate::config::Secret`]s, whose `Debug` is `Secret(***)`.

/// What a redacted password reads as.
pub const REDACTED: &str = "***";

/// Query parameters that carry a password in database URLs (libpq's `password`,
/// `sslpassword`); their values are redacted like the userinfo password.
const SECRET_PARAMS: [&str; 2] = ["password", "sslpassword"];

/// `url` with its password (the userinfo after `user:`) and any password query parameter
/// replaced by [`REDACTED`]; anything else is left as written. Works on text that is not a
/// valid URL too (an operator's typo must not leak either): the userinfo is everything between
/// `://` and the last `@` before the query.
pub fn redact_url(url: &str) -> String {
    let (before_query, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let mut out = match before_query.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((userinfo, host)) => match userinfo.split_once(':') {
                Some((user, _password)) => format!("{scheme}://{user}:{REDACTED}@{host}"),
                None => before_query.to_string(),
            },
            None => before_query.to_string(),
        },
        None => before_query.to_string(),
    };
    if let Some(query) = query {
        out.push('?');
        let params: Vec<String> = query
            .split('&')
            .map(|pair| match pair.split_once('=') {
                Some((name, _)) if SECRET_PARAMS.contains(&name.to_ascii_lowercase().as_str()) => {
                    format!("{name}={REDACTED}")
                }
                _ => pair.to_string(),
            })
            .collect();
        out.push_str(&params.join("&"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passwords_are_replaced_and_the_rest_kept() {
        assert_eq!(
            redact_url("postgres://u:secret@db.example:5432/slotd"),
            "postgres://u:***@db.example:5432/slotd"
        );
        assert_eq!(
            redact_url("redis://:hunter2@127.0.0.1:6379/0"),
            "redis://:***@127.0.0.1:6379/0"
        );
        // '@' and '/' inside an unescaped password: still nothing of it shows.
        let odd = redact_url("postgres://u:p@ss/w0rd@host/db");
        assert!(!odd.contains("p@ss") && !odd.contains("w0rd"), "{odd}");
        assert_eq!(
            redact_url("postgres://u@host/db?sslmode=require&password=s3cr3t"),
            "postgres://u@host/db?sslmode=require&password=***"
        );
        for plain in [
            "sqlite://slotd.db",
            "sqlite:///var/lib/slotd/slotd.db?mode=rwc",
            "postgres://root@127.0.0.1:5432/test",
            "file://./objects",
            "not a url",
        ] {
            assert_eq!(redact_url(plain), plain);
        }
    }
}
