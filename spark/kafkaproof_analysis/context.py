"""Manifest reading: what the job needs from manifest.json (`RunContext`), parsed into plain Python."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from pyspark.sql import DataFrame

from .base import AnalysisInputError, location_name


@dataclass(frozen=True)
class PartitionAudit:
    """Manifest `audit` facts about one partition."""

    partition: int
    low: int | None
    high: int | None
    complete: bool


@dataclass
class RunContext:
    """What the job needs from manifest.json, parsed into plain Python."""

    run_dir: str
    run_id: str
    t0_ns: int | None
    partitions: list[PartitionAudit]
    producer_acks: dict[int, int]
    default_acks: int
    consumer_group: dict[int, int]
    consumer_read_committed: dict[int, bool]
    groups: list[str]
    has_consumers: bool
    topic: str | None = None  # the scenario topic (proxy events of other topics are ignored)
    # Producers whose delivery reports carry offsets a broker assigned (not acks=0's made-up ones).
    producer_broker_offsets: dict[int, bool] = field(default_factory=dict)
    delivery_within_s: float | None = None  # claims.delivery: every attempted value delivered within this bound
    processed_once: bool = False  # claims.processed_once: no consumer group processes a value twice
    exercised: list[dict[str, Any]] = field(default_factory=list)  # the scenario's own exercised conditions
    manifest: dict[str, Any] = field(repr=False, default_factory=dict)
    cached: list[DataFrame] = field(repr=False, default_factory=list)  # persisted for one run; unpersisted after

    @property
    def all_complete(self) -> bool:
        return bool(self.partitions) and all(p.complete for p in self.partitions)

    @property
    def groups_mask(self) -> int:
        return (1 << len(self.groups)) - 1


def _lookup(entry: Mapping[str, Any], *names: str) -> Any:
    """Find a client setting in a scenario entry or its config sub-mapping."""
    for scope in (entry, entry.get("config"), entry.get("settings"), entry.get("properties")):
        if isinstance(scope, Mapping):
            for name in names:
                if scope.get(name) is not None:
                    return scope[name]
    return None


def expand_clients(scenario: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    """One settings dict per client index of `scenario[key]` ('producers'/'consumers').

    Accepts a list of entries (each optionally with `count`/`instances`), one
    mapping, or an integer count with the shared settings under the singular key.
    """
    raw = scenario.get(key)
    if raw is None:
        return []
    if isinstance(raw, int):
        shared = scenario.get(key[:-1]) or {}
        return [dict(shared) for _ in range(raw)]
    if isinstance(raw, Mapping):
        raw = [raw]
    out: list[dict[str, Any]] = []
    for entry in raw:
        entry = dict(entry or {})
        count = entry.get("count", entry.get("instances", 1))
        out.extend(dict(entry) for _ in range(int(count if count is not None else 1)))
    return out


def parse_acks(value: Any) -> int:
    """Normalise a producer `acks` setting to -1 (all), 0 or 1; librdkafka's default is all."""
    if value is None:
        return -1
    text = str(value).strip().lower()
    if text in ("all", "-1"):
        return -1
    try:
        return int(text)
    except ValueError as exc:
        raise AnalysisInputError(f"manifest: producer acks={value!r} is not all/-1/0/1") from exc


def parse_isolation(value: Any) -> bool:
    """True when a consumer reads committed data (librdkafka's default)."""
    return value is None or str(value).strip().lower() == "read_committed"


def parse_partitions(audit: Any) -> list[PartitionAudit]:
    """Manifest `audit.partitions` (mapping keyed by partition, or list) to PartitionAudit rows."""
    if not isinstance(audit, Mapping):
        return []
    raw = audit.get("partitions") or {}
    items: list[tuple[Any, Mapping[str, Any]]]
    if isinstance(raw, Mapping):
        items = list(raw.items())
    else:
        items = [(e.get("partition"), e) for e in raw]
    out = []
    for key, info in items:
        info = info or {}
        low, high = info.get("low"), info.get("high")
        out.append(PartitionAudit(
            partition=int(key),
            low=None if low is None else int(low),
            high=None if high is None else int(high),
            complete=bool(info.get("complete", False)),
        ))
    return sorted(out, key=lambda p: p.partition)


def clients_from_scenario(scenario: Mapping[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """The `clients` section of runs written before the manifest had one: read off the scenario."""
    producers = expand_clients(scenario, "producers")
    consumers = expand_clients(scenario, "consumers")
    prods = []
    for i, p in enumerate(producers):
        acks = parse_acks(_lookup(p, "acks", "request.required.acks"))
        prods.append({"index": i, "acks": acks, "offsets_from_broker": acks != 0})
    cons = [{"index": i, "group": str(_lookup(c, "group", "group_id", "group.id") or "default"),
             "isolation_level": _lookup(c, "isolation_level", "isolation", "isolation.level")}
            for i, c in enumerate(consumers)]
    return {"producers": prods, "consumers": cons}


def build_context(run_dir: str, manifest: Mapping[str, Any]) -> RunContext:
    """Parse the manifest facts the job relies on (documented in docs/analysis.md).

    What each client ran with comes from the manifest's `clients` section (resolved once by the
    runner), never from the scenario's fields, which a client property could contradict.
    """
    scenario = manifest.get("scenario") or {}
    clients = manifest.get("clients") or clients_from_scenario(scenario)
    producer_acks = {int(p["index"]): parse_acks(p.get("acks")) for p in clients.get("producers", [])}
    broker_offsets = {int(p["index"]): bool(p.get("offsets_from_broker", parse_acks(p.get("acks")) != 0))
                      for p in clients.get("producers", [])}
    group_names: list[str] = []
    consumer_group: dict[int, int] = {}
    consumer_rc: dict[int, bool] = {}
    for c in clients.get("consumers", []):
        i, name = int(c["index"]), str(c.get("group") or "default")
        if name not in group_names:
            group_names.append(name)
        consumer_group[i] = group_names.index(name)
        consumer_rc[i] = parse_isolation(c.get("isolation_level"))
    if not group_names:
        group_names = ["default"]
    clock = manifest.get("clock") or {}
    t0 = clock.get("monotonic_origin_ns")
    delivery = (scenario.get("claims") or {}).get("delivery")
    return RunContext(
        run_dir=str(run_dir),
        run_id=str(manifest.get("run_id", location_name(str(run_dir)))),
        t0_ns=None if t0 is None else int(t0),
        partitions=parse_partitions(manifest.get("audit")),
        producer_acks=producer_acks,
        default_acks=-1,
        consumer_group=consumer_group,
        consumer_read_committed=consumer_rc,
        groups=group_names,
        has_consumers=bool(consumer_group),
        topic=manifest.get("topic") or (scenario.get("topic") or {}).get("name"),
        producer_broker_offsets=broker_offsets,
        delivery_within_s=None if delivery is None else float((delivery or {}).get("within_s", 60.0)),
        processed_once="processed_once" in (scenario.get("claims") or {}),
        exercised=list(scenario.get("exercised") or []),
        manifest=dict(manifest),
    )
