"""A team's own compose project, attached as it runs: found, faulted, healed, handed back untouched.

The project (`users_project/docker-compose.yml`) is written the way the seeds write theirs (apache/kafka
environment names, published ports, advertised localhost, named volumes, no kafkaproof label) and started
with plain `docker compose up -d`. Run under the shared lock (it starts containers): `make test-compose`.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkaproof.cluster import state
from kafkaproof.cluster.attached import AttachedCluster
from kafkaproof.faults import FaultInjector
from kafkaproof.run.resolved import Overrides
from kafkaproof.spec.faults import FaultSpec

import users_projects
from support import leader_kill_run, produce, wait_for
from users_projects import containers

# long: ~70 s with its project start, which would take a fresh machine's `make test` (28 min with setup) past 30.
pytestmark = [pytest.mark.compose, pytest.mark.long]

PROJECT_FILE = Path(__file__).parent / "users_project" / "docker-compose.yml"
USERS_TOPIC = "orders"


def high_watermarks(bootstrap: str, topic: str) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "kp-test-hw"})
    try:
        md = c.list_topics(topic, timeout=10).topics[topic]
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in md.partitions}
    finally:
        c.close()


@pytest.fixture(scope="module")
def users_project():
    """The user's project, up as they start it, with a topic of theirs holding 100 records; removed after."""
    with users_projects.users_project(PROJECT_FILE, "kpusers", "USERS_PORT_", 3) as (project, bootstrap, found):
        assert produce(bootstrap, USERS_TOPIC, 100, acks="all") == (100, [])
        yield project, bootstrap, found


def _inspect(project: str):
    return users_projects._found(project, 3)


def check_handed_back(project: str, bootstrap: str, before: dict[str, tuple[str, str]], hw: dict[int, int]) -> None:
    """Every container runs again, the same container, every broker is in the metadata, the user's topic as it was."""
    wait_for(lambda: containers(project) == {n: (cid, "running") for n, (cid, _) in before.items()}, 30,
             f"the project's containers running as found ({containers(project)} vs {before})")
    wait_for(lambda: high_watermarks(bootstrap, USERS_TOPIC) == hw, 30, "the user's topic as it was")


def test_inspect_attach_kill_and_pause_then_detach_from_another_process(users_project):
    project, bootstrap, found = users_project
    t0 = time.monotonic()
    assert [(n["id"], n["roles"], n["host"], n["service"]) for n in found["nodes"]] == [
        (i, ["broker", "controller"], "localhost", f"kafka-{i}") for i in (1, 2, 3)]
    assert found["bootstrap"] == bootstrap
    before = containers(project)
    hw = high_watermarks(bootstrap, USERS_TOPIC)
    with pytest.raises(Exception, match="no Kafka broker container"):
        AttachedCluster.up("kpusers-nothing-here", "kp-att-none")
    cluster = AttachedCluster.up(project, "kp-att-faults")
    try:
        cluster.create_topic("kp-att-faults", 1, 3)
        cluster.wait_in_sync("kp-att-faults")
        with pytest.raises(Exception, match="already exists"):
            cluster.create_topic(USERS_TOPIC, 1, 3)  # the user's: never taken, never deleted
        injector = FaultInjector(cluster, "kp-att-faults")
        leader = cluster.leader_of("kp-att-faults", 0)
        kill = injector.inject(FaultSpec("kill", "leader:0", {}))
        assert kill.nodes == [leader] and cluster.node_state(leader) == "dead"
        wait_for(lambda: cluster.partitions("kp-att-faults")[0]["leader"] not in (leader, -1), 30,
                 "a new leader of the run's topic")
        controller = wait_for(cluster.active_controller, 30, "an active controller")
        pause = injector.inject(FaultSpec("pause", "controller", {}))
        assert pause.nodes == [controller] and cluster.node_state(controller) == "paused"
        assert set(f["fault_id"] for f in cluster.active_faults()) == {kill.fault_id, pause.fault_id}
    finally:
        # as after a crash: another process detaches through the state file
        proc = subprocess.run([sys.executable, "-m", "kafkaproof", "cluster", "detach", "--name", "kp-att-faults"],
                              capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "kp-att-faults" not in state.list_clusters()
    check_handed_back(project, bootstrap, before, hw)
    wait_for(lambda: _inspect(project), 30, "all three brokers in the metadata")
    from confluent_kafka.admin import AdminClient
    topics = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10).topics
    assert USERS_TOPIC in topics and "kp-att-faults" not in topics
    print(f"attach, kill, pause, detach: {time.monotonic() - t0:.1f}s")


def test_a_scenario_runs_on_the_attached_project_with_exact_counts(users_project, tmp_path):
    project, bootstrap, _ = users_project
    before = containers(project)
    hw = high_watermarks(bootstrap, USERS_TOPIC)
    manifest = leader_kill_run(tmp_path, "t-attached-run", {}, 1600, Overrides(attach_project=project,
                                                                                     faults_hit_attached=True))
    assert manifest["cluster"]["backend"] == "attached" and manifest["cluster"]["project"] == project
    assert manifest["cluster"]["name"] not in state.list_clusters()
    check_handed_back(project, bootstrap, before, hw)
    from confluent_kafka.admin import AdminClient
    admin = AdminClient({"bootstrap.servers": bootstrap})
    assert "kp-t-attached-run" not in admin.list_topics(timeout=10).topics
    groups = {g.group_id for g in admin.list_consumer_groups().result(timeout=10).valid}
    assert "kp-t-attached-run" not in groups
