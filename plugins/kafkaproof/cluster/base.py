"""What every cluster backend shares: its state file, its nodes, and the bookkeeping of its faults.

A backend's state file (`state.py`) records everything it started, before it is relied on,
so any process (`kafkaproof cluster down`, `fault heal --all`) can undo a crashed run.
"""
from __future__ import annotations

import contextlib
import logging
import subprocess
from pathlib import Path
from typing import Any, Iterator

from ..errors import FaultError
from ..spec.cluster import NodeLink
from . import procs, state
from .heal import heal_recorded
from .proxies import ProxyFleet
from .views import KafkaViews

log = logging.getLogger(__name__)


class StatefulCluster(KafkaViews, ProxyFleet):
    """The part of a cluster backend read from and recorded in its state file."""

    backend = "?"

    def __init__(self, name: str):
        self.name = name
        self._popen: dict[int, subprocess.Popen] = {}  # children of this process, reaped here
        self._proxy_popen: dict[int, subprocess.Popen] = {}
        self._admin = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    def down(self, keep_logs: bool = True, graceful: bool = True) -> None:  # pragma: no cover - per backend
        raise NotImplementedError

    def _stop_runs_and_heal(self) -> None:
        """Teardown's first step: stop the workers of runs against this cluster, heal its recorded faults."""
        procs.stop_for_cluster(self.name)  # the workers of a run that crashed against this cluster
        try:
            heal_recorded(self, restart_nodes=False)
        except Exception as e:  # keep tearing down; the nodes and proxies go anyway
            log.warning("healing faults during teardown: %s", e)

    def release_run(self) -> None:
        """What a run leaves behind goes, the cluster stays: its workers stopped, its faults healed (nodes
        a fault stopped are started again), for the next run to use the cluster."""
        procs.stop_for_cluster(self.name)
        heal_recorded(self, restart_nodes=True)

    def unsupported_reason(self, kind: str) -> str:
        """Why this backend cannot inject a fault of `kind`, and what would."""
        return f"{kind!r} is not supported by the {self.backend} cluster backend"

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

    def node_link(self, node_id: int) -> NodeLink | None:
        """The node's network attachment (its namespace, addresses, host-side veth), None if it has none."""
        link = self.node(node_id).get("link")
        return NodeLink.from_json(link) if link else None

    # --- faults bookkeeping ---------------------------------------------------
    def active_faults(self) -> list[dict[str, Any]]:
        """Faults injected and not healed, with their heal recipes (also those of a crashed process)."""
        return list(self.state()["faults"])

    def record_fault(self, fault: dict[str, Any]) -> None:
        with state.update_state(self.name) as st:
            st["faults"].append(fault)

    def forget_fault(self, fault_id: str) -> None:
        with state.update_state(self.name) as st:
            st["faults"] = [f for f in st["faults"] if f["fault_id"] != fault_id]

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Exclusive access to the cluster's state across processes."""
        with state.locked(self.name):
            yield
