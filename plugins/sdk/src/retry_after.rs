//! How long a provider asked to be left alone: `retry-after-ms` (milliseconds, a common
//! extension), else `Retry-After` as delay-seconds or as an HTTP-date (RFC 9110 section
//! 10.2.3, all three date formats).

use std::time::{Duration, UNIX_EPOCH};

use crate::host::header;

/// The wait in milliseconds the answer's headers ask for, relative to `now_ms` (the call's
/// clock). `None` when neither header is present or readable; a date in the past is `Some(0)`.
/// `retry-after-ms` wins when both are readable: it is the more precise.
pub fn retry_after_ms(headers: &[(String, String)], now_ms: u64) -> Option<u64> {
    let precise = header(headers, "retry-after-ms").and_then(|v| non_negative(v, 1.0));
    precise.or_else(|| header(headers, "retry-after").and_then(|v| parse(v, now_ms)))
}

/// One `Retry-After` value: delay-seconds (fractions accepted) or an HTTP-date.
pub fn parse(value: &str, now_ms: u64) -> Option<u64> {
    let value = value.trim();
    if let Some(ms) = non_negative(value, 1000.0) {
        return Some(ms);
    }
    let at = httpdate::parse_http_date(value).ok()?;
    let at_ms = at
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO)
        .as_millis();
    let at_ms = u64::try_from(at_ms).unwrap_or(u64::MAX);
    Some(at_ms.saturating_sub(now_ms))
}

/// A non-negative decimal number times `scale`, as whole milliseconds (saturating).
fn non_negative(value: &str, scale: f64) -> Option<u64> {
    let value = value.trim();
    // Only digits and one dot: refuses signs, exponents, `inf` and `NaN` that `f64` parses.
    if value.is_empty() || !value.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return None;
    }
    let n: f64 = value.parse().ok()?;
    // `as` saturates: absurdly large waits become u64::MAX (the host clamps hints anyway).
    Some((n * scale).ceil() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// 2015-10-21 07:28:00 UTC, the RFC's example date.
    const RFC_EXAMPLE_MS: u64 = 1_445_412_480_000;

    #[test]
    fn delay_seconds() {
        assert_eq!(parse("120", 0), Some(120_000));
        assert_eq!(parse(" 0 ", 0), Some(0));
        assert_eq!(parse("1.5", 0), Some(1_500));
        for bad in ["", "-1", "+3", "1e3", "inf", "NaN", "soon", "1,5"] {
            assert_eq!(parse(bad, 0), None, "{bad:?}");
        }
    }

    #[test]
    fn http_dates_in_all_three_formats_count_from_now() {
        let now = RFC_EXAMPLE_MS - 30_000;
        for date in [
            "Wed, 21 Oct 2015 07:28:00 GMT",
            "Wednesday, 21-Oct-15 07:28:00 GMT",
            "Wed Oct 21 07:28:00 2015",
        ] {
            assert_eq!(parse(date, now), Some(30_000), "{date}");
        }
        assert_eq!(
            parse("Wed, 21 Oct 2015 07:28:00 GMT", RFC_EXAMPLE_MS + 5_000),
            Some(0),
            "a date in the past means now"
        );
        assert_eq!(parse("Wed, 32 Oct 2015 07:28:00 GMT", 0), None);
    }

    #[test]
    fn retry_after_ms_wins_and_names_are_case_insensitive() {
        let both = headers(&[("Retry-After", "10"), ("Retry-After-Ms", "250.2")]);
        assert_eq!(retry_after_ms(&both, 0), Some(251));
        let seconds = headers(&[("RETRY-AFTER", "3")]);
        assert_eq!(retry_after_ms(&seconds, 0), Some(3_000));
        let unreadable_ms = headers(&[("retry-after-ms", "x"), ("retry-after", "2")]);
        assert_eq!(retry_after_ms(&unreadable_ms, 0), Some(2_000));
        assert_eq!(retry_after_ms(&headers(&[("x", "1")]), 0), None);
    }
}
