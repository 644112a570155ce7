"""The compose cluster backend behind the one interface, for real: engine, containers, faults, a run.

Run under the shared lock (it starts containers): `make test-compose`. Each test starts its
own compose cluster through `start_cluster` and checks nothing labelled is left after it.
"""
from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml

from kafkaproof import pipeline
from kafkaproof.cluster import attach, network, start_cluster, state
from kafkaproof.cluster import docker_engine as de
from kafkaproof.cluster.compose import ComposeCluster, compose_project
from kafkaproof.cluster.host import free_slot
from kafkaproof.errors import ClusterError
from kafkaproof.faults import FaultInjector
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.spec import ledger
from kafkaproof.spec.cluster import ClusterConfig
from kafkaproof.spec.faults import FaultSpec
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION

from rolling_checks import check_rolled_run, settings_change_upgrade_and_refused_downgrade
from support import REPO, leader_kill_run, needs_root, produce, wait_for

pytestmark = pytest.mark.compose

FAST = {"replica.lag.time.max.ms": 4000, "broker.session.timeout.ms": 6000, "broker.heartbeat.interval.ms": 1000}


@pytest.fixture(scope="module")
def docker_ready() -> None:
    de.ensure_engine()
    de.ensure_compose_cli()
    de.ensure_image(DEFAULT_KAFKA_VERSION)


@pytest.fixture
def compose_cluster(docker_ready, request):
    """Factory: a compose cluster of the given config; removed after the test, and nothing of it left."""
    names: list[str] = []

    def make(**kwargs) -> ComposeCluster:
        name = f"kp-t-{request.node.name[5:20].replace('_', '-').strip('-')}-{len(names)}"
        names.append(name)
        return start_cluster(ClusterConfig(name=name, backend="compose", **kwargs))

    yield make
    for name in names:
        if name in state.list_clusters():
            attach(name).down(keep_logs=False)
        assert not any(de.labelled(compose_project(name)).values()), de.labelled(compose_project(name))


def isr(cluster, topic: str) -> list[int]:
    try:
        return cluster.partitions(topic)[0]["isr"]
    except Exception:
        return []


@needs_root
def test_process_and_network_faults_on_containers(compose_cluster, tmp_path):
    t0 = time.monotonic()
    cluster = compose_cluster(brokers=3, broker_config=FAST)
    print(f"compose cluster (3 combined nodes) ready in {time.monotonic() - t0:.1f}s")
    assert attach(cluster.name).status()["backend"] == "compose"
    assert cluster.supported_faults >= {"kill", "stop", "pause", "isolate", "bandwidth"}
    cluster.create_topic("orders", 1, 3, {"min.insync.replicas": 2})
    cluster.wait_in_sync("orders")
    bootstrap = cluster.bootstrap_servers()
    assert produce(bootstrap, "orders", 200) == (200, [])
    with FaultInjector(cluster, topic="orders", log_path=tmp_path / "faults.jsonl") as faults:
        # docker kill of the leader: a new leader from the ISR, writes continue; the heal starts it again
        old = cluster.leader_of("orders", 0)
        kill = faults.inject(FaultSpec("kill", "leader:0"))
        assert kill.nodes == [old] and cluster.node_state(old) == "dead"
        wait_for(lambda: cluster.partitions("orders")[0]["leader"] not in (-1, old), 30, "a new leader")
        assert produce(bootstrap, "orders", 100) == (100, [])
        faults.heal(kill.fault_id)
        assert cluster.node_state(old) == "running"
        wait_for(lambda: len(isr(cluster, "orders")) == 3, 60, "the killed node back in the ISR")
        # nft inside the container's namespace: an isolated follower drops out of the ISR and returns
        follower = cluster.followers("orders", 0)[0]
        iso = faults.inject(FaultSpec("isolate", f"node:{follower}"))
        wait_for(lambda: follower not in isr(cluster, "orders"), 30, "the isolated follower out of the ISR")
        faults.heal(iso.fault_id)
        wait_for(lambda: follower in isr(cluster, "orders"), 60, "the follower back in the ISR")
        # docker pause: the container frozen, its connections open; a new leader after the session timeout
        leader = cluster.leader_of("orders", 0)
        pause = faults.inject(FaultSpec("pause", "leader:0"))
        assert cluster.node_state(leader) == "paused"
        wait_for(lambda: cluster.partitions("orders")[0]["leader"] not in (-1, leader), 60, "a leader not paused")
        faults.heal(pause.fault_id)
        assert cluster.node_state(leader) == "running"
    cluster.wait_in_sync("orders", timeout_s=60)
    assert "Kafka" in cluster.node_log(1).read_text(errors="replace")  # the container's output


