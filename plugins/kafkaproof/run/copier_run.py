"""An exactly-once pipeline in a scenario run (issue 43): the output topic, the copiers' spec, the downstream
reader, its catch-up and the output's drain, and the pipeline ledger (spec/pipeline_ledger.py).

`ScenarioRun` starts the copiers as its consumers (`copier_spec`), so its settle phase waits for their
transactional commits to reach the input's high watermarks and restarts copiers a fault left dead.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

import pyarrow as pa

from ..spec import ledger
from ..spec.pipeline_ledger import OUTPUT_READS, PIPELINE_PARTITIONS, TRANSACTION_RECORDS, TRANSACTIONS
from .copier import txn_of_key
from .drain import committed_offsets, drain, high_watermarks
from .java_driver import read_tsv
from .workload import read_stream

log = logging.getLogger(__name__)


def copier_spec(consumer_spec: Mapping[str, Any], section: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: the spec of the copiers, which run in the consumers' places (the same group, config and client:
    librdkafka's copier, run/copier.py, or the Java driver's CopierWorker with `consumers.client: java`)."""
    return {"client": "librdkafka", **consumer_spec, "role": "copier", "pipeline": dict(section)}


def reader_spec(section: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    """Pure: the downstream reader's spec: the output topic, in a group of its own."""
    return {"topic": section["output_topic"], "isolation": section["downstream_isolation"],
            "group": f"kp-reader-{run_id}"}


def last_per_txn(rows: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pure: a copier writes a transaction's row when it begins and again when it ends: the last one wins."""
    out: dict[int, dict[str, Any]] = {}
    for r in rows:
        out[r["txn"]] = dict(r)
    return [out[t] for t in sorted(out)]


def audit_rows(uncommitted: list[dict], committed: list[dict], committed_complete: Mapping[int, bool]) -> list[dict]:
    """Pure: the output log (read_uncommitted) with each record's transaction (from its key) and marker:
    true when read_committed returned it, false when read_committed read past it, null when it stopped short
    (a transaction without a marker holds the last stable offset)."""
    seen = {(r["partition"], r["offset"]) for r in committed}
    out = []
    for r in uncommitted:
        at = (r["partition"], r["offset"])
        marker = True if at in seen else (False if committed_complete.get(r["partition"]) else None)
        out.append({"partition": r["partition"], "offset": r["offset"], "value_id": r["value_id"],
                    "txn": txn_of_key(r["key"]), "committed": marker})
    return out


def _streams(work: Path, pattern: str, schema: pa.Schema) -> pa.Table:
    """Every copier's stream of one kind: the librdkafka copier's Arrow files (`<pattern>.arrow`) and the Java
    copier's tab-separated ones (`<pattern>.tsv`), the same columns."""
    tables = [read_stream(p, schema) for p in sorted(work.glob(pattern + ".arrow"))]
    tables += [read_tsv(p, schema) for p in sorted(work.glob(pattern + ".tsv"))]
    return pa.concat_tables(tables) if tables else schema.empty_table()


class PipelineRun:
    """The runner's side of one scenario's pipeline section (already checked and with its defaults)."""

    def __init__(self, section: Mapping[str, Any], input_topic: str, work: Path):
        self.section = dict(section)
        self.input_topic = input_topic
        self.work = work
        self.audit: list[dict] = []
        self.final_offsets: dict[int, int] = {}
        self.summary: dict[str, Any] = {}

    @property
    def output_topic(self) -> str:
        return self.section["output_topic"]

    def create_output_topic(self, cluster, replication_factor: int, config: Mapping[str, Any]) -> None:
        """The output topic, as replicated and configured as the input."""
        cluster.create_topic(self.output_topic, self.section["output_partitions"], replication_factor, dict(config))
        cluster.wait_in_sync(self.output_topic)

    def reader_positions(self) -> dict[int, int]:
        try:
            p = json.loads((self.work / "reader-0.progress.json").read_text())
        except (OSError, json.JSONDecodeError):
            return {}
        return {int(k): v for k, v in (p.get("positions") or {}).items()}

    def wait_reader(self, bootstrap: str, connection: Mapping[str, Any], until: float) -> bool:
        """Let the downstream reader reach the output's high watermarks (read_committed: past the last
        markers), at most until `until` (monotonic); False when it stopped short."""
        marks = high_watermarks(bootstrap, self.output_topic, connection)
        while time.monotonic() < until:
            positions = self.reader_positions()
            if all(positions.get(p, -1) >= hw for p, hw in marks.items() if hw > 0):
                return True
            time.sleep(0.5)
        log.warning("the downstream reader of %s stopped short of %s (at %s)", self.output_topic, marks,
                    self.reader_positions())
        return False

    def drain_output(self, bootstrap: str, timeout_s: float, connection: Mapping[str, Any], admin, group: str) -> None:
        """After the faults healed and the copiers stopped: the output log read both ways, and the group's
        final committed input offsets."""
        uncommitted, u_marks = drain(bootstrap, self.output_topic, "read_uncommitted", timeout_s, connection)
        committed, c_marks = drain(bootstrap, self.output_topic, "read_committed", timeout_s, connection)
        self.audit = audit_rows(uncommitted, committed, {p: m["complete"] for p, m in c_marks.items()})
        self.final_offsets = committed_offsets(admin, group, self.input_topic)
        self.summary = {"output_topic": self.output_topic, "output_records": len(uncommitted),
                        "output_committed": len(committed),
                        "read_committed_complete": all(m["complete"] for m in c_marks.values()),
                        "read_uncommitted_complete": all(m["complete"] for m in u_marks.values()),
                        "final_offsets": {str(p): o for p, o in sorted(self.final_offsets.items())}}

    def write_ledger(self, run_dir: Path) -> dict[str, int]:
        """The five pipeline tables in the run directory; returns their row counts."""
        txns = _streams(self.work, "copier-*.txns", TRANSACTIONS)
        counts = {"transactions": ledger.write_table(run_dir, "transactions", last_per_txn(txns.to_pylist()))}
        ledger.write_arrow(run_dir, "transaction_records", _streams(self.work, "copier-*.records",
                                                                    TRANSACTION_RECORDS))
        ledger.write_arrow(run_dir, "output_reads", _streams(self.work, "reader-*.reads", OUTPUT_READS))
        counts["output_audit"] = ledger.write_table(run_dir, "output_audit", self.audit)
        per_txn = _streams(self.work, "copier-*.offsets", PIPELINE_PARTITIONS).to_pylist()
        final = [{"partition": p, "txn": None, "committed_offset": o} for p, o in sorted(self.final_offsets.items())]
        counts["pipeline_partitions"] = ledger.write_table(run_dir, "pipeline_partitions", per_txn + final)
        for name in ("transaction_records", "output_reads"):
            counts[name] = ledger.read_table(run_dir, name).num_rows
        return counts
