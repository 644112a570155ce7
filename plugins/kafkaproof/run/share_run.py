"""A share-group workload in a scenario run (issue 46, KIP-932): the share consumers, their group's configs, the
settle phase that waits for every record's outcome, and the share ledger (spec/share_ledger.py).

The share consumers are the Java driver's (`ShareConsumerWorker`, `KafkaShareConsumer`); `ScenarioRun` starts
them in the consumers' places (`consumer-<i>-<incarnation>`), so `consumer:<i>` faults kill, stop and pause them
and their heal starts them again. Before the workload the run sets the group's configs through the admin API
(`group_configs`): `share.auto.offset.reset=earliest` (a share group starts at the latest offset otherwise), the
record lock duration and the delivery count limit of the scenario's `share` section. The settle phase waits, at
most `drain.timeout_s`, until every record up to the high watermarks is accepted, rejected or given up (or
unconfirmed: its accept or reject failed and it did not come back once its lock ran out).
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

import pyarrow as pa

from ..errors import KafkaproofError
from ..spec import ledger
from ..spec.share_ledger import SHARE_ACKS, SHARE_DELIVERIES, SHARE_MEMBERS
from .java_driver import read_tsv

log = logging.getLogger(__name__)

NS_PER_MS = 1_000_000
# The group configs the run sets (GroupConfig of Kafka 4.2+; `kafka-configs --entity-type groups`).
AUTO_OFFSET_RESET = "share.auto.offset.reset"
LOCK_DURATION = "share.record.lock.duration.ms"
DELIVERY_LIMIT = "share.delivery.count.limit"


class ShareGroupError(KafkaproofError):
    """The share group could not be configured."""


def group_configs(section: Mapping[str, Any]) -> dict[str, str]:
    """Pure: the share group's configs for a `share` section (with its defaults)."""
    return {AUTO_OFFSET_RESET: "earliest", LOCK_DURATION: str(int(section["lock_timeout_ms"])),
            DELIVERY_LIMIT: str(int(section["delivery_limit"]))}


def share_spec(section: Mapping[str, Any], client_version: str, seed: int = 0) -> dict[str, Any]:
    """Pure: the worker spec of the share consumers (the Java driver's `share` role)."""
    return {"role": "share", "client": "java", "client_version": client_version, "group": section["group"],
            "processing_ms": section["processing_ms"], "config": dict(section.get("config") or {}),
            "share": {"ack": dict(section["ack"]), "lock_timeout_ms": int(section["lock_timeout_ms"]),
                      "delivery_limit": int(section["delivery_limit"]), "seed": seed}}


# How long after a failed accept's (or reject's) lock ran out its record must have come back if the broker did not
# take the acknowledgement: past it the record is `unconfirmed` (the analysis' outcome), no longer waited for.
UNCONFIRMED_GRACE_MS = 2_000


def share_clients(clients: Mapping[str, Any], section: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: the manifest's `clients` of a share run: no consumers of a consumer group (the analysis would look
    for their reads), and the share consumers under `share_consumers`."""
    return {**clients, "consumers": [],
            "share_consumers": [{"index": i, "client": "java", "group": section["group"],
                                 "acknowledgement_mode": section["ack"]["mode"]} for i in range(section["consumers"])]}


def record_states(deliveries: Iterable[Mapping[str, Any]], acks: Iterable[Mapping[str, Any]], limit: int,
                  lock_ms: int, now_ns: int) -> dict[tuple[int, int], str]:
    """Pure: where each delivered record stands now: `accepted` or `rejected` (a confirmed acknowledgement),
    `given_up` (its latest delivery was at the limit and ended: released, or its lock ran out), `unconfirmed` (its
    latest delivery's accept or reject failed, e.g. a lost answer, and it did not come back within
    `UNCONFIRMED_GRACE_MS` after its lock ran out), else `open`."""
    ok: dict[int, str] = {}
    failed: set[int] = set()
    for a in acks:
        if a["success"] and a["type"] in ("accept", "reject", "release"):
            ok.setdefault(a["delivery_id"], a["type"])
        elif not a["success"] and a["type"] in ("accept", "reject"):
            failed.add(a["delivery_id"])
    latest: dict[tuple[int, int], Mapping[str, Any]] = {}
    done: dict[tuple[int, int], str] = {}
    for d in deliveries:
        at = (d["partition"], d["offset"])
        kind = ok.get(d["delivery_id"])
        if kind in ("accept", "reject"):
            done[at] = kind + "ed"
        if at not in latest or d["acquired_ns"] >= latest[at]["acquired_ns"]:
            latest[at] = d
    out: dict[tuple[int, int], str] = {}
    for at, d in latest.items():
        if at in done:
            out[at] = done[at]
        elif d["delivery_count"] >= limit and (ok.get(d["delivery_id"]) == "release"
                                               or d["acquired_ns"] + lock_ms * NS_PER_MS <= now_ns):
            out[at] = "given_up"
        elif (d["delivery_id"] in failed and d["delivery_id"] not in ok
              and d["acquired_ns"] + (lock_ms + UNCONFIRMED_GRACE_MS) * NS_PER_MS <= now_ns):
            out[at] = "unconfirmed"
        else:
            out[at] = "open"
    return out


def missing_offsets(states: Mapping[tuple[int, int], str], marks: Mapping[int, int]) -> dict[int, int]:
    """Pure: per partition, how many offsets below the high watermark were never delivered (0s left out)."""
    seen: dict[int, int] = {}
    for (p, o) in states:
        if o < marks.get(p, 0):
            seen[p] = seen.get(p, 0) + 1
    return {p: hw - seen.get(p, 0) for p, hw in marks.items() if hw - seen.get(p, 0) > 0}


def killed_members(fault_log: Path) -> list[dict[str, Any]]:
    """The `killed` member rows: consumer faults of kind `kill` in the run's fault log (its pid and time)."""
    rows = []
    try:
        lines = fault_log.read_text().splitlines()
    except OSError:
        return rows
    for line in lines:
        try:
            e = json.loads(line)
        except ValueError:
            continue
        if e.get("event") == "inject" and e.get("kind") == "kill" and str(e.get("target", "")).startswith("consumer:"):
            rows.append({"consumer": int(e["target"].split(":")[1]), "consumer_pid": (e.get("params") or {}).get("pid"),
                         "group": None, "member_id": None, "event": "killed", "ts_ns": e.get("mono_ns")})
    return rows


