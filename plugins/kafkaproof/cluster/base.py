"""What every cluster backend shares: its state file, its nodes, and the bookkeeping of its faults.

A backend's state file (`state.py`) records everything it started, before it is relied on,
so any process (`kafkaproof cluster down`, `fault heal --all`) can undo a crashed run.
"""
from __future__ import annotations

import contextlib
import logging
import socket
import subprocess
import time
from pathlib import Path
from typing import Any, Iterator, Mapping

from ..errors import ClusterError, ClusterNotRunning, FaultError
from ..spec.cluster import NodeLink
from ..spec.connection import redacted
from . import procs, state
from .capabilities import FaultProxies, FaultyDisks, NodeClocks, NodeProcesses
from .heal import heal_recorded
from .proxies import ProxyFleet
from .state import ClusterState, NodeState
from .views import KafkaViews

log = logging.getLogger(__name__)

START_MARKER = "==== kafkaproof: starting node"  # the line the local backend writes before each start
FATAL_LOG_LINE = "Encountered fatal fault"  # a KRaft node that cannot go on (e.g. an unsupported metadata.version)
SERVER_STARTED_LINE = "Kafka Server started"
CAUGHT_UP_STABLE_S = 2.0


class StatefulCluster(KafkaViews, ProxyFleet):
    """The part of a cluster backend read from and recorded in its state file."""

    backend = "?"
    name: str
    _popen: dict[int, subprocess.Popen]
    _proxy_popen: dict[int, subprocess.Popen]
    _admin: Any

    def __init__(self, name: str):
        self.name = name
        self._popen = {}  # children of this process, reaped here
        self._proxy_popen = {}
        self._admin = None

    # --- capabilities (`capabilities.py`): the backend itself when its class implements one and the
    # cluster was started with it, else None ---------------------------------------------------------
    @property
    def nodes(self) -> NodeProcesses | None:
        """Its nodes' processes, when kafkaproof owns them (not an existing cluster's)."""
        return self if isinstance(self, NodeProcesses) else None

    @property
    def proxies(self) -> FaultProxies | None:
        """Its fault proxies, when it was started with them."""
        return self if self.has_proxy else None

    @property
    def disks(self) -> FaultyDisks | None:
        """Its nodes' faulty disks, when it was started with them (local only)."""
        return self if isinstance(self, FaultyDisks) and self.state().disk else None

    @property
    def clock(self) -> NodeClocks | None:
        """Its nodes' movable wall clocks, when it was started with them (local only)."""
        return self if isinstance(self, NodeClocks) and self.state().clock else None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def down(self, keep_logs: bool = True, graceful: bool = True) -> None:  # pragma: no cover - per backend
        raise NotImplementedError

    def _begin_down(self) -> ClusterState | None:
        """Teardown's first step: the state (None when the cluster is not up: nothing to do), the workers
        of runs against this cluster stopped, its recorded faults healed."""
        try:
            st = state.load_state(self.name)
        except ClusterNotRunning:
            return None
        procs.stop_for_cluster(self.name)  # the workers of a run that crashed against this cluster
        try:
            heal_recorded(self, restart_nodes=False)
        except Exception as e:  # keep tearing down; the nodes and proxies go anyway
            log.warning("healing faults during teardown: %s", e)
        return st

    def release_run(self) -> None:
        """What a run leaves behind goes, the cluster stays: its workers stopped, its faults healed (nodes
        a fault stopped are started again), for the next run to use the cluster."""
        procs.stop_for_cluster(self.name)
        heal_recorded(self, restart_nodes=True)

    def unsupported_reason(self, kind: str) -> str:
        """Why this backend cannot inject a fault of `kind`, and what would."""
        return f"{kind!r} is not supported by the {self.backend} cluster backend"

    def roll_refused(self, version: str | None, settings: Mapping[str, Any]) -> str | None:
        """Why this backend cannot roll its nodes onto Kafka `version` (None: the same) with `settings` on top
        ({}: none), or None when it can (asked before a rolling fault touches any node)."""
        return None

    def _reap(self) -> None:
        for p in list(self._popen.values()) + list(self._proxy_popen.values()):
            p.poll()

    # --- nodes ----------------------------------------------------------------
    def state(self) -> ClusterState:
        """The cluster's state file, read now (another process may have changed it)."""
        return state.load_state(self.name)

    def node(self, node_id: int) -> NodeState:
        node = self.state().node(node_id)
        if node is None:
            raise FaultError(f"node {node_id} is not in cluster {self.name!r} (nodes: {sorted(self.node_ids())})")
        return node

    def node_ids(self) -> list[int]:
        return [n.id for n in self.state().nodes]

    def broker_ids(self) -> list[int]:
        return [n.id for n in self.state().nodes if n.is_broker]

    def controller_ids(self) -> list[int]:
        return [n.id for n in self.state().nodes if n.is_controller]

    def node_dir(self, node_id: int) -> Path:
        return state.cluster_dir(self.name) / f"node-{node_id}"

    def node_log(self, node_id: int) -> Path:
        """The node's log as a file (`server.log` in its directory; it may not exist)."""
        return self.node_dir(node_id) / "server.log"

    def node_version(self, node_id: int) -> str:
        """The Kafka version the node runs (a rolling upgrade changes it node by node)."""
        st = self.state()
        return st.node_version(self.node(node_id))

    def node_versions(self) -> dict[int, str]:
        """Every node's Kafka version."""
        st = self.state()
        return {n.id: st.node_version(n) for n in st.nodes}

    def node_settings(self, node_id: int) -> dict[str, Any]:
        """The settings rolling faults gave the node on top of the cluster's own ({} when none)."""
        return dict(self.node(node_id).settings)

    def start_node_as(self, node_id: int, version: str, settings: Mapping[str, Any]) -> None:  # pragma: no cover
        """Start a stopped node on Kafka `version` with `settings` on top of the cluster's (its data kept)."""
        raise NotImplementedError

    def _record_node_change(self, node_id: int, version: str, settings: Mapping[str, Any], **extra: Any) -> None:
        """Record a node's new version and settings in the state file, and that the cluster was rolled
        (a changed cluster is never reused by the next scenario of a batch)."""
        with state.update_state(self.name) as st:
            st.rolled = True
            node = st.node(node_id)
            if node is not None:
                node.kafka_version, node.settings = version, dict(settings)
                for key, value in extra.items():
                    setattr(node, key, value)
        log.info("node %d will start as Kafka %s%s", node_id, version,
                 f" with {', '.join(f'{k}={v}' for k, v in sorted(settings.items()))}" if settings else "")

    def node_log_since_start(self, node_id: int) -> str:
        """The node's log from its latest start on."""
        path = self.node_log(node_id)
        text = path.read_text(errors="replace") if path.exists() else ""
        return text[max(0, text.rfind(START_MARKER)):]

    def wait_node_caught_up(self, node_id: int, timeout_s: float = 120.0) -> float:
        """Wait until a restarted node serves again and stays so for CAUGHT_UP_STABLE_S: a broker registered
        and in the ISR of every partition it replicates, a dedicated controller started and following a
        quorum leader. Returns the seconds until it first did; ClusterError (with the node's own fatal log
        line when there is one) when it died or did not within `timeout_s`."""
        t0 = time.monotonic()
        since: float | None = None
        last = "nothing yet"
        while True:
            fatal = [ln for ln in self.node_log_since_start(node_id).splitlines() if FATAL_LOG_LINE in ln]
            if fatal:
                raise ClusterError(f"node {node_id} stopped itself: {fatal[0].strip()[:400]}")
            if self.node_state(node_id) == "dead":
                raise ClusterError(f"node {node_id} exited after it started; see {self.log_hint(node_id)}")
            ok, last = self._node_serving(node_id)
            now = time.monotonic()
            if ok:
                since = since or now
                if now - since >= CAUGHT_UP_STABLE_S:
                    return since - t0
            else:
                since = None
            if now - t0 > timeout_s:
                raise ClusterError(f"node {node_id} not back after {timeout_s:.0f}s: {last}; see {self.log_hint(node_id)}")
            time.sleep(0.5)

    def _node_serving(self, node_id: int) -> tuple[bool, str]:
        if self.node(node_id).is_broker:
            try:
                md = self.metadata()
            except ClusterError as e:
                return False, str(e)
            if node_id not in md.brokers:
                return False, f"broker {node_id} is not registered"
            for t in md.topics.values():
                for p in t.partitions.values():
                    if node_id in p.replicas and node_id not in p.isrs:
                        return False, f"broker {node_id} is not in the ISR of {t.topic}-{p.id}"
            return True, "registered and in every ISR"
        if SERVER_STARTED_LINE not in self.node_log_since_start(node_id):
            return False, f"controller {node_id} has not logged '{SERVER_STARTED_LINE}'"
        qs = self.read_quorum_state(node_id) or {}
        if (qs.get("leaderId") if qs.get("leaderId") is not None else -1) < 0:
            return False, f"controller {node_id} follows no quorum leader"
        return True, f"started, quorum leader {qs['leaderId']}"

    def node_link(self, node_id: int) -> NodeLink | None:
        """The node's network attachment (its namespace, addresses, host-side veth), None if it has none."""
        return self.node(node_id).link

    # --- status ---------------------------------------------------------------
    def node_status(self, node: NodeState) -> dict[str, Any]:  # pragma: no cover - per backend
        """One node's entry of `status()`: id, roles, address, namespace, pid, state, alive, paused."""
        raise NotImplementedError

    def status_fields(self, st: ClusterState) -> dict[str, Any]:  # pragma: no cover - per backend
        """What `status()` says of the backend itself: backend, kafka_version, network, ..."""
        raise NotImplementedError

    def status(self) -> dict[str, Any]:
        """Status as a JSON-able dict: the backend's own fields, every node (with its fault proxy), the
        addresses, the active controller, per topic-partition leader/replicas/ISR and the active faults."""
        st = self.state()
        nodes = []
        for n in st.nodes:
            entry = self.node_status(n)
            if n.proxy:
                entry["proxy"] = {"address": n.proxy.listen, "pid": n.proxy.process.pid if n.proxy.process else None,
                                  "state": self.proxy_state(n.id), "control": n.proxy.control}
            nodes.append(entry)
        topics, error = self.topics_status()
        versions = self.node_versions()
        for entry in nodes:
            entry["kafka_version"] = versions[entry["id"]]
        return {"name": self.name, **self.status_fields(st), "cluster_id": st.cluster_id,
                "bootstrap_servers": self.bootstrap_servers(), "proxy": bool(st.proxy),
                "client_connection": redacted(self.client_config()),
                "direct_bootstrap": self.direct_bootstrap(), "active_controller": self.active_controller(),
                "nodes": nodes, "topics": topics,
                "active_faults": [{k: f[k] for k in ("fault_id", "kind", "target", "nodes", "params")}
                                  for f in st.faults],
                "metadata_error": error}

    # --- the quorum and readiness (local and compose; an existing cluster has its own) -------
    def read_quorum_state(self, node_id: int) -> dict | None:  # pragma: no cover - per backend
        """A controller's KRaft `quorum-state` file as JSON, None when it cannot be read."""
        raise NotImplementedError

    def log_hint(self, node_id: int) -> str:
        """Where a person finds the node's log."""
        return str(self.node_log(node_id))

    def wait_node_listening(self, node_id: int, timeout_s: float = 60.0) -> None:
        """Wait until a node accepts TCP connections on its first listener."""
        node = self.node(node_id)
        port = node.client_port if node.is_broker else node.controller_port
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.node_state(node_id) == "dead":
                raise ClusterError(f"node {node_id} exited during start-up; see {self.log_hint(node_id)}")
            try:
                with socket.create_connection((node.host, port), timeout=1):
                    return
            except OSError:
                time.sleep(0.2)
        raise ClusterError(f"node {node_id} is not listening on {node.host}:{port} after {timeout_s:.0f}s")

    def active_controller(self) -> int | None:
        """The KRaft quorum leader, from the quorum-state files of running controllers (highest epoch wins)."""
        best: tuple[int, int] | None = None
        for cid in self.controller_ids():
            if self.node_state(cid) != "running":
                continue
            qs = self.read_quorum_state(cid) or {}
            leader, epoch = qs.get("leaderId", -1), qs.get("leaderEpoch", -1)
            if leader is not None and leader >= 0 and (best is None or epoch > best[1]):
                best = (leader, epoch)
        if best is None or self.node_state(best[0]) != "running":
            return None
        return best[0]

    def wait_ready(self, timeout_s: float = 120.0) -> None:
        """Wait until the quorum has a leader and every live broker is registered (unfenced)."""
        deadline = time.monotonic() + timeout_s
        expected = {b for b in self.broker_ids() if self.node_state(b) == "running"}
        last = "nothing yet"
        while time.monotonic() < deadline:
            for nid in self.node_ids():
                if self.node(nid).status == "running" and self.node_state(nid) == "dead":
                    raise ClusterError(f"node {nid} exited; see {self.log_hint(nid)}")
            controller = self.active_controller()
            try:
                registered = self.registered_brokers()
            except ClusterError as e:
                registered, last = set(), str(e)
            if controller is not None and expected <= registered:
                if self.has_proxy:
                    self.check_proxies(max(5.0, deadline - time.monotonic()))
                log.info("cluster %s ready: brokers %s, active controller %s, bootstrap %s",
                         self.name, sorted(registered), controller, self.bootstrap_servers())
                return
            last = f"controller={controller}, registered brokers={sorted(registered)}, expected={sorted(expected)}"
            time.sleep(0.5)
        raise ClusterError(f"cluster {self.name} not ready after {timeout_s:.0f}s ({last}); "
                           f"node logs: {self.log_hint(self.node_ids()[0])} and the others'")

    # --- faults bookkeeping ---------------------------------------------------
    def active_faults(self) -> list[dict[str, Any]]:
        """Faults injected and not healed, with their heal recipes (also those of a crashed process)."""
        return list(self.state().faults)

    def record_fault(self, fault: dict[str, Any]) -> None:
        with state.update_state(self.name) as st:
            st.faults.append(fault)

    def forget_fault(self, fault_id: str) -> None:
        with state.update_state(self.name) as st:
            st.faults = [f for f in st.faults if f["fault_id"] != fault_id]

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive access to the cluster's state across processes."""
        with state.locked(self.name):
            yield
