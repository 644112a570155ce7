"""The local cluster backend and its faults, on real Kafka brokers (no mocks)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from kafkaproof.cluster import network, process
from kafkaproof.cluster.state import ClusterState
from kafkaproof.errors import FaultError
from kafkaproof.faults import FaultInjector
from kafkaproof.spec.faults import FaultSpec
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION, PRODUCTION_KAFKA_VERSION

from support import needs_root, produce, wait_for

pytestmark = pytest.mark.cluster

FAST_ISR = {"replica.lag.time.max.ms": 4000, "broker.session.timeout.ms": 6000,
            "broker.heartbeat.interval.ms": 1000}


def leader_seen_by(cluster, node_id: int, topic: str) -> int:
    """Partition 0's leader in the metadata of one node (a client bootstrapped to it alone)."""
    from confluent_kafka.admin import AdminClient
    node = cluster.node(node_id)
    admin = AdminClient({"bootstrap.servers": f"{node.host}:{node.client_port}", "log_level": 2})
    try:
        return admin.list_topics(topic, timeout=5).topics[topic].partitions[0].leader
    except Exception:
        return -1


def assert_cluster_gone(state_before: ClusterState) -> None:
    """Nothing of this cluster is left: processes, namespaces, host veths."""
    for node in state_before.nodes:
        ref = node.process
        assert process.state_of(ref) == "dead", f"node {node.id} still running"
        if node.link:
            assert node.link.namespace not in network.list_kafkaproof_namespaces()
            links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
            assert node.link.veth_host not in links


@needs_root
def test_three_nodes_leader_kill_isolation_pause_and_teardown(make_cluster):
    cluster = make_cluster(broker_config=FAST_ISR)
    status = cluster.status()
    assert [n["id"] for n in status["nodes"]] == [1, 2, 3]
    assert all(n["alive"] for n in status["nodes"])
    assert status["active_controller"] in (1, 2, 3)
    assert len({n["address"].split(":")[0] for n in status["nodes"]}) == 3, "each node has its own IP"

    cluster.create_topic("orders", partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    cluster.wait_in_sync("orders")
    bootstrap = cluster.bootstrap_servers()
    assert produce(bootstrap, "orders", 200) == (200, [])

    with FaultInjector(cluster, topic="orders") as faults:
        # Killing the leader elects a new one from the ISR; writes continue.
        old_leader = cluster.leader_of("orders", 0)
        kill = faults.inject(FaultSpec("kill", "leader:0"))
        assert kill.nodes == [old_leader]
        new_leader = wait_for(lambda: (lambda l: l if l not in (-1, old_leader) else None)(
            cluster.partitions("orders")[0]["leader"]), 30, "a new leader")
        assert new_leader in cluster.partitions("orders")[0]["replicas"]
        assert produce(bootstrap, "orders", 100) == (100, [])
        faults.heal(kill.fault_id)
        cluster.wait_in_sync("orders", timeout_s=60)

        # Isolating a follower shrinks the ISR; healing restores it.
        leader = cluster.leader_of("orders", 0)
        iso = faults.inject(FaultSpec("isolate", "follower:0"))
        (follower,) = iso.nodes
        assert follower != leader
        produce(bootstrap, "orders", 20)  # traffic lets the leader notice the lagging follower
        wait_for(lambda: follower not in cluster.partitions("orders")[0]["isr"], 40, "ISR shrink")
        faults.heal(iso.fault_id)
        cluster.wait_in_sync("orders", timeout_s=60)

        # Pause and resume a node.
        pause = faults.inject(FaultSpec("pause", "node:2"))
        assert cluster.node_state(2) == "paused"
        assert cluster.status()["nodes"][1]["paused"] is True
        faults.heal(pause.fault_id)
        assert cluster.node_state(2) == "running"

        # Packet loss and a bandwidth limit install and heal.
        loss = faults.inject(FaultSpec("packet_loss", "node:3", {"percent": 20}))
        ns = cluster.node(3).link.namespace
        assert any(t.startswith("kp_packet_loss") for t in network.nft_tables(ns))
        faults.heal(loss.fault_id)
        assert network.nft_tables(ns) == []
        bw = faults.inject(FaultSpec("bandwidth", "node:3", {"rate_kbit": 8000}))
        qdisc = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0"],
                               capture_output=True, text=True).stdout
        assert "tbf" in qdisc
        faults.heal(bw.fault_id)
    assert cluster.state().faults == []
    log = (cluster.node_dir(1).parent / "faults.jsonl").read_text().splitlines()
    assert sum('"inject"' in line for line in log) == sum('"heal"' in line for line in log) >= 5

    before = cluster.state()
    cluster.down()
    assert_cluster_gone(before)


