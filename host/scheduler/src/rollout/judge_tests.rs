//! The judgement's figures and rules: the documented examples, the pass and fail rules, each
//! signal, and the tails against hand-computed values.

use super::*;

fn side(ended: u64, failed: u64) -> Side {
    Side {
        ended,
        failed,
        failed_by_code: Default::default(),
    }
}

fn ev(candidate: Side, incumbent: Side) -> Evidence {
    Evidence {
        candidate,
        incumbent,
        ..Evidence::default()
    }
}

fn verdict(e: &Evidence) -> Verdict {
    judge(e, e.candidate.ended, 10, 0.05).0
}

#[test]
fn a_stage_waits_for_its_minimum_to_pass_not_to_fail() {
    let (v, _) = judge(&ev(side(40, 0), side(100, 0)), 19, 20, 0.05);
    assert_eq!(v, Verdict::Wait("19 of 20 units ended in the stage".into()));
    // 3 failures of 4 against none of 100 are beyond chance already (p ≈ 0.00002).
    let (v, f) = judge(&ev(side(4, 3), side(100, 0)), 4, 5, 0.05);
    assert!(matches!(v, Verdict::Fail(_)), "{v:?}");
    assert!(f.p < 0.0001, "{f:?}");
}

#[test]
fn the_documented_figures_hold() {
    let fail = |c: Side, i: Side| matches!(verdict(&ev(c, i)), Verdict::Fail(_));
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
fn a_stage_passes_only_within_the_margin() {
    // One failure of 10 against none of 86: not yet beyond chance, not within 5 % either.
    assert!(matches!(
        verdict(&ev(side(10, 1), side(86, 0))),
        Verdict::Wait(_)
    ));
    // None of 10 is not yet shown within 5 % (0.95^10 ≈ 0.60 ≥ 0.2): a build failing 30 %
    // of its units would show it 3 % of the time.
    assert!(matches!(
        verdict(&ev(side(10, 0), side(86, 0))),
        Verdict::Wait(_)
    ));
    // None of 32 is (0.95^32 ≈ 0.19).
    assert!(matches!(
        verdict(&ev(side(32, 0), side(86, 0))),
        Verdict::Pass(_)
    ));
    // More units settle it either way.
    assert!(matches!(
        verdict(&ev(side(20, 4), side(120, 0))),
        Verdict::Fail(_)
    ));
    assert!(matches!(
        verdict(&ev(side(40, 2), side(200, 4))),
        Verdict::Wait(_)
    ));
    assert!(matches!(
        verdict(&ev(side(80, 2), side(200, 4))),
        Verdict::Pass(_)
    ));
}

#[test]
fn a_new_failure_class_fails_where_the_total_does_not() {
    // The incumbent fails 20 % of its units for moderation; the candidate as many, but a
    // third of its failures are a class the incumbent never had.
    let mut c = side(60, 12);
    c.failed_by_code = [("moderation".to_string(), 6), ("1303".to_string(), 6)].into();
    let mut i = side(300, 60);
    i.failed_by_code = [("moderation".to_string(), 60)].into();
    let (v, f) = judge(&ev(c, i), 60, 10, 0.05);
    assert!(
        matches!(&v, Verdict::Fail(said) if said.starts_with("units failed with 1303")),
        "{v:?}"
    );
    assert_ne!(
        f.checks[0].result, "worse",
        "the total alone does not fail: {f:?}"
    );
}

fn signals(units: i64, creates: i64, refused: i64, faults: i64, changes: i64) -> ReleaseSignals {
    ReleaseSignals {
        units,
        creates,
        create_refused: refused,
        faults,
        refused_changes: changes,
        ..ReleaseSignals::default()
    }
}

#[test]
fn refusals_faults_and_refused_changes_are_judged() {
    let judged = |cs: ReleaseSignals, is: ReleaseSignals| {
        let e = Evidence {
            candidate_signals: cs,
            incumbent_signals: is,
            ..ev(side(60, 0), side(200, 0))
        };
        verdict(&e)
    };
    let healthy = signals(2_000, 200, 4, 0, 0);
    let cases = [
        ("creates refused", signals(200, 20, 12, 0, 0)),
        ("handler faults", signals(200, 20, 0, 30, 0)),
        ("changes refused", signals(200, 20, 0, 0, 25)),
    ];
    for (what, bad) in cases {
        let v = judged(bad, healthy.clone());
        assert!(
            matches!(&v, Verdict::Fail(said) if said.starts_with(what)),
            "{what}: {v:?}"
        );
    }
    assert!(matches!(
        judged(signals(200, 20, 0, 1, 0), healthy),
        Verdict::Pass(_)
    ));
}

fn jobs(ms: &[i64]) -> ReleaseSignals {
    let mut s = ReleaseSignals::default();
    for &m in ms {
        s.job(m);
    }
    s
}

#[test]
fn slower_jobs_fail_beyond_the_duration_margin() {
    let judged = |c: &[i64], i: &[i64]| {
        let e = Evidence {
            candidate_signals: jobs(c),
            incumbent_signals: jobs(i),
            ..ev(side(60, 0), side(200, 0))
        };
        judge(&e, 20, 10, 0.05)
    };
    let usual: Vec<i64> = (0..40).map(|k| 60_000 + (k % 5) * 1_000).collect();
    let slow: Vec<i64> = (0..12).map(|k| 120_000 + (k % 3) * 2_000).collect();
    let (v, _) = judged(&slow, &usual);
    assert!(
        matches!(&v, Verdict::Fail(said) if said.starts_with("job duration")),
        "{v:?}"
    );
    // 10 % slower: within the 25 % margin.
    let a_bit: Vec<i64> = (0..12).map(|k| 66_000 + (k % 3) * 1_000).collect();
    assert!(matches!(judged(&a_bit, &usual).0, Verdict::Pass(_)));
    // Too few timed jobs to say: the check does not hold the stage.
    assert!(matches!(judged(&slow[..3], &usual).0, Verdict::Pass(_)));
    // One long-tail job (ten times the usual) among a dozen: not a slower build.
    let mut one_tail: Vec<i64> = (0..11).map(|k| 60_000 + (k % 5) * 1_000).collect();
    one_tail.push(700_000);
    assert!(matches!(judged(&one_tail, &usual).0, Verdict::Pass(_)));
}

#[test]
fn the_tails_match_hand_computed_values() {
    // 2 of 10 against 0 of 62: C(10,2)/C(72,2) = 45/2556.
    assert!((fisher_upper(72, 2, 10, 2) - 45.0 / 2556.0).abs() < 1e-9);
    // At least 0 of anything: certain.
    assert!((fisher_upper(50, 5, 10, 0) - 1.0).abs() < 1e-9);
    // More failures than there are: impossible.
    assert!(fisher_upper(50, 5, 10, 6) < 1e-12);
    // None of 32 at 5 %: 0.95^32; at most 1 of 3 at ½: ½.
    assert!((binomial_lower(32, 0.05, 0) - 0.95f64.powi(32)).abs() < 1e-12);
    assert!((binomial_lower(3, 0.5, 1) - 0.5).abs() < 1e-12);
    // Large counts need no table: 1 % against 1 % is no evidence.
    assert!(fisher_upper(2_000_000, 20_000, 1_000_000, 10_000) > 0.4);
    assert!((normal_upper(0.0) - 0.5).abs() < 1e-7);
    assert!((normal_upper(2.326_348) - 0.01).abs() < 1e-6);
    assert!((normal_upper(-1.644_854) - 0.95).abs() < 1e-6);
    assert!((ln_gamma(11.0) - (3_628_800f64).ln()).abs() < 1e-9);
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
