//! The form of the inputs Runway checks at create time, checked in `plan` instead so a bad
//! payload is a 422 naming the field rather than a failed unit ("Input assets" in
//! RUNWAY_API.md): image references (an HTTPS URL on a domain of at most 2048 characters, a
//! base64 data URI of a JPEG, PNG or WebP under 5 MB, or a `runway://` upload URI) and prompt
//! text (at most 1000 UTF-16 code units). Only the form is checked: nothing is fetched.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use slotd_sdk::PlanError;
use slotd_sdk::fields::shorten;

/// Longest image URL, in characters.
pub const URL_MAX_CHARS: usize = 2048;
/// A data URI must be shorter than this, whole.
pub const DATA_URI_MAX_BYTES: usize = 5 * 1024 * 1024;
/// Media types a data URI may carry.
const IMAGE_TYPES: [&str; 3] = ["image/jpeg", "image/png", "image/webp"];
/// Longest prompt, in UTF-16 code units (not bytes, not characters).
pub const PROMPT_MAX_UTF16: usize = 1000;

/// Check one image reference; the error names `field`.
pub fn check_image(value: &str, field: &str) -> Result<(), PlanError> {
    let problem = if value.is_empty() {
        Some("must not be empty".to_string())
    } else if let Some(rest) = value.strip_prefix("data:") {
        data_uri_problem(value.len(), rest)
    } else if let Some(rest) = value.strip_prefix("runway://") {
        rest.is_empty()
            .then(|| "is a runway:// upload URI without a name".to_string())
    } else {
        url_problem(value)
    };
    match problem {
        Some(message) => Err(PlanError::at(field, message)),
        None => Ok(()),
    }
}

fn url_problem(value: &str) -> Option<String> {
    let n = value.chars().count();
    if n > URL_MAX_CHARS {
        return Some(format!(
            "is a URL of {n} characters; Runway takes at most {URL_MAX_CHARS}"
        ));
    }
    let Some(scheme_end) = value.find("://") else {
        return Some(not_an_image_reference(value));
    };
    let (scheme, rest) = (&value[..scheme_end], &value[scheme_end + 3..]);
    if !scheme.eq_ignore_ascii_case("https") {
        return Some(if scheme.eq_ignore_ascii_case("http") {
            format!(
                "must be an HTTPS URL (Runway fetches only HTTPS), got {:?}",
                shorten(value)
            )
        } else {
            not_an_image_reference(value)
        });
    }
    if value.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Some(format!(
            "is not a valid URL (it contains spaces): {:?}",
            shorten(value)
        ));
    }
    match host_of(rest) {
        None => Some(format!("is a URL without a host: {:?}", shorten(value))),
        Some(host) if is_ip_address(host) => Some(format!(
            "must be hosted on a domain name, not an IP address ({host})"
        )),
        Some(_) => None,
    }
}

/// The message for a value that is none of the accepted forms.
fn not_an_image_reference(value: &str) -> String {
    format!(
        "must be an HTTPS URL, a data URI (data:image/png;base64,…) or a runway:// upload URI, \
         got {:?}",
        shorten(value)
    )
}

/// The host of a URL's authority (`rest` is what follows `scheme://`), without user info or
/// port; `None` when empty.
fn host_of(rest: &str) -> Option<&str> {
    let authority = rest.split(['/', '?', '#', '\\']).next().unwrap_or_default();
    let host_port = authority.rsplit('@').next().unwrap_or_default();
    let host = if host_port.starts_with('[') {
        // An IPv6 literal, `[…]` with an optional port after it.
        host_port
            .find(']')
            .map_or(host_port, |end| &host_port[..=end])
    } else {
        host_port.split(':').next().unwrap_or_default()
    };
    (!host.is_empty()).then_some(host)
}

/// Whether a URL host is an IP address rather than a domain. Follows the URL standard: an
/// IPv6 literal, or a host whose last label is a number (decimal, or hex with `0x`), which
/// parses as IPv4 (`10.0.0.1`, `0x7f.1`, `2130706433`).
fn is_ip_address(host: &str) -> bool {
    if host.starts_with('[') {
        return true;
    }
    let host = host.strip_suffix('.').unwrap_or(host);
    let last = host.rsplit('.').next().unwrap_or_default();
    let hex = last.strip_prefix("0x").or_else(|| last.strip_prefix("0X"));
    match hex {
        Some(digits) => digits.chars().all(|c| c.is_ascii_hexdigit()),
        None => !last.is_empty() && last.chars().all(|c| c.is_ascii_digit()),
    }
}

/// `data:<image type>;base64,<payload>` (`rest` is what follows `data:`), the whole URI
/// (`total_len` bytes) under 5 MB.
fn data_uri_problem(total_len: usize, rest: &str) -> Option<String> {
    if total_len >= DATA_URI_MAX_BYTES {
        return Some(format!(
            "is a data URI of {total_len} bytes; Runway takes less than {DATA_URI_MAX_BYTES} \
             (5 MB), so send a larger image by HTTPS URL"
        ));
    }
    let Some((meta, payload)) = rest.split_once(',') else {
        return Some("is not a valid data URI (no comma before the data)".into());
    };
    let Some(media_type) = meta.strip_suffix(";base64") else {
        return Some("must be a base64 data URI (data:image/png;base64,…)".into());
    };
    if !IMAGE_TYPES.contains(&media_type.to_ascii_lowercase().as_str()) {
        return Some(format!(
            "is a data URI of type {:?}; Runway takes {}",
            shorten(media_type),
            IMAGE_TYPES.join(", ")
        ));
    }
    if payload.is_empty() || STANDARD.decode(payload).is_err() {
        return Some("is not a valid data URI (its data is not base64)".into());
    }
    None
}