@needs_root
def test_partition_cuts_brokers_but_not_clients(make_cluster):
    cluster = make_cluster(broker_config=FAST_ISR)
    cluster.create_topic("p", partitions=1, replication_factor=3)
    leader = cluster.leader_of("p", 0)
    with FaultInjector(cluster, topic="p") as faults:
        part = faults.inject(FaultSpec("partition", params={"groups": "leader-minority:0"}))
        assert part.params["resolved_groups"][0] == [leader]
        produce(cluster.bootstrap_servers(), "p", 20, **{"message.timeout.ms": 8000})
        # The majority elects a leader of its own once the old one is fenced. Ask a majority
        # node: clients still reach the cut-off old leader, whose own metadata stays stale.
        majority = part.params["resolved_groups"][1][0]
        wait_for(lambda: leader_seen_by(cluster, majority, "p") not in (-1, leader), 90, "leader on majority side")
    cluster.wait_in_sync("p", timeout_s=90)


@needs_root
def test_two_brokers_down_gives_not_enough_replicas_then_recovers(make_cluster):
    # A dedicated controller keeps the quorum alive while two of three brokers are down.
    cluster = make_cluster(brokers=3, controllers=1, broker_config=FAST_ISR)
    cluster.create_topic("acks", partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    cluster.wait_in_sync("acks")
    bootstrap = cluster.bootstrap_servers()
    leader = cluster.leader_of("acks", 0)
    followers = [b for b in cluster.broker_ids() if b != leader]
    with FaultInjector(cluster, topic="acks") as faults:
        kill = faults.inject(FaultSpec("kill", f"nodes:{followers[0]},{followers[1]}"))
        wait_for(lambda: cluster.partitions("acks")[0]["isr"] == [leader], 30, "ISR = leader only")
        # Retries run out before delivery.timeout.ms, so the broker's own error reaches the callback.
        acked, errors = produce(bootstrap, "acks", 5, retries=2, **{"retry.backoff.ms": 200, "delivery.timeout.ms": 20000})
        assert acked == 0
        assert set(errors) == {"NOT_ENOUGH_REPLICAS"}, errors
        faults.heal(kill.fault_id)
    cluster.wait_in_sync("acks", timeout_s=60)
    assert produce(bootstrap, "acks", 5) == (5, [])


@pytest.mark.parametrize("version", [PRODUCTION_KAFKA_VERSION, DEFAULT_KAFKA_VERSION])
def test_cluster_works_on_supported_versions(make_cluster, version):
    cluster = make_cluster(kafka_version=version)
    assert cluster.state().kafka_version == version
    cluster.create_topic("v", partitions=2, replication_factor=3, config={"min.insync.replicas": 2})
    assert produce(cluster.bootstrap_servers(), "v", 50) == (50, [])
    with FaultInjector(cluster, topic="v") as faults:
        faults.inject(FaultSpec("restart", "leader:0"))
    cluster.wait_in_sync("v", timeout_s=60)
    assert produce(cluster.bootstrap_servers(), "v", 50) == (50, [])


@needs_root
def test_crashed_run_is_cleaned_by_cluster_down(repo, tmp_path):
    """A process that started a cluster and injected faults dies by SIGKILL; `cluster down` heals it all."""
    name = "t-crash"
    script = tmp_path / "crash.py"
    script.write_text(
        "import os, signal\n"
        "from kafkaproof.cluster import ClusterConfig, LocalCluster\n"
        "from kafkaproof.faults import FaultInjector; from kafkaproof.spec.faults import FaultSpec\n"
        f"c = LocalCluster.up(ClusterConfig(name={name!r}))\n"
        "f = FaultInjector(c)\n"
        "f.inject(FaultSpec('isolate', 'node:1'))\n"
        "f.inject(FaultSpec('pause', 'node:2'))\n"
        "f.inject(FaultSpec('bandwidth', 'node:3', {'rate_kbit': 1000}))\n"
        "print('READY', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ})
    assert "READY" in proc.stdout, proc.stderr[-3000:]
    assert proc.returncode == -signal.SIGKILL
    from kafkaproof.cluster import attach
    before = attach(name).state()
    assert len(before.faults) == 3
    down = subprocess.run([sys.executable, "-m", "kafkaproof", "cluster", "down", "--name", name],
                          capture_output=True, text=True, timeout=120)
    assert down.returncode == 0, down.stderr
    assert_cluster_gone(before)


def test_bad_input_is_rejected_clearly(make_cluster):
    cluster = make_cluster(brokers=1, broker_config={"offsets.topic.replication.factor": 1})
    faults = FaultInjector(cluster)
    with pytest.raises(FaultError, match="out of range.*nodes \\[1\\]"):
        faults.inject(FaultSpec("kill", "node:7"))
    with pytest.raises(FaultError, match="unknown fault kind 'explode'; allowed: kill"):
        faults.inject(FaultSpec("explode", "node:1"))
    assert cluster.node_state(1) == "running"
