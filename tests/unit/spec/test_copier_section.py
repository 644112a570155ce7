"""The scenario's `pipeline` section (spec/copier.py): defaults, the copiers as consumers, clear refusals."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafkaproof.errors import ScenarioError
from kafkaproof.spec import copier, scenario as scenario_mod

pytestmark = pytest.mark.unit

from support import REPO  # noqa: E402

MINIMAL = {"name": "p", "guarantee": "at-least-once", "producers": {"messages": 10},
           "pipeline": {"copiers": 2}, "claims": {"exactly_once_pipeline": {}}}


def write(tmp_path: Path, doc, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc))
    return path


def test_defaults_and_the_copiers_are_the_consumers(tmp_path):
    s = scenario_mod.load(write(tmp_path, MINIMAL))
    p = s.data["pipeline"]
    assert p == {"copiers": 2, "output_topic": "kp-p-out", "output_partitions": 3, "batch_size": 50,
                 "abort_probability": 0.0, "downstream_isolation": "read_committed",
                 "transactional_id_prefix": "kp-p", "transaction_timeout_ms": 10_000, "ordered_output": True,
                 "producer_config": {}}
    assert s.data["consumers"]["count"] == 2 and s.data["consumers"]["group"] == "kp-p"
    assert copier.transactional_id(p, 1) == "kp-p-1"
    # a consumer fault targets a copier
    s = scenario_mod.load(write(tmp_path, {**MINIMAL, "faults": [{"at": 1, "kind": "kill", "target": "consumer:1"}]}))
    assert s.timeline()[0].spec.target == "consumer:1"
    assert s.with_overrides(messages=20).data["pipeline"] == p  # checked again, unchanged


@pytest.mark.parametrize("patch, message", [
    ({"pipeline": {}}, "pipeline: 'copiers' is a required property"),
    ({"pipeline": {"copiers": 0}}, "pipeline.copiers"),
    ({"pipeline": {"copiers": 1, "abort_probability": 2}}, "pipeline.abort_probability"),
    ({"pipeline": {"copiers": 1, "downstream_isolation": "dirty"}}, "pipeline.downstream_isolation"),
    ({"pipeline": {"copiers": 1, "transactional_id_prefix": "a b"}}, "pipeline.transactional_id_prefix"),
    ({"pipeline": {"copiers": 1, "output_topic": "kp-p"}}, "pipeline.output_topic: 'kp-p' is the input topic"),
    ({"pipeline": {"copiers": 1, "output_partitions": 1}},
     "pipeline.output_partitions: 1 is fewer than the input's 3 partitions"),
    ({"pipeline": {"copiers": 1, "producer_config": {"acks": 1}}}, "pipeline.producer_config.acks: 1: transactions need acks=all"),
    ({"pipeline": {"copiers": 1, "producer_config": {"enable.idempotence": False}}},
     "pipeline.producer_config.enable.idempotence: False: transactions need idempotence"),
    ({"pipeline": {"copiers": 1, "producer_config": {"transactional.id": "x"}}}, "use transactional_id_prefix"),
    ({"pipeline": {"copiers": 1, "transaction_timeout_ms": 60_000}, "timeout_s": 30},
     "pipeline.transaction_timeout_ms: 60000 ms is longer than the run"),
    ({"consumers": {"count": 3}}, "consumers.count: 3, but the copiers are the consumers: pipeline.copiers is 2"),
    ({"consumers": {"config": {"enable.auto.commit": True}}}, "consumers.config.enable.auto.commit"),
    ({"producers": {"messages": 10, "transactions": {"batch": 5}}}, "producers.transactions: the pipeline's input"),
    ({"faults": [{"at": 1, "kind": "kill", "target": "consumer:2"}]}, "consumers are consumer:0..consumer:1"),
])
def test_refusals_name_the_field(tmp_path, patch, message):
    path = write(tmp_path, {**MINIMAL, **patch})
    with pytest.raises(ScenarioError) as e:
        scenario_mod.load(path)
    assert str(path) in str(e.value) and message in str(e.value)


def test_the_java_client_runs_copiers(tmp_path):
    s = scenario_mod.load(write(tmp_path, {**MINIMAL, "consumers": {"client": "java"}}))
    assert s.data["consumers"]["client"] == "java" and s.data["consumers"]["count"] == 2


def test_the_claim_needs_a_pipeline(tmp_path):
    doc = {k: v for k, v in MINIMAL.items() if k != "pipeline"}
    with pytest.raises(ScenarioError, match="claims.exactly_once_pipeline: needs a pipeline section"):
        scenario_mod.load(write(tmp_path, doc))


def test_two_scenarios_with_one_transactional_prefix_are_refused(tmp_path):
    write(tmp_path, MINIMAL, "a.yaml")
    write(tmp_path, {**MINIMAL, "name": "q", "pipeline": {"copiers": 1, "transactional_id_prefix": "kp-p"}}, "b.yaml")
    with pytest.raises(ScenarioError, match="q: pipeline.transactional_id_prefix 'kp-p' is also p's"):
        scenario_mod.load_catalog(tmp_path)


def test_the_eos_catalog():
    eos = scenario_mod.load_catalog(REPO / "scenarios", tag="eos")
    assert len(eos) >= 5 and all(s.data.get("pipeline") and s.data["explanation"] for s in eos)
    assert all("exactly_once_pipeline" in s.claims for s in eos)
    negative = [s for s in eos if s.expect["outcome"] == "detect"]
    assert [s.data["pipeline"]["downstream_isolation"] for s in negative] == ["read_uncommitted"]
