"""A team's own compose project, attached as it runs: found, faulted, healed, handed back untouched.

The project (`users_project/docker-compose.yml`) is written the way the seeds write theirs (apache/kafka
environment names, published ports, advertised localhost, named volumes, no kafkaproof label, no fixed
addresses) and started with plain `docker compose up -d`: process faults, network faults (through
kafkaproof's tools containers in the containers' namespaces) and proxy faults (kafkaproof's proxies in front
of the published ports). Run under the shared lock (it starts containers): `make test-long`.
"""
from __future__ import annotations

import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkaproof.cluster import docker_engine as de
from kafkaproof.cluster import network, state
from kafkaproof.cluster.attached import AttachedCluster
from kafkaproof.faults import FaultInjector
from kafkaproof.run.resolved import Overrides
from kafkaproof.spec.faults import FaultSpec

import users_projects
from support import fault_events, leader_kill_run, produce, wait_for
from users_projects import containers

# long: ~80 s with its project start (network and proxy faults included), which would take a fresh
# machine's `make test` (28 min with setup) past 30.
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


def check_handed_back(project: str, bootstrap: str, before: dict[str, tuple[str, str]], hw: dict[int, int]) -> None:
    """Every container runs again, the same container, every broker is in the metadata, the user's topic as it was."""
    wait_for(lambda: containers(project) == {n: (cid, "running") for n, (cid, _) in before.items()}, 30,
             f"the project's containers running as found ({containers(project)} vs {before})")
    wait_for(lambda: high_watermarks(bootstrap, USERS_TOPIC) == hw, 30, "the user's topic as it was")


def project_resources(project: str) -> dict[str, list[str]]:
    """The names of the project's volumes and networks (compose labels them with the project)."""
    flt = f"label=com.docker.compose.project={project}"
    return {"volumes": sorted(de.docker("volume", "ls", "--filter", flt, "--format", "{{.Name}}").stdout.split()),
            "networks": sorted(de.docker("network", "ls", "--filter", flt, "--format", "{{.Name}}").stdout.split())}


def tools_in(project: str) -> list[str]:
    """kafkaproof's tools containers (any state) in the network of one of the project's containers."""
    targets = set(containers(project)) | {cid for cid, _ in containers(project).values()}
    out = de.docker("ps", "-a", "--filter", f"label={de.TOOL_LABEL}",
                    "--format", f'{{{{.ID}}}} {{{{.Label "{de.TOOL_TARGET_LABEL}"}}}}').stdout.split("\n")
    return [line for line in out if line.strip() and line.split()[-1] in targets]


def isr(cluster, topic: str) -> list[int]:
    try:
        return cluster.partitions(topic)[0]["isr"]
    except Exception:
        return []


