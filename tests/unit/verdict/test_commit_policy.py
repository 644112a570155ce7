"""Issue 45: the commit-consistency kinds in the policy, and a scenario's `allow: {kind: reason}`."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafkaproof.errors import ScenarioError
from kafkaproof.report.verdict_text import tolerated_lines
from kafkaproof.spec import anomalies
from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.verdict.policy import GUARANTEES, Expect, PolicyError, judge, load_policy, parse_policy, suites

policy = load_policy()
REASON = "auto.offset.reset=earliest after the offsets topic was wiped"
COMMIT_KINDS = ("rewind_below_commit", "skip_above_commit", "commit_beyond_read", "commit_regression",
                "double_ownership")


@pytest.mark.unit
def test_commit_kinds_and_what_each_guarantee_makes_of_them():
    assert set(COMMIT_KINDS) <= set(policy.names)
    assert policy.allowable == anomalies.ALLOWABLE == ("rewind_below_commit", "skip_above_commit", "double_ownership")
    for g in GUARANTEES:  # off the last commit: every guarantee forbids it
        assert {"rewind_below_commit", "skip_above_commit", "commit_regression"} <= set(policy.forbidden(g))
    assert policy.kind("commit_regression").cls == "hard"
    assert "commit_beyond_read" in policy.allowed("at-most-once")  # commit before processing
    assert "commit_beyond_read" in policy.forbidden("at-least-once")
    assert "double_ownership" in policy.allowed("at-least-once")  # a zombie's copies are duplicates
    assert "double_ownership" in policy.forbidden("exactly-once")


@pytest.mark.unit
def test_allow_accepts_a_kind_with_its_reason():
    allow = policy.check_allow({"rewind_below_commit": f"  {REASON} "}, "s.yaml")
    assert allow == {"rewind_below_commit": REASON}
    rows = {r.anomaly: r for r in judge({"rewind_below_commit": 2, "skip_above_commit": 1}, policy,
                                        "at-least-once", Expect(), allow=allow)}
    assert rows["rewind_below_commit"].ok and rows["rewind_below_commit"].allowed_reason == REASON
    assert not rows["skip_above_commit"].ok and rows["skip_above_commit"].allowed_reason is None
    without = {r.anomaly: r for r in judge({"rewind_below_commit": 2}, policy, "at-least-once", Expect())}
    assert not without["rewind_below_commit"].ok
    # a kind the guarantee allows anyway carries no reason: the guarantee decides
    rows = {r.anomaly: r for r in judge({"double_ownership": 1}, policy, "at-least-once", Expect(),
                                        allow={"double_ownership": "zombie consumer"})}
    assert rows["double_ownership"].ok and rows["double_ownership"].allowed_reason is None
    counts = suites(policy, "at-least-once", Expect(), allow=allow)["counts"]
    (rule,) = [e for e in counts["expectations"] if e["kwargs"]["column"] == "rewind_below_commit"]
    assert rule["meta"]["rule"] == f"allowable_with_reason: {REASON}" and "max_value" not in rule["kwargs"]
    assert "rewind_below_commit" in suites(policy, "at-least-once", Expect(), allow=allow)["anomalies"][
        "expectations"][0]["kwargs"]["value_set"]


@pytest.mark.unit
@pytest.mark.parametrize("allow, match", [
    ({"nope": REASON}, "s.yaml: allow.nope: not a kind a scenario may allow; allowed: rewind_below_commit"),
    ({"lost": REASON}, "s.yaml: allow.lost: not a kind"),
    ({"commit_regression": REASON}, "s.yaml: allow.commit_regression: not a kind"),
    ({"skip_above_commit": "  "}, "s.yaml: allow.skip_above_commit: needs a non-empty reason"),
    ({"skip_above_commit": None}, "s.yaml: allow.skip_above_commit: needs a non-empty reason"),
    (["rewind_below_commit"], "s.yaml: allow: .* is not a mapping"),
])
def test_allow_refuses_unknown_kinds_and_empty_reasons(allow, match):
    with pytest.raises(ScenarioError, match=match):
        policy.check_allow(allow, "s.yaml")


@pytest.mark.unit
def test_a_scenario_file_with_a_bad_allow_is_refused_naming_the_file_and_field(tmp_path: Path):
    doc = yaml.safe_load((Path(scenario_mod.__file__).parents[3] / "scenarios" / "consumer-crash-commit-sync.yaml")
                         .read_text())
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump({**doc, "allow": {"rewind_below_commit": REASON}}))
    assert scenario_mod.load(good).data["allow"] == {"rewind_below_commit": REASON}
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**doc, "allow": {"rewind_below_commit": ""}}))
    with pytest.raises(ScenarioError, match=r"bad.yaml: allow.rewind_below_commit: needs a non-empty reason"):
        scenario_mod.load(bad)
    bad.write_text(yaml.safe_dump({**doc, "allow": {"lost": REASON}}))
    with pytest.raises(ScenarioError, match=r"bad.yaml: allow.lost: not a kind a scenario may allow"):
        scenario_mod.load(bad)


@pytest.mark.unit
def test_the_policy_refuses_allowable_on_a_kind_that_is_not_soft():
    raw = {"kinds": {"lost": {"class": "hard", "allowable_with_reason": True}},
           "guarantees": {g: {"allowed": []} for g in GUARANTEES}}
    with pytest.raises(PolicyError, match="kinds.lost.allowable_with_reason needs class soft"):
        parse_policy(raw)


@pytest.mark.unit
def test_the_report_shows_the_reason_of_an_allowed_kind():
    rows = [{"anomaly": "rewind_below_commit", "cls": "soft", "allowed_reason": REASON, "count": 3}]
    (line,) = tolerated_lines(rows, {"rewind_below_commit": 3}, set(), "at-least-once")
    assert line[0] == "warn" and f"Allowed by the scenario with a reason ({REASON})" in line[1]
    assert "below their group's last commit 3 times" in line[1]