def _streams(work: Path, suffix: str, schema: pa.Schema) -> pa.Table:
    tables = [read_tsv(p, schema) for p in sorted(work.glob(f"consumer-*{suffix}"))]
    return pa.concat_tables(tables) if tables else schema.empty_table()


class ShareRun:
    """The runner's side of one scenario's share section (already checked and with its defaults)."""

    def __init__(self, section: Mapping[str, Any], topic: str, work: Path):
        self.section = dict(section)
        self.topic = topic
        self.work = work
        self.summary: dict[str, Any] = {}

    @property
    def consumers(self) -> int:
        return int(self.section["consumers"])

    @property
    def limit(self) -> int:
        return int(self.section["delivery_limit"])

    @property
    def lock_ms(self) -> int:
        return int(self.section["lock_timeout_ms"])

    def configure_group(self, admin, timeout_s: float = 30.0) -> dict[str, str]:
        """Set the group's configs (IncrementalAlterConfigs on the GROUP resource) before any member joins."""
        from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType
        configs = group_configs(self.section)
        entries = [ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()]
        resource = ConfigResource(ResourceType.GROUP, self.section["group"], incremental_configs=entries)
        try:
            for fut in admin.incremental_alter_configs([resource], request_timeout=timeout_s).values():
                fut.result(timeout=timeout_s)
        except Exception as e:  # KafkaException, a timeout: the run cannot set the group up as asked
            raise ShareGroupError(f"share: setting the configs {configs} of share group {self.section['group']!r} "
                                  f"failed: {e}") from e
        log.info("share group %s: %s", self.section["group"], configs)
        self.summary["group_configs"] = configs
        return configs

    def spec(self, client_version: str, seed: int = 0) -> dict[str, Any]:
        return share_spec(self.section, client_version, seed)

    def deliveries(self) -> pa.Table:
        return _streams(self.work, ".share_deliveries.tsv", SHARE_DELIVERIES)

    def acks(self) -> pa.Table:
        return _streams(self.work, ".share_acks.tsv", SHARE_ACKS)

    def states(self) -> dict[tuple[int, int], str]:
        return record_states(self.deliveries().to_pylist(), self.acks().to_pylist(), self.limit, self.lock_ms,
                             time.monotonic_ns())

    def settle(self, workers, marks: Mapping[int, int], until: float) -> bool:
        """Until every record below the high watermarks `marks` is accepted, rejected or given up, at most until
        `until` (monotonic); consumers a fault left dead start again. False when it stopped short."""
        states: dict[tuple[int, int], str] = {}
        missing: dict[int, int] = dict(marks)
        while time.monotonic() < until:
            for i, proc in list(workers.consumers.items()):
                if proc.poll() is not None:
                    workers.restart_consumer(i)
            states = self.states()
            missing = missing_offsets(states, marks)
            if not missing and all(s != "open" for s in states.values()):
                self._summarize(states, marks, True)
                return True
            time.sleep(0.5)
        self._summarize(states, marks, False)
        log.warning("share group %s did not settle: %d records open, never delivered per partition %s",
                    self.section["group"], sum(1 for s in states.values() if s == "open"), missing)
        return False

    def _summarize(self, states: Mapping[tuple[int, int], str], marks: Mapping[int, int], settled: bool) -> None:
        by: dict[str, int] = {}
        for s in states.values():
            by[s] = by.get(s, 0) + 1
        self.summary.update(settled=settled, states=by, high_watermarks={str(p): m for p, m in sorted(marks.items())})
        log.info("share group %s: %s%s", self.section["group"], by, "" if settled else " (did not settle)")

    def write_ledger(self, run_dir: Path, fault_log: Path) -> dict[str, int]:
        """The three share tables in the run directory; returns their row counts."""
        ledger.write_arrow(run_dir, "share_deliveries", self.deliveries())
        ledger.write_arrow(run_dir, "share_acks", self.acks())
        members = _streams(self.work, ".share_members.tsv", SHARE_MEMBERS).to_pylist()
        for row in killed_members(fault_log):
            row["group"] = self.section["group"]
            members.append(row)
        members.sort(key=lambda r: (r["ts_ns"] or 0, r["consumer"]))
        counts = {"share_members": ledger.write_table(run_dir, "share_members", members)}
        for name in ("share_deliveries", "share_acks"):
            counts[name] = ledger.read_table(run_dir, name).num_rows
        return counts
