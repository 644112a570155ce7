"""The run report on a real analysis and validation of the report tests' golden run (Spark and GX: slow)."""
from __future__ import annotations

import json
import re

import pytest

from report_runs import history_url, make_run, section, text_of  # noqa: F401  (history_url: a fixture)

from kafkaproof.report import run_page


@pytest.mark.spark
def test_report_on_real_analysis_and_validation(tmp_path, history_url):
    """spark/analyze.py and validation.py on the golden ledger, then the report (slow: Spark and GX)."""
    from kafkaproof.analysis.submit import analyze, find_spark_submit
    from kafkaproof.errors import AnalysisError
    try:
        find_spark_submit()
    except AnalysisError as e:
        pytest.skip(str(e))
    from kafkaproof.verdict.validation import validate
    rd = make_run(tmp_path, analysis=False, validation=False)
    analyze(rd)
    # The manifest's top-level `expect` is the normalised one ({outcome, detect}); the resolved
    # scenario's has no `outcome`.
    result = validate(rd, expect=json.loads((rd / "manifest.json").read_text())["expect"])
    assert result.status == "pass", result.to_dict()
    # Data Docs, built once after the three checkpoints, show each suite's validation
    pages = {p.name for p in (rd / "validation" / "data_docs" / "validations").rglob("*.html")}
    assert pages == {"kafkaproof-counts.html", "kafkaproof-values.html", "kafkaproof-anomalies.html"}
    page = run_page.write_run_report(rd, history_url=history_url).read_text()
    verdict = text_of(section(page, "verdict"))
    assert "PASS" in verdict
    assert "Expected anomaly detected (lost): 300 acknowledged values were lost" in verdict
    assert "analysis/timeseries.parquet" in text_of(page)
    assert re.search(r"<code>lost</code></td><td class=\"num\">300</td>", page)
    assert 'href="../validation/data_docs/index.html"' in page