/// Check prompt text: not blank, at most [`PROMPT_MAX_UTF16`] UTF-16 code units.
pub fn check_prompt(value: &str, field: &str) -> Result<(), PlanError> {
    if value.trim().is_empty() {
        return Err(PlanError::at(field, "must not be empty"));
    }
    let units = value.encode_utf16().count();
    if units > PROMPT_MAX_UTF16 {
        return Err(PlanError::at(
            field,
            format!(
                "is {units} UTF-16 code units long; Runway takes at most {PROMPT_MAX_UTF16} \
                 (characters outside the Basic Multilingual Plane, such as most emoji, count \
                 twice)"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(value: &str) -> Option<String> {
        check_image(value, "shots[0].prompt_image")
            .err()
            .map(|e| e.message)
    }

    #[test]
    fn https_urls_on_domains_pass() {
        for ok in [
            "https://cdn.example.com/a.png",
            "HTTPS://cdn.example.com",
            "https://user:pw@cdn.example.com:8443/a.png?x=1#y",
            "https://localhost/a.png",
            "https://1.example/a.png",
            "runway://uploads/abc",
        ] {
            assert_eq!(problem(ok), None, "{ok}");
        }
    }

    #[test]
    fn urls_runway_refuses_are_refused_with_the_reason() {
        for (bad, why) in [
            ("http://cdn.example.com/a.png", "HTTPS"),
            (
                "ftp://cdn.example.com/a.png",
                "must be an HTTPS URL, a data URI",
            ),
            ("cdn.example.com/a.png", "must be an HTTPS URL, a data URI"),
            ("https:///a.png", "without a host"),
            ("https://cdn.example.com/a b.png", "spaces"),
            ("https://203.0.113.7/a.png", "not an IP address"),
            ("https://203.0.113.7.:443/a.png", "not an IP address"),
            ("https://0x7f.1/a.png", "not an IP address"),
            ("https://2130706433/a.png", "not an IP address"),
            ("https://[2001:db8::1]:8443/a.png", "not an IP address"),
            ("runway://", "without a name"),
            ("", "must not be empty"),
        ] {
            let got = problem(bad).unwrap_or_default();
            assert!(got.contains(why), "{bad}: {got}");
        }
    }

    #[test]
    fn url_length_is_counted_in_characters() {
        let base = "https://cdn.example.com/";
        let at_limit = format!("{base}{}", "é".repeat(URL_MAX_CHARS - base.len()));
        assert_eq!(problem(&at_limit), None);
        let over = format!("{at_limit}x");
        assert!(problem(&over).is_some_and(|m| m.contains("2048")));
    }

    #[test]
    fn data_uris_need_an_image_type_base64_and_less_than_5_mb() {
        assert_eq!(problem("data:image/png;base64,iVBORw0KGgo="), None);
        assert_eq!(problem("data:IMAGE/JPEG;base64,/9j/"), None);
        for (bad, why) in [
            ("data:image/gif;base64,R0lGODlh", "image/jpeg"),
            ("data:image/png,raw", "base64 data URI"),
            ("data:image/png;base64", "no comma"),
            ("data:image/png;base64,***", "not base64"),
            ("data:image/png;base64,", "not base64"),
        ] {
            let got = problem(bad).unwrap_or_default();
            assert!(got.contains(why), "{bad}: {got}");
        }
        let prefix = "data:image/png;base64,";
        // The longest base64 (a multiple of 4) that keeps the whole URI under 5 MB.
        let longest = (DATA_URI_MAX_BYTES - prefix.len() - 1) / 4 * 4;
        let fits = format!("{prefix}{}", "A".repeat(longest));
        assert_eq!(problem(&fits), None);
        let too_big = format!("{prefix}{}", "A".repeat(DATA_URI_MAX_BYTES - prefix.len()));
        assert!(problem(&too_big).is_some_and(|m| m.contains("5 MB")));
    }

    #[test]
    fn prompts_are_measured_in_utf16_code_units() {
        let field = "shots[2].prompt_text";
        assert_eq!(check_prompt(&"a".repeat(1000), field), Ok(()));
        assert_eq!(
            check_prompt(&"é".repeat(1000), field),
            Ok(()),
            "é is one unit"
        );
        let emoji = "😀".repeat(501);
        let err = check_prompt(&emoji, field).err();
        assert_eq!(err.as_ref().and_then(|e| e.field.as_deref()), Some(field));
        assert!(err.is_some_and(|e| e.message.contains("1002 UTF-16")));
        assert_eq!(check_prompt(&"😀".repeat(500), field), Ok(()));
        assert!(check_prompt(" \n", field).is_err());
    }
}
