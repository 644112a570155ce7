"""The guarantee policy (expectations/policy.yaml) and the suites generated from it, without a JVM."""
from __future__ import annotations

import json

import pytest

import golden
from support import load_analysis_job

from kafkaproof.errors import LedgerError, ScenarioError
from kafkaproof.verdict.policy import (GUARANTEES, SUITES_DIR, Expect, PolicyError, judge, load_policy,
                                       normalize_expect, parse_policy, suites)
from kafkaproof.verdict.validation import validate

job = load_analysis_job()
policy = load_policy()


@pytest.mark.unit
def test_policy_covers_every_kind_of_the_job():
    # spark/analyze.py runs without the package, so it keeps a checked copy of the vocabulary
    from kafkaproof.spec import anomalies
    from kafkaproof.verdict.policy import VALUE_FLAGS
    from kafkaproof.spec.scenario import ANOMALIES
    assert policy.names == job.KINDS == anomalies.KINDS
    assert VALUE_FLAGS == job.VALUE_FLAGS == anomalies.VALUE_FLAGS
    assert set(ANOMALIES) <= set(job.KINDS), "every anomaly a scenario may expect is one the job counts"


@pytest.mark.unit
def test_hard_kinds_never_allowed_and_guarantees_as_documented():
    for g in GUARANTEES:
        forbidden = set(policy.forbidden(g))
        assert {"lost", "inconsistent_offsets", "ack_offset_mismatch", "aborted_reads", "unknown_values"} <= forbidden
        assert "indefinite_landed" not in forbidden
    assert {"duplicates", "redeliveries"} <= policy.allowed("at-least-once")
    assert {"not_delivered", "lost_unconfirmed", "poll_skips"} & set(policy.forbidden("at-least-once")) == \
        {"not_delivered", "lost_unconfirmed", "poll_skips"}
    assert {"duplicates", "redeliveries", "poll_rewinds"} <= set(policy.forbidden("at-most-once"))
    # exactly-once allows nothing, except what only an application-level claim judges
    assert policy.allowed_by["exactly-once"] == frozenset().union(*policy.forbidden_by_claim.values())
    assert "dirty_reads" in policy.forbidden("exactly-once") and "dirty_reads" in policy.allowed("at-least-once")
    assert "undelivered_attempts" in policy.forbidden("at-least-once", ["delivery"])
    # an idempotent consumer: copies in the log allowed, a value processed twice not
    assert "reprocessed" in policy.forbidden("at-least-once", ["processed_once"])
    assert "duplicates" not in policy.forbidden("at-least-once", ["processed_once"])


@pytest.mark.unit
def test_policy_refuses_allowing_a_hard_kind():
    raw = {"kinds": {"lost": {"class": "hard"}}, "guarantees": {g: {"allowed": []} for g in GUARANTEES}}
    parse_policy(raw)
    raw["guarantees"]["at-most-once"]["allowed"] = ["lost"]
    with pytest.raises(PolicyError, match="hard kind"):
        parse_policy(raw)


@pytest.mark.unit
def test_generated_suites_are_in_sync_with_the_policy():
    for g in GUARANTEES:
        for spec in suites(policy, g, Expect()).values():
            path = SUITES_DIR / f"{spec['name']}.json"
            assert path.exists(), f"{path} missing: python -m kafkaproof.policy write-suites"
            assert json.loads(path.read_text()) == spec, f"{path} stale: python -m kafkaproof.policy write-suites"


@pytest.mark.unit
def test_normalize_expect():
    assert normalize_expect(None, policy) == Expect()
    assert normalize_expect({"outcome": "pass", "detect": []}, policy) == Expect()
    assert normalize_expect({"outcome": "detect", "detect": ["lost"]}, policy) == Expect("detect", ("lost",))
    for bad in ({"outcome": "detect", "detect": []}, {"outcome": "maybe"}, {"outcome": "detect", "detect": ["nope"]}):
        with pytest.raises(ScenarioError):
            normalize_expect(bad, policy)


@pytest.mark.unit
def test_judge():
    rows = {r.anomaly: r for r in judge({"duplicates": 3, "lost": 0}, policy, "at-least-once", Expect())}
    assert rows["duplicates"].ok and rows["duplicates"].allowed and rows["lost"].ok and not rows["lost"].allowed
    rows = {r.anomaly: r for r in judge({"duplicates": 3}, policy, "exactly-once", Expect())}
    assert not rows["duplicates"].ok
    rows = {r.anomaly: r for r in judge({"unseen": 1, "lost": 2}, policy, "at-least-once", Expect("detect", ("lost",)))}
    assert rows["lost"].ok and rows["lost"].expected_detected and not rows["unseen"].ok


@pytest.mark.unit
def test_unknown_guarantee_is_a_scenario_error(tmp_path):
    run = golden.clean().write(tmp_path / "run")
    with pytest.raises(ScenarioError, match="guarantee"):
        validate(run, guarantee="twice")
    with pytest.raises(LedgerError):
        validate(tmp_path / "nowhere")


