"""Docker engine, the locally built Kafka image and a compose cluster, for real (no mocks).

Run under the shared lock (it starts containers):
    make test-compose   (or: .venv/bin/python -m pytest tests/compose -m compose)
The tests share one 3-node cluster (compose/kraft-3-combined.yml) and run in file order;
the last one tears it down and checks nothing labelled is left.
"""
from __future__ import annotations

import socket
import subprocess
import time

import pytest

from kafkaproof.cluster import docker_engine as de
from kafkaproof.cluster import network
from kafkaproof.faults.network_rules import isolate_rules
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION

from support import needs_root, produce, wait_for

pytestmark = pytest.mark.compose

PROJECT = "kp-test-compose"
NET_PREFIX = "10.78.13"  # not a compose file's default, so a user's cluster on this engine is left alone
NODES = {1: f"{PROJECT}-kafka1", 2: f"{PROJECT}-kafka2", 3: f"{PROJECT}-kafka3"}
BOOTSTRAP = ",".join(f"{NET_PREFIX}.{10 + n}:9092" for n in NODES)
NETNS_SLOT = 250  # namespace names kp250n<id>: the last local-backend slot, reserved while attached
# Quick failure detection, as the local backend's cluster tests (tests/test_cluster.py).
OVERRIDE = """services:
{services}"""
FAST = {"KAFKA_REPLICA_LAG_TIME_MAX_MS": 4000, "KAFKA_BROKER_SESSION_TIMEOUT_MS": 6000,
        "KAFKA_BROKER_HEARTBEAT_INTERVAL_MS": 1000}


def admin(bootstrap: str = BOOTSTRAP):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})


def brokers_in_metadata(bootstrap: str = BOOTSTRAP) -> set[int]:
    try:
        return set(admin(bootstrap).list_topics(timeout=3).brokers)
    except Exception:
        return set()


def partition0(topic: str) -> dict:
    try:
        p = admin().list_topics(topic, timeout=3).topics[topic].partitions[0]
        return {"leader": p.leader, "isr": sorted(p.isrs), "replicas": sorted(p.replicas)}
    except Exception:
        return {"leader": -1, "isr": [], "replicas": []}


def create_topic(name: str) -> None:
    from confluent_kafka.admin import NewTopic
    client = admin()  # keep a reference: a collected client cancels its pending futures
    client.create_topics([NewTopic(name, 1, 3, config={"min.insync.replicas": "2"})])[name].result(30)
    wait_for(lambda: len(partition0(name)["isr"]) == 3, 30, f"{name} in sync")


def tcp_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


@pytest.fixture(scope="module")
def engine() -> str:
    return de.ensure_engine()


@pytest.fixture(scope="module")
def image(engine) -> str:
    return de.ensure_image(DEFAULT_KAFKA_VERSION)


@pytest.fixture(scope="module")
def cluster(image, tmp_path_factory):
    """A 3-node compose cluster of the default image, removed (with its volumes) afterwards."""
    de.ensure_compose_cli()
    override = tmp_path_factory.mktemp("compose") / "fast.yml"
    override.write_text(OVERRIDE.format(services="".join(
        f"  kafka{n}:\n    environment:\n" + "".join(f"      {k}: {v}\n" for k, v in FAST.items()) for n in NODES)))
    files = [de.compose_file("kraft-3-combined"), override]
    env = {"KAFKAPROOF_NET_PREFIX": NET_PREFIX, "KAFKA_IMAGE": image}
    de.remove_labelled(PROJECT)  # leftovers of a crashed run
    t0 = time.monotonic()
    try:
        de.compose(["up", "-d"], PROJECT, env=env, files=files)
        wait_for(lambda: brokers_in_metadata() == set(NODES), 120, "3 brokers in metadata")
        yield {"files": files, "env": env, "ready_s": time.monotonic() - t0}
    finally:
        for n in NODES:
            network.detach_netns(f"kp{NETNS_SLOT}n{n}")
        de.compose(["down", "-v", "--timeout", "10"], PROJECT, env=env, files=files, check=False)
        de.remove_labelled(PROJECT)


def test_engine_answers(engine):
    assert engine.startswith(("unix://", "tcp://", "ssh://", "npipe://"))
    version = de.docker("version", "--format", "{{.Server.Version}}").stdout.strip()
    assert version, "the engine did not report a server version"


def test_image_builds_or_is_cached(image):
    assert image == f"kafkaproof/kafka:{DEFAULT_KAFKA_VERSION}"
    label = de.docker("image", "inspect", "-f", '{{ index .Config.Labels "io.kafkaproof.content-hash" }}', image)
    assert len(label.stdout.strip()) == 16
    t0 = time.monotonic()
    assert de.ensure_image(DEFAULT_KAFKA_VERSION) == image
    assert time.monotonic() - t0 < 20, "a current image must be reused, not rebuilt"
    java = de.docker("run", "--rm", image, "java", "-version")
    assert "17." in java.stderr


def test_entrypoint_property_names_are_apache_kafkas(repo):
    """KAFKA_FOO_BAR -> foo.bar, `__` -> `_`, `___` -> `-`, as the apache/kafka image converts them."""
    script = (repo / "compose" / "image" / "entrypoint.sh").read_text()
    func = script[script.index("property_name() {"):]
    func = func[:func.index("\n}\n") + 3]
    names = ["KAFKA_NODE_ID", "KAFKA_LISTENER_SECURITY_PROTOCOL_MAP", "KAFKA_A__B", "KAFKA_X___Y_Z"]
    out = subprocess.run(["bash", "-c", func + "".join(f'property_name {n}; echo; ' for n in names)],
                         capture_output=True, text=True, check=True).stdout.split()
    assert out == ["node.id", "listener.security.protocol.map", "a_b", "x-y.z"]


