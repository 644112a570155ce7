"""Regression rules against history: what fails the gate, what only warns (expectations/regression.yaml)."""
from __future__ import annotations

import pytest

from kafkaproof.verdict.regression import RegressionPolicy, compare_to_reference, count_band, judge_history, robust_band

pytestmark = pytest.mark.unit

POLICY = RegressionPolicy.load(env={})


def m(recovery=5.0, p50=10.0, p99=20.0, unavailable=3.0, samples=2000, **anomalies):
    return {"recovery_s": recovery, "publish_p50_ms": p50, "publish_p99_ms": p99, "unavailable_s": unavailable,
            "publish_samples": samples, "anomalies": anomalies}


def test_policy_file_as_documented():
    assert (POLICY.min_runs, POLICY.window) == (5, 20)
    assert {r.name for r in POLICY.metrics} == {"recovery_s", "unavailable_s", "publish_p50_ms", "publish_p99_ms"}
    assert POLICY.rule("publish_p99_ms").min_samples == 20000


def test_no_regression_verdict_before_the_baseline_has_enough_runs():
    past = [m(recovery=r) for r in (4.0, 5.0, 6.0)]
    judged = judge_history("s", m(recovery=30.0), past, POLICY)
    assert judged.regressions == []
    (warn,) = judged.warnings
    assert warn.kind == "recovery_s" and "baseline: 3 of 5 runs" in warn.message
    assert judged.baseline_text == "baseline: 3 of 5 runs (no regression verdict until 5)"


def test_band_from_the_baseline_spread():
    past = [m(recovery=r) for r in (4.0, 5.0, 6.0, 5.0, 5.5)]
    assert judge_history("s", m(recovery=7.4), past, POLICY).regressions == []  # within 50% and 2 s
    (reg,) = judge_history("s", m(recovery=9.0), past, POLICY).regressions
    assert reg.kind == "recovery_s" and reg.severity == "fail" and "median 5.0 of the last 5 passing runs" in reg.message
    noisy = [m(recovery=r) for r in (2.0, 9.0, 4.0, 12.0, 6.0)]  # a wide spread widens the band
    assert judge_history("s", m(recovery=14.0), noisy, POLICY).regressions == []


def test_a_p99_of_a_few_thousand_sends_only_warns():
    past = [m(p99=p) for p in (890, 900, 880, 910, 905)]
    judged = judge_history("s", m(p99=1890), past, POLICY)
    assert judged.regressions == [] and "too few for this metric" in judged.warnings[0].message
    big = judge_history("s", m(p99=1890, samples=100_000), past, POLICY)
    assert [r.kind for r in big.regressions] == ["publish_p99_ms"]


def test_allowed_anomalies_are_judged_by_count_bands_not_by_novelty():
    past = [m() for _ in range(5)]
    judged = judge_history("s", m(duplicates=1), past, POLICY)
    assert judged.regressions == [] and "none in the last 5 passing runs" in judged.warnings[0].message
    past = [m(duplicates=d) for d in (0, 1, 0, 3, 0)]
    assert judge_history("s", m(duplicates=15), past, POLICY).regressions == []   # limit: 3*2 + 10 = 16
    (reg,) = judge_history("s", m(duplicates=70), past, POLICY).regressions
    assert reg.kind == "duplicates" and "limit 16" in reg.message
    assert count_band([0, 1, 0, 3, 0], POLICY) == (0, 16.0)


def test_robust_band_and_env_overrides():
    assert robust_band([10, 10, 10, 10, 100], 4, 0.0, 0.0) == (10, 10.0)  # one outlier does not widen it
    policy = POLICY.with_env({"KAFKAPROOF_REGRESSION_MIN_RUNS": "2", "KAFKAPROOF_REGRESSION_TOLERANCE": "0",
                              "KAFKAPROOF_REGRESSION_MIN_ABSOLUTE": '{"recovery_s": 0}'})
    assert policy.min_runs == 2 and policy.rule("recovery_s").absolute == 0 and policy.rule("recovery_s").relative == 0
    assert policy.rule("publish_p50_ms").absolute == 20.0


def test_upgrade_compares_with_one_reference_run():
    (worse,) = compare_to_reference("s", m(recovery=20), m(recovery=5), POLICY)
    assert worse.message == "recovery_s 20.0 vs 5.0 on the current version (limit 7.5)"
    assert compare_to_reference("s", m(recovery=6), m(recovery=5), POLICY) == []
    # a p99 of a few thousand sends is noise: it only warns (a CI run saw 1,600 vs 1,040 ms on 5,000 sends)
    (noisy,) = compare_to_reference("s", m(p99=1600.0, samples=5000), m(p99=1040.0, samples=5000), POLICY)
    assert noisy.severity == "warn" and "5000 samples, too few for this metric (it gates from 20000)" in noisy.message
    (real,) = compare_to_reference("s", m(p99=1600.0, samples=50000), m(p99=1040.0, samples=50000), POLICY)
    assert real.severity == "fail"