def produce_timed(bootstrap: str, topic: str) -> tuple[str | None, float]:
    """One record to partition 0 through `bootstrap`: (its delivery error, seconds until its delivery report)."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "retry.backoff.ms": 100,
                  "log_level": 2})
    reports: list[tuple[str | None, float]] = []
    p.produce(topic, value=b"x", partition=0)  # the connection and metadata first: not timed
    assert p.flush(30) == 0
    t0 = time.monotonic()
    p.produce(topic, value=b"timed", partition=0,
              on_delivery=lambda e, m: reports.append((e.name() if e else None, time.monotonic() - t0)))
    assert p.flush(60) == 0, "the record was not delivered within 60 s"
    return reports[0]


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
    wait_for(lambda: users_projects.found_nodes(project, 3), 30, "all three brokers in the metadata")
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


def test_an_isolated_container_leaves_the_isr_and_comes_back_and_nothing_of_kafkaproofs_is_left(users_project):
    project, bootstrap, _ = users_project
    t0 = time.monotonic()
    before, resources = containers(project), project_resources(project)
    hw = high_watermarks(bootstrap, USERS_TOPIC)
    cluster = AttachedCluster.up(project, "kp-att-net")
    topic = "kp-att-net"
    try:
        assert cluster.supported_faults >= {"isolate", "cut", "partition", "packet_loss", "bandwidth"}
        # the peers' addresses: the containers' on the project's network, as the engine gives them
        engine_ips = {de.docker("inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                                name).stdout.strip() for name in before}
        links = {n: cluster.node_link(n) for n in cluster.node_ids()}
        assert {link.node_ip for link in links.values()} == engine_ips
        assert all(link.namespace == f"docker:{cluster.node(n).container}" for n, link in links.items())
        cluster.create_topic(topic, 1, 3, {"min.insync.replicas": 2})
        cluster.wait_in_sync(topic)
        with FaultInjector(cluster, topic=topic) as faults:
            follower = cluster.followers(topic, 0)[0]
            iso = faults.inject(FaultSpec("isolate", f"node:{follower}"))
            wait_for(lambda: follower not in isr(cluster, topic), 30, "the isolated container out of the ISR")
            table = "kp_" + iso.fault_id.replace("-", "_")
            assert network.nft_dropped(links[follower].namespace, table)["packets"] > 0  # it took effect
            faults.heal(iso.fault_id)
            # only kafkaproof's table went: the engine's own (`nat`, its DNS on a user network) stays
            assert [t for t in network.nft_tables(links[follower].namespace) if t.startswith("kp_")] == []
            wait_for(lambda: follower in isr(cluster, topic), 60, "the isolated container back in the ISR")
            slow = faults.inject(FaultSpec("bandwidth", f"node:{follower}", {"rate_kbit": 800}))
            assert network.tc_limited(cluster.node_link(follower))
            faults.heal(slow.fault_id)
            assert not network.tc_limited(cluster.node_link(follower))
        assert produce(cluster.bootstrap_servers(), topic, 100) == (100, [])
        print(f"attach, isolate out of and back into the ISR, bandwidth: {time.monotonic() - t0:.1f}s")
    finally:
        cluster.down()
    assert "kp-att-net" not in state.list_clusters()
    check_handed_back(project, bootstrap, before, hw)
    assert project_resources(project) == resources and tools_in(project) == []
    print(f"... and detached: {time.monotonic() - t0:.1f}s")


def test_proxy_faults_on_the_attached_project_reach_its_clients_and_the_proxies_go_at_detach(users_project):
    project, bootstrap, _ = users_project
    t0 = time.monotonic()
    before, resources = containers(project), project_resources(project)
    hw = high_watermarks(bootstrap, USERS_TOPIC)
    cluster = AttachedCluster.up(project, "kp-att-proxy", proxy=True)
    topic = "kp-att-proxy"
    try:
        nodes = {n.id: n for n in cluster.state().nodes}
        assert cluster.proxies is cluster and all(cluster.proxy_state(n) == "running" for n in nodes)
        from confluent_kafka.admin import AdminClient
        md = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()}).list_topics(timeout=10)
        advertised = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
        assert advertised == {i: n.proxy.listen for i, n in nodes.items()}
        assert cluster.direct_bootstrap() == bootstrap  # kafkaproof's own clients: the published ports
        cluster.create_topic(topic, 1, 3)
        cluster.wait_in_sync(topic)
        injector = FaultInjector(cluster, topic=topic)
        _, fast = produce_timed(cluster.bootstrap_servers(), topic)
        slow = injector.inject(FaultSpec("latency", "leader:0", {"topic": topic, "partitions": [0], "api": "produce",
                                                                 "ms": 1500}))
        try:
            error, held = produce_timed(cluster.bootstrap_servers(), topic)
        finally:
            injector.heal(slow.fault_id)
        assert error is None and 1.45 <= held < 5.0 and fast < 1.0, (fast, held)
        refused = injector.inject(FaultSpec("error", "leader:0", {"topic": topic, "partitions": [0],
                                                                  "error": "NOT_ENOUGH_REPLICAS", "count": 1}))
        try:
            error, _ = produce_timed(cluster.bootstrap_servers(), topic)
        finally:
            injector.heal(refused.fault_id)
        assert error is None  # retried after the error, delivered once
        assert [e["phase"] for e in fault_events(cluster, refused.fault_id)] == ["answered_without_forwarding"]
        listens = [n.proxy.listen for n in nodes.values()]
        print(f"attach with proxies, latency and error faults: {time.monotonic() - t0:.1f}s")
    finally:
        cluster.down()
    for listen in listens:  # the proxies are stopped: nothing listens there any more
        host, port = listen.rsplit(":", 1)
        with pytest.raises(OSError):
            socket.create_connection((host, int(port)), timeout=2).close()
    check_handed_back(project, bootstrap, before, hw)
    assert project_resources(project) == resources and tools_in(project) == []
    print(f"... and detached: {time.monotonic() - t0:.1f}s")
