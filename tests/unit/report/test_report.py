"""HTML reports (kafkaproof.report): golden run directories rendered and checked for their content.

The golden run mirrors `e4-unclean-election-on`: a follower is isolated while the leader
acknowledges alone, then the leader is killed and the stale follower is elected. 300
acknowledged values are lost, their offsets reused by later values. The analysis and
validation outputs are written by hand in the formats of spark/analyze.py and
kafkaproof/validation.py (the `spark` test produces them for real).
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from kafkaproof.report import (batch_page, data, night_page, run_page, shaping, svg, upgrade_page,
                               verdict_text)
from kafkaproof.verdict import history
from kafkaproof.spec.ledger import write_manifest, write_table

from report_runs import (  # noqa: F401  (history_url: a fixture)
    EXPLANATION, KIND_CLASSES, fault_rows, T0, history_url, make_run, manifest, section, snapshot_rows, text_of)


# --------------------------------------------------------------------------- run report


@pytest.mark.unit
def test_run_report_negative_control(tmp_path, history_url):
    rd = make_run(tmp_path)
    path = run_page.write_run_report(rd, examples=3, history_url=history_url)
    assert path == rd / "report" / "index.html"
    page = path.read_text()
    text = text_of(page)
    # verdict first: status, guarantee, the control's outcome in one sentence with its count
    verdict = section(page, "verdict")
    assert "PASS" in verdict and "negative control" in verdict
    assert "Expected anomaly detected (lost): 300 acknowledged values were lost: they are not in the log after " \
           "the faults healed." in text_of(verdict)
    # inconsistent_offsets is outside the control's detect list and forbidden by its guarantee: never "allowed"
    assert "Also found (forbidden by the guarantee, at-least-once): 300 offsets hold different values" \
        in text_of(verdict)
    assert page.index('id="verdict"') < page.index('id="timeline"') < page.index('id="anomalies"')
    assert EXPLANATION in text
    # timeline: the chart with both fault bands labelled, leader change and ISR states
    assert '<svg class="timeline"' in page
    assert "isolate follower:0 → node 2" in text and "kill leader:0 → node 1" in text
    assert page.count('class="fault-band"') == 2
    assert 'class="leader-change"' in page and "L1 ISR 1,2 → L1 ISR 1" in text and "L2 ISR 2" in text
    assert "analysis/timeseries.parquet" in text
    # anomalies: counts, when, share during faults, 3 examples each with partition, offsets, time and fault
    anomalies = section(page, "anomalies")
    assert re.search(r"<code>lost</code></td><td class=\"num\">300</td>", anomalies)
    lost_examples = anomalies[anomalies.index("lost: 300 — examples"):anomalies.index("inconsistent_offsets: 300 —")]
    assert lost_examples.count("<tr>") == 1 + 3
    assert "400 (p0 #400)" in lost_examples and "9.00 s" in lost_examples and "isolate follower:0" in lost_examples
    assert "Checked and not found: lost_unconfirmed, unseen" in text_of(anomalies)
    # outcomes, errors, recovery, latency
    assert re.search(r"acked</td><td class=\"num\">1,700</td>", page)
    assert re.search(r"_MSG_TIMED_OUT</code></td><td>indefinite</td><td class=\"num\">300</td>", page)
    recovery = text_of(section(page, "recovery"))
    assert "kill leader:0 → node 1" in recovery and "5,000.0 ms" in recovery and "8,005.0 ms" in recovery
    assert "Seconds with sends but no ack: 3 of 20" in recovery
    latency = text_of(section(page, "latency"))
    assert "publish (send → ack) 1,700 5.00 ms 800.0 ms 800.0 ms" in latency
    assert "no fault active" in latency
    # scenario, versions, cluster, files
    assert "unclean.leader.election.enable" in section(page, "scenario")
    cluster = text_of(section(page, "cluster"))
    assert "10.77.9.10:9093" in cluster and "controller" in cluster and "librdkafka 2.16.0" in cluster
    files = section(page, "files")
    for href in ("../sends.parquet", "../manifest.json", "../logs/node-101.log", "../analysis/metrics.json",
                 "../validation/result.json", "../validation/data_docs/index.html"):
        assert f'href="{href}"' in files
        assert (path.parent / href).resolve().exists()
    # trend: the history store is empty
    assert "history store is empty" in text_of(section(page, "trend"))
    assert "<script" not in page and "http://" not in page.replace('xmlns="http://www.w3.org/2000/svg"', "")


@pytest.mark.unit
def test_run_report_violation_in_plain_sentences(tmp_path, history_url):
    rd = make_run(tmp_path, expect_detect=False)
    page = run_page.write_run_report(rd, history_url=history_url).read_text()
    verdict = text_of(section(page, "verdict"))
    assert "FAIL: at-least-once violated" in verdict
    assert "300 acknowledged values were lost: they are not in the log after the faults healed." in verdict
    assert "300 acknowledgements named offsets where the log holds another value or none." in verdict
    assert '<section class="verdict fail"' in page
    lost = section(page, "anomalies")
    assert lost.count("(p0 #") >= 10  # default: 10 examples per kind


@pytest.mark.unit
def test_run_report_shows_a_secured_clusters_connection_as_the_manifest_has_it(tmp_path, history_url):
    from kafkaproof.spec import ledger
    rd = make_run(tmp_path)
    manifest = ledger.read_manifest(rd)
    manifest["client_connection"] = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256",
                                      "sasl.username": "kafkaproof", "sasl.password": "***"}
    ledger.write_manifest(rd, manifest)
    cluster = text_of(section(run_page.write_run_report(rd, history_url=history_url).read_text(), "cluster"))
    assert ("client connection sasl.mechanism=SCRAM-SHA-256, sasl.password=***, sasl.username=kafkaproof, "
            "security.protocol=SASL_SSL") in cluster



@pytest.mark.unit
def test_run_report_says_when_a_workload_ended_early_or_a_run_was_salvaged(tmp_path, history_url):
    from kafkaproof.spec import ledger
    rd = make_run(tmp_path)
    manifest = ledger.read_manifest(rd)
    manifest["stopped_early"] = {"reason": "free disk below 2048 MB (1900 MB left at /runs)", "at_s": 3601.5}
    manifest["salvaged"] = {"wall": 1.0, "status_before": "running"}
    ledger.write_manifest(rd, manifest)
    cluster = text_of(section(run_page.write_run_report(rd, history_url=history_url).read_text(), "cluster"))
    assert "workload ended early at t=3601.5 s: free disk below 2048 MB (1900 MB left at /runs)" in cluster
    assert "salvaged assembled from its streams after it died before its final drain" in cluster


@pytest.mark.unit
def test_run_report_without_analysis_says_so(tmp_path, history_url):
    """The report reads the analysis and never redoes it: without one, every number it would show says why not."""
    rd = make_run(tmp_path, analysis=False, validation=False)
    page = run_page.write_run_report(rd, history_url=history_url).read_text()
    text = text_of(page)
    assert "NOT JUDGED" in text_of(section(page, "verdict"))
    assert "no analysis (analysis/metrics.json)" in text and "no validation result" in text
    assert "the run was not analysed" in text_of(section(page, "timeline"))
    assert "Not analysed" in text_of(section(page, "anomalies"))
    assert "Not analysed" in text_of(section(page, "outcomes"))
    assert not re.search(r"acked</td><td class=\"num\">1,700</td>", page), "no second analysis from the ledger"


@pytest.mark.unit
def test_run_report_of_a_run_that_ended_in_error(tmp_path, history_url):
    rd = tmp_path / "broken-run"
    write_manifest(rd, {**manifest("broken-run", False, status="error",
                                   error="faults could not be injected: isolate: nft failed"), "counts": None})
    page = run_page.write_run_report(rd, history_url=history_url).read_text()
    verdict = text_of(section(page, "verdict"))
    assert "ERROR: run error" in verdict
    assert "faults could not be injected: isolate: nft failed" in verdict
    assert "ledger table sends.parquet is missing" in text_of(page)
    assert "no sends or reads recorded" in page
    assert "sends.parquet (missing)" in text_of(page)


@pytest.mark.unit
def test_run_report_without_manifest(tmp_path, history_url):
    rd = tmp_path / "empty"
    rd.mkdir()
    page = run_page.write_run_report(rd, history_url=history_url).read_text()
    assert "ERROR: no run manifest" in page and "not a kafkaproof run directory" in page


@pytest.mark.unit
def test_everything_from_data_is_escaped(tmp_path, history_url):
    evil = "<script>alert('x')</script> & <b>bold</b>"
    rd = make_run(tmp_path, explanation=evil)
    faults = fault_rows()
    faults[0]["target"] = "<img src=x onerror=alert(1)>"
    write_table(rd, "faults", faults)
    page = run_page.write_run_report(rd, history_url=history_url).read_text()
    assert "<script" not in page and "<img" not in page and "<b>bold" not in page
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page


@pytest.mark.unit
def test_trend_from_history(tmp_path, history_url):
    rd = make_run(tmp_path)
    t = datetime(2026, 11, 1, 2, tzinfo=timezone.utc)
    for i in range(4):
        history.record({"scenario": "golden-unclean", "run_id": f"golden-unclean-old{i}", "batch_id": f"night-{i}",
                        "kafka_version": "4.3.1", "verdict": "pass" if i != 2 else "fail", "status": "complete",
                        "finished_at": t + timedelta(days=i),
                        "metrics": {"recovery_s": 3.0 + i, "publish_p99_ms": 40.0 + i, "unavailable_s": 1.0,
                                    "anomalies": {"lost": 250 + i}, "outcomes": {}}}, url=history_url)
    page = run_page.write_run_report(rd, history_url=history_url).read_text()
    trend = section(page, "trend")
    assert trend.count('<svg class="trend"') == 3
    assert "golden-unclean-old3" in trend and "(this run)" in trend
    assert "lost=253" in trend
    # oldest first in the charts: the first point is old0's recovery (3 s), this run is ringed
    assert 'stroke="#000"' in trend


# --------------------------------------------------------------------------- pure shaping


@pytest.mark.unit
def test_anomaly_sentences_one_and_many():
    assert verdict_text.anomaly_sentence("lost", 1) == "1 acknowledged value was lost: it is not in the log after the faults healed."
    assert verdict_text.anomaly_sentence("lost", 1490) == \
        "1,490 acknowledged values were lost: they are not in the log after the faults healed."
    assert verdict_text.anomaly_sentence("duplicates", 2) == "2 values are in the log more than once."
    assert "brand_new" in verdict_text.anomaly_sentence("brand_new", 3)
    assert set(data.KINDS) == set(KIND_CLASSES)  # every kind the analysis counts has a sentence


@pytest.mark.unit
def test_attribution_text_names_the_faults_behind_a_kind():
    metrics = {"attribution": {"unacknowledged_writes": 4, "unacknowledged_records": 9, "kinds": {
        "duplicates": {"attributed": 9, "unattributed": 2, "by_fault": {"lost_ack-1": 9}}}}}
    text = shaping.attribution_text(metrics, "duplicates")
    assert "9 by fault lost_ack-1" in text and "4 such writes, 9 records" in text
    assert "not explained by a proxy action: 2" in text
    assert shaping.attribution_text(metrics, "lost") is None
    no_proxy = {"attribution": {"unacknowledged_writes": 0, "kinds": {"duplicates": {"unattributed": 3}}}}
    assert shaping.attribution_text(no_proxy, "duplicates") is None and shaping.attribution_text(None, "x") is None


@pytest.mark.unit
def test_build_verdict_cases():
    m = manifest("r", expect_detect=True)
    counts = {"lost": 0}
    undetected = verdict_text.build_verdict(m, {"status": "fail", "rows": [
        {"anomaly": "lost", "count": 0, "ok": False, "expected_detected": True}], "errors": []}, counts)
    assert undetected.status == "fail"
    assert any("NOT detected" in text and cls == "bad" for cls, text in undetected.lines)
    incomplete = verdict_text.build_verdict({**m, "status": "incomplete", "error": "interrupted (SIGTERM)"}, None, None)
    assert incomplete.status == "error" and "interrupted (SIGTERM)" in incomplete.lines[0][1]
    unjudged = verdict_text.build_verdict(manifest("r", False), {"status": "error", "rows": [],
                                                            "errors": ["final drain incomplete for partition(s) 1"]}, {})
    assert unjudged.status == "error" and "final drain incomplete" in unjudged.lines[0][1]
    allowed = verdict_text.build_verdict(manifest("r", False), {"status": "pass", "errors": [], "rows": [
        {"anomaly": "duplicates", "count": 2, "ok": True, "allowed": True, "cls": "soft"},
        {"anomaly": "indefinite_landed", "count": 1, "ok": True, "allowed": True, "cls": "info"}]}, None)
    assert allowed.headline == "PASS: at-least-once held"
    assert ("info", "Allowed under at-least-once: 2 values are in the log more than once.") in allowed.lines
    assert any(text.startswith("For information: 1 send") for _, text in allowed.lines)


@pytest.mark.unit
def test_per_second_comes_from_the_analysis_only():
    import pandas as pd
    seconds, source = shaping.per_second(None)
    assert seconds.empty and "not analysed" in source
    ts = pd.DataFrame({"second": [1, 0], "acks_completed": [5, 3], "errors_completed": [0, 1], "reads": [4, 2],
                       "publish_p99_ms": [2.0, 1.0], "unavailable": [False, False], "attempted": [5, 4]})
    seconds, source = shaping.per_second(ts)
    assert list(seconds["second"]) == [0, 1] and list(seconds["acks"]) == [3, 5] and source.startswith("analysis/")


@pytest.mark.unit
def test_partition_segments_and_changes():
    import pandas as pd
    segs = shaping.partition_segments(pd.DataFrame(snapshot_rows()), T0)[0]
    assert [s.label for s in segs] == ["L1 ISR 1,2", "L1 ISR 1", "L2 ISR 2", "L2 ISR 2,1"]
    assert [s.state for s in segs] == ["ok", "shrunk", "shrunk", "ok"]
    changes = shaping.cluster_changes({0: segs})
    assert [round(c.t_s, 1) for c in changes] == [9.3, 15.3, 26.3]
    assert [c.leader_changed for c in changes] == [False, True, False]
    nodes = shaping.node_segments(pd.DataFrame(snapshot_rows()), T0, [1, 2, 101])
    assert [(s.state, round(s.start_s, 1)) for s in nodes[1]] == [("up", 4.3), ("down", 12.3), ("up", 26.3)]


@pytest.mark.unit
def test_batch_helpers():
    assert batch_page.safe_batch_id("kafka_reliability_nightly/scheduled__2026-11-22T02:00:00+00:00").startswith(
        "kafka_reliability_nightly_scheduled__2026-11-22T02_00_00_00_00-")
    assert batch_page.safe_batch_id("night-1") == "night-1"
    assert batch_page.safe_batch_id("../../etc") != "../../etc" and "/" not in batch_page.safe_batch_id("../../etc")
    assert batch_page.change_since(None, "pass") == ("first run", "same")
    assert batch_page.change_since("pass", "fail")[0].startswith("NEW FAILURE")
    assert batch_page.change_since("fail", "pass") == ("fixed (was fail)", "better")
    assert batch_page.change_since("fail", "fail")[0] == "still failing"
    rows = [{"run_id": "c", "batch_id": "b2"}, {"run_id": "x", "batch_id": "b2"}, {"run_id": "b", "batch_id": "b1"},
            {"run_id": "a", "batch_id": "b0"}]
    assert batch_page.pick_previous(rows, "b2", {"c"}, "c")["run_id"] == "b"
    assert batch_page.pick_previous(rows, "b1", {"b"}, "b")["run_id"] == "a"
    assert batch_page.pick_previous(rows, "b0", {"a"}, "a") is None
    assert batch_page.reused_note({"reused_after": ["a", "b"]}) == " · cluster reused after 2 scenarios"
    assert batch_page.reused_note({"reused_after": []}) == ""
    assert run_page.reuse_text({"reused": False, "runs_before": []}) == "fresh, started for this run"
    # a leftover of a DAG run that died with Airflow, reclaimed by the provision before this run
    reclaimed = {"cluster": "af-0123456789", "batch": "kafka_reliability_nightly/scheduled__2026-11-25T02:00:00+00:00",
                 "why": "its DAG run kafka_reliability_nightly/scheduled__2026-11-25T02:00:00+00:00 is failed"}
    assert run_page.reuse_text({"reused": False, "runs_before": [], "reclaimed": [reclaimed]}) == (
        "fresh, started for this run; first reclaimed the leftover pipeline cluster af-0123456789 of DAG run "
        "kafka_reliability_nightly/scheduled__2026-11-25T02:00:00+00:00 (its DAG run "
        "kafka_reliability_nightly/scheduled__2026-11-25T02:00:00+00:00 is failed)")
    text = run_page.reuse_text({"reused": True, "runs_before": ["baseline"], "leftovers": {"partitions": 53}})
    assert text.startswith("reused after baseline") and "all 53 partitions in sync" in text
    assert svg.nice_ticks(0, 7, 4) == [0, 2, 4, 6]
    assert svg.place_labels([(0, 50), (20, 80), (60, 90), (100, 120)]) == [0, 1, 0, 0]


@pytest.mark.unit
def test_a_faults_colour_is_its_familys_found_by_kind_and_target():
    from kafkaproof.spec.fault_families import APP, PROCESS
    assert svg.fault_color("kill", "node:1") == PROCESS.colors["kill"] != APP.colors["kill"]
    assert svg.fault_color("kill", "app:web:0") == APP.colors["kill"]
    assert svg.fault_color("kill", "consumer:0") == PROCESS.colors["kill"]  # a family without colours: the kind's
    assert svg.fault_color("roll_node", "node:1") == svg.fault_color("explode", "all") == svg.GREY


# --------------------------------------------------------------------------- batch pages


def summary(scenario: str, verdict: str, run_dir: Path | None, **kw) -> dict:
    s = {"scenario": scenario, "run_id": run_dir.name if run_dir else None, "run_dir": str(run_dir) if run_dir else None,
         "verdict": verdict, "guarantee": "at-least-once", "expect": "pass", "kafka_version": "4.3.1",
         "violations": [], "regressions": [], "error": None,
         "report": str(run_dir / "report" / "index.html") if run_dir else None,
         "metrics": {"recovery_s": 2.5, "publish_p99_ms": 45.0, "anomalies": {"lost": 0}}, "label": ""}
    s.update(kw)
    return s


@pytest.mark.unit
def test_batch_report_with_change_since_previous_batch(tmp_path, history_url):
    runs = tmp_path / "runs"
    dirs = {}
    for name in ("a-passes", "b-breaks", "c-fixed", "d-error"):
        dirs[name] = make_run(runs, f"{name}-20261122T020000Z-0001")
        run_page.write_run_report(dirs[name], history_url=history_url)
    t = datetime(2026, 11, 21, 2, tzinfo=timezone.utc)
    for name, verdict in (("a-passes", "pass"), ("b-breaks", "pass"), ("c-fixed", "fail")):
        history.record({"scenario": name, "run_id": f"{name}-prev", "batch_id": "nightly/2026-11-21",
                        "verdict": verdict, "finished_at": t, "metrics": {}}, url=history_url)
        history.record({"scenario": name, "run_id": dirs[name].name, "batch_id": "nightly/2026-11-22",
                        "verdict": "x", "finished_at": t + timedelta(days=1), "metrics": {}}, url=history_url)
    summaries = [
        summary("a-passes", "pass", dirs["a-passes"]),
        summary("b-breaks", "fail", dirs["b-breaks"], violations=["300 acknowledged values were lost"],
                metrics={"anomalies": {"lost": 300}, "recovery_s": 9.0, "publish_p99_ms": 800.0}),
        summary("c-fixed", "pass", dirs["c-fixed"], regressions=["recovery_s 9.0 vs median 2.5"]),
        summary("d-error", "error", dirs["d-error"], error="run error: <nft> failed"),
        None,
    ]
    path = batch_page.write_batch_report(summaries, "nightly/2026-11-22", runs, history_url=history_url)
    assert path == runs / "batches" / batch_page.safe_batch_id("nightly/2026-11-22") / "index.html"
    page = path.read_text()
    text = text_of(page)
    assert "ERROR: 4 scenario runs: 2 pass, 1 fail, 1 error, 1 regression" in text
    assert "b-breaks: NEW FAILURE (was pass)" in text and "c-fixed: fixed (was fail)" in text
    assert "d-error" in text and "first run" in text
    assert "300 acknowledged values were lost" in text and "regression: recovery_s 9.0" in text
    assert "&lt;nft&gt;" in page and "<nft>" not in page
    assert "lost 300" in text
    # worst first, and every report link is relative and resolves
    table = text[text.index("Scenarios (worst first)"):]
    assert table.index("d-error") < table.index("b-breaks") < table.index("a-passes")
    hrefs = re.findall(r'href="([^"#]+)"', page)
    assert hrefs and all(not h.startswith("/") for h in hrefs)
    for h in hrefs:
        assert (path.parent / h).resolve().exists(), h


@pytest.mark.unit
def test_batch_report_without_history(tmp_path):
    out = tmp_path / "runs"
    path = batch_page.write_batch_report([summary("a", "pass", None, report=None)], "b1", out,
                                     history_url="nosuchdialect://nowhere")
    text = text_of(path.read_text())
    assert "results history unavailable" in text and "no report" in text


@pytest.mark.unit
def test_an_application_runs_view_leads_its_row_on_the_batch_and_upgrade_pages(tmp_path, history_url):
    runs = tmp_path / "runs"
    app_run, other = make_run(runs, "app-e6-20261122T020000Z-0001"), make_run(runs, "b-20261122T020000Z-0001")
    m = json.loads((app_run / "manifest.json").read_text())
    m["application"] = {"requests": {"accepted": 500, "rejected": 0, "indefinite": 0}, "processed": None,
                        "delivered": {"measured": False, "reason": "not measured (no proxy)"}}
    (app_run / "manifest.json").write_text(json.dumps(m))
    lead = run_page.application_lead(app_run)
    assert lead.startswith("500 events accepted, ") and "accepted but never in Kafka, first at " in lead
    verdict = text_of(section(run_page.write_run_report(app_run, history_url=history_url).read_text(), "verdict"))
    assert lead in verdict and "Delivered to the consumer group: not measured (no proxy)." in verdict
    assert run_page.application_lead(other) is None  # not an application's run
    # the batch page shows the lead under the scenario's name, as the run page leads with it
    summaries = [summary("app-e6", "pass", app_run, application=lead), summary("b", "pass", other)]
    text = text_of(batch_page.write_batch_report(summaries, "manual/1", runs, history_url=history_url).read_text())
    assert text.count("events accepted") == 1 and lead in text
    upgrade = [summary("app-e6", "pass", app_run, label=side, application=lead) for side in ("current", "candidate")]
    text = text_of(upgrade_page.write_upgrade_report(upgrade, [], "upgrade/1", runs).read_text())
    assert text.count(lead) == 2
    # `kafkaproof report --night DIR` reads it from the run directory
    nights = {s["run_id"]: s.get("application") for s in night_page.find_batch_summaries(runs)}
    assert nights == {app_run.name: lead, other.name: None}


@pytest.mark.unit
def test_upgrade_report(tmp_path, history_url):
    runs = tmp_path / "runs"
    cur = make_run(runs, "s1-current")
    cand = make_run(runs, "s1-candidate")
    for rd in (cur, cand):
        run_page.write_run_report(rd, history_url=history_url)
    summaries = [summary("s1", "pass", cur, label="current", kafka_version="3.9.2"),
                 summary("s1", "fail", cand, label="candidate", kafka_version="4.3.1",
                         violations=["300 acknowledged values were lost"],
                         metrics={"anomalies": {"lost": 300}, "recovery_s": 9.0, "publish_p99_ms": 800.0}),
                 summary("s2", "pass", None, label="current", kafka_version="3.9.2", report=None)]
    worse = ["s1: pass on 3.9.2 but fail on 4.3.1", "s2: no result on the candidate version"]
    path = upgrade_page.write_upgrade_report(summaries, worse, "upgrade/run-1", runs)
    assert path == runs / "batches" / batch_page.safe_batch_id("upgrade/run-1") / "index.html"
    page = path.read_text()
    text = text_of(page)
    assert "CANDIDATE 4.3.1 IS WORSE than 3.9.2" in text
    assert "s1: pass on 3.9.2 but fail on 4.3.1" in text and "s2: no result on the candidate version" in text
    assert "current (3.9.2)" in text and "candidate (4.3.1)" in text
    assert "NEW FAILURE (current pass)" in text and "no result on the candidate version" in text
    assert "new on the candidate: lost 300" in text and "p99 800.0 ms vs 45.0 ms" in text
    for h in re.findall(r'href="([^"#]+)"', page):
        assert (path.parent / h).resolve().exists(), h


@pytest.mark.unit
def test_upgrade_report_lists_the_client_defaults_that_change_next_to_the_measured_differences(tmp_path, history_url):
    runs = tmp_path / "runs"
    cur, cand = make_run(runs, "b-current"), make_run(runs, "b-candidate")
    for rd in (cur, cand):
        run_page.write_run_report(rd, history_url=history_url)
    summaries = [summary("baseline", "pass", cur, label="current", kafka_version="4.3.1"),
                 summary("baseline", "pass", cand, label="candidate", kafka_version="4.3.1",
                         metrics={"anomalies": {"lost": 0}, "recovery_s": 2.5, "publish_p99_ms": 20.0})]
    change = {"role": "producer", "name": "linger.ms", "current": "0", "candidate": "5"}
    clients = {"scenarios": {"baseline": {
        "clients": {"current": ["producer 0: kafka-clients 3.9.2"], "candidate": ["producer 0: kafka-clients 4.3.1"]},
        "java": {"current": "3.9.2", "candidate": "4.3.1"}, "error": None,
        "diff": {"current": "3.9.2", "candidate": "4.3.1", "changed": [change], "only_current": {},
                 "only_candidate": {}, "set_here": []}}},
        "versions": [{"current": "3.9.2", "candidate": "4.3.1",
                      "changed": [change, {"role": "admin", "name": "enable.metrics.push", "current": "true",
                                           "candidate": "false"}],
                      "only_current": {}, "only_candidate": {"producer": [f"p{i}" for i in range(45)]},
                      "set_here": []}]}
    text = text_of(upgrade_page.write_upgrade_report(summaries, [], "upgrade/clients", runs, clients).read_text())
    assert "Candidate 4.3.1 with kafka-clients 4.3.1 is no worse than 4.3.1 with kafka-clients 3.9.2" in text
    assert "kafka-clients 3.9.2 → 4.3.1: defaults read from the two jars" in text
    assert "enable.metrics.push" in text and "45 properties only in 4.3.1: p0, p1" in text and "(5 more)" in text
    assert "producer linger.ms default 0 → 5 (not set by the scenario)" in text
    assert "p99 20.0 ms vs 45.0 ms" in text  # the measured difference, in the same cell
    assert "producer 0: kafka-clients 3.9.2" in text and "producer 0: kafka-clients 4.3.1" in text
    assert upgrade_page.default_change_lines(None) == []


@pytest.mark.unit
def test_night_report_from_a_directory_of_runs(tmp_path, history_url):
    night = tmp_path / "night"
    make_run(night, "r1", expect_detect=True)
    make_run(night, "r2", expect_detect=False)
    make_run(night, "r3", analysis=False, validation=False)
    summaries = night_page.find_batch_summaries(night)
    by = {s["run_id"]: s for s in summaries}
    assert by["r1"]["verdict"] == "pass" and by["r1"]["expect"] == "detect"
    assert by["r2"]["verdict"] == "fail" and "300 acknowledged values were lost" in by["r2"]["violations"][0]
    assert by["r3"]["verdict"] == "error" and "no validation result" in by["r3"]["error"]
    path = night_page.write_night_report(night, history_url=history_url)
    assert path == night / "batches" / "night" / "index.html"
    page = path.read_text()
    for rd in ("r1", "r2", "r3"):
        assert (night / rd / "report" / "index.html").exists()
        assert f'href="../../{rd}/report/index.html"' in page


# --------------------------------------------------------------------------- in a browser

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.unit
@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_report_renders_in_headless_chromium(tmp_path, history_url):
    rd = make_run(tmp_path)
    path = run_page.write_run_report(rd, history_url=history_url)
    url = path.resolve().as_uri()
    base = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'chromium-profile'}"]
    env = {**os.environ, "HOME": str(tmp_path)}
    dom = subprocess.run(base + ["--enable-logging=stderr", "--v=0", "--dump-dom", url], capture_output=True,
                         text=True, timeout=120, env=env)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert '<svg class="timeline"' in dom.stdout and 'class="fault-band"' in dom.stdout
    assert dom.stdout.count("<table") >= 6
    console = [line for line in dom.stderr.splitlines() if "CONSOLE" in line or "Uncaught" in line]
    assert not console, console
    shot = tmp_path / "report.png"
    run = subprocess.run(base + [f"--screenshot={shot}", "--window-size=1400,2400", url], capture_output=True,
                         text=True, timeout=120, env=env)
    assert run.returncode == 0 and shot.exists(), run.stderr[-2000:]
    assert shot.stat().st_size > 50_000  # a blank page compresses to a few KB
    keep = os.environ.get("KAFKAPROOF_REPORT_SCREENSHOT")
    if keep:
        shutil.copy(shot, keep)


# --------------------------------------------------------------------------- with the real analysis


@pytest.mark.unit
def test_batch_report_reads_violations_from_the_run_when_the_summary_has_none(tmp_path, history_url):
    runs = tmp_path / "runs"
    rd = make_run(runs, "r-fail", expect_detect=False)
    s = summary("r", "fail", rd, report=None)
    page = batch_page.write_batch_report([s], "b", runs, history_url=history_url).read_text()
    assert "300 acknowledged values were lost: they are not in the log after the faults healed." in text_of(page)


@pytest.mark.unit
def test_the_files_section_links_each_application_service_instances_log(tmp_path, history_url):
    rd = make_run(tmp_path)
    page = text_of(section(run_page.write_run_report(rd, history_url=history_url).read_text(), "files"))
    assert "Application logs" not in page  # a run without an application
    (rd / "services").mkdir()
    for name in ("signup-service-0.log", "signup-processor-0.log"):
        (rd / "services" / name).write_text("started\n")
    files = section(run_page.write_run_report(rd, history_url=history_url).read_text(), "files")
    assert "Application logs" in text_of(files)
    for name in ("signup-processor-0.log", "signup-service-0.log"):
        assert f'href="../services/{name}"' in files