def test_three_brokers_in_metadata(cluster):
    assert brokers_in_metadata() == {1, 2, 3}
    found = de.labelled(PROJECT)
    assert sorted(found["containers"]) == sorted(NODES.values())
    assert found["networks"] == [f"{PROJECT}_kafka"] and len(found["volumes"]) == 3
    for n, name in NODES.items():
        assert de.container_ip(name, f"{PROJECT}_kafka") == f"{NET_PREFIX}.{10 + n}"
    props = de.docker("exec", NODES[1], "cat", "/opt/kafka/config/server.properties").stdout.splitlines()
    assert "replica.lag.time.max.ms=4000" in props, "the override file's KAFKA_* settings must reach the broker"
    assert f"advertised.listeners=CLIENT://{NET_PREFIX}.11:9092,INTERNAL://{NET_PREFIX}.11:9094" in props
    assert de.docker("exec", NODES[1], "cat", "/proc/1/comm").stdout.strip() == "java", \
        "the JVM must be PID 1 so that `docker stop` reaches it (controlled shutdown)"


def test_docker_kill_of_the_leader_elects_a_new_one(cluster):
    create_topic("kill-leader")
    acked, errors = produce(BOOTSTRAP, "kill-leader", 200)
    assert (acked, errors) == (200, [])
    old = partition0("kill-leader")["leader"]
    de.docker("kill", NODES[old])

    def new_leader() -> int:
        leader = partition0("kill-leader")["leader"]
        return leader if leader not in (-1, old) else 0

    new = wait_for(new_leader, 30, "a new leader")
    assert new in (set(NODES) - {old})
    acked, errors = produce(BOOTSTRAP, "kill-leader", 200)
    assert (acked, errors) == (200, []), "writes must continue with 2 of 3 replicas (min ISR 2)"
    de.docker("start", NODES[old])
    wait_for(lambda: brokers_in_metadata() == set(NODES), 90, f"node {old} back")
    wait_for(lambda: len(partition0("kill-leader")["isr"]) == 3, 60, "ISR back to 3")


@needs_root
def test_nft_isolation_and_tc_through_attach_netns(cluster):
    create_topic("isolate")
    p = partition0("isolate")
    victim = next(n for n in NODES if n != p["leader"])
    ns = f"kp{NETNS_SLOT}n{victim}"
    network.attach_netns(NODES[victim], ns)
    assert ns in network.list_kafkaproof_namespaces()
    ip = f"{NET_PREFIX}.{10 + victim}"
    # tc: the existing bandwidth code, on the container's eth0 and its host-side veth.
    veth = network.host_veth(NODES[victim])
    assert veth.startswith("veth")
    link = network.NodeLink(namespace=ns, veth_host=veth, host_ip=f"{NET_PREFIX}.1", node_ip=ip)
    network.tc_limit(link, 10_000)
    inside = network.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0"]).stdout
    assert "tbf" in inside
    network.tc_clear(link)
    assert "tbf" not in network.run(["ip", "netns", "exec", ns, "tc", "qdisc", "show", "dev", "eth0"]).stdout
    # nft: the isolate fault's own rules, loaded the way faults.py loads them.
    assert tcp_open(ip, 9092)
    network.nft_apply(ns, network.nft_ruleset("kp_test_isolate", *isolate_rules()))
    try:
        assert "kp_test_isolate" in network.nft_tables(ns)
        assert not tcp_open(ip, 9092), "the host still reaches an isolated container"
        wait_for(lambda: victim not in partition0("isolate")["isr"], 40, f"node {victim} out of the ISR")
    finally:
        network.nft_delete_table(ns, "kp_test_isolate")
    assert tcp_open(ip, 9092)
    wait_for(lambda: victim in partition0("isolate")["isr"], 60, f"node {victim} back in the ISR")
    network.detach_netns(ns)
    assert ns not in network.list_kafkaproof_namespaces()


def test_docker_pause_and_unpause(cluster):
    name = NODES[2]
    de.docker("pause", name)
    try:
        assert de.docker("inspect", "-f", "{{.State.Paused}}", name).stdout.strip() == "true"
        wait_for(lambda: 2 not in brokers_in_metadata(), 40, "the paused broker fenced")
    finally:
        de.docker("unpause", name)
    assert de.docker("inspect", "-f", "{{.State.Paused}}", name).stdout.strip() == "false"
    wait_for(lambda: brokers_in_metadata(f"{NET_PREFIX}.12:9092") == set(NODES), 60, "the broker back")


def test_teardown_leaves_nothing_labelled(cluster):
    de.compose(["down", "-v", "--timeout", "10"], PROJECT, env=cluster["env"], files=cluster["files"])
    removed = de.remove_labelled(PROJECT)
    assert removed == {"containers": [], "networks": [], "volumes": []}, f"compose down left {removed}"
    assert de.labelled(PROJECT) == {"containers": [], "networks": [], "volumes": []}
    assert not [ns for ns in network.list_kafkaproof_namespaces() if ns.startswith(f"kp{NETNS_SLOT}n")]
