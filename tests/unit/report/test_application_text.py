"""The report's lead for an application run (issue 39): the application's view, from the manifest's
`application`, the analysis and the `lost` anomalies."""
from __future__ import annotations

import pytest

from kafkaproof.report.shaping import FaultWindow, KindSummary, application_text, delivered_text

pytestmark = pytest.mark.unit

WALL0 = 1_790_000_000_000_000_000  # 2026-09-21 14:13:20 UTC
STOP = FaultWindow("f1", "stop", "leader:0", [2], "", 5.0, 15.0)


def manifest(processed: bool = False, **requests: int) -> dict:
    return {"clock": {"wall_origin_ns": WALL0, "monotonic_origin_ns": 7},
            "application": {"requests": {"accepted": 1000, "rejected": 0, "indefinite": 0, **requests},
                            "processed": {"source": "http"} if processed else None}}


def test_the_application_view_names_what_was_accepted_processed_and_lost_and_when():
    lost = KindSummary("lost", 38, "", first_s=7.4)
    text = application_text(manifest(processed=True), {"outcomes": {"consumed": 962}}, lost, [STOP], 30.0)
    assert text == ("1,000 events accepted, 962 processed, 38 accepted but never in Kafka, first at 14:13:27 UTC, "
                    "during stop leader:0.")


def test_without_loss_or_processed_source_and_with_refusals():
    assert application_text(manifest(rejected=3, indefinite=2), {}, None, [STOP], 30.0) == \
        "1,000 events accepted (3 rejected, 2 unanswered), every accepted event in Kafka."
    lost = KindSummary("lost", 2, "", first_s=20.0)  # after the fault: no fault named
    assert application_text(manifest(), {}, lost, [STOP], 30.0) == \
        "1,000 events accepted, 2 accepted but never in Kafka, first at 14:13:40 UTC."


def test_a_run_without_an_application_has_no_application_view():
    assert application_text({"clock": {}}, {}, None, [], 1.0) is None
    assert application_text(None, None, None, [], 1.0) is None


def test_the_delivered_line_says_delivered_not_processed_or_that_it_was_not_measured():
    measured = manifest(processed=True)
    measured["application"]["delivered"] = {
        "measured": True, "accepted": 400, "delivered": 400, "processed": 360,
        "delivered_not_processed": {"count": 40, "examples": ["r-7", "r-17", "r-27", "r-37"]},
        "never_delivered": {"count": 0, "in_log": 0, "examples": []}, "truncated": False, "unread_batches": 0,
        "problems": {}}
    assert delivered_text(measured) == (
        "Delivered to the consumer group (what the fault proxies handed it in Fetch answers, not what it "
        "processed): 400 of 400 accepted events, 40 delivered but never processed (e.g. r-7, r-17, r-27).")
    # the lead (also the batch page's) stays the application's view
    assert application_text(measured, {"outcomes": {"consumed": 360}}, None, [STOP], 30.0) == \
        "1,000 events accepted, 360 processed, every accepted event in Kafka."
    measured["application"]["delivered"].update(truncated=True, unread_batches=2,
                                                never_delivered={"count": 3, "in_log": 0, "examples": []})
    assert delivered_text(measured).endswith(", 3 never delivered (the delivery log reached its bound (truncated); "
                                             "2 compressed batches handed over unread).")
    unmeasured = manifest()
    unmeasured["application"]["delivered"] = {"measured": False, "reason": "not measured (no proxy)"}
    assert delivered_text(unmeasured) == "Delivered to the consumer group: not measured (no proxy)."
    assert delivered_text(manifest()) is None and delivered_text(None) is None  # recorded before the measure
