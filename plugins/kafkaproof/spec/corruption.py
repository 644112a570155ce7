"""Corruption at rest (`file_corrupt`, the `corruption` family): what its parameters may say, and the majority rule.

Pure. The fault flips bits in, or truncates, files of one kind in a node's log directory (cluster/corrupt.py
does it; docs/corruption.md). Damage on a majority of a partition's replicas (or of the KRaft controllers, for
`snapshot`) can lose acknowledged writes by design, so it is refused unless the scenario says
`allow_majority: true`: at the scenario's check from its topology, and again at injection against the
partition's replicas then.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import FaultError

# What `file` may name: log segments, their offset and time indexes, the broker's offset checkpoints and a
# partition's leader-epoch checkpoint, the KRaft metadata log and its snapshots.
FILE_KINDS = ("segment", "index", "checkpoint", "snapshot")
MODES = ("bitflip", "truncate")
SEGMENTS = ("active", "closed", "all")  # which segments (and their indexes) of a partition
WHEN = ("running", "stopped")  # stopped: the node is killed first and started at the heal
# `file: checkpoint`: which checkpoint files (a partition's leader-epoch-checkpoint, the log directory's
# replication-offset-checkpoint and recovery-point-offset-checkpoint), or all of them.
CHECKPOINTS = ("leader-epoch", "replication-offset", "recovery-point", "all")
# `file: snapshot`: the KRaft `__cluster_metadata-0` snapshots (`.checkpoint`), its log segments (`.log`), or both.
METADATA = ("snapshots", "log", "all")
# A parameter that narrows one file kind: the kinds it is for.
NARROWS = {"segment": ("segment", "index"), "checkpoint": ("checkpoint",), "metadata": ("snapshot",)}
DEFAULTS = {"segment": "all", "checkpoint": "all", "metadata": "all", "probability": 0.01, "range_bytes": 4096,
            "fraction": 0.5, "when": "running"}


def param(params: Mapping[str, Any], name: str) -> Any:
    """Pure: a parameter of a `file_corrupt` fault, or its default."""
    return params.get(name, DEFAULTS.get(name))


def check_corruption_params(params: Mapping[str, Any], where: str) -> None:
    """Pure: the values of a `file_corrupt` fault's parameters (their types are the registry's); FaultError
    naming `where`.params.<name> and what is allowed otherwise."""
    for name, allowed in (("file", FILE_KINDS), ("mode", MODES), ("segment", SEGMENTS), ("checkpoint", CHECKPOINTS),
                          ("metadata", METADATA), ("when", WHEN)):
        if name in params and params[name] not in allowed:
            raise FaultError(f"{where}.params.{name}: {params[name]!r} is not allowed; allowed: {', '.join(allowed)}")
    for name, kinds in NARROWS.items():
        if name in params and params.get("file") not in kinds:
            raise FaultError(f"{where}.params.{name}: only for file: {' or '.join(kinds)}")
    mode = params.get("mode")
    for name in ("probability", "range_bytes"):
        if name in params and mode != "bitflip":
            raise FaultError(f"{where}.params.{name}: only for mode: bitflip")
    if "fraction" in params and mode != "truncate":
        raise FaultError(f"{where}.params.fraction: only for mode: truncate")
    if not 0 < param(params, "probability") <= 1:
        raise FaultError(f"{where}.params.probability: must be in (0, 1] (the chance of a flipped bit in each "
                         f"range of range_bytes), got {params['probability']}")
    if param(params, "range_bytes") < 1:
        raise FaultError(f"{where}.params.range_bytes: must be >= 1, got {params['range_bytes']}")
    if not 0 <= param(params, "fraction") < 1:
        raise FaultError(f"{where}.params.fraction: must be in [0, 1) (the share of each file kept), "
                         f"got {params['fraction']}")
    part = params.get("partition")
    if part is not None and not (isinstance(part, int) and part >= 0 or isinstance(part, str) and
                                 part.rpartition(":")[2].isdigit() and part.rpartition(":")[0]):
        raise FaultError(f"{where}.params.partition: {part!r} is not a partition; give <partition> or "
                         f"<topic>:<partition>")


def is_majority(damaged: int, members: int) -> bool:
    """Pure: whether `damaged` of `members` replicas (or voters) is a majority of them."""
    return members > 0 and 2 * damaged > members


def majority_refusal(damaged: int, members: int, what: str) -> str:
    """Pure: the message refusing corruption on a majority without `allow_majority`."""
    return (f"file_corrupt would damage {damaged} of {members} {what}: a majority, which can lose acknowledged "
            f"writes by design; set params.allow_majority: true to mean it (a negative control)")


def targeted_at_least(target: str, brokers: int, controllers: int) -> int:
    """Pure: how many nodes a target expression names at least, before the cluster runs (`all`, `brokers`,
    `nodes:`, `followers:` of a topic whose replicas are every broker are counted by the caller)."""
    if target.startswith("nodes:"):
        return len(set(target[6:].split(",")))
    if target == "brokers":
        return brokers
    if target == "all":
        return brokers + controllers
    return 1


def scenario_majority_problem(fault: Mapping[str, Any], brokers: int, controllers: int,
                              topic: Mapping[str, Any] | int) -> str | None:
    """Pure: why a scenario's `file_corrupt` fault damages a majority for sure (the replicas every partition of
    `topic` (its section, or its replication factor) has among the nodes it names, or the KRaft voters for
    `snapshot`), or None. The injection checks again against the partition's replicas then."""
    replication_factor = topic if isinstance(topic, int) else int(topic["replication_factor"])
    params = fault.get("params") or {}
    if params.get("allow_majority"):
        return None
    target = fault.get("target", "")
    if params.get("file") == "snapshot":
        voters = controllers or brokers  # combined nodes vote when there are no dedicated controllers
        named = targeted_at_least(target, brokers, controllers)
        if target == "brokers" and controllers:
            named = 0
        elif target == "all":
            named = voters
        return majority_refusal(named, voters, "KRaft voters") if is_majority(named, voters) else None
    if target.startswith("followers:"):
        damaged = replication_factor - 1
    else:
        named_brokers = targeted_at_least(target, brokers, controllers) if target != "all" else brokers
        if target.startswith("nodes:"):
            named_brokers = sum(1 for n in target[6:].split(",") if int(n) <= brokers)
        # at least this many of them hold a replica of each partition
        damaged = max(0, named_brokers - (brokers - replication_factor))
    return majority_refusal(damaged, replication_factor, "replicas of a partition") \
        if is_majority(damaged, replication_factor) else None
