"""The local cluster backend: real Apache Kafka (KRaft) nodes as JVM processes on this host.

Each node runs `kafka.Kafka` in its own network namespace with its own IP (see
`network.py`) when we are root, else on loopback ports (network faults are then
refused). Everything started is recorded in a state file (`state.py`) so that
`LocalCluster.attach(name).down()` heals and removes the leftovers of a crashed run.

Listeners: CLIENT (9092) for clients, INTERNAL (9094) between brokers,
CONTROLLER (9093) for the KRaft quorum, so client-path faults can spare the
replication path.

With `proxy=True` each broker gets a Kafka-aware fault proxy (`kafkaproof.proxy`,
one process per broker, in the root namespace) and advertises the proxy's address
on its CLIENT listener, so every client connection crosses the proxy while the
INTERNAL and CONTROLLER traffic stays direct. kafkaproof's own admin client
(readiness, leaders for fault targets, snapshots) and the audit drain use the
INTERNAL listener (`direct_bootstrap()`), so a proxy fault never blinds the
orchestrator. Proxy processes are recorded in the state file like the JVMs.
"""
from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from . import logs, network, process, procs, state
from .errors import ClusterError, ClusterNotRunning, FaultError
from .install import DEFAULT_KAFKA_VERSION, KafkaDistribution, ensure_kafka
from .process import ProcessRef

log = logging.getLogger(__name__)

# Errors librdkafka raises without the request having been answered by a broker: it retired
# the broker handle the request was queued on (e.g. a bootstrap handle replaced by the broker
# it turned out to be), or the connection dropped. Safe to send an admin request again.
LOCAL_RETRIABLE_ERRORS = frozenset({"_DESTROY_BROKER", "_TRANSPORT"})


def kafka_error_name(exc: BaseException) -> str | None:
    """Pure: the KafkaError name carried by a confluent-kafka exception (e.g. `_DESTROY_BROKER`), else None."""
    err = exc.args[0] if exc.args else None
    return err.name() if hasattr(err, "name") and callable(err.name) else None

CLIENT_PORT, CONTROLLER_PORT, INTERNAL_PORT = 9092, 9093, 9094
LOOPBACK_PORT_BASE = 20000
CONTROLLER_ID_BASE = 100
MAX_BROKERS = 9

_METADATA_TIMEOUT_S = 3.0
# Without root the proxy of a node listens on this loopback address at the node's own
# client port (the whole of 127.0.0.0/8 is local on Linux), so its port cannot collide.
LOOPBACK_PROXY_HOST = "127.0.0.2"
_PROXY_START_TIMEOUT_S = 20.0
_UNKNOWN_TOPIC_GRACE_S = 3.0  # how long a topic a broker does not know yet may take to appear
_PLUGINS_DIR = str(Path(__file__).resolve().parent.parent)


@dataclass(frozen=True)
class ClusterConfig:
    """What cluster to start. `controllers=0` means combined broker+controller nodes."""

    name: str = "default"
    brokers: int = 3
    controllers: int = 0
    kafka_version: str = DEFAULT_KAFKA_VERSION
    broker_config: Mapping[str, Any] = field(default_factory=dict)
    node_config: Mapping[int, Mapping[str, Any]] = field(default_factory=dict)
    heap: str = "512m"
    network: str = "auto"  # auto | netns | loopback
    start_timeout_s: float = 120.0
    proxy: bool = False  # a fault proxy per broker on the client path

    def validate(self) -> "ClusterConfig":
        state.check_cluster_name(self.name)
        if not isinstance(self.brokers, int) or not 1 <= self.brokers <= MAX_BROKERS:
            raise ClusterError(f"brokers must be an integer from 1 to {MAX_BROKERS}, got {self.brokers!r}")
        if not isinstance(self.controllers, int) or not 0 <= self.controllers <= 5:
            raise ClusterError(f"controllers must be 0 (combined broker+controller nodes) to 5, got {self.controllers!r}")
        if self.network not in ("auto", "netns", "loopback"):
            raise ClusterError(f"network must be auto, netns or loopback, got {self.network!r}")
        for node_id in self.node_config:
            if node_id not in self.node_ids():
                raise ClusterError(f"node_config names node {node_id}, which this cluster does not have "
                                   f"(nodes: {self.node_ids()})")
        return self

    def broker_ids(self) -> list[int]:
        return list(range(1, self.brokers + 1))

    def controller_ids(self) -> list[int]:
        """Voters of the KRaft quorum."""
        if self.controllers == 0:
            return self.broker_ids()
        return list(range(CONTROLLER_ID_BASE + 1, CONTROLLER_ID_BASE + 1 + self.controllers))

    def node_ids(self) -> list[int]:
        ids = self.broker_ids()
        return ids if self.controllers == 0 else ids + self.controller_ids()

    def roles(self, node_id: int) -> str:
        if self.controllers == 0:
            return "broker,controller"
        return "broker" if node_id <= self.brokers else "controller"


