"""Per-second snapshots of the cluster during a run: leaders, replicas and ISR of every partition, live nodes
and each node's Kafka version."""
from __future__ import annotations

import json
import logging
import threading
import time

from ..cluster.backend import ClusterBackend
from ..errors import ClusterError

log = logging.getLogger(__name__)


class SnapshotSampler:
    """Samples leader/replicas/ISR per partition, the controller and live nodes every second."""

    def __init__(self, cluster: ClusterBackend | None, topic: str, interval_s: float = 1.0):
        self.cluster, self.topic, self.interval = cluster, topic, interval_s
        self.rows: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="snapshots", daemon=True)

    def start(self) -> "SnapshotSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.sample()
            except Exception as e:  # a sample may fail under faults; the next one tries again
                log.debug("snapshot failed: %s", e)
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def sample(self) -> None:
        if self.cluster is None:
            return
        ts = time.monotonic_ns()
        live = [n for n in self.cluster.node_ids() if self.cluster.node_state(n) == "running"]
        controller = self.cluster.active_controller()
        try:
            parts = self.cluster.partitions(self.topic)
        except ClusterError:
            parts = {}
        try:
            versions = json.dumps({str(k): v for k, v in self.cluster.node_versions().items()}, sort_keys=True)
        except (ClusterError, KeyError):  # an existing cluster's versions are not known
            versions = None
        for p, info in sorted(parts.items()):
            self.rows.append({"ts_ns": ts, "partition": p, "leader": info["leader"], "replicas": info["replicas"],
                              "isr": info["isr"], "controller": -1 if controller is None else controller,
                              "live_nodes": live, "node_versions": versions})
