"""A scenario with an application section is validated but not run yet (issue 39): refused at run start."""
from __future__ import annotations

import json

import pytest

from kafkaproof.run.resolved import Overrides, ResolvedScenario
from kafkaproof.run.scenario_run import RunOptions, ScenarioRun
from kafkaproof.spec.scenario import Scenario, validate_document

pytestmark = pytest.mark.unit

APPLICATION = {"services": [{"name": "svc", "command": ["sh", "-c", "true"], "ready": {"log": "up"}}],
               "drive": {"request": {"url": "http://127.0.0.1:8080/e"}, "rate": 10, "messages": 5},
               "identity": {"key": True}}


def test_an_application_scenario_is_refused_before_anything_starts(tmp_path):
    doc = {"name": "app", "guarantee": "at-least-once", "application": APPLICATION}
    scenario = Scenario("app", "app.yaml", validate_document(doc, "app.yaml"))
    result = ScenarioRun(ResolvedScenario(scenario, Overrides(), scenario.hash(), "k"), RunOptions(out=tmp_path)).execute()
    assert result.status == "error"
    assert result.error.startswith("app.yaml: application: application scenarios are validated but not run yet "
                                   "(issue 39)")
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["status"] == "error" and "timings" in manifest and not manifest["timings"]
