"""Coordinators as fault targets (issue 43): `txn_coordinator:<copier>` and `group_coordinator`.

A transactional.id's transaction coordinator is the leader of its `__transaction_state` partition, a group's
coordinator the leader of its `__consumer_offsets` partition; Kafka picks the partition from the key:
`Utils.abs(key.hashCode()) % partitions` (TransactionStateManager.partitionFor, GroupMetadataManager /
GroupCoordinatorShard's partitionFor), Java's String.hashCode over UTF-16 code units. The partition counts are
the internal topics' (`transaction.state.log.num.partitions`, `offsets.topic.num.partitions`, 50 by default),
read from metadata when the fault is injected. One resolver for every coordinator target: the keys come from the
scenario run (`CoordinatorKeys`: its consumer group and its copiers' transactional ids).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from ..errors import ClusterError, FaultError
from ..spec.coordinator_targets import GROUP_TARGET, TXN_TARGET_RE

TRANSACTION_STATE_TOPIC = "__transaction_state"
OFFSETS_TOPIC = "__consumer_offsets"


def java_string_hash(key: str) -> int:
    """Pure: Java's `String.hashCode()` of `key` (signed 32 bits, over UTF-16 code units)."""
    h = 0
    data = key.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def key_partition(key: str, partitions: int) -> int:
    """Pure: the internal-topic partition Kafka keeps `key` in: `Utils.abs(key.hashCode()) % partitions`
    (Utils.abs maps Integer.MIN_VALUE to 0)."""
    if partitions < 1:
        raise ValueError(f"partitions must be >= 1, got {partitions}")
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def is_coordinator_target(target: str) -> bool:
    """Pure: whether `target` names a coordinator (resolved by `CoordinatorKeys`, not by the cluster alone)."""
    return target == GROUP_TARGET or bool(TXN_TARGET_RE.match(target))


class _Cluster(Protocol):  # what the resolver needs of a cluster backend
    def partitions(self, topic: str) -> dict[int, dict]: ...


@dataclass(frozen=True)
class CoordinatorKeys:
    """The keys a scenario run's coordinator targets stand for: its consumer group (None: it has none) and its
    copiers' transactional ids, copier i's at index i."""

    group: str | None = None
    transactional_ids: tuple[str, ...] = field(default_factory=tuple)

    def key_of(self, target: str) -> tuple[str, str]:
        """Pure: (internal topic, key) of a coordinator target; FaultError when the run has no such key."""
        if target == GROUP_TARGET:
            if not self.group:
                raise FaultError(f"{target}: this run has no consumer group (group_coordinator needs consumers "
                                 f"in subscribe mode or a pipeline)")
            return OFFSETS_TOPIC, self.group
        m = TXN_TARGET_RE.match(target)
        if not m:
            raise FaultError(f"{target!r} is not a coordinator target (txn_coordinator:<copier>, {GROUP_TARGET})")
        i = int(m.group(1))
        if i >= len(self.transactional_ids):
            have = f"copiers 0..{len(self.transactional_ids) - 1}" if self.transactional_ids else "no copiers"
            raise FaultError(f"{target}: this run has {have} (txn_coordinator:<copier> needs a pipeline section)")
        return TRANSACTION_STATE_TOPIC, self.transactional_ids[i]

    def partition_of(self, cluster: _Cluster, target: str) -> tuple[str, int]:
        """(internal topic, partition) holding the target's key on `cluster`, from the topic's partition count."""
        topic, key = self.key_of(target)
        try:
            count = len(cluster.partitions(topic))
        except ClusterError as e:  # the topic is made when first used (a group's or a copier's start)
            raise FaultError(f"{target}: {topic} cannot be read yet ({e}); its coordinator exists once a client "
                             f"used it") from e
        return topic, key_partition(key, count)