@needs_root
def test_a_subnet_a_dead_engine_left_routed_is_not_used(compose_cluster, caplog):
    """A bridge that a killed Docker engine left behind keeps its address and route, and the host would
    send a new cluster on that /24 nothing (every compose test of one CI run failed so): its slot is
    skipped. What this host reaches, logged when a start fails, names each listener."""
    slot = free_slot(True)
    stale = "kpstale0"
    network.run(["ip", "link", "add", stale, "type", "bridge"])
    try:
        network.run(["ip", "addr", "add", f"10.79.{slot}.1/24", "dev", stale])
        network.run(["ip", "link", "set", stale, "up"])
        cluster = compose_cluster(brokers=2, broker_config=FAST)
    finally:
        network.run(["ip", "link", "del", stale], check=False)
    used = cluster.state().slot
    assert used != slot
    cluster.create_topic("orders", 1, 2)
    assert produce(cluster.bootstrap_servers(), "orders", 50) == (50, [])
    cluster._dump_reachability()
    assert f"node 1 at 10.79.{used}.11: from this host 9092 open, 9094 open" in caplog.text, caplog.text


def test_a_scenario_runs_on_a_compose_cluster_with_exact_counts(docker_ready, tmp_path):
    manifest = leader_kill_run(tmp_path, "t-compose-run", {"brokers": 3, "backend": "compose", "config": FAST}, 2000)
    assert manifest["cluster"]["backend"] == "compose"
    assert "Kafka" in (Path(manifest["run_dir"]) / "logs" / "node-1.log").read_text(errors="replace")
    name = manifest["cluster"]["name"]
    assert name not in state.list_clusters() and not any(de.labelled(compose_project(name)).values())


class EngineOverTcp:
    """A TCP endpoint relaying to the local engine's unix socket: the engine as an Airflow worker on
    another machine sees it (`tcp://host:port`), whose containers' namespaces are not this host's."""

    def __init__(self, socket_path: str):
        import socket
        import threading
        self.socket_path = socket_path
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"tcp://127.0.0.1:{self.server.getsockname()[1]}"
        self._socket, self._threading = socket, threading
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            engine = self._socket.socket(self._socket.AF_UNIX)
            engine.connect(self.socket_path)
            for src, dst in ((client, engine), (engine, client)):
                self._threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src, dst) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
            dst.shutdown(self._socket.SHUT_WR)  # `docker run -i`: the end of stdin reaches the engine
        except OSError:
            pass

    def close(self) -> None:
        self.server.close()


