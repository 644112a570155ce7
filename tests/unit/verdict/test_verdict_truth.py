"""The verdict's pure parts on the cases of issue 36: empty runs, violations beside unconfirmed faults,
forbidden anomalies in a negative control (the goldens check the same through Spark and GX)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kafkaproof.verdict.policy import Expect, judge, load_policy
from kafkaproof.verdict.validation import (
    AnomalyRow,
    ValidationResult,
    decide_status,
    format_result,
    nothing_to_judge,
    unconfirmed_reasons,
)

policy = load_policy()


def metrics(sent: int = 10, expected: int = 10, reads: int = 10, has_consumers: bool = True, **extra) -> dict:
    return {"outcomes": {"sent": sent, "acked": expected, "expected": expected, "reads": reads},
            "has_consumers": has_consumers, **extra}


@pytest.mark.unit
def test_nothing_to_judge():
    assert nothing_to_judge(metrics(sent=0, expected=0, reads=0)) == ["nothing to judge: 0 sends"]
    assert nothing_to_judge(metrics(sent=0, expected=0, reads=0, has_consumers=False)) == ["nothing to judge: 0 sends"]
    (why,) = nothing_to_judge(metrics(expected=5, reads=0))
    assert why.startswith("nothing to judge") and "5 acknowledged" in why and "0 reads" in why
    # judged: consumers read something; no consumers configured; every send failed (nothing acknowledged to read)
    assert nothing_to_judge(metrics(expected=5, reads=1)) == []
    assert nothing_to_judge(metrics(expected=5, reads=0, has_consumers=False)) == []
    assert nothing_to_judge(metrics(sent=40, expected=0, reads=0)) == []
    assert nothing_to_judge({}) == []  # no outcomes recorded: says nothing


@pytest.mark.unit
def test_unconfirmed_reasons_name_the_fault():
    m = metrics(exercised=[{"check": "fault_took_effect", "subject": "kill leader:0 (f1)", "held": False,
                            "evidence": "no node state was recorded after the injection"},
                           {"check": "leader_change", "subject": "partition 0", "held": True, "evidence": "1 → 2"}])
    (why,) = unconfirmed_reasons(m)
    assert why.startswith("not exercised: fault_took_effect kill leader:0 (f1): no node state")
    assert unconfirmed_reasons(metrics(sent=0, expected=0, reads=0)) == ["nothing to judge: 0 sends"]


@pytest.mark.unit
def test_decide_status_unconfirmed_turns_only_a_pass_into_an_error():
    u = ["not exercised: kill (f1): no node state"]
    assert decide_status([], [], True) == ("pass", [])
    assert decide_status([], [], False) == ("fail", [])
    why = ["not exercised: kill (f1): no node state; the run tested nothing it claims"]
    assert decide_status([], u, True) == ("error", why)
    assert decide_status([], u, False) == ("fail", [])           # a violation found stands
    assert decide_status(["manifest status is 'failed'"], u, False) == ("error", ["manifest status is 'failed'", *why])


@pytest.mark.unit
def test_control_rows_outside_detect_keep_the_guarantees_reading():
    counts = {"lost": 1, "dirty_reads": 1880, "duplicates": 2, "indefinite_landed": 1}
    rows = {r.anomaly: r for r in judge(counts, policy, "exactly-once", Expect("detect", ("lost",)))}
    assert rows["lost"].ok and rows["lost"].allowed and not rows["lost"].also_found
    for kind in ("dirty_reads", "duplicates"):  # forbidden by exactly-once: not decisive, never "allowed"
        assert rows[kind].ok and not rows[kind].allowed and rows[kind].also_found
    assert not rows["indefinite_landed"].also_found  # informational
    assert not rows["poll_skips"].also_found         # forbidden, but not found
    rows = {r.anomaly: r for r in judge(counts, policy, "at-least-once", Expect("detect", ("lost",)))}
    assert rows["dirty_reads"].allowed and rows["duplicates"].allowed and not rows["dirty_reads"].also_found
    rows = {r.anomaly: r for r in judge(counts, policy, "at-least-once", Expect())}  # a plain run: unchanged
    assert not rows["lost"].ok and not rows["lost"].also_found


def _result(status: str, rows: list[AnomalyRow], errors=(), unconfirmed=(), expect=None) -> ValidationResult:
    return ValidationResult(Path("/runs/r1"), status == "pass", status, "exactly-once",
                            expect or {"outcome": "pass", "detect": []}, rows, list(errors), {}, None,
                            unconfirmed=list(unconfirmed))


@pytest.mark.unit
def test_format_result_labels():
    control = _result("pass", [AnomalyRow("lost", 1, True, True, True, "hard", ""),
                               AnomalyRow("dirty_reads", 1880, False, False, True, "soft", "", [7], True),
                               AnomalyRow("indefinite_landed", 1, True, False, True, "info", "")],
                      expect={"outcome": "detect", "detect": ["lost"]})
    text = format_result(control)
    (line,) = [ln for ln in text.splitlines() if "dirty_reads" in ln]
    assert line.split()[0] == "ALSO" and line.endswith("also found (forbidden by the guarantee)")
    assert "allowed" not in text
    u = "not exercised: fault_took_effect kill leader:0 (f1): no node state was recorded after the injection"
    failed = format_result(_result("fail", [AnomalyRow("lost", 1, False, False, False, "hard", "")], unconfirmed=[u]))
    assert failed.startswith("FAIL") and f"unconfirmed: {u}; the violation found stands" in failed
    errored = format_result(_result("error", [], errors=[u + "; the run tested nothing it claims"], unconfirmed=[u]))
    assert errored.count(u) == 1 and "error: not exercised" in errored and "stands" not in errored


@pytest.mark.unit
def test_report_verdict_names_the_unconfirmed_fault_and_the_forbidden_control_finds():
    from kafkaproof.report import verdict_text

    u = "not exercised: fault_took_effect kill leader:0 (f1): no node state was recorded after the injection"
    lost = {"anomaly": "lost", "count": 1, "ok": False, "allowed": False, "cls": "hard"}
    v = verdict_text.judged_verdict({"status": "fail", "errors": [], "unconfirmed": [u], "rows": [lost]},
                                    "at-least-once", "pass", [], None)
    assert v.status == "fail" and ("warn", f"Unconfirmed: {u}; the violation found stands.") in v.lines
    rows = [{"anomaly": "lost", "count": 1, "ok": True, "allowed": True, "cls": "hard", "expected_detected": True},
            {"anomaly": "dirty_reads", "count": 1880, "ok": True, "allowed": False, "cls": "soft", "also_found": True},
            {"anomaly": "indefinite_landed", "count": 2, "ok": True, "allowed": True, "cls": "info"}]
    v = verdict_text.judged_verdict({"status": "pass", "errors": [], "rows": rows}, "exactly-once", "detect",
                                    ["lost"], None)
    text = [t for _, t in v.lines]
    assert any(t.startswith("Also found (forbidden by the guarantee, exactly-once): 1,880 values") for t in text)
    assert any(t.startswith("Also found (not decisive in a negative control): 2 sends") for t in text)
    assert not any("dirty" in t and "not decisive" in t for t in text)


@pytest.mark.unit
def test_a_check_the_run_cannot_judge_is_not_applicable_never_passed():
    from kafkaproof.verdict.validation import without_kinds
    assert without_kinds({"lost": 2, "reordering": 5}, {"reordering": "concurrent requests"}) == \
        {"lost": 2, "reordering": 0}
    rows = [AnomalyRow("lost", 2, True, True, True, "hard", ""),
            AnomalyRow("reordering", 0, False, False, True, "hard", "", not_applicable="concurrent requests")]
    text = format_result(_result("pass", rows))
    assert "n/a  reordering  not applicable: concurrent requests" in text
