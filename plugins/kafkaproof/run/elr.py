"""A run's feature levels and its eligible-leader-replica evidence (issue 44.2, docs/features.md).

`features_record`: the manifest's `features`, the levels the scenario pinned at format and those the brokers
report (ApiVersions) when the run starts. `ElrSampler`: DescribeTopicPartitions (KIP-966) twice a second over
kio, keeping each change of a partition's leader, leader epoch, ISR, eligible leader replicas (ELR) and last
known ELR; `summary()` is the manifest's `elr` section (spec/elr_evidence.py reads it for the run page).
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Any, Mapping

from ..cluster import kio_admin
from ..errors import ClusterError
from ..spec.cluster_features import pinned_features

log = logging.getLogger(__name__)

ELR_INTERVAL_S = 0.5
MAX_CHANGES = 2000  # a flapping partition cannot grow the manifest without bound


def features_record(cluster: Any, cluster_section: Mapping[str, Any]) -> dict[str, Any]:
    """The manifest's `features`: `format` (the pinned levels, when any), `finalized` (what a broker reports,
    or `error` saying why it could not be read)."""
    record: dict[str, Any] = {}
    if pinned := pinned_features(cluster_section):
        record["format"] = pinned
    try:
        kio_admin.check_plaintext(cluster.direct_client_config())
        address, levels = kio_admin.first_answer(cluster.direct_bootstrap().split(","), kio_admin.finalized_features)
        record.update(finalized=dict(sorted(levels.items())), read_from=address)
    except Exception as e:  # best effort: a run is not refused for a record it could not read
        record["error"] = f"{type(e).__name__}: {e}"[-300:]
    return record


class ElrSampler:
    """Samples DescribeTopicPartitions of the run's topic every `interval_s` and keeps the changes."""

    def __init__(self, cluster: Any, topic: str, interval_s: float = ELR_INTERVAL_S):
        self.cluster, self.topic, self.interval = cluster, topic, interval_s
        self.changes: list[dict[str, Any]] = []
        self.samples = self.failures = 0
        self.last_error: str | None = None
        self._last: dict[int, tuple] = {}
        self._preferred: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="elr-sampler", daemon=True)

    def start(self) -> "ElrSampler":
        """Start sampling; on a secured listener (the kio calls speak plaintext) it never starts, and says so."""
        try:
            kio_admin.check_plaintext(self.cluster.direct_client_config())
        except kio_admin.KioUnsupported as e:
            self.last_error = f"not sampled: {e}"
            return self
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.sample()
            except ClusterError as e:  # under faults a broker may not answer: the next sample tries again
                self.failures += 1
                self.last_error = str(e)[-300:]
            except Exception as e:  # never let the sampler die silently mid-run
                self.failures += 1
                self.last_error = f"{type(e).__name__}: {e}"[-300:]
                log.debug("ELR sample failed", exc_info=True)
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def sample(self) -> None:
        """One DescribeTopicPartitions, from the broker that answered last first; a change per partition kept."""
        addresses = self.cluster.direct_bootstrap().split(",")
        if self._preferred in addresses:
            addresses.remove(self._preferred)
            addresses.insert(0, self._preferred)
        ts = time.monotonic_ns()
        address, parts = kio_admin.first_answer(addresses, kio_admin.describe_topic_partitions, self.topic, 1.0)
        self._preferred = address
        self.samples += 1
        for p in parts:
            key = (p.leader, p.leader_epoch, p.isr, p.elr, p.last_known_elr, p.offline)
            if self._last.get(p.partition) != key and len(self.changes) < MAX_CHANGES:
                self._last[p.partition] = key
                self.changes.append({"ts_ns": ts, "from": address, **p.as_json()})

    def summary(self) -> dict[str, Any]:
        """The manifest's `elr` section."""
        return {"source": "DescribeTopicPartitions v0 (kio)", "interval_s": self.interval, "topic": self.topic,
                "samples": self.samples, "failures": self.failures, "last_error": self.last_error,
                "changes": list(self.changes)}
