//! What every simulator's options share: the defaults of the knobs they all have and the
//! start-up checks they all make, each error naming its flag.

use anyhow::bail;

/// Default time scale: real durations.
pub const TIME_SCALE_DEFAULT: f64 = 1.0;
/// Default seed of the deterministic draws.
pub const SEED_DEFAULT: u64 = 42;
/// Default delay of a "slow" answer, in real milliseconds.
pub const SLOW_MS_DEFAULT: u64 = 2_000;

/// Refuses a concurrency of 0 (`flags` names the flags that set it), a time scale that is not
/// a positive number, and any rate outside 0..1, naming its flag.
pub(crate) fn check(
    flags: &str,
    concurrency_ok: bool,
    time_scale: f64,
    rates: &[(&str, f64)],
) -> anyhow::Result<()> {
    if !concurrency_ok {
        bail!("{flags} must be at least 1");
    }
    if !(time_scale.is_finite() && time_scale > 0.0) {
        bail!("--time-scale must be a positive number (got {time_scale})");
    }
    for &(flag, rate) in rates {
        if !(0.0..=1.0).contains(&rate) {
            bail!("{flag} must be between 0 and 1 (got {rate})");
        }
    }
    Ok(())
}
