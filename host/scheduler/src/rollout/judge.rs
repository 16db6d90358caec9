//! Judging a rollout's stage (docs/handlers.md, "Staged rollout"): pure, from the outcome
//! counts of the candidate's units and the incumbent's.
//!
//! A unit counts once its job ended: `succeeded`, `finalizing` and `completed` as a success,
//! `failed` as a failure (by its error code); the release counted is the one that last
//! submitted it. A stage is judged once `min_units` of the candidate's units ended *in that
//! stage*, on everything both releases did *since the rollout started* (the same pools and
//! time window; the incumbent's share shrinks stage by stage, so a stage's own window would
//! leave it nothing to compare with at 100 %):
//! - **fail** when the candidate's failure share exceeds the incumbent's by more than `margin`
//!   *and* that many failures are unlikely to be chance: a one-sided Fisher exact test
//!   (hypergeometric tail: the chance that the candidate's units would hold at least its
//!   failures if failures fell on both releases' units alike) below 1 %. Exact, so it holds on
//!   the small counts of a first stage: 5 failures of 20 against none of 69 fail (p ≈ 0.0004),
//!   2 of 10 against none of 62 do not yet (p ≈ 0.018);
//! - **pass** otherwise: the stage moves on (the last one promotes).
//!
//! So a bad candidate is rolled back at the first stage whose judgement shows it, after at most
//! `min_units` of its units ended per stage (plus those still in flight), and no stage passes
//! on fewer.

use std::collections::BTreeMap;

use serde::Serialize;
use slotd_store::ReleaseOutcome;

/// The chance below which the candidate's excess failures are not put down to chance.
pub const P_FAIL: f64 = 0.01;

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
    /// Not enough of the candidate's units ended yet.
    Wait {
        ended: u64,
        needed: u64,
    },
    Pass(String),
    Fail(String),
}

/// The figures of a judgement, as stored with the rollout and shown.
#[derive(Clone, Debug, Serialize)]
pub struct Figures {
    /// Since the rollout started.
    pub candidate: Side,
    pub incumbent: Side,
    /// The candidate's units ended in this stage.
    pub stage_ended: u64,
    /// The one-sided Fisher exact p-value of the candidate's failures.
    pub p: f64,
    pub margin: f64,
    pub min_units: u32,
}

/// ln(n!) for n = 0..=max.
fn ln_factorials(max: u64) -> Vec<f64> {
    let mut t = Vec::with_capacity(max as usize + 1);
    let mut acc = 0.0;
    t.push(0.0);
    for n in 1..=max {
        acc += (n as f64).ln();
        t.push(acc);
    }
    t
}

/// P(X ≥ a) for X hypergeometric: `draws` drawn from `total` of which `marked` are marked.
pub fn fisher_upper(total: u64, marked: u64, draws: u64, a: u64) -> f64 {
    let lf = ln_factorials(total);
    let ln_choose = |n: u64, k: u64| lf[n as usize] - lf[k as usize] - lf[(n - k) as usize];
    let hi = marked.min(draws);
    let lo_k = draws.saturating_sub(total - marked);
    let denom = ln_choose(total, draws);
    (a.max(lo_k)..=hi)
        .map(|k| (ln_choose(marked, k) + ln_choose(total - marked, draws - k) - denom).exp())
        .sum::<f64>()
        .min(1.0)
}

/// Judge a stage: `candidate` and `incumbent` since the rollout started, `stage_ended` the
/// candidate's units ended in this stage.
pub fn judge(
    candidate: &Side,
    incumbent: &Side,
    stage_ended: u64,
    min_units: u32,
    margin: f64,
) -> (Verdict, Figures) {
    let (pc, pi) = (candidate.share(), incumbent.share());
    let p = if candidate.ended == 0 {
        1.0
    } else {
        fisher_upper(
            candidate.ended + incumbent.ended,
            candidate.failed + incumbent.failed,
            candidate.ended,
            candidate.failed,
        )
    };
    let figures = Figures {
        candidate: candidate.clone(),
        incumbent: incumbent.clone(),
        stage_ended,
        p,
        margin,
        min_units,
    };
    if stage_ended < u64::from(min_units) {
        let verdict = Verdict::Wait {
            ended: stage_ended,
            needed: u64::from(min_units),
        };
        return (verdict, figures);
    }
    let said = format!(
        "candidate failed {} of {} ({:.1} %), incumbent {} of {} ({:.1} %), margin {:.1} %, \
         p {p:.4}",
        candidate.failed,
        candidate.ended,
        pc * 100.0,
        incumbent.failed,
        incumbent.ended,
        pi * 100.0,
        margin * 100.0,
    );
    let verdict = if pc - pi > margin && p < P_FAIL {
        Verdict::Fail(said)
    } else {
        Verdict::Pass(said)
    };
    (verdict, figures)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side(ended: u64, failed: u64) -> Side {
        Side {
            ended,
            failed,
            failed_by_code: Default::default(),
        }
    }

    #[test]
    fn a_stage_waits_for_its_minimum() {
        let (v, _) = judge(&side(30, 30), &side(100, 0), 19, 20, 0.05);
        assert_eq!(
            v,
            Verdict::Wait {
                ended: 19,
                needed: 20
            }
        );
    }

    #[test]
    fn the_documented_figures_hold() {
        let fail = |c: Side, i: Side| matches!(judge(&c, &i, 99, 10, 0.05).0, Verdict::Fail(_));
        assert!(fail(side(20, 5), side(69, 0)));
        assert!(!fail(side(10, 2), side(62, 0)));
        // Everything failing against nothing failing.
        assert!(fail(side(20, 20), side(200, 0)));
        // As good as the incumbent, or slightly worse within the margin: passes.
        assert!(!fail(side(40, 2), side(200, 10)));
        assert!(!fail(side(200, 16), side(200, 10)));
        // Clearly worse on many units: fails.
        assert!(fail(side(200, 60), side(200, 10)));
        // Nothing to compare with yet but its own failures: a 5 % margin, one failure of 10.
        assert!(!fail(side(10, 1), side(0, 0)));
    }

    #[test]
    fn the_fisher_tail_matches_hand_computed_values() {
        // 2 of 10 against 0 of 62: C(10,2)/C(72,2) = 45/2556.
        assert!((fisher_upper(72, 2, 10, 2) - 45.0 / 2556.0).abs() < 1e-9);
        // At least 0 of anything: certain.
        assert!((fisher_upper(50, 5, 10, 0) - 1.0).abs() < 1e-9);
        // More failures than there are: impossible.
        assert!(fisher_upper(50, 5, 10, 6) < 1e-12);
    }

    #[test]
    fn failures_are_counted_by_code() {
        let o = |status: &str, error: Option<&str>, units| ReleaseOutcome {
            release: "c".into(),
            status: status.into(),
            error: error.map(str::to_string),
            units,
        };
        let outcomes = [
            o("completed", None, 10),
            o(
                "failed",
                Some(r#"{"code":"1303","message":"over capacity"}"#),
                3,
            ),
            o("failed", Some(r#"{"message":"no code"}"#), 1),
            o("succeeded", None, 2),
        ];
        let s = Side::of(&outcomes, "c");
        assert_eq!((s.ended, s.failed), (16, 4));
        assert_eq!(s.failed_by_code.get("1303"), Some(&3));
        assert_eq!(s.failed_by_code.get("none"), Some(&1));
        assert_eq!(Side::of(&outcomes, "other"), Side::default());
    }
}
