"""Teams' compose projects started with plain `docker compose up -d` and attached as they run: the seeds' E1
project (two combined nodes `kafka`/`kafka2`, RF 1, advertised localhost) with E1 reproduced (no failover:
sends fail while the partition's broker is stopped, nothing acked is lost); and a rolling restart of the
three-node project's containers in place (each restarted, the same container, back in its ISRs), the rolls
that would recreate the team's service refused.

Long (each starts the project): run under the shared lock, `make test-long`.
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from kafkaproof.cluster import state
from kafkaproof.cluster.attach_config import read_config_file
from kafkaproof.errors import FaultError
from kafkaproof.cluster.attached import AttachedCluster
from kafkaproof.faults import FaultInjector
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.faults import FaultSpec
from kafkaproof.spec.scenario import load

from support import REPO, produce, wait_for
from users_projects import containers, users_project

pytestmark = [pytest.mark.compose, pytest.mark.long]

PROJECT_FILE = Path(__file__).parent / "users_project" / "e1-two-nodes.yml"


@pytest.fixture
def e1_project():
    """The seeds' E1 project up as they start it (fresh for each test); removed after, volumes too."""
    with users_project(PROJECT_FILE, "kpseede1", "E1_PORT_", 2) as up:
        yield up


def test_e1_no_failover_is_reproduced_on_the_attached_two_node_project(e1_project, tmp_path):
    project, bootstrap, found = e1_project
    t0 = time.monotonic()
    assert [(n["id"], n["service"], n["host"]) for n in found["nodes"]] == [
        (0, "kafka", "localhost"), (1, "kafka2", "localhost")]
    # no KAFKA_LOG_DIRS in the environment: the broker's own file (found from its command line, kafka.Kafka FILE)
    # says where the quorum-state file is, so the active controller can be read
    assert [(n["config_file"], n["log_dir"]) for n in found["nodes"]] == [
        ("/opt/kafka/config/server.properties", "/var/lib/kafka/data")] * 2
    config = read_config_file(found["nodes"][1]["container"])
    assert config.path == "/opt/kafka/config/server.properties" and config.properties["node.id"] == "1"
    before = containers(project)
    # E1 as the catalog has it, on the team's cluster as it is (its broker defaults: RF 1, auto-created topic)
    doc = yaml.safe_load((REPO / "scenarios" / "e1-two-nodes-no-failover.yaml").read_text())
    doc["cluster"] = {"backend": "compose", "attach": project}
    doc["producers"]["duration_s"] = 34  # 16 s after the heal: the broker back, sends succeed again
    path = tmp_path / "e1-attached.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = ScenarioRun(resolve(load(path), Overrides(faults_hit_attached=True)),
                         RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "complete", result.error
    table = lambda name: pq.read_table(ledger.table_path(result.run_dir, name)).to_pandas()  # noqa: E731
    sends, audit, faults = table("sends"), table("audit"), table("faults")
    (stop,) = faults[faults["kind"] == "stop"].itertuples()
    assert len(stop.nodes) == 1
    ok, failed = sends[sends["outcome"] == "ok"], sends[sends["outcome"] != "ok"]
    # no failover: sends meant while the partition's only broker was stopped fail (failures, not loss) ...
    during = sends[(sends["intended_ns"] > stop.start_ns + 2e9) & (sends["intended_ns"] < stop.heal_ns - 1e9)]
    assert len(during) > 100 and set(during["outcome"]) <= {"fail", "indefinite"}, during["outcome"].value_counts()
    # ... and the broker back, they succeed again; nothing acked is lost
    after = sends[sends["intended_ns"] > stop.heal_ns + 12e9]
    assert len(after) > 50 and set(after["outcome"]) == {"ok"}, after["outcome"].value_counts()
    logged = set(audit[audit["isolation"] == "read_uncommitted"]["value_id"])
    assert set(ok["value_id"]) <= logged and len(failed) >= len(during)
    # handed back: the same containers, running
    wait_for(lambda: containers(project) == {n: (cid, "running") for n, (cid, _) in before.items()}, 30,
             "the project's containers running as found")
    assert not [c for c in state.list_clusters() if c.startswith("att-")]
    print(f"E1 on the attached project: {len(ok)} acked, {len(failed)} failed "
          f"({len(during)} meant while stopped), {time.monotonic() - t0:.1f}s")


@pytest.fixture
def three_node_project():
    """The three-node project of test_attached_project (an INTERNAL listener the brokers replicate over: E1's
    single listener advertised as localhost reaches no other container, so its replicas never catch up)."""
    with users_project(PROJECT_FILE.parent / "docker-compose.yml", "kproll", "USERS_PORT_", 3) as up:
        yield up


def test_a_rolling_restart_restarts_each_container_in_place_and_other_rolls_are_refused(three_node_project, tmp_path):
    project, bootstrap, _ = three_node_project
    t0 = time.monotonic()
    before = containers(project)
    cluster = AttachedCluster.up(project, "kp-att-roll")
    try:
        cluster.create_topic("kp-att-roll", 2, 3)
        cluster.wait_in_sync("kp-att-roll")
        assert produce(bootstrap, "kp-att-roll", 200, acks="all") == (200, [])
        starts = {n: cluster.node_incarnation(n) for n in cluster.node_ids()}
        fault_log = tmp_path / "faults.jsonl"
        injector = FaultInjector(cluster, "kp-att-roll", log_path=fault_log)
        with pytest.raises(FaultError, match="rolling_restart: .*onto settings .*recreating your service"):
            injector.inject(FaultSpec("rolling_restart", "", {"config": {"num.io.threads": 4}}))
        with pytest.raises(FaultError, match="rolling_upgrade"):
            injector.inject(FaultSpec("rolling_upgrade", "", {"version": "3.9.2"}))
        assert {n: cluster.node_incarnation(n) for n in cluster.node_ids()} == starts, "a refusal touches nothing"
        roll = injector.inject(FaultSpec("rolling_restart", "", {}))
        events = [json.loads(line) for line in fault_log.read_text().splitlines()]
        (record,) = [e for e in events if e["event"] == "inject" and e["fault_id"] == roll.fault_id]
        rolled = record["effect"]["rolled"]
        assert [e["kind"] for e in events if e["event"] == "heal"].count("roll_node") == 3
        assert sorted(rolled) == ["1", "2", "3"]
        for node, step in rolled.items():
            assert step["started_before"] == starts[int(node)] and step["started_after"] not in (None, starts[int(node)])
            assert step["caught_up_s"] is not None and step["caught_up_s"] < 60
        assert {n: cluster.node_state(n) for n in cluster.node_ids()} == {1: "running", 2: "running", 3: "running"}
        assert not cluster.active_faults()
        assert containers(project) == {n: (cid, "running") for n, (cid, _) in before.items()}, "the same containers"
        assert produce(bootstrap, "kp-att-roll", 100, acks="all") == (100, [])
    finally:
        cluster.detach()
    assert "kp-att-roll" not in state.list_clusters()
    print(f"rolling restart of the attached project: {json.dumps({k: v['caught_up_s'] for k, v in rolled.items()})}, "
          f"{time.monotonic() - t0:.1f}s")