@pytest.mark.long
def test_network_faults_through_an_engine_elsewhere_on_a_users_compose_file(docker_ready, compose_cluster,
                                                                            monkeypatch, tmp_path):
    """With the engine at a tcp:// address (an Airflow worker that is not the Docker host), network
    faults enter the containers through tools containers sharing their network; the cluster comes
    from the user's own compose file (ours with a smaller heap); nothing is left."""
    own = tmp_path / "docker-compose.yml"
    own.write_text((REPO / "compose" / "kraft-3-combined.yml").read_text().replace("-Xmx512m -Xms512m", "-Xmx400m -Xms400m"))
    local = de.ensure_engine()
    relay = EngineOverTcp(local[len("unix://"):])
    image = f"kafkaproof/kafka:{DEFAULT_KAFKA_VERSION}"
    try:
        monkeypatch.setenv("DOCKER_HOST", local)  # restored after the test, as is the image variable:
        monkeypatch.setenv(de.KAFKA_IMAGE_ENV, "")
        # what the DAGs' provision does with the params docker_url and kafka_image (DockerHook pings it)
        assert pipeline.use_docker_engine(docker_url=relay.url, kafka_image=image) == relay.url
        cluster = compose_cluster(brokers=3, broker_config=FAST, compose_file=str(own))
        assert cluster.state().image == image
        st = cluster.state()
        assert (st.network, st.engine, st.compose.files[0]) == ("engine", relay.url, str(own))
        env = de.docker("inspect", "--format", "{{json .Config.Env}}", cluster.node(1).container).stdout
        assert "KAFKA_HEAP_OPTS=-Xmx400m -Xms400m" in env
        assert cluster.node_link(1).namespace == f"docker:{cluster.node(1).container}"
        cluster.create_topic("orders", 1, 3, {"min.insync.replicas": 2})
        cluster.wait_in_sync("orders")
        with FaultInjector(cluster, topic="orders") as faults:
            follower = cluster.followers("orders", 0)[0]
            iso = faults.inject(FaultSpec("isolate", f"node:{follower}"))
            wait_for(lambda: follower not in isr(cluster, "orders"), 30, "the isolated follower out of the ISR")
            faults.heal(iso.fault_id)
            wait_for(lambda: follower in isr(cluster, "orders"), 60, "the follower back in the ISR")
            slow = faults.inject(FaultSpec("bandwidth", f"node:{follower}", {"rate_kbit": 800}))
            assert network.tc_limited(cluster.node_link(follower))
            faults.heal(slow.fault_id)
            assert not network.tc_limited(cluster.node_link(follower))
        assert produce(cluster.bootstrap_servers(), "orders", 100) == (100, [])
        tools = de.docker("ps", "-a", "--filter", f"label={de.TOOL_LABEL}", "--format", "{{.Names}}").stdout.split()
        assert tools == []  # every tools container removed itself
        cluster.down(keep_logs=False)  # while the engine is reachable at its recorded address
    finally:
        relay.close()


def test_a_users_compose_file_that_breaks_the_conventions_is_refused_before_anything_starts(docker_ready, tmp_path):
    own = tmp_path / "docker-compose.yml"
    own.write_text((REPO / "compose" / "kraft-2-combined.yml").read_text().replace("kafka2:", "broker2:"))
    name = "kp-t-own-file-bad"
    with pytest.raises(ClusterError, match=r"(?s)docker-compose.yml: not usable as a kafkaproof compose file.*"
                                           r"services.kafka2: missing \(node 2"):
        start_cluster(ClusterConfig(name=name, brokers=2, backend="compose", compose_file=str(own)))
    assert name not in state.list_clusters() and not any(de.labelled(compose_project(name)).values())


@pytest.mark.long
def test_catalog_rolling_upgrade_on_containers_loses_and_duplicates_nothing(docker_ready, tmp_path):
    (scenario,) = pipeline.suite(names=["upgrade-39-to-43-idempotent"])
    result = ScenarioRun(resolve(scenario, Overrides(messages=20000, backend="compose")),
                         RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "complete", result.error
    check_rolled_run(result.run_dir, [1, 2, 3], 20000)
    assert not any(de.labelled(compose_project(ledger.read_manifest(result.run_dir)["cluster"]["name"])).values())


@pytest.mark.long
def test_settings_change_upgrade_and_a_refused_downgrade_on_containers(compose_cluster, tmp_path):
    cluster = compose_cluster(brokers=2, kafka_version="3.9.2", broker_config=FAST)
    settings_change_upgrade_and_refused_downgrade(cluster, tmp_path)
    rolled = yaml.safe_load((state.cluster_dir(cluster.name) / "rolled.yml").read_text())["services"]
    assert {svc["image"] for svc in rolled.values()} == {"kafkaproof/kafka:4.3.1"}
