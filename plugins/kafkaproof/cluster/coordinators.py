"""Which broker coordinates a group right now (issue 46; the targets: spec/coordinator_targets.py).

Kafka places a group on a partition of `__consumer_offsets` by its id's Java hash: the group coordinator
(classic, consumer and share groups alike) is the leader of partition `Utils.abs(groupId.hashCode()) %
offsets.topic.num.partitions` (GroupCoordinatorService.partitionFor). A share group's coordinator is found that
way, not with FindCoordinator key type SHARE: that one looks up the share-*state* coordinator of a
`groupId:topicId:partition` key on `__share_group_state`, another broker in general.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..errors import ClusterError, FaultError
from ..spec.coordinator_targets import CoordinatorKind

INT_MIN = -(2 ** 31)


def java_string_hash(text: str) -> int:
    """Pure: Java's `String.hashCode()` of `text` (over UTF-16 code units, 32-bit overflow)."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - 2 ** 32 if h >= 2 ** 31 else h


def java_abs(n: int) -> int:
    """Pure: Kafka's `Utils.abs` (Integer.MIN_VALUE maps to 0, not to itself)."""
    return 0 if n == INT_MIN else abs(n)


def key_partition(key: str, partitions: int) -> int:
    """Pure: the internal topic's partition a coordinator key (a group id) lives on, as the broker computes it."""
    if partitions <= 0:
        raise ValueError(f"an internal topic has at least one partition, not {partitions}")
    return java_abs(java_string_hash(key)) % partitions


class _Partitions(Protocol):
    def partitions(self, topic: str) -> dict[int, dict]: ...


@dataclass(frozen=True)
class Coordinator:
    """Where a key's coordinator is right now: the node leading `partition` of `topic`."""

    kind: str
    key: str
    topic: str
    partition: int
    node: int

    def as_json(self) -> dict:
        """What a fault records of it (its params' `coordinator`)."""
        return {"kind": self.kind, "key": self.key, "topic": self.topic, "partition": self.partition,
                "node": self.node}


def find_coordinator(cluster: _Partitions, kind: CoordinatorKind, key: str) -> Coordinator:
    """The node coordinating `key` now: the leader of its partition of `kind.topic` (read from metadata, with the
    topic's actual partition count). FaultError when the topic does not exist yet (no group has used the
    cluster) or the partition has no leader."""
    try:
        parts = cluster.partitions(kind.topic)
    except ClusterError as e:
        raise FaultError(f"{kind.name}:{key}: cannot read {kind.topic} ({e}); it exists once a group has used the "
                         f"cluster") from None
    partition = key_partition(key, len(parts))
    leader = parts[partition]["leader"]
    if leader < 0:
        raise FaultError(f"{kind.name}:{key}: {kind.topic}-{partition} (the {kind.key_name}'s coordinator "
                         f"partition) has no leader right now")
    return Coordinator(kind.name, key, kind.topic, partition, leader)
