//! Judging a rollout's stage (docs/handlers.md, "Staged rollout"): pure, from the outcome
//! counts of the candidate's units and the incumbent's and the signals their tick calls left
//! (`release_signals`).
//!
//! A unit counts once its job ended: `succeeded`, `finalizing` and `completed` as a success,
//! `failed` as a failure (by its error code); the release counted is the one that last
//! submitted it. A stage is judged once `min_units` of the candidate's units ended *in that
//! stage*, on everything both releases did *since the rollout started* (the same pools and
//! time window; the incumbent's share shrinks stage by stage, so a stage's own window would
//! leave it nothing to compare with at 100 %). Each of these is a check of a share, the
//! candidate's against the incumbent's:
//! - units failed, of the units ended; and the same for each failure class (error code) the
//!   candidate failed units with;
//! - creates the provider refused for capacity, of the creates sent;
//! - handler faults, of the units its calls were given;
//! - changes the state machine refused, of the units its calls were given.
//!
//! A check **fails** when the candidate's share exceeds the incumbent's by more than `margin`
//! *and* that excess is unlikely to be chance: a one-sided Fisher exact test (hypergeometric
//! tail: the chance that the candidate's side would hold at least its count if the events
//! fell on both sides alike) below 1 % (divided among the failure classes, Bonferroni, so
//! several classes do not multiply the false alarms). Exact, so it holds on the small counts
//! of a first stage: 5 failures of 20 against none of 69 fail (p ≈ 0.0004), 2 of 10 against
//! none of 62 do not yet (p ≈ 0.018). It is **within** when the share is within the margin
//! (for the units-failed check, the one passing rests on, also *shown* within: as few
//! failures would be unlikely, binomial below [`P_WITHIN`], were the candidate's true share the
//! incumbent's plus the margin; none of 32 at 5 %), and **undecided** otherwise: beyond the
//! margin but not yet beyond chance (1 failure of 10 against none), or not yet shown within.
//!
//! Provider job durations are a check of their own, on geometric means (means of ln ms, so
//! one long-tail job does not swing a stage's few): it fails when the candidate's is more than
//! [`DURATION_MARGIN`] longer than the incumbent's and a one-sided Welch test (normal tail of
//! the excess over the margin, over its standard error) puts that below 1 %, each side having
//! at least `min_units` jobs timed; it is never undecided (durations are the noisiest signal:
//! they can roll a stage back, never hold one).
//!
//! The stage **fails** (rolls back) on the first failing check, at any count, **waits** while
//! fewer than `min_units` of the candidate's units ended in it or any check is undecided, and
//! **passes** (moves on; the last stage promotes) when all are within. So a bad candidate is
//! rolled back as soon as its failures are beyond chance, and no stage passes on fewer than
//! `min_units` of its units.

use std::collections::BTreeMap;

use serde::Serialize;
use slotd_store::{ReleaseOutcome, ReleaseSignals};

/// The chance below which the candidate's excess failures are not put down to chance.
pub const P_FAIL: f64 = 0.01;

/// The chance below which the candidate's unit failures are shown within the margin: a stage
/// passes on 80 % confidence (later stages judge again, on more units).
pub const P_WITHIN: f64 = 0.2;

/// One release's ended units in the window.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Side {
    pub ended: u64,
    pub failed: u64,
    /// Failures by error code (`none` when the error names no code).
    pub failed_by_code: BTreeMap<String, u64>,
}

impl Side {
    /// The side of `release` in `outcomes`.
    pub fn of(outcomes: &[ReleaseOutcome], release: &str) -> Side {
        let mut side = Side::default();
        for o in outcomes.iter().filter(|o| o.release == release) {
            let n = u64::try_from(o.units).unwrap_or(0);
            side.ended += n;
            if o.status == "failed" {
                side.failed += n;
                let code = o
                    .error
                    .as_deref()
                    .and_then(|e| serde_json::from_str::<serde_json::Value>(e).ok())
                    .and_then(|v| v["code"].as_str().map(str::to_string))
                    .unwrap_or_else(|| "none".into());
                *side.failed_by_code.entry(code).or_default() += n;
            }
        }
        side
    }

    /// The failure share (0 with nothing ended).
    pub fn share(&self) -> f64 {
        if self.ended == 0 {
            0.0
        } else {
            self.failed as f64 / self.ended as f64
        }
    }
}

/// What a judgement found.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Not enough of the candidate's units ended yet, or a check is still undecided.
    Wait(String),
    Pass(String),
    Fail(String),
}

/// How much longer the candidate's mean provider job may be than the incumbent's.
pub const DURATION_MARGIN: f64 = 0.25;

/// What a judgement compares: both releases' outcomes and signals since the rollout started.
#[derive(Clone, Debug, Default)]
pub struct Evidence {
    pub candidate: Side,
    pub incumbent: Side,
    pub candidate_signals: ReleaseSignals,
    pub incumbent_signals: ReleaseSignals,
}