def default_broker_config(brokers: int) -> dict[str, Any]:
    """Production-like defaults for a small cluster, sized for a 2-core host."""
    rf = min(3, brokers)
    return {
        "num.partitions": 1,
        "default.replication.factor": rf,
        "min.insync.replicas": min(2, rf),
        "offsets.topic.replication.factor": rf,
        "offsets.topic.num.partitions": 10,
        "transaction.state.log.replication.factor": rf,
        "transaction.state.log.min.isr": min(2, rf),
        "transaction.state.log.num.partitions": 10,
        "unclean.leader.election.enable": "false",
        "auto.create.topics.enable": "true",
        "group.initial.rebalance.delay.ms": 0,
        "num.network.threads": 2,
        "num.io.threads": 4,
        "num.replica.fetchers": 1,
        "background.threads": 4,
        "log.cleaner.threads": 1,
        "log.cleaner.dedupe.buffer.size": 8 * 1024 * 1024,
        "log.segment.bytes": 64 * 1024 * 1024,
        "share.coordinator.state.topic.replication.factor": rf,
        "share.coordinator.state.topic.min.isr": min(2, rf),
    }


def new_cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding.

    Never one starting with '-' (as Kafka's own Uuid.randomUuid): the storage tool's
    argument parser would take it for an option.
    """
    while True:
        cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cid.startswith("-"):
            return cid


def node_properties(config: ClusterConfig, node: dict, nodes: list[dict], workdir: Path,
                    kafka_major: int) -> dict[str, Any]:
    """Pure: the server.properties of one node."""
    by_id = {n["id"]: n for n in nodes}
    voters = ",".join(f"{v}@{by_id[v]['host']}:{by_id[v]['controller_port']}" for v in config.controller_ids())
    roles = config.roles(node["id"])
    listeners, advertised = [], []
    if "broker" in roles:
        listeners += [f"CLIENT://{node['host']}:{node['client_port']}", f"INTERNAL://{node['host']}:{node['internal_port']}"]
        advertised += [f"CLIENT://{node['advertised_host']}:{node['advertised_port']}",
                       f"INTERNAL://{node['host']}:{node['internal_port']}"]
    if "controller" in roles:
        listeners.append(f"CONTROLLER://{node['host']}:{node['controller_port']}")
    props: dict[str, Any] = {
        "node.id": node["id"],
        "process.roles": roles,
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(listeners),
        "listener.security.protocol.map": "CLIENT:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "log.dirs": str(workdir / "data"),
    }
    if "broker" in roles:
        props["advertised.listeners"] = ",".join(advertised)
        props["inter.broker.listener.name"] = "INTERNAL"
        if kafka_major < 4:
            props["controller.quorum.election.timeout.ms"] = 1000
    if "controller" in roles and "broker" not in roles:
        props["advertised.listeners"] = f"CONTROLLER://{node['host']}:{node['controller_port']}"
    props.update(default_broker_config(config.brokers))
    props.update({k: v for k, v in config.broker_config.items()})
    props.update(config.node_config.get(node["id"], {}))
    return props


def render_properties(props: Mapping[str, Any]) -> str:
    def fmt(v: Any) -> str:
        return str(v).lower() if isinstance(v, bool) else str(v)
    return "".join(f"{k}={fmt(v)}\n" for k, v in props.items())


def _plan_nodes(config: ClusterConfig, slot: int, use_netns: bool) -> list[dict]:
    nodes = []
    for pos, node_id in enumerate(config.node_ids()):
        if use_netns:
            link = network.plan_link(slot, pos, node_id)
            host, ports = link.node_ip, (CLIENT_PORT, CONTROLLER_PORT, INTERNAL_PORT)
        else:
            link = None
            base = LOOPBACK_PORT_BASE + slot * 50 + pos * 3
            host, ports = "127.0.0.1", (base, base + 1, base + 2)
        nodes.append({
            "id": node_id, "roles": config.roles(node_id), "host": host,
            "client_port": ports[0], "controller_port": ports[1], "internal_port": ports[2],
            "advertised_host": host, "advertised_port": ports[0],
            "link": link.to_json() if link else None, "process": None, "status": "new",
        })
        if config.proxy and "broker" in config.roles(node_id):
            # The proxy listens where clients in the root namespace reach the node: the
            # root side of its veth (netns) or a second loopback address (loopback).
            proxy_host = link.host_ip if link else LOOPBACK_PROXY_HOST
            nodes[-1].update(advertised_host=proxy_host, advertised_port=ports[0])
            nodes[-1]["proxy"] = {"listen": f"{proxy_host}:{ports[0]}", "upstream": f"{host}:{ports[0]}",
                                  "process": None, "control": None}
    return nodes


def _free_slot(use_netns: bool) -> int:
    used = set()
    for name in state.list_clusters():
        try:
            used.add(state.load_state(name)["slot"])
        except (ClusterNotRunning, KeyError, json.JSONDecodeError):
            continue
    if use_netns:
        for ns in network.list_kafkaproof_namespaces():
            used.add(int(ns[2:ns.index("n", 2)]))
    for slot in range(1, network.MAX_SLOTS + 1):
        if slot not in used:
            return slot
    raise ClusterError("no free cluster slot: run `kafkaproof cluster down --all`")


class LocalCluster:
    """A running local cluster. Use `LocalCluster.up(config)` as a context manager, or `attach(name)`."""

    def __init__(self, name: str):
        self.name = name
        self._popen: dict[int, subprocess.Popen] = {}  # children of this process, reaped here
        self._proxy_popen: dict[int, subprocess.Popen] = {}
        self._admin = None
        st = state.load_state(name)
        self.dist = KafkaDistribution(st["kafka_version"], Path(st["kafka_libs"]), st["kafka_source"])

    # --- lifecycle ------------------------------------------------------------
    @classmethod
    def up(cls, config: ClusterConfig) -> "LocalCluster":
        """Start a cluster and return once every broker is registered and the quorum has a leader."""
        config.validate()
        if state.state_path(config.name).exists():
            raise ClusterError(f"a cluster named {config.name!r} is already up; `kafkaproof cluster down"
                               f"{'' if config.name == 'default' else ' --name ' + config.name}` first")
        use_netns = _choose_network(config.network)
        dist = ensure_kafka(config.kafka_version)
        workdir = state.cluster_dir(config.name)
        with state.locked(config.name):
            slot = _free_slot(use_netns)
            nodes = _plan_nodes(config, slot, use_netns)
            st = {"name": config.name, "slot": slot, "cluster_id": new_cluster_id(),
                  "network": "netns" if use_netns else "loopback", "kafka_version": dist.version,
                  "kafka_libs": str(dist.libs), "kafka_source": dist.source, "heap": config.heap,
                  "proxy": config.proxy,
                  "config": {"brokers": config.brokers, "controllers": config.controllers,
                             "broker_config": dict(config.broker_config),
                             "node_config": {str(k): dict(v) for k, v in config.node_config.items()}},
                  "nodes": nodes, "faults": [], "created_wall": time.time()}
            state.save_state(config.name, st)
        cluster = cls(config.name)
        try:
            cluster._provision(config, workdir)
            cluster.wait_ready(config.start_timeout_s)
        except BaseException:
            log.error("cluster %s failed to start; tearing down (node logs in %s)", config.name, workdir)
            cluster._dump_log_tails()
            cluster.down(keep_logs=True)
            raise
        return cluster

    @classmethod
    def attach(cls, name: str = "default") -> "LocalCluster":
        """Attach to a running cluster by name (from its state file).

        An existing cluster fronted by kafkaproof's proxies (`external.ExternalCluster`)
        attaches as that class, so `cluster down` and `fault heal` treat it alike.
        """
        if cls is LocalCluster and state.load_state(name).get("backend") == "external":
            from .external import ExternalCluster
            return ExternalCluster(name)
        return cls(name)

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def _provision(self, config: ClusterConfig, workdir: Path) -> None:
        st = state.load_state(self.name)
        if st["network"] == "netns":
            for node in st["nodes"]:
                network.create_link(network.NodeLink.from_json(node["link"]))
        for node in st["nodes"]:
            ndir = workdir / f"node-{node['id']}"
            if ndir.exists():
                shutil.rmtree(ndir)
            (ndir / "data").mkdir(parents=True)
            props = node_properties(config, node, st["nodes"], ndir, self.dist.major)
            (ndir / "server.properties").write_text(render_properties(props))
        with ThreadPoolExecutor(max_workers=len(st["nodes"])) as pool:  # each format is a JVM start
            list(pool.map(lambda n: self._format(workdir / f"node-{n['id']}", st["cluster_id"]), st["nodes"]))
        for node in st["nodes"]:  # proxies first: brokers advertise them from their first registration
            if node.get("proxy"):
                self.start_proxy(node["id"])
        for node in st["nodes"]:
            self.start_node(node["id"])

    def _format(self, ndir: Path, cluster_id: str) -> None:
        cmd = self.dist.java_command("kafka.tools.StorageTool", "format", "-t", cluster_id,
                                     "-c", str(ndir / "server.properties"), "--ignore-formatted", heap="128m")
        # The pool threads outlive the format; a crash of this process kills it at once.
        proc = subprocess.run(process.die_with_parent(cmd), capture_output=True, text=True)
        if proc.returncode != 0:
            raise ClusterError(f"formatting {ndir} failed:\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")

    def down(self, keep_logs: bool = True, graceful: bool = True) -> None:
        """Heal every fault, stop every node, remove namespaces and the state file. Safe to repeat.

        `graceful=False` kills the JVMs at once: for a cluster whose data was already collected.
        """
        from .faults import heal_all  # faults depends on cluster
        try:
            st = state.load_state(self.name)
        except ClusterNotRunning:
            return
        procs.stop_for_cluster(self.name)  # the workers of a run that crashed against this cluster
        try:
            heal_all(self, restart_nodes=False)
        except Exception as e:  # keep tearing down; report at the end
            log.warning("healing faults during teardown: %s", e)
        refs = [ProcessRef.from_json(n["process"]) for n in st["nodes"]]
        for ref in refs:  # signal all first, so nodes shut down in parallel
            if ref and process.state_of(ref) != "dead":
                with contextlib.suppress(FaultError, ProcessLookupError):
                    process.send_signal(ref, signal.SIGCONT)
                    process.send_signal(ref, signal.SIGTERM if graceful else signal.SIGKILL)
        for ref in refs:
            process.terminate(ref, grace_s=15.0, reap=self._reap)
        for node in st["nodes"]:
            if node.get("proxy"):
                process.terminate(ProcessRef.from_json(node["proxy"]["process"]), grace_s=5.0, reap=self._reap)
        sweep(state.cluster_dir(self.name))
        if st["network"] == "netns":
            for node in st["nodes"]:
                if node.get("link"):
                    network.destroy_link(network.NodeLink.from_json(node["link"]))
        if self._admin is not None:
            self._admin = None
        state.remove_state(self.name)
        if keep_logs:  # keep server.log and properties, drop the (large) log segments
            for node in st["nodes"]:
                shutil.rmtree(self.node_dir(node["id"]) / "data", ignore_errors=True)
        else:
            shutil.rmtree(state.cluster_dir(self.name), ignore_errors=True)
        log.info("cluster %s is down", self.name)

    def _reap(self) -> None:
        for p in list(self._popen.values()) + list(self._proxy_popen.values()):
            p.poll()

    # --- nodes ----------------------------------------------------------------
    def state(self) -> dict:
        return state.load_state(self.name)

    def node(self, node_id: int) -> dict:
        nodes = {n["id"]: n for n in self.state()["nodes"]}
        if node_id not in nodes:
            raise FaultError(f"node {node_id} is not in cluster {self.name!r} (nodes: {sorted(nodes)})")
        return nodes[node_id]

    def node_ids(self) -> list[int]:
        return [n["id"] for n in self.state()["nodes"]]

    def broker_ids(self) -> list[int]:
        return [n["id"] for n in self.state()["nodes"] if "broker" in n["roles"]]

    def controller_ids(self) -> list[int]:
        return [n["id"] for n in self.state()["nodes"] if "controller" in n["roles"]]

    def node_dir(self, node_id: int) -> Path:
        return state.cluster_dir(self.name) / f"node-{node_id}"

    def node_ref(self, node_id: int) -> ProcessRef | None:
        return ProcessRef.from_json(self.node(node_id)["process"])

    def node_state(self, node_id: int) -> str:
        self._reap()
        return process.state_of(self.node_ref(node_id))

    def start_node(self, node_id: int) -> None:
        """Start (or restart) one node's JVM; no-op if it is running."""
        node = self.node(node_id)
        if process.state_of(ProcessRef.from_json(node["process"])) != "dead":
            return
        ndir = self.node_dir(node_id)
        ns = node["link"]["namespace"] if node.get("link") else None
        cmd = network.netns_prefix(ns) + self.dist.java_command(
            "kafka.Kafka", str(ndir / "server.properties"), heap=self.state().get("heap", "512m"))
        logf = open(ndir / "server.log", "ab")
        logf.write(f"\n==== kafkaproof: starting node {node_id} at {time.strftime('%Y-%m-%dT%H:%M:%S')} ====\n".encode())
        logf.flush()
        popen = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 cwd=ndir, start_new_session=True)
        logf.close()
        self._popen[node_id] = popen
        # `ip netns exec` execs java in place, so this pid is the JVM's.
        ref = process.ref_for(popen.pid)
        with state.update_state(self.name) as st:
            for n in st["nodes"]:
                if n["id"] == node_id:
                    n["process"] = ref.to_json()
                    n["status"] = "running"
        log.info("node %d started (pid %d)", node_id, popen.pid)

    def signal_node(self, node_id: int, sig: int) -> None:
        """Send a signal to a node's JVM (refused for processes we did not start)."""
        ref = self.node_ref(node_id)
        if ref is None:
            raise FaultError(f"node {node_id} has no process")
        process.send_signal(ref, sig)

    def stop_node(self, node_id: int, graceful: bool = True, timeout_s: float = 30.0) -> None:
        """Stop a node: SIGTERM (controlled shutdown) or SIGKILL, and wait until it is gone."""
        ref = self.node_ref(node_id)
        if process.state_of(ref) == "dead":
            return
        if graceful:
            process.send_signal(ref, signal.SIGCONT)
            process.send_signal(ref, signal.SIGTERM)
            if not process.wait_dead(ref, timeout_s, self._reap):
                log.warning("node %d ignored SIGTERM for %.0fs; killing it", node_id, timeout_s)
                process.send_signal(ref, signal.SIGKILL)
        else:
            process.send_signal(ref, signal.SIGKILL)
        process.wait_dead(ref, 10.0, self._reap)

    def wait_node_listening(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Wait until a node accepts TCP connections on its first listener."""
        import socket
        node = self.node(node_id)
        port = node["client_port"] if "broker" in node["roles"] else node["controller_port"]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.node_state(node_id) == "dead":
                raise ClusterError(f"node {node_id} exited during start-up; see {self.node_dir(node_id)}/server.log")
            try:
                with socket.create_connection((node["host"], port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise ClusterError(f"node {node_id} is not listening on {node['host']}:{port} after {timeout_s:.0f}s")

    # --- fault proxies ------------------------------------------------------------
    @property
    def has_proxy(self) -> bool:
        return bool(self.state().get("proxy"))

    def proxy_ids(self) -> list[int]:
        """Node ids of the brokers that have a fault proxy."""
        return [n["id"] for n in self.state()["nodes"] if n.get("proxy")]

    def proxy_state(self, node_id: int) -> str:
        """running / paused / dead of a broker's proxy process ('none' without a proxy)."""
        proxy = self.node(node_id).get("proxy")
        if not proxy:
            return "none"
        self._reap()
        return process.state_of(ProcessRef.from_json(proxy["process"]))

    def proxy_events_path(self, node_id: int) -> Path:
        return self.node_dir(node_id) / "proxy-events.jsonl"

    def start_proxy(self, node_id: int) -> None:
        """Start (or restart) the fault proxy in front of one broker; no-op if it is running.

        The proxy runs in the root namespace in its own session (it outlives the
        process that started it, like the JVMs); `down()` stops it. Its control port
        and pid are recorded in the state file once it printed its ready line.
        """
        node = self.node(node_id)
        proxy = node.get("proxy")
        if not proxy:
            raise ClusterError(f"node {node_id} has no fault proxy (start the cluster with --proxy)")
        if process.state_of(ProcessRef.from_json(proxy["process"])) != "dead":
            return
        ndir = self.node_dir(node_id)
        ndir.mkdir(parents=True, exist_ok=True)
        ready_file = ndir / "proxy.ready.json"
        ready_file.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "kafkaproof.proxy", "--listen", f"{node_id}@{proxy['listen']}={proxy['upstream']}",
               "--control", "127.0.0.1:0", "--events", str(self.proxy_events_path(node_id)), "--log-level", "INFO"]
        # Local brokers advertise their proxy themselves; in front of an existing cluster
        # the proxy rewrites metadata to point at itself and its peers (external.py).
        if not proxy.get("rewrite"):
            cmd.append("--no-rewrite")
        for peer_id, address in sorted(proxy.get("peers", {}).items()):
            cmd += ["--peer", f"{peer_id}={address}"]
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (_PLUGINS_DIR, env.get("PYTHONPATH")) if p)
        with open(ready_file, "wb") as out, open(ndir / "proxy.log", "ab") as err:
            popen = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL, cwd=ndir, env=env,
                                     start_new_session=True)
        self._proxy_popen[node_id] = popen
        ref = process.ref_for(popen.pid)
        with state.update_state(self.name) as st:  # recorded before we wait: a crash now still kills it
            for n in st["nodes"]:
                if n["id"] == node_id:
                    n["proxy"].update(process=ref.to_json(), control=None)
        deadline = time.monotonic() + _PROXY_START_TIMEOUT_S
        ready = None
        while time.monotonic() < deadline:
            text = ready_file.read_text() if ready_file.exists() else ""
            if "\n" in text:
                ready = json.loads(text.split("\n", 1)[0])
                break
            if popen.poll() is not None:
                break
            time.sleep(0.05)
        if not ready or not ready.get("ready"):
            process.terminate(ref, grace_s=2.0, reap=self._reap)
            tail = (ndir / "proxy.log").read_text(errors="replace").strip().splitlines()[-5:]
            raise ClusterError(f"the fault proxy of node {node_id} did not start ({proxy['listen']} -> "
                               f"{proxy['upstream']}): {' | '.join(tail)}")
        with state.update_state(self.name) as st:
            for n in st["nodes"]:
                if n["id"] == node_id:
                    n["proxy"]["control"] = ready["control"]
        log.info("proxy of node %d started (pid %d): %s -> %s, control %s", node_id, popen.pid,
                 proxy["listen"], proxy["upstream"], ready["control"])

    def stop_proxy(self, node_id: int) -> None:
        proxy = self.node(node_id).get("proxy")
        if proxy:
            process.terminate(ProcessRef.from_json(proxy["process"]), grace_s=5.0, reap=self._reap)

    def proxy_control(self, node_id: int):
        """A connected control client of a broker's proxy (close it after use)."""
        from .proxy import ControlClient
        proxy = self.node(node_id).get("proxy")
        if not proxy:
            raise FaultError(f"node {node_id} has no fault proxy; proxies front the brokers "
                             f"{self.proxy_ids() or '(none: start the cluster with --proxy)'}")
        if not proxy.get("control") or self.proxy_state(node_id) == "dead":
            raise FaultError(f"the fault proxy of node {node_id} is not running")
        return ControlClient(proxy["control"], timeout=10.0)

    # --- cluster-wide views ---------------------------------------------------
    def bootstrap_servers(self) -> str:
        """What clients use: the brokers' advertised CLIENT addresses (the proxies, with --proxy)."""
        return ",".join(f"{n['advertised_host']}:{n['advertised_port']}" for n in self.state()["nodes"]
                        if "broker" in n["roles"])

    def direct_bootstrap(self) -> str:
        """Bootstrap that never crosses a fault proxy: the INTERNAL listeners with --proxy, else the clients'.

        A client bootstrapped here gets INTERNAL addresses in metadata, so all its
        connections stay direct. kafkaproof's admin client and the audit drain use it.
        """
        st = self.state()
        if not st.get("proxy"):
            return self.bootstrap_servers()
        return ",".join(f"{n['host']}:{n['internal_port']}" for n in st["nodes"] if "broker" in n["roles"])

    def admin(self):
        from confluent_kafka.admin import AdminClient
        if self._admin is None:
            self._admin = AdminClient({"bootstrap.servers": self.direct_bootstrap(),
                                       "socket.connection.setup.timeout.ms": 3000,
                                       "reconnect.backoff.max.ms": 1000,
                                       # Connection refusals while nodes start or are faulted are expected.
                                       "logger": logs.librdkafka_logger(), "log_level": 2})
        return self._admin

    def active_controller(self) -> int | None:
        """The KRaft quorum leader, from the quorum-state files of live controllers (highest epoch wins)."""
        best: tuple[int, int] | None = None
        for cid in self.controller_ids():
            if self.node_state(cid) != "running":
                continue
            try:
                qs = json.loads((self.node_dir(cid) / "data" / "__cluster_metadata-0" / "quorum-state").read_text())
            except (FileNotFoundError, json.JSONDecodeError):
                continue
            leader, epoch = qs.get("leaderId", -1), qs.get("leaderEpoch", -1)
            if leader is not None and leader >= 0 and (best is None or epoch > best[1]):
                best = (leader, epoch)
        if best is None or self.node_state(best[0]) != "running":
            return None
        return best[0]

    def metadata(self, topic: str | None = None, timeout_s: float = _METADATA_TIMEOUT_S, attempts: int = 3):
        """Cluster metadata from a live broker (confluent_kafka ClusterMetadata).

        librdkafka may send the request over a connection to a node that a fault
        silently cut off; on a timeout we retry with a fresh client, whose new
        connections only succeed to reachable brokers.
        """
        last: Exception | None = None
        for _ in range(attempts):
            try:
                return self.admin().list_topics(topic=topic, timeout=timeout_s)
            except Exception as e:  # KafkaException; the message is what matters
                last = e
                self._admin = None
        raise ClusterError(f"cannot read metadata from {self.direct_bootstrap()}: {last}") from last

    def registered_brokers(self) -> set[int]:
        return set(self.metadata().brokers)

    def partitions(self, topic: str, unknown_grace_s: float = _UNKNOWN_TOPIC_GRACE_S) -> dict[int, dict]:
        """Per partition of `topic`: leader (-1 if none), replicas and ISR, from metadata.

        Each broker applies the metadata log at its own pace, so one that answers
        "unknown topic" for a topic another broker already serves is asked again for
        up to `unknown_grace_s` before the topic counts as missing.
        """
        deadline = time.monotonic() + unknown_grace_s
        while True:
            md = self.metadata(topic)
            t = md.topics.get(topic)
            if t is not None and (t.error is None or t.partitions):
                return {p.id: {"leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs)}
                        for p in t.partitions.values()}
            if time.monotonic() >= deadline:
                raise ClusterError(f"topic {topic!r} not found: {t.error if t else 'absent from metadata'}")
            time.sleep(0.2)

    def leader_of(self, topic: str, partition: int) -> int:
        parts = self.partitions(topic)
        if partition not in parts:
            raise FaultError(f"topic {topic!r} has no partition {partition} (partitions: {sorted(parts)})")
        leader = parts[partition]["leader"]
        if leader < 0:
            raise FaultError(f"{topic}-{partition} has no leader right now")
        return leader

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Wait until the quorum has a leader and every live broker is registered (unfenced)."""
        deadline = time.monotonic() + timeout_s
        expected = {b for b in self.broker_ids() if self.node_state(b) == "running"}
        last = "nothing yet"
        while time.monotonic() < deadline:
            for nid in self.node_ids():
                if self.node(nid)["status"] == "running" and self.node_state(nid) == "dead":
                    raise ClusterError(f"node {nid} exited; see {self.node_dir(nid)}/server.log")
            controller = self.active_controller()
            try:
                registered = self.registered_brokers()
            except ClusterError as e:
                registered, last = set(), str(e)
            if controller is not None and expected <= registered:
                if self.has_proxy:
                    self._check_proxies(max(5.0, deadline - time.monotonic()))
                log.info("cluster %s ready: brokers %s, active controller %s, bootstrap %s",
                         self.name, sorted(registered), controller, self.bootstrap_servers())
                return
            last = f"controller={controller}, registered brokers={sorted(registered)}, expected={sorted(expected)}"
            time.sleep(0.5)
        raise ClusterError(f"cluster {self.name} not ready after {timeout_s:.0f}s ({last}); "
                           f"node logs in {state.cluster_dir(self.name)}")

    def _check_proxies(self, timeout_s: float) -> None:
        """Every proxy answers on its control port and metadata is readable through the proxies."""
        from confluent_kafka.admin import AdminClient
        for nid in self.proxy_ids():
            if self.node_state(nid) != "running":
                continue
            client = self.proxy_control(nid)
            try:
                client.call("ping")
            finally:
                client.close()
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers(), "logger": logs.librdkafka_logger(),
                             "log_level": 2})
        try:
            md = admin.list_topics(timeout=timeout_s)
        except Exception as e:
            raise ClusterError(f"metadata not readable through the fault proxies {self.bootstrap_servers()}: {e}") from e
        advertised = {f"{b.host}:{b.port}" for b in md.brokers.values()}
        expected = {n["proxy"]["listen"] for n in self.state()["nodes"] if n.get("proxy")}
        if not advertised <= expected:
            raise ClusterError(f"brokers advertise {sorted(advertised)}, not their proxies {sorted(expected)}")

    def status(self) -> dict:
        """Status as JSON-able dict: nodes, active controller, per topic-partition leader/replicas/ISR."""
        st = self.state()
        nodes = []
        for n in st["nodes"]:
            ref = ProcessRef.from_json(n["process"])
            nodes.append({"id": n["id"], "roles": n["roles"], "address": f"{n['host']}:{n['client_port'] if 'broker' in n['roles'] else n['controller_port']}",
                          "namespace": n["link"]["namespace"] if n.get("link") else None,
                          "pid": ref.pid if ref else None, "state": self.node_state(n["id"]),
                          "alive": self.node_state(n["id"]) == "running", "paused": self.node_state(n["id"]) == "paused"})
            if n.get("proxy"):
                pref = ProcessRef.from_json(n["proxy"]["process"])
                nodes[-1]["proxy"] = {"address": n["proxy"]["listen"], "pid": pref.pid if pref else None,
                                      "state": self.proxy_state(n["id"]), "control": n["proxy"].get("control")}
        topics: dict[str, dict] = {}
        error = None
        try:
            md = self.metadata(timeout_s=3.0)
            for tname, t in sorted(md.topics.items()):
                topics[tname] = {str(p.id): {"leader": p.leader, "replicas": list(p.replicas), "isr": list(p.isrs)}
                                 for p in sorted(t.partitions.values(), key=lambda p: p.id)}
        except ClusterError as e:
            error = str(e)
        return {"name": self.name, "kafka_version": st["kafka_version"], "network": st["network"],
                "cluster_id": st["cluster_id"], "bootstrap_servers": self.bootstrap_servers(),
                "proxy": bool(st.get("proxy")), "direct_bootstrap": self.direct_bootstrap(),
                "active_controller": self.active_controller(), "nodes": nodes, "topics": topics,
                "active_faults": [{k: f[k] for k in ("fault_id", "kind", "target", "nodes", "params")} for f in st["faults"]],
                "metadata_error": error}

    # --- topics ---------------------------------------------------------------
    def create_topic(self, topic: str, partitions: int = 1, replication_factor: int = 3,
                     config: Mapping[str, Any] | None = None, timeout_s: float = 30.0) -> None:
        """Create a topic and wait until every partition has a leader.

        A request librdkafka failed locally (see LOCAL_RETRIABLE_ERRORS) is sent again; on such a
        retry, "already exists" means the first attempt did reach the controller.
        """
        from confluent_kafka.admin import NewTopic
        cfg = {k: (str(v).lower() if isinstance(v, bool) else str(v)) for k, v in (config or {}).items()}
        give_up = time.monotonic() + timeout_s
        retried = False
        while True:
            fut = self.admin().create_topics([NewTopic(topic, num_partitions=partitions,
                                                       replication_factor=replication_factor, config=cfg)],
                                              request_timeout=timeout_s)[topic]
            try:
                fut.result(timeout=timeout_s)
                break
            except Exception as e:
                name = kafka_error_name(e)
                if retried and name == "TOPIC_ALREADY_EXISTS":
                    break
                if name in LOCAL_RETRIABLE_ERRORS and time.monotonic() < give_up:
                    log.info("creating topic %r: %s; asking again", topic, e)
                    retried = True
                    time.sleep(0.5)
                    continue
                raise ClusterError(f"creating topic {topic!r} (partitions={partitions}, RF={replication_factor}, "
                                   f"config={cfg}) failed: {e}") from e
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                parts = self.partitions(topic)
                if len(parts) == partitions and all(p["leader"] >= 0 for p in parts.values()):
                    return
            except ClusterError:
                pass
            time.sleep(0.2)
        raise ClusterError(f"topic {topic!r} has partitions without a leader after {timeout_s:.0f}s")

    def describe_topic(self, topic: str) -> dict:
        """Partitions (leader, replicas, ISR) and the non-default configs of a topic."""
        from confluent_kafka.admin import ConfigResource
        res = ConfigResource(ConfigResource.Type.TOPIC, topic)
        deadline = time.monotonic() + 10
        while True:  # a broker may learn of a topic just created a moment after another one did
            try:
                cfg = self.admin().describe_configs([res])[res].result(timeout=10)
                break
            except Exception as e:
                transient = "UNKNOWN_TOPIC_OR_PART" in str(e) or kafka_error_name(e) in LOCAL_RETRIABLE_ERRORS
                if not transient or time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        return {"topic": topic, "partitions": self.partitions(topic),
                "config": {k: v.value for k, v in cfg.items() if not v.is_default}}

    def wait_in_sync(self, topic: str, timeout_s: float = 60.0) -> None:
        """Wait until every partition's ISR holds all its replicas."""
        deadline = time.monotonic() + timeout_s
        parts: dict = {}
        while time.monotonic() < deadline:
            try:
                parts = self.partitions(topic)
                if all(sorted(p["isr"]) == sorted(p["replicas"]) for p in parts.values()):
                    return
            except ClusterError:
                pass
            time.sleep(0.5)
        raise ClusterError(f"{topic}: replicas not all in sync after {timeout_s:.0f}s: {parts}")

    def random_follower(self, topic: str, partition: int, rng: random.Random | None = None) -> int:
        parts = self.partitions(topic)
        p = parts.get(partition)
        if p is None:
            raise FaultError(f"topic {topic!r} has no partition {partition}")
        followers = [r for r in p["replicas"] if r != p["leader"]]
        live = [r for r in followers if self.node_state(r) == "running"]
        followers = live or followers  # a second fault on "a follower" should hit another one
        if not followers:
            raise FaultError(f"{topic}-{partition} has no follower (replicas {p['replicas']})")
        return (rng or random).choice(followers)

    def _dump_log_tails(self, lines: int = 15) -> None:
        try:
            ids = self.node_ids()
        except ClusterNotRunning:
            return
        for nid in ids:
            f = self.node_dir(nid) / "server.log"
            if f.exists():
                tail = f.read_text(errors="replace").splitlines()[-lines:]
                log.error("last lines of node %d's log:\n%s", nid, "\n".join(tail))


def _choose_network(mode: str) -> bool:
    can = network.namespaces_supported()
    if mode == "netns" and not can:
        raise ClusterError("network mode netns needs root and iproute2 (`ip`); run as root or use --network loopback")
    if mode == "auto" and not can:
        log.warning("not root: nodes run on loopback ports; network faults are unavailable")
    return can and mode != "loopback"


def sweep(directory: Path) -> list[int]:
    """Stop any process still naming `directory` (a node or proxy started an instant before a crash,
    before its pid reached the state file; a storage format in flight). Returns their pids."""
    refs = process.find_by_cmdline(f"{directory}/")
    for ref in refs:
        log.warning("stopping process %d, which still uses %s", ref.pid, directory)
        process.terminate(ref, grace_s=5.0)
    return [r.pid for r in refs]


def down_all() -> list[str]:
    """Tear down every cluster with a state file, any stray kafkaproof namespaces, and every process a
    crashed run or analysis left (its workers, its Spark driver)."""
    procs.stop_all()
    names = state.list_clusters()
    for name in names:
        LocalCluster.attach(name).down()
    sweep(state.state_dir() / "clusters")
    if network.namespaces_supported():
        for ns in network.list_kafkaproof_namespaces():
            slot_node = ns[2:]
            slot, node_id = slot_node.split("n")
            network.destroy_link(network.plan_link(int(slot), 0, int(node_id)))
    return names