/// One check of a judgement.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Check {
    /// What is compared: `units failed`, `units failed with 1303`, `creates refused`,
    /// `handler faults`, `changes refused`, `job duration`.
    pub signal: String,
    /// The candidate's share (or mean job, ms) and the incumbent's.
    pub candidate: f64,
    pub incumbent: f64,
    /// The one-sided p-value of the candidate's excess.
    pub p: f64,
    /// `within`, `undecided` or `worse`.
    pub result: &'static str,
    /// The counts behind it, said in words.
    pub said: String,
}

/// The figures of a judgement, as stored with the rollout and shown.
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    /// Since the rollout started.
    pub candidate: Side,
    pub incumbent: Side,
    pub candidate_signals: ReleaseSignals,
    pub incumbent_signals: ReleaseSignals,
    /// The candidate's units ended in this stage.
    pub stage_ended: u64,
    /// The one-sided Fisher exact p-value of the candidate's unit failures.
    pub p: f64,
    pub margin: f64,
    pub min_units: u32,
    /// Every check, in the order judged.
    pub checks: Vec<Check>,
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, n = 9; relative error below 1e-13): the log-factorials
/// of the Fisher tail without a table as long as the counts.
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const C: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x)Γ(1−x) = π / sin(πx).
        return (std::f64::consts::PI / (std::f64::consts::PI * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut a = C[0];
    let t = x + G + 0.5;
    for (i, c) in C.iter().enumerate().skip(1) {
        a += c / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

fn ln_choose(n: u64, k: u64) -> f64 {
    ln_gamma(n as f64 + 1.0) - ln_gamma(k as f64 + 1.0) - ln_gamma((n - k) as f64 + 1.0)
}

/// P(X ≥ a) for X hypergeometric: `draws` drawn from `total` of which `marked` are marked.
pub fn fisher_upper(total: u64, marked: u64, draws: u64, a: u64) -> f64 {
    let (marked, draws) = (marked.min(total), draws.min(total));
    let hi = marked.min(draws);
    let lo_k = draws.saturating_sub(total - marked);
    let denom = ln_choose(total, draws);
    (a.max(lo_k)..=hi)
        .map(|k| (ln_choose(marked, k) + ln_choose(total - marked, draws - k) - denom).exp())
        .sum::<f64>()
        .min(1.0)
}

/// P(Z ≥ z) for a standard normal Z (Abramowitz–Stegun 7.1.26 for erfc; error below 1.5e-7).
pub fn normal_upper(z: f64) -> f64 {
    let x = z.abs() / std::f64::consts::SQRT_2;
    let t = 1.0 / (1.0 + 0.327_591_1 * x);
    let poly = t
        * (0.254_829_592
            + t * (-0.284_496_736
                + t * (1.421_413_741 + t * (-1.453_152_027 + t * 1.061_405_429))));
    let erfc = poly * (-x * x).exp();
    if z >= 0.0 {
        erfc / 2.0
    } else {
        1.0 - erfc / 2.0
    }
}

/// A check of a share: the candidate's `c` of `cn` against the incumbent's `i` of `in_`.
fn share_check(
    signal: &str,
    (c, cn): (u64, u64),
    (i, in_): (u64, u64),
    margin: f64,
    alpha: f64,
    shown: bool,
) -> Check {
    let share = |x: u64, n: u64| if n == 0 { 0.0 } else { x as f64 / n as f64 };
    let (pc, pi) = (share(c, cn), share(i, in_));
    let p = if cn == 0 {
        1.0
    } else {
        fisher_upper(cn + in_, c + i, cn, c)
    };
    // Shown within: were the candidate's true share the incumbent's plus the margin, this
    // few events on its units would be unlikely.
    let p_within = binomial_lower(cn, (pi + margin).min(1.0), c);
    let result = if pc - pi > margin && p < alpha {
        "worse"
    } else if pc - pi <= margin && (!shown || p_within < P_WITHIN) {
        "within"
    } else {
        "undecided"
    };
    let shown_said = if shown {
        format!(", shown within: p {p_within:.3}")
    } else {
        String::new()
    };
    Check {
        signal: signal.to_string(),
        candidate: pc,
        incumbent: pi,
        p,
        result,
        said: format!(
            "{signal}: candidate {c} of {cn} ({:.1} %), incumbent {i} of {in_} ({:.1} %), \
             margin {:.1} %, p {p:.4}{shown_said}",
            pc * 100.0,
            pi * 100.0,
            margin * 100.0
        ),
    }
}

/// P(X ≤ a) for X binomial over `n` trials of chance `q`.
pub fn binomial_lower(n: u64, q: f64, a: u64) -> f64 {
    if a >= n || q <= 0.0 {
        return 1.0;
    }
    if q >= 1.0 {
        return 0.0;
    }
    let (lq, lr) = (q.ln(), (1.0 - q).ln());
    (0..=a)
        .map(|k| (ln_choose(n, k) + k as f64 * lq + (n - k) as f64 * lr).exp())
        .sum::<f64>()
        .min(1.0)
}

/// The check of provider job durations: geometric means (means of ln ms), so one long-tail
/// job does not swing a stage's few. Worse when the candidate's is more than
/// [`DURATION_MARGIN`] longer than the incumbent's *and* a one-sided Welch test (normal tail)
/// says it exceeds the margin itself beyond chance; never undecided: durations are the
/// noisiest signal, so they can roll a stage back but never hold one.
fn duration_check(c: &ReleaseSignals, i: &ReleaseSignals, min_jobs: u64) -> Check {
    let stats = |s: &ReleaseSignals| {
        let n = s.jobs.max(0) as f64;
        if n == 0.0 {
            return (0.0, 0.0, 0.0);
        }
        let mean = s.job_log_ms / n;
        let var = if n > 1.0 {
            ((s.job_log_ms_sq - n * mean * mean) / (n - 1.0)).max(0.0)
        } else {
            0.0
        };
        (n, mean, var)
    };
    let ((nc, mc, vc), (ni, mi, vi)) = (stats(c), stats(i));
    let enough = nc >= min_jobs as f64 && ni >= min_jobs as f64;
    let margin = (1.0 + DURATION_MARGIN).ln();
    let excess = mc - mi - margin;
    let se = (vc / nc.max(1.0) + vi / ni.max(1.0)).sqrt();
    let p = if !enough {
        1.0
    } else if se == 0.0 {
        if excess > 0.0 { 0.0 } else { 1.0 }
    } else {
        normal_upper(excess / se)
    };
    let result = if enough && excess > 0.0 && p < P_FAIL {
        "worse"
    } else {
        "within"
    };
    let geo = |n: f64, m: f64| if n == 0.0 { 0.0 } else { m.exp() };
    let (gc, gi) = (geo(nc, mc), geo(ni, mi));
    Check {
        signal: "job duration".into(),
        candidate: gc,
        incumbent: gi,
        p,
        result,
        said: format!(
            "job duration: candidate {gc:.0} ms (geometric mean of {nc} jobs), incumbent \
             {gi:.0} ms of {ni}, margin {:.0} %, p {p:.4}",
            DURATION_MARGIN * 100.0
        ),
    }
}

/// Judge a stage on `e` (since the rollout started); `stage_ended` is the candidate's units
/// ended in this stage.
pub fn judge(e: &Evidence, stage_ended: u64, min_units: u32, margin: f64) -> (Verdict, Figures) {
    let (c, i) = (&e.candidate, &e.incumbent);
    let (cs, is) = (&e.candidate_signals, &e.incumbent_signals);
    let n = |v: i64| u64::try_from(v).unwrap_or(0);
    let mut checks = vec![share_check(
        "units failed",
        (c.failed, c.ended),
        (i.failed, i.ended),
        margin,
        P_FAIL,
        true,
    )];
    let classes = c.failed_by_code.len().max(1) as f64;
    for (code, &failed) in &c.failed_by_code {
        let theirs = i.failed_by_code.get(code).copied().unwrap_or(0);
        checks.push(share_check(
            &format!("units failed with {code}"),
            (failed, c.ended),
            (theirs, i.ended),
            margin,
            P_FAIL / classes,
            false,
        ));
    }
    checks.push(share_check(
        "creates refused",
        (n(cs.create_refused), n(cs.creates)),
        (n(is.create_refused), n(is.creates)),
        margin,
        P_FAIL,
        false,
    ));
    checks.push(share_check(
        "handler faults",
        (n(cs.faults), n(cs.units)),
        (n(is.faults), n(is.units)),
        margin,
        P_FAIL,
        false,
    ));
    checks.push(share_check(
        "changes refused",
        (n(cs.refused_changes), n(cs.units)),
        (n(is.refused_changes), n(is.units)),
        margin,
        P_FAIL,
        false,
    ));
    checks.push(duration_check(cs, is, u64::from(min_units)));
    let figures = Figures {
        candidate: c.clone(),
        incumbent: i.clone(),
        candidate_signals: cs.clone(),
        incumbent_signals: is.clone(),
        stage_ended,
        p: checks[0].p,
        margin,
        min_units,
        checks,
    };
    // A worse check fails the stage at any count (the exact test holds on few units); no
    // stage passes on fewer than `min_units`.
    let verdict = if let Some(worse) = figures.checks.iter().find(|k| k.result == "worse") {
        Verdict::Fail(worse.said.clone())
    } else if stage_ended < u64::from(min_units) {
        Verdict::Wait(format!(
            "{stage_ended} of {min_units} units ended in the stage"
        ))
    } else if let Some(open) = figures.checks.iter().find(|k| k.result == "undecided") {
        Verdict::Wait(open.said.clone())
    } else {
        Verdict::Pass(figures.checks[0].said.clone())
    };
    (verdict, figures)
}

#[cfg(test)]
#[path = "judge_tests.rs"]
mod tests;
