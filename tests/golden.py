"""Golden histories: small hand-built ledgers with exactly known anomalies.

Each builder returns a `Golden`: the ledger rows plus the verdict the analysis and
validation must reach. `write(run_dir)` lays it out as a run directory with
`kafkaproof.ledger.write_table` / `write_manifest`, so the analysis job reads it
exactly as it reads a real run.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from kafkaproof.spec.ledger import TABLES, make_value_id, write_manifest, write_table
from kafkaproof.spec.pipeline_ledger import PIPELINE_TABLES
from kafkaproof.spec.share_ledger import SHARE_TABLES

T0_NS = 5_000_000_000_000  # monotonic origin of every golden run
WALL0_NS = 1_790_000_000_000_000_000
MS = 1_000_000


def ns(ms: float) -> int:
    """Monotonic ns of `ms` milliseconds after the golden run start."""
    return T0_NS + int(round(ms * MS))


@dataclass
class Golden:
    """A hand-built run and what must be concluded from it."""

    name: str
    guarantee: str = "at-least-once"
    expect: dict[str, Any] = field(default_factory=lambda: {"outcome": "pass", "detect": []})
    counts: dict[str, int] = field(default_factory=dict)       # non-zero anomaly counts, exactly
    value_ids: dict[str, list[int]] = field(default_factory=dict)  # sorted value ids per kind, exactly
    status: str = "pass"             # validate() status with the manifest's guarantee/expect
    manifest_status: str = "complete"
    producers: list[dict[str, Any]] = field(default_factory=lambda: [{"acks": "all"}])
    consumers: list[dict[str, Any]] = field(default_factory=list)
    claims: dict[str, Any] = field(default_factory=dict)         # scenario claims (e.g. delivery)
    exercised: list[dict[str, Any]] = field(default_factory=list)  # scenario exercised conditions
    # The pipeline's (share group's) tables only once a transaction (a delivery) is recorded: a run without them
    # is not applicable.
    rows: dict[str, list[dict[str, Any]]] = field(
        default_factory=lambda: {t: [] for t in TABLES if t not in PIPELINE_TABLES and t not in SHARE_TABLES})
    partition_overrides: dict[int, dict[str, Any]] = field(default_factory=dict)
    analysis_from: str | None = None  # same ledger as that golden: reuse its analysis (only the manifest differs)
    causes: dict[int, str | None] = field(default_factory=dict)  # value id -> cause_fault_id of its anomaly rows
    application: dict[str, Any] | None = None  # the manifest's `application` (an application run, issue 39)
    share: dict[str, Any] | None = None  # the scenario's `share` section (a share-group run, issue 46)
    _next_offset: dict[int, int] = field(default_factory=dict)
    _next_output: dict[int, int] = field(default_factory=dict)
    _poll: dict[int, int] = field(default_factory=dict)
    _poll_seq: dict[int, int] = field(default_factory=dict)

    # ---- building blocks
    def send(self, producer: int, seq: int, t_ms: float, *, partition: int = 0, outcome: str = "ok",
             offset: int | None = None, latency_ms: float = 5.0, key: str | None = None,
             txn_id: int | None = None, txn_outcome: str | None = None, error: str | None = None,
             delay_ms: float = 0.0) -> int:
        """Record one send; returns its value id."""
        vid = make_value_id(producer, seq)
        self.rows["sends"].append({
            "value_id": vid, "producer": producer, "producer_pid": 1000 + producer, "seq": seq, "key": key,
            "partition": partition, "intended_ns": ns(t_ms - delay_ms), "send_ns": ns(t_ms),
            "complete_ns": ns(t_ms + latency_ms), "outcome": outcome,
            "offset": offset if outcome == "ok" else None,
            "error_code": None if outcome == "ok" else 7, "error_name": error or (None if outcome == "ok" else "_MSG_TIMED_OUT"),
            "txn_id": txn_id, "txn_outcome": txn_outcome,
        })
        return vid

    def log(self, partition: int, offset: int, value_id: int, *, committed: bool = True, timestamp_ms: int = 0) -> None:
        """Put a record in the final log (read_uncommitted, and read_committed unless aborted)."""
        isolations = ["read_uncommitted"] + (["read_committed"] if committed else [])
        for iso in isolations:
            self.rows["audit"].append({"isolation": iso, "partition": partition, "offset": offset, "key": None,
                                       "value_id": value_id, "timestamp_ms": timestamp_ms})
        self._next_offset[partition] = max(self._next_offset.get(partition, 0), offset + 1)

    def acked(self, producer: int, seq: int, t_ms: float, *, partition: int = 0, offset: int | None = None,
              log: bool = True, **kw: Any) -> int:
        """An acked send written to the log at the next (or given) offset."""
        offset = self._next_offset.get(partition, 0) if offset is None else offset
        vid = self.send(producer, seq, t_ms, partition=partition, offset=offset, **kw)
        if log:
            self.log(partition, offset, vid)
        return vid

    def read(self, consumer: int, partition: int, offset: int, value_id: int, t_ms: float, *,
             pid: int | None = None, incarnation: int = 0, new_poll: bool = True) -> None:
        """One record returned by a consumer poll."""
        pid = 2000 + consumer if pid is None else pid
        if new_poll:
            self._poll[pid] = self._poll.get(pid, -1) + 1
        self._poll_seq[pid] = 0 if new_poll else self._poll_seq.get(pid, -1) + 1
        self.rows["reads"].append({
            "consumer": consumer, "consumer_pid": pid, "incarnation": incarnation, "generation": 1,
            "partition": partition, "offset": offset, "key": None, "value_id": value_id, "read_ns": ns(t_ms),
            "poll_id": self._poll.get(pid, 0), "poll_seq": self._poll_seq[pid]})

    def poll(self, consumer: int, partition: int, offsets: list[int], t_ms: float) -> None:
        """One poll returning `offsets` of a partition in this order (all read at `t_ms`)."""
        by_offset = {r["offset"]: r["value_id"] for r in self.rows["audit"] if r["partition"] == partition}
        for i, o in enumerate(offsets):
            self.read(consumer, partition, o, by_offset[o], t_ms, new_poll=i == 0)

    def event(self, consumer: int, event: str, t_ms: float, partitions: list[int] | None = None, *,
              pid: int | None = None, incarnation: int = 0, assigned: list[int] | None = None) -> None:
        """A consumer lifecycle/rebalance event; `assigned`: the whole assignment after it (None: as in
        runs written before the column existed)."""
        self.rows["consumer_events"].append({
            "consumer": consumer, "consumer_pid": 2000 + consumer if pid is None else pid, "incarnation": incarnation,
            "ts_ns": ns(t_ms), "event": event, "partitions": partitions, "offsets": None, "success": None,
            "error": None, "assigned": assigned})

    def fault(self, fault_id: str, kind: str, start_ms: float, heal_ms: float | None, target: str = "leader:0",
              effect: dict[str, Any] | None = None, params: dict[str, Any] | None = None) -> None:
        """An injected fault window; `effect` defaults to evidence that it took effect."""
        if effect is None:
            effect = {"kill": {"node_states": {"1": "dead"}}, "stop": {"node_states": {"1": "dead"}},
                      "pause": {"node_states": {"1": "paused"}}}.get(kind, {"proxy_fired": 3, "dropped_packets": 9})
        self.rows["faults"].append({
            "fault_id": fault_id, "kind": kind, "target": target, "nodes": [0], "params": json.dumps(params or {}),
            "start_ns": ns(start_ms), "heal_ns": None if heal_ms is None else ns(heal_ms),
            "start_wall": "2026-01-01T00:00:00Z", "heal_wall": None, "effect": json.dumps(effect)})

    def snapshot(self, t_ms: float, partition: int, leader: int, isr: list[int], replicas: list[int] | None = None,
                 live: list[int] | None = None) -> None:
        """One sample of a partition's leader and ISR."""
        replicas = replicas or [1, 2, 3]
        self.rows["cluster_snapshots"].append({
            "ts_ns": ns(t_ms), "partition": partition, "leader": leader, "replicas": replicas, "isr": isr,
            "controller": 1, "live_nodes": live if live is not None else replicas})

    def proxy_event(self, fault_id: str, phase: str, t_ms: float, partition: int, base_offset: int,
                    record_count: int | None, *, correlation_id: int = 1, topic: str | None = "t",
                    detail: dict[str, Any] | None = None) -> None:
        """A fault-proxy action on a Produce (`response_dropped`: the broker wrote, the ack was lost)."""
        self.rows["proxy_events"].append({
            "ts_ns": ns(t_ms), "fault_id": fault_id, "rule_id": fault_id, "broker": 1, "proxy": "10.77.1.1:9092",
            "conn": 3, "client_id": "rdkafka", "api": "produce", "api_key": 0, "api_version": 9,
            "correlation_id": correlation_id, "action": "lost_ack", "phase": phase, "topic": topic,
            "partitions": [partition], "base_offsets": [base_offset] if phase != "request_forwarded" else None,
            "error_code": None, "delay_ms": None, "detail": json.dumps(detail, sort_keys=True) if detail else None,
            "record_counts": None if record_count is None else [record_count]})

    def read_all(self, consumer: int, partition: int, t_ms: float, **kw: Any) -> None:
        """The consumer reads, in order, every read_committed record of a partition."""
        recs = sorted((r["offset"], r["value_id"]) for r in self.rows["audit"]
                      if r["partition"] == partition and r["isolation"] == "read_committed")
        for i, (o, v) in enumerate(recs):
            self.read(consumer, partition, o, v, t_ms + i, **kw)

    # ---- an exactly-once pipeline (issue 43): a copier's transactions, the output log and its readers
    def copy(self, txn: int, copier: int, outcome: str, t_ms: float, inputs: list[int], *,
             commit: int | None = None, drop: tuple[int, ...] = (), ended: bool = True, epoch: int = 0) -> dict[int, int]:
        """One copier transaction over `inputs` (value ids the input producer sent), begun at `t_ms`, its commit
        requested at +50 ms (committed only) and ended at +60 ms (unless not `ended`). Each input's output goes
        to the output partition of the same number at its next offset; a marker follows (if ended) and the
        output log holds it with its marker's outcome (none: not ended or indefinite) unless its value is in
        `drop`. `commit`: the input offset this transaction commits. Returns value id -> output offset."""
        for t in PIPELINE_TABLES:
            self.rows.setdefault(t, [])
        sent = {r["value_id"]: r for r in self.rows["sends"]}
        self.rows["transactions"].append({
            "txn": txn, "transactional_id": f"copier-{copier}", "copier": copier, "producer_id": 100 + copier,
            "epoch": epoch, "txn_seq": txn, "outcome": outcome, "begin_ns": ns(t_ms),
            "commit_ns": ns(t_ms + 50) if outcome == "committed" else None, "end_ns": ns(t_ms + 60) if ended else None})
        marker = {"committed": True, "aborted": False}.get(outcome) if ended else None
        out: dict[int, int] = {}
        for vid in inputs:
            p = sent[vid]["partition"]
            offset = self._next_output.get(p, 0)
            self._next_output[p] = offset + 1
            out[vid] = offset
            self.rows["transaction_records"] += [
                {"txn": txn, "role": "input", "partition": p, "offset": sent[vid]["offset"], "value_id": vid},
                {"txn": txn, "role": "output", "partition": p, "offset": offset, "value_id": vid}]
            if vid not in drop:
                self.rows["output_audit"].append(
                    {"partition": p, "offset": offset, "value_id": vid, "txn": txn, "committed": marker})
        if ended:
            for p in {sent[v]["partition"] for v in inputs}:
                self._next_output[p] += 1
        if commit is not None:
            p = sent[inputs[0]]["partition"]
            self.rows["pipeline_partitions"].append({"partition": p, "txn": txn, "committed_offset": commit})
        return out

    def committed_offset(self, partition: int, offset: int) -> None:
        """The input partition's committed offset when the run ended."""
        self.rows["pipeline_partitions"].append({"partition": partition, "txn": None, "committed_offset": offset})

    def output_read(self, reader: int, partition: int, offset: int, value_id: int, t_ms: float, *,
                    isolation: str = "read_committed") -> None:
        """A downstream reader of the output topic read one record."""
        self.rows["output_reads"].append({"reader": reader, "isolation": isolation, "partition": partition,
                                          "offset": offset, "value_id": value_id, "read_ns": ns(t_ms)})

    # ---- output
    def manifest(self) -> dict[str, Any]:
        """The run's manifest.json, audit watermarks derived from the log."""
        parts: dict[str, dict[str, Any]] = {}
        all_parts = ({r["partition"] for r in self.rows["audit"]} | {r["partition"] for r in self.rows["sends"]
                                                                   if r["partition"] >= 0}
                     | set(self.partition_overrides))  # an override declares a partition (an empty topic's)
        for p in sorted(all_parts):
            offs = [r["offset"] for r in self.rows["audit"] if r["partition"] == p]
            info = {"low": min(offs, default=0), "high": max(offs, default=-1) + 1, "complete": True}
            info.update(self.partition_overrides.get(p, {}))
            parts[str(p)] = info
        from kafkaproof.spec.clients import parse_acks
        clients = {
            "producers": [{"index": i, "acks": parse_acks(p.get("acks")), "offsets_from_broker": parse_acks(p.get("acks")) != 0}
                          for i, p in enumerate(self.producers)],
            "consumers": [{"index": i, "group": c.get("group", "default"),
                           "isolation_level": c.get("isolation_level", "read_committed")}
                          for i, c in enumerate(self.consumers)]}
        extra = {"application": self.application} if self.application is not None else {}
        return {
            **extra,
            "run_id": f"golden-{self.name}",
            "status": self.manifest_status,
            "topic": "t",
            "scenario": {"name": self.name, "guarantee": self.guarantee, "expect": self.expect,
                         "producers": self.producers, "consumers": self.consumers, "claims": self.claims,
                         "exercised": self.exercised, **({"share": self.share} if self.share else {})},
            "clients": clients,
            "clock": {"monotonic_origin_ns": T0_NS, "wall_origin_ns": WALL0_NS},
            "audit": {"partitions": parts},
            "counts": {t: len(r) for t, r in self.rows.items()},
        }

    def write(self, run_dir: Path) -> Path:
        """Write the ledger tables and manifest into `run_dir`."""
        run_dir.mkdir(parents=True, exist_ok=True)
        for table, rows in self.rows.items():
            write_table(run_dir, table, rows)
        write_manifest(run_dir, self.manifest())
        return run_dir


# --------------------------------------------------------------------------- goldens

def clean() -> Golden:
    """One producer through a 2 s outage (failed/indefinite sends), one consumer reading everything.

    Numbers the metrics test relies on: 60 sends every 100 ms from t=0; those sent in
    [2 s, 4 s) fail 500 ms later (one is indefinite); acks take 5 ms except the one sent
    at 5 s (50 ms); fault `f1` (kill) from 2 s to 4 s.
    """
    g = Golden("clean", guarantee="exactly-once", consumers=[{"group": "g", "isolation_level": "read_committed"}])
    g.fault("f1", "kill", 2000, 4000)
    g.event(0, "start", 0)
    g.event(0, "assign", 0, [0])
    for seq in range(60):
        t = seq * 100
        if 2000 <= t < 4000:
            outcome = "indefinite" if t == 3900 else "fail"
            g.send(0, seq, t, outcome=outcome, latency_ms=500)
        else:
            vid = g.acked(0, seq, t, latency_ms=50 if t == 5000 else 5)
            g.read(0, 0, g._next_offset[0] - 1, vid, t + 60)
    return g


def clean_txn() -> Golden:
    """Transactions: committed and aborted batches, markers leave offset gaps.

    The read_committed consumer skips the aborted records and the markers (no poll skips);
    the read_uncommitted one reads the aborted records (dirty reads, which at-least-once allows).
    """
    g = Golden("clean_txn", consumers=[{"group": "rc", "isolation_level": "read_committed"},
                                       {"group": "ru", "isolation_level": "read_uncommitted"}],
               counts={"dirty_reads": 2}, exercised=[{"check": "aborted_in_log", "min": 2}])
    # txn 0 committed at offsets 0,1 (marker 2); txn 1 aborted at 3,4 (marker 5); txn 2 committed at 6,7 (marker 8)
    layout = [(0, "commit", [0, 1]), (1, "abort", [3, 4]), (2, "commit", [6, 7])]
    seq = 0
    for txn, outcome, offsets in layout:
        for o in offsets:
            vid = g.send(0, seq, 10 * seq, offset=o, txn_id=txn, txn_outcome=outcome)
            g.log(0, o, vid, committed=outcome == "commit")
            seq += 1
    g.partition_overrides[0] = {"high": 9}  # the last control marker is offset 8
    for c in (0, 1):
        g.event(c, "assign", 0, [0])
    g.read_all(0, 0, 500)
    recs = sorted((r["offset"], r["value_id"]) for r in g.rows["audit"] if r["isolation"] == "read_uncommitted")
    for i, (o, v) in enumerate(recs):
        g.read(1, 0, o, v, 600 + i)
    g.value_ids = {"dirty_reads": sorted(r["value_id"] for r in g.rows["sends"] if r["txn_outcome"] == "abort")}
    return g


def lost() -> Golden:
    """Unclean election: X acked at p0/2 is gone and Y (acked later) took offset 2."""
    g = Golden("lost", counts={"lost": 1, "ack_offset_mismatch": 1, "inconsistent_offsets": 1}, status="fail")
    g.acked(0, 0, 0)
    g.acked(0, 1, 10)
    x = g.send(0, 2, 20, offset=2)        # acked, then truncated away
    g.fault("f1", "kill", 25, 100)
    g.acked(0, 3, 200, offset=2)          # Y re-uses offset 2
    g.acked(0, 4, 210)
    g.value_ids = {"lost": [x], "ack_offset_mismatch": [x], "inconsistent_offsets": [x]}
    return g


def lost_detected() -> Golden:
    """The `lost` history as a negative control expecting `lost`: passes."""
    g = lost()
    g.name, g.expect, g.status = "lost_detected", {"outcome": "detect", "detect": ["lost"]}, "pass"
    g.analysis_from = "lost"
    return g


def detect_missing() -> Golden:
    """A negative control expecting `lost` on a clean history: fails."""
    g = Golden("detect_missing", expect={"outcome": "detect", "detect": ["lost"]}, status="fail")
    for seq in range(5):
        g.acked(0, seq, seq * 10)
    return g


def lost_unconfirmed() -> Golden:
    """acks=0: 'ok' without a broker ack, absent from the log: at-most-once tolerates it."""
    g = Golden("lost_unconfirmed", guarantee="at-most-once", producers=[{"acks": 0}],
               counts={"lost_unconfirmed": 1}, status="pass")
    a = g.send(0, 0, 0, offset=None)
    g.log(0, 0, a)
    x = g.send(0, 1, 10, offset=None)
    b = g.send(0, 2, 20, offset=None)
    g.log(0, 1, b)
    g.value_ids = {"lost_unconfirmed": [x]}
    return g


def unseen() -> Golden:
    """Drain of p1 incomplete, and an ack beyond p0's high watermark: incomplete run (error)."""
    g = Golden("unseen", counts={"unseen": 2}, status="error")
    g.acked(0, 0, 0, partition=0)
    g.acked(0, 1, 10, partition=0)
    beyond = g.send(0, 2, 20, partition=0, offset=5)
    g.acked(0, 3, 30, partition=1)
    hidden = g.acked(0, 4, 40, partition=1, log=False)
    g.partition_overrides[1] = {"complete": False, "high": 2}
    g.value_ids = {"unseen": sorted([beyond, hidden])}
    return g


def not_delivered() -> Golden:
    """The consumer never reads the last record (committed before processing, then crashed)."""
    g = Golden("not_delivered", consumers=[{"group": "g"}], counts={"not_delivered": 1}, status="fail")
    g.event(0, "assign", 0, [0])
    vids = [g.acked(0, s, s * 10) for s in range(4)]
    for o, v in enumerate(vids[:3]):
        g.read(0, 0, o, v, 100 + o)
    g.value_ids = {"not_delivered": [vids[3]]}
    return g


def duplicates() -> Golden:
    """A retried send landed twice (offsets 1 and 2); the consumer reads both copies."""
    g = Golden("duplicates", guarantee="exactly-once", consumers=[{"group": "g"}],
               counts={"duplicates": 1}, status="fail")
    g.event(0, "assign", 0, [0])
    g.acked(0, 0, 0)
    d = g.send(0, 1, 10, offset=2)
    g.log(0, 1, d)
    g.log(0, 2, d)
    g.acked(0, 2, 20)
    g.read_all(0, 0, 100)
    g.value_ids = {"duplicates": [d]}
    return g


def duplicates_allowed() -> Golden:
    """The same history under at-least-once: duplicates are allowed, so it passes."""
    g = duplicates()
    g.name, g.guarantee, g.status = "duplicates_allowed", "at-least-once", "pass"
    g.analysis_from = "duplicates"
    return g


def lost_ack_attribution() -> Golden:
    """Duplicates tied to the lost ack that caused them, and one that no proxy action explains.

    The proxy dropped the response to a 2-record write at offsets 1..2 (fault `la`);
    the producer retried and the batch landed again at 3..4. It also dropped the
    response to the write at 7 (count unknown: the base offset alone), whose send then
    ended indefinite. The write at 8 was pipelined behind a dropped answer: the reset
    that followed discarded its answer too, and its retry landed at 9. The copies at
    5 and 6 have no proxy action behind them, and a dropped write of another topic is
    ignored.
    """
    g = Golden("lost_ack_attribution", consumers=[{"group": "g"}],
               counts={"duplicates": 4, "indefinite_landed": 1})
    g.fault("la", "lost_ack", 5, 60, target="all")
    g.event(0, "assign", 0, [0])
    g.acked(0, 0, 0)
    d1, d2 = g.send(0, 1, 10, offset=3), g.send(0, 2, 11, offset=4)
    g.proxy_event("la", "request_forwarded", 12, 0, -1, 2)
    g.proxy_event("la", "response_dropped", 14, 0, 1, 2)
    for off, vid in ((1, d1), (2, d2), (3, d1), (4, d2)):
        g.log(0, off, vid)
    u = g.send(0, 3, 20, offset=6)
    g.log(0, 5, u)
    g.log(0, 6, u)
    g.proxy_event("la", "response_dropped", 16, 0, 5, 2, topic="other-topic")
    i = g.send(0, 4, 30, outcome="indefinite", latency_ms=500)
    g.proxy_event("la", "response_dropped", 31, 0, 7, None, correlation_id=2)
    g.log(0, 7, i)
    p = g.send(0, 5, 40, offset=9)
    g.proxy_event("la", "response_discarded", 41, 0, 8, 1, correlation_id=3)
    g.log(0, 8, p)
    g.log(0, 9, p)
    g.read_all(0, 0, 100)
    g.value_ids = {"duplicates": [d1, d2, u, p], "indefinite_landed": [i]}
    g.causes = {d1: "la", d2: "la", u: None, i: "la", p: "la"}
    return g


def reset_in_flight_attribution() -> Golden:
    """Issue 36.6: the duplicates of every Produce request in flight at a lost ack's reset are attributed.

    A Java producer without idempotence had five requests in flight on one connection (correlation
    ids 1-5) when the proxy dropped the answer to the first and reset the connection; the client
    sent all five again, and every value landed twice. The second answer was in the proxy at the
    reset; the broker answered the third and fifth after it, and the proxy, reading the broker
    connection on, reported what it wrote (`after_reset`); the fourth answer never came (no base
    offsets: its copy stays unattributed). The fifth was written after the client's retry of it
    (offsets 11, then 12): its duplicate's later copy is the unacknowledged write. The
    `proxy_events` rows come from the proxy's own events through the run's assembly. Today's
    analysis attributes 4 of the 6 duplicates (not the one whose retry landed first), and today's
    proxy gave the third and fifth no results: 2 of 6.
    """
    from kafkaproof.run.assemble import proxy_event_rows

    g = Golden("reset_in_flight_attribution", consumers=[{"group": "g"}], counts={"duplicates": 6})
    g.fault("la", "lost_ack", 5, 60, target="all", params={"reset": True})
    g.event(0, "assign", 0, [0])
    g.acked(0, 0, 0)
    a, b, c1, c2, e, f = (g.send(0, seq, 10 + seq, offset=5 + seq) for seq in range(1, 7))
    for off, vid in enumerate((a, b, c1, c2, e, a, b, c1, c2, e, f, f), start=1):
        g.log(0, off, vid)

    def event(t_ms: float, correlation_id: int, phase: str, offset: int | None, count: int,
              **detail: Any) -> dict[str, Any]:
        if offset is not None:
            detail["results"] = [{"topic": "t", "partition": 0, "error_code": 0, "error": "NONE",
                                  "base_offset": offset}]
        return {"event": "fault", "ts_ns": ns(t_ms), "rule_id": "la", "action": "lost_ack", "phase": phase,
                "broker": 1, "proxy": "10.77.1.1:9092", "conn": 7, "client_id": "producer-1", "api": "produce",
                "api_key": 0, "api_version": 9, "correlation_id": correlation_id,
                "topics": [{"topic": "t", "partitions": [0], "record_counts": [count]}], "detail": detail}

    g.rows["proxy_events"] = proxy_event_rows([
        event(12, 1, "request_forwarded", None, 1, reset=True),
        event(14, 1, "response_dropped", 1, 1, reset=True),
        event(15, 2, "response_discarded", 2, 1, caused_by="response_dropped", response_received=True),
        event(15, 4, "response_discarded", None, 1, caused_by="response_dropped", response_received=False),
        event(17, 3, "response_discarded", 3, 2, caused_by="response_dropped", response_received=True,
              after_reset=True),
        event(19, 5, "response_discarded", 12, 1, caused_by="response_dropped", response_received=True,
              after_reset=True),
    ], {"la"})
    g.read_all(0, 0, 100)
    g.value_ids = {"duplicates": [a, b, c1, c2, e, f]}
    g.causes = {a: "la", b: "la", c1: "la", c2: "la", e: None, f: "la"}
    return g


def unread_answer_attribution() -> Golden:
    """Answers the proxy wrote to the client just before a reset (`delivered`): a duplicate of one is caused by
    the reset, nothing else is.

    A lost ack with reset dropped the answer to the write at 3 (its retry at 5). The proxy had written
    the answers to the writes at 1, 2 and 6 to the client just before the reset: the client never
    read the first (the Java client closes a reset connection with answers unread) and sent it again
    (at 4); it did read the second (in the log once, no anomaly). The send of the value at 6 ended
    indefinite: a write whose answer the client may have read does not explain that, so its
    `indefinite_landed` stays unattributed. Today's analysis (before `delivered` rows) attributes
    1 of the 2 duplicates.
    """
    g = Golden("unread_answer_attribution", consumers=[{"group": "g"}],
               counts={"duplicates": 2, "indefinite_landed": 1})
    g.fault("la", "lost_ack", 5, 60, target="all", params={"reset": True})
    g.event(0, "assign", 0, [0])
    g.acked(0, 0, 0)
    unread, read, dropped = g.send(0, 1, 10, offset=4), g.send(0, 2, 11, offset=2), g.send(0, 3, 12, offset=5)
    i = g.send(0, 4, 13, outcome="indefinite", latency_ms=500)
    for off, vid in enumerate((unread, read, dropped, unread, dropped, i), start=1):
        g.log(0, off, vid)
    delivered = {"caused_by": "response_dropped", "response_received": True, "delivered": True,
                 "written_ms_before_reset": 2.5}
    g.proxy_event("la", "response_dropped", 14, 0, 3, 1, correlation_id=3)
    for cid, off in ((1, 1), (2, 2), (4, 6)):
        g.proxy_event("la", "response_discarded", 14, 0, off, 1, correlation_id=cid, detail=delivered)
    g.read_all(0, 0, 100)
    g.value_ids = {"duplicates": [unread, dropped], "indefinite_landed": [i]}
    g.causes = {unread: "la", dropped: "la", i: None}
    return g


def redeliveries() -> Golden:
    """A consumer crashes after reading 0..3 and committing 2; its successor re-reads 2..5."""
    g = Golden("redeliveries", guarantee="exactly-once", consumers=[{"group": "g"}],
               counts={"redeliveries": 2}, status="fail")
    vids = [g.acked(0, s, s * 10) for s in range(6)]
    g.event(0, "assign", 100, [0], pid=3000)
    for o in range(4):
        g.read(0, 0, o, vids[o], 110 + o, pid=3000)
    g.event(0, "crash", 120, pid=3000)
    g.event(0, "assign", 200, [0], pid=3001, incarnation=1)
    for o in range(2, 6):
        g.read(0, 0, o, vids[o], 210 + o, pid=3001, incarnation=1)
    g.value_ids = {"redeliveries": [vids[2], vids[3]]}
    return g


def aborted_reads() -> Golden:
    """A definitely failed send is in the committed log; an aborted txn value is read read_committed."""
    g = Golden("aborted_reads", guarantee="exactly-once",
               consumers=[{"group": "g", "isolation_level": "read_committed"}],
               counts={"aborted_reads": 2}, status="fail")
    a = g.send(0, 0, 0, offset=0, txn_id=0, txn_outcome="commit")
    g.log(0, 0, a)
    failed = g.send(0, 1, 10, outcome="fail", txn_id=0, txn_outcome="commit", error="NOT_ENOUGH_REPLICAS")
    g.log(0, 1, failed)
    aborted = g.send(0, 2, 20, offset=2, txn_id=1, txn_outcome="abort")
    g.log(0, 2, aborted, committed=False)
    g.event(0, "assign", 0, [0])
    g.read(0, 0, 0, a, 100)
    g.read(0, 0, 1, failed, 101, new_poll=False)
    g.read(0, 0, 2, aborted, 102, new_poll=False)   # isolation broken
    g.value_ids = {"aborted_reads": sorted([failed, aborted])}
    return g


def indefinite_landed() -> Golden:
    """A timed-out send that did land: informational, passes under every guarantee."""
    g = Golden("indefinite_landed", guarantee="exactly-once", counts={"indefinite_landed": 1}, status="pass")
    g.acked(0, 0, 0)
    i = g.send(0, 1, 10, outcome="indefinite")
    g.log(0, 1, i)
    g.acked(0, 2, 20)
    g.value_ids = {"indefinite_landed": [i]}
    return g


def inconsistent_offsets() -> Golden:
    """Two different values acked at p0/1; the log holds Y there and X elsewhere (X: seen at 1 and 2)."""
    g = Golden("inconsistent_offsets", status="fail",
               counts={"inconsistent_offsets": 1, "ack_offset_mismatch": 1, "observed_duplicates": 1})
    g.acked(0, 0, 0)
    x = g.send(0, 1, 10, offset=1)
    g.acked(1, 0, 15, offset=1)          # Y, acked at the same offset and logged there
    g.log(0, 2, x)
    g.value_ids = {"inconsistent_offsets": [x], "ack_offset_mismatch": [x], "observed_duplicates": [x]}
    return g


def ack_offset_mismatch() -> Golden:
    """X acked at p0/1 where the log has no record (though it continues); X sits at offset 3 (seen at 1 and 3)."""
    g = Golden("ack_offset_mismatch", counts={"ack_offset_mismatch": 1, "observed_duplicates": 1}, status="fail")
    g.acked(0, 0, 0)
    x = g.send(0, 1, 10, offset=1)
    g.acked(1, 0, 20, offset=2)
    g.log(0, 3, x)
    g.value_ids = {"ack_offset_mismatch": [x], "observed_duplicates": [x]}
    return g


def reordering() -> Golden:
    """Retries reorder a producer's values: seq 3 lands before seq 2."""
    g = Golden("reordering", guarantee="exactly-once", counts={"reordering": 1}, status="fail")
    vids = {}
    for seq, off in zip(range(5), [0, 1, 3, 2, 4]):
        vids[seq] = g.acked(0, seq, seq * 10, offset=off)
    g.value_ids = {"reordering": [vids[3]]}
    return g


def reordering_allowed() -> Golden:
    """The same history under at-least-once: ordering is not promised, passes."""
    g = reordering()
    g.name, g.guarantee, g.status = "reordering_allowed", "at-least-once", "pass"
    g.analysis_from = "reordering"
    return g


def poll_skips() -> Golden:
    """p1: consumer 0 jumps 1 -> 4 with no rebalance (2, 3 exist). p0: a jump excused by a rebalance.

    Its events have no `assigned` (as in runs written before the column): any rebalance event of the
    process between the two reads excuses the jump, as it did before issue 36.2."""
    g = Golden("poll_skips", consumers=[{"group": "g"}, {"group": "g"}], counts={"poll_skips": 1}, status="fail")
    p0 = [g.acked(0, s, s, partition=0) for s in range(7)]
    p1 = [g.acked(1, s, s, partition=1) for s in range(6)]
    g.event(0, "assign", 0, [0, 1])
    g.event(1, "assign", 0, [])
    for o in (0, 1):
        g.read(0, 1, o, p1[o], 10 + o)
    for o in (4, 5):
        g.read(0, 1, o, p1[o], 10 + o)        # skipped 2, 3
    for o in (2, 3):
        g.read(1, 1, o, p1[o], 30 + o)        # (someone else delivers them)
    for o in range(3):
        g.read(0, 0, o, p0[o], 15 + o)
    g.event(0, "revoke", 20, [0])
    g.event(0, "assign", 21, [0])
    for o in (3, 4):
        g.read(1, 0, o, p0[o], 22 + o)
    for o in (5, 6):
        g.read(0, 0, o, p0[o], 25 + o)        # jump 2 -> 5 excused by the rebalance
    g.value_ids = {"poll_skips": [p1[4]]}
    return g


def poll_rewinds() -> Golden:
    """One process reads 0..3 then 2..4 with no rebalance in between."""
    g = Golden("poll_rewinds", guarantee="exactly-once", consumers=[{"group": "g"}],
               counts={"poll_rewinds": 1, "redeliveries": 2}, status="fail")
    vids = [g.acked(0, s, s) for s in range(5)]
    g.event(0, "assign", 0, [0])
    for o in range(4):
        g.read(0, 0, o, vids[o], 10 + o)
    for o in range(2, 5):
        g.read(0, 0, o, vids[o], 20 + o)
    g.value_ids = {"poll_rewinds": [vids[2]], "redeliveries": [vids[2], vids[3]]}
    return g


def poll_skip_kept() -> Golden:
    """Issue 36.2: a skip is excused only when its partition left the process's assignment in between.

    Consumer 0 holds partitions 0 and 1. A cooperative rebalance takes partition 1 away (revoke [1],
    assigned [0]) and gives it back (assign [1], assigned [0, 1]); partition 0 stays throughout.
    Afterwards it jumps 2 -> 5 in partition 0 (a real skip: the partition never left it) and
    1 -> 4 in partition 1 (excused: revoked and assigned again). Consumer 1 reads the skipped records of
    partition 0, which consumer 0 kept: a `double_ownership` too (issue 45), which at-least-once allows.

    Code before the fix (excused every gap with any rebalance event of the process in between):
    0 poll_skips, validate PASS.
    """
    g = Golden("poll_skip_kept", consumers=[{"group": "g"}, {"group": "g"}],
               counts={"poll_skips": 1, "double_ownership": 1}, status="fail")
    p0 = [g.acked(0, s, s, partition=0) for s in range(7)]
    p1 = [g.acked(1, s, s, partition=1) for s in range(6)]
    g.event(0, "assign", 0, [0, 1], assigned=[0, 1])
    g.event(1, "assign", 0, [], assigned=[])
    g.poll(0, 0, [0, 1, 2], 10)
    g.poll(0, 1, [0, 1], 11)
    g.event(0, "revoke", 20, [1], assigned=[0])
    g.event(1, "assign", 20, [1], assigned=[1])
    g.poll(1, 1, [2, 3], 22)
    g.poll(1, 0, [3, 4], 23)  # (someone else delivers them)
    g.event(1, "revoke", 24, [1], assigned=[])
    g.event(0, "assign", 25, [1], assigned=[0, 1])
    g.poll(0, 0, [5, 6], 30)  # skipped 3, 4 in a partition it kept
    g.poll(0, 1, [4, 5], 31)  # skipped 2, 3 after partition 1 came back: excused
    g.value_ids = {"poll_skips": [p0[5]], "double_ownership": [p0[3]]}
    return g


def poll_inversion() -> Golden:
    """Issue 36.4: records a poll returned out of offset order (Jepsen's int-nonmonotonic-poll).

    One consumer, one partition: polls [0, 1, 2], [5, 6, 3, 4] (6 -> 3 inverted), [7, 8, 9], [10, 11, 10]
    (11 -> 10 inverted, offset 10 returned twice). Between polls it never goes back or skips: the
    highest offset of a poll is followed by the next one's lowest.

    Code before the fix (ordered a poll's records by offset): the second poll gave nothing at all,
    the fourth a poll_rewinds (10 -> 10) and a redelivery; validate PASS (at-least-once allows rewinds).
    """
    g = Golden("poll_inversion", consumers=[{"group": "g"}], counts={"poll_inversion": 2, "redeliveries": 1},
               status="fail")
    vids = [g.acked(0, s, s) for s in range(12)]
    g.event(0, "assign", 0, [0], assigned=[0])
    for i, offsets in enumerate(([0, 1, 2], [5, 6, 3, 4], [7, 8, 9], [10, 11, 10])):
        g.poll(0, 0, offsets, 10 + 10 * i)
    g.value_ids = {"poll_inversion": [vids[3], vids[10]], "redeliveries": [vids[10]]}
    return g


def unknown_values() -> Golden:
    """A value of this run sits in the log but no producer recorded sending it."""
    g = Golden("unknown_values", counts={"unknown_values": 1}, status="fail")
    g.acked(0, 0, 0)
    ghost = make_value_id(7, 0)
    g.log(0, 1, ghost)
    g.acked(0, 1, 10)
    g.value_ids = {"unknown_values": [ghost]}
    return g


def acks0_offsets() -> Golden:
    """acks=0: librdkafka's reports carry offsets no broker assigned (0, 1, 2, ... per batch).

    They must never count as acknowledged offsets: the bogus offsets collide with the real ones,
    which would read as inconsistent offsets and ack/offset mismatches. Only the value that is
    absent from the log counts, as lost_unconfirmed.
    """
    g = Golden("acks0_offsets", guarantee="at-most-once", producers=[{"acks": "0"}], consumers=[{"group": "g"}],
               counts={"lost_unconfirmed": 1}, status="pass")
    g.event(0, "assign", 0, [0])
    vids = []
    for seq in range(6):
        # The ledger holds what librdkafka reported: offsets counting from 0 again for the second batch.
        vids.append(g.send(0, seq, seq * 10, offset=seq % 3))
    for o, v in enumerate(vids[:2] + vids[3:]):
        g.log(0, 10 + o, v)                     # the real offsets: 10..14; seq 2 never reached the log
    g.read_all(0, 0, 100)
    g.value_ids = {"lost_unconfirmed": [vids[2]]}
    return g


def dirty_reads() -> Golden:
    """The clean_txn history claimed exactly-once: its read_uncommitted consumer processed rolled-back values."""
    g = clean_txn()
    g.name, g.guarantee, g.status = "dirty_reads", "exactly-once", "fail"
    g.analysis_from = "clean_txn"
    return g


def undelivered_attempts() -> Golden:
    """The E6 incident: the partition's only replica is down from 1 s to 3 s; sends meanwhile time out.

    Every acked value is in the log and read (the guarantee holds), but the application's
    values sent during the outage never reach its consumer: the delivery claim catches them,
    and each names the window in which the partition had no live leader.
    """
    g = Golden("undelivered_attempts", consumers=[{"group": "g"}], claims={"delivery": {"within_s": 30}},
               counts={"undelivered_attempts": 4}, status="fail")
    g.fault("f1", "stop", 1000, 3000)
    g.event(0, "assign", 0, [0])
    lost_to_app = []
    for seq in range(8):
        t = seq * 500
        if 1000 <= t < 3000 and seq != 5:
            lost_to_app.append(g.send(0, seq, t, outcome="indefinite", latency_ms=400, error="_MSG_TIMED_OUT"))
        elif seq == 5:
            lost_to_app.append(g.send(0, seq, t, outcome="fail", latency_ms=400, error="_MSG_TIMED_OUT"))
        else:
            vid = g.acked(0, seq, t)
            g.read(0, 0, g._next_offset[0] - 1, vid, t + 20)
    for t in range(0, 4500, 500):
        down = 1000 <= t < 3000
        g.snapshot(t, 0, -1 if down else 1, [] if down else [1], replicas=[1], live=[2, 3] if down else [1, 2, 3])
    g.value_ids = {"undelivered_attempts": sorted(lost_to_app)}
    return g


def undelivered_fixed() -> Golden:
    """The fix: the same claim, and every attempted value reaches the consumer; passes."""
    g = Golden("undelivered_fixed", consumers=[{"group": "g"}], claims={"delivery": {"within_s": 30}}, status="pass")
    g.fault("f1", "stop", 1000, 3000)
    g.event(0, "assign", 0, [0])
    for seq in range(8):
        vid = g.acked(0, seq, seq * 500, latency_ms=300 if 1000 <= seq * 500 < 3000 else 5)
        g.read(0, 0, g._next_offset[0] - 1, vid, seq * 500 + 400)
    g.exercised = [{"check": "leader_change", "partition": 0}]
    for t, leader in ((0, 1), (500, 1), (1500, 2), (3500, 2)):
        g.snapshot(t, 0, leader, [1, 2, 3] if t < 1000 else [2, 3])
    return g


def reprocessed() -> Golden:
    """The duplicates history claimed `processed_once` under at-least-once: the copy in the log is allowed,
    but the consumer processed the value twice (both copies), which the claim forbids."""
    g = duplicates()
    g.name, g.guarantee, g.claims = "reprocessed", "at-least-once", {"processed_once": {}}
    g.counts = {"duplicates": 1, "reprocessed": 1}
    g.value_ids = {"duplicates": list(g.value_ids["duplicates"]), "reprocessed": list(g.value_ids["duplicates"])}
    return g


def processed_once() -> Golden:
    """The same claim, and an idempotent application consumer (run/processed.py's reads: no partition or
    offset): the value is in the log twice but listed as processed once; passes."""
    g = duplicates()
    g.name, g.guarantee, g.claims, g.status = "processed_once", "at-least-once", {"processed_once": {}}, "pass"
    seen: set[int] = set()
    reads = []
    for r in g.rows["reads"]:
        if r["value_id"] not in seen:  # the consumer skips an id it processed before
            seen.add(r["value_id"])
            reads.append({**r, "partition": None, "offset": None, "poll_seq": None, "generation": -1})
    g.rows["reads"] = reads
    return g


def fault_without_effect() -> Golden:
    """A lost-ack rule that never fired and a leader change that never happened: the run tested nothing.

    The history itself is clean; the verdict must be error (not a pass), naming both.
    """
    g = Golden("fault_without_effect", guarantee="exactly-once", status="error",
               exercised=[{"check": "leader_change", "partition": 0}])
    g.fault("la", "lost_ack", 10, 50, target="all", effect={"proxy_fired": 0})
    for seq in range(5):
        g.acked(0, seq, seq * 10)
    for t in (0, 20, 40):
        g.snapshot(t, 0, 1, [1, 2, 3])
    return g


def clock_timestamps() -> Golden:
    """The leader's clock an hour ahead for 2 s (LogAppendTime): its records are stamped an hour late, and
    the first record after the heal about an hour earlier than the one before it (3,599,900 ms). Record 35
    is stamped 1 s early (900 ms before record 34). Nothing is lost: a pass, with two steps back."""
    g = Golden("clock_timestamps")
    g.fault("ck", "clock_skew", 1000, 3000, params={"offset_s": 3600},
            effect={"clocks": {"1": {"offset_s": 3600.0, "faketime_loaded": True}}})
    wall = 1_800_000_000_000
    for seq in range(40):
        t = seq * 100
        skew = 3_600_000 if 1000 <= t < 3000 else 0
        vid = g.send(0, seq, t, offset=seq)
        g.log(0, seq, vid, timestamp_ms=wall + t + skew - (1000 if seq == 35 else 0))
    return g


def incomplete_manifest() -> Golden:
    """A clean history whose manifest says the run was interrupted: error, never pass."""
    g = detect_missing()
    g.name, g.expect, g.manifest_status, g.status = "incomplete_manifest", {"outcome": "pass", "detect": []}, "incomplete", "error"
    g.analysis_from = "detect_missing"
    return g


# --------------------------------------------------------------------------- issue 36: verdict truth

def many_values_at_one_offset() -> Golden:
    """Ten values acked at p0/0 (ten unclean elections in a row); the log holds the tenth there.

    One `ack_offset_mismatch` per acked value the log does not hold there (9), one
    `inconsistent_offsets` row whose value list names all ten, and the nine are lost.
    Before issue 36 (min/max per offset) the job gave 1 mismatch (the smallest value only) and the
    value list [first, tenth]: lost 9, ack_offset_mismatch 1, inconsistent_offsets 1; fail.
    """
    g = Golden("many_values_at_one_offset", producers=[{"acks": "all"}] * 10, status="fail",
               counts={"lost": 9, "ack_offset_mismatch": 9, "inconsistent_offsets": 1})
    vids = [g.send(p, 0, 10 * p, offset=0) for p in range(10)]
    g.log(0, 0, vids[-1])
    g.acked(0, 1, 200)
    g.value_ids = {"lost": vids[:9], "ack_offset_mismatch": vids[:9], "inconsistent_offsets": [vids[0]]}
    return g


def empty_run() -> Golden:
    """Nothing was sent: no sends, an empty topic drained completely, no consumers. Nothing to judge:
    error ("nothing to judge: 0 sends"), never a pass. Before issue 36: pass (every count 0)."""
    g = Golden("empty_run", status="error")
    g.partition_overrides[0] = {}
    return g


def consumers_read_nothing() -> Golden:
    """Five acked values in the log and a consumer that started and read nothing at all, under
    at-most-once (which tolerates `not_delivered`): nothing was judged on the consumer side, error.
    Before issue 36: pass (not_delivered 5, allowed)."""
    g = Golden("consumers_read_nothing", guarantee="at-most-once", consumers=[{"group": "g"}],
               counts={"not_delivered": 5}, status="error")
    g.event(0, "start", 0)
    vids = [g.acked(0, s, s * 10) for s in range(5)]
    g.value_ids = {"not_delivered": vids}
    return g


def observed_duplicates() -> Golden:
    """d's first write (offset 1) lost its ack, the retry was acked at 2 and the consumer read both
    copies; then an unclean election truncated the log to [0, 2), so the final log holds d once.
    exactly-once: fail (observed_duplicates 1). Before issue 36: every count 0, pass."""
    g = Golden("observed_duplicates", guarantee="exactly-once", consumers=[{"group": "g"}],
               counts={"observed_duplicates": 1}, status="fail")
    g.event(0, "assign", 0, [0])
    a = g.acked(0, 0, 0)
    d = g.send(0, 1, 10, offset=2)
    g.log(0, 1, d)
    g.read(0, 0, 0, a, 100)
    g.read(0, 0, 1, d, 101, new_poll=False)
    g.read(0, 0, 2, d, 102, new_poll=False)
    g.value_ids = {"observed_duplicates": [d]}
    return g


def control_also_found() -> Golden:
    """The `lost` history as a negative control claiming exactly-once that must detect `lost`: it passes,
    and its ack_offset_mismatch and inconsistent_offsets, which the guarantee forbids, are reported as
    "also found (forbidden by the guarantee)". Before issue 36: pass, both printed as `allowed`."""
    g = lost()
    g.name, g.guarantee, g.status = "control_also_found", "exactly-once", "pass"
    g.expect = {"outcome": "detect", "detect": ["lost"]}
    g.analysis_from = "lost"
    return g


def violation_not_exercised() -> Golden:
    """The `lost` history whose kill fault left no node state after the injection (effect unconfirmed):
    the loss is a violation all the same, fail, with the unconfirmed fault named beside it.
    Before issue 36: error ("not exercised: ... the run tested nothing it claims"), the loss underneath."""
    g = lost()
    g.name = "violation_not_exercised"
    g.rows["faults"][0]["effect"] = json.dumps({})
    return g


GOLDENS: dict[str, Callable[[], Golden]] = {f.__name__: f for f in (
    clean, clean_txn, lost, lost_detected, detect_missing, lost_unconfirmed, unseen, not_delivered, duplicates,
    duplicates_allowed, lost_ack_attribution, redeliveries, aborted_reads, indefinite_landed, inconsistent_offsets, ack_offset_mismatch,
    reordering, reordering_allowed, poll_skips, poll_rewinds, unknown_values, incomplete_manifest,
    acks0_offsets, dirty_reads, undelivered_attempts, undelivered_fixed, fault_without_effect, clock_timestamps,
)}


# Issue 36.2 and 36.4 (registered apart from the list above, which other changes extend too).
GOLDENS.update({f.__name__: f for f in (poll_skip_kept, poll_inversion)})
# Issue 39: an application's claim about processing.
GOLDENS.update({f.__name__: f for f in (reprocessed, processed_once)})

# Issue 36.1, .3, .5, .7 and .8.
GOLDENS.update({f.__name__: f for f in (
    many_values_at_one_offset, empty_run, consumers_read_nothing, observed_duplicates, control_also_found,
    violation_not_exercised,
)})


def app_answer_before_ack() -> Golden:
    """An application run (issue 39), the E6 negative control: six sign-ups accepted (HTTP 202), sends with
    no partition or offset (the answer names none), no consumer side exposed; seq 2 and 3 never reached
    the log: `lost`, detected. The checks the application's data cannot show are not applicable, with
    the manifest's reasons, never passed."""
    from kafkaproof.run.app_ledger import not_applicable
    g = Golden("app_answer_before_ack", expect={"outcome": "detect", "detect": ["lost"]}, counts={"lost": 2},
               producers=[], application={"not_applicable": not_applicable(None)})
    offset = 0
    for seq in range(6):
        vid = g.send(0, seq, seq * 100, partition=-1)
        g.rows["sends"][-1].update(offset=None, producer_pid=None)
        if seq in (2, 3):
            g.value_ids.setdefault("lost", []).append(vid)
            continue
        g.log(0, offset, vid)
        offset += 1
    return g


GOLDENS[app_answer_before_ack.__name__] = app_answer_before_ack


def _pipeline_inputs(g: Golden, partitions: int, per_partition: int) -> dict[int, list[int]]:
    """The input producer's acked values: `per_partition` in each input partition; partition -> value ids."""
    ids: dict[int, list[int]] = {}
    for p in range(partitions):
        for i in range(per_partition):
            ids.setdefault(p, []).append(g.acked(0, p * per_partition + i, 10 * (p * per_partition + i), partition=p))
    return ids


def pipeline_clean() -> Golden:
    """Issue 43: two copiers, each over its own input partition: a committed transaction, an aborted one and
    its retry committed; offsets committed with each committed transaction; a read_committed reader of the
    output reads every committed output after its commit and nothing of the aborted transaction; passes."""
    g = Golden("pipeline_clean", guarantee="exactly-once", claims={"exactly_once_pipeline": {}})
    ins = _pipeline_inputs(g, 2, 4)
    txn = 0
    for p, (a, b, c, d) in ins.items():
        t = 1000 + 1000 * p
        first = g.copy(txn, p, "committed", t, [a, b], commit=2)
        g.copy(txn + 1, p, "aborted", t + 100, [c, d])
        retry = g.copy(txn + 2, p, "committed", t + 200, [c, d], commit=4)
        g.committed_offset(p, 4)
        for vid, offset in {**first, **retry}.items():
            g.output_read(0, p, offset, vid, t + 500)
        txn += 3
    return g


def pipeline_every_kind() -> Golden:
    """Issue 43: one copier per input partition, each showing one pipeline anomaly (partition = copier):
    0 eos_lost (a committed transaction's second output is not in the output log); 1 eos_duplicated (a second
    committed transaction copied the value again); 2 eos_aborted_read (the read_committed reader read the
    aborted attempt); 3 precommitted_read (read 20 ms before the commit was requested); 4
    offsets_outputs_disagree twice (the offsets skipped input 0, whose only transaction aborted; input 2's
    output committed but its offset not); 5 hanging_transaction (begun, an output written, never ended, no
    marker); 6 eos_dirty_read (a read_uncommitted reader read the aborted attempt: shown, not a failure)."""
    g = Golden("pipeline_every_kind", claims={"exactly_once_pipeline": {}}, status="fail")
    ins = _pipeline_inputs(g, 7, 3)
    rc = {}  # the read_committed reader: every committed output, after its commit (unless said otherwise)
    # 0: lost output
    rc.update({(0, o): v for v, o in g.copy(0, 0, "committed", 1000, ins[0][:2], commit=2, drop=(ins[0][1],)).items()
               if v != ins[0][1]})
    g.committed_offset(0, 2)
    # 1: copied twice, by two committed transactions (a zombie's retry)
    rc.update({(1, o): v for v, o in g.copy(1, 1, "committed", 1000, ins[1][:1], commit=1).items()})
    rc.update({(1, o): v for v, o in g.copy(2, 1, "committed", 1200, ins[1][:1], commit=1, epoch=1).items()})
    g.committed_offset(1, 1)
    # 2: the aborted attempt read by the read_committed reader
    aborted2 = g.copy(3, 2, "aborted", 1000, ins[2][:1])
    rc.update({(2, o): v for v, o in g.copy(4, 2, "committed", 1200, ins[2][:1], commit=1).items()})
    g.committed_offset(2, 1)
    # 3: read before the commit was requested (commit requested at 1050)
    early = g.copy(5, 3, "committed", 1000, ins[3][:1], commit=1)
    g.committed_offset(3, 1)
    # 4: offsets past an input no committed transaction output; an output committed whose offset was not
    g.copy(6, 4, "aborted", 1000, ins[4][:1])
    rc.update({(4, o): v for v, o in g.copy(7, 4, "committed", 1200, ins[4][1:2], commit=2).items()})
    rc.update({(4, o): v for v, o in g.copy(8, 4, "committed", 1400, ins[4][2:3]).items()})
    g.committed_offset(4, 2)
    # 5: a transaction that never ended after one committed
    rc.update({(5, o): v for v, o in g.copy(9, 5, "committed", 1000, ins[5][:1], commit=1).items()})
    g.copy(10, 5, "indefinite", 1200, ins[5][1:2], ended=False)
    g.committed_offset(5, 1)
    # 6: the aborted attempt read by a read_uncommitted reader (the negative control), and the retry
    aborted6 = g.copy(11, 6, "aborted", 1000, ins[6][:1])
    retry6 = g.copy(12, 6, "committed", 1200, ins[6][:1], commit=1)
    rc.update({(6, o): v for v, o in retry6.items()})
    g.committed_offset(6, 1)
    for (p, o), v in sorted(rc.items()):
        g.output_read(0, p, o, v, 3000)
    (v2, o2), = aborted2.items()
    g.output_read(0, 2, o2, v2, 3000)
    (v3, o3), = early.items()
    g.output_read(0, 3, o3, v3, 1030)
    (v6, o6), = aborted6.items()
    g.output_read(1, 6, o6, v6, 3000, isolation="read_uncommitted")
    g.output_read(1, 6, retry6[v6], v6, 3001, isolation="read_uncommitted")
    g.value_ids = {"eos_lost": [ins[0][1]], "eos_duplicated": [ins[1][0]], "eos_aborted_read": [v2],
                   "precommitted_read": [v3], "offsets_outputs_disagree": [ins[4][0], ins[4][2]],
                   "hanging_transaction": [ins[5][1]], "eos_dirty_read": [v6]}
    g.counts = {k: len(v) for k, v in g.value_ids.items()}
    return g


def pipeline_every_kind_detected() -> Golden:
    """The every-kind history as a negative control expecting each pipeline kind: passes."""
    g = pipeline_every_kind()
    g.name, g.status, g.analysis_from = "pipeline_every_kind_detected", "pass", "pipeline_every_kind"
    g.expect = {"outcome": "detect", "detect": sorted(g.counts)}
    return g


def pipeline_unclaimed() -> Golden:
    """The every-kind history without the claim: the guarantee alone judges the input side; the pipeline's
    kinds are counted and shown, and only the claim forbids them; passes."""
    g = pipeline_every_kind()
    g.name, g.status, g.analysis_from, g.claims = "pipeline_unclaimed", "pass", "pipeline_every_kind", {}
    return g


def pipeline_not_applicable() -> Golden:
    """The clean history (no pipeline ledger) claiming exactly_once_pipeline: the claim cannot be judged, its
    kinds are not applicable and the run is never a pass: error."""
    g = clean()
    g.name, g.status, g.analysis_from, g.claims = "pipeline_not_applicable", "error", "clean", {
        "exactly_once_pipeline": {}}
    return g


# Issue 43 step 1: two analysed pipeline goldens, the other two reuse an analysis.
GOLDENS.update({f.__name__: f for f in (
    pipeline_clean, pipeline_every_kind, pipeline_every_kind_detected, pipeline_unclaimed, pipeline_not_applicable,
)})


def write_all(root: Path) -> dict[str, Path]:
    """Write every golden run under `root`; returns name -> run dir."""
    return {name: build().write(root / name) for name, build in GOLDENS.items()}


def needs_analysis(goldens: dict[str, Golden]) -> list[str]:
    """Goldens whose ledger is their own (the others reuse the analysis of `analysis_from`)."""
    return [name for name, g in goldens.items() if g.analysis_from is None]


# Issue 46: the share-group goldens (tests/golden_share.py: this file is long enough).
from golden_share import SHARE_GOLDENS  # noqa: E402 - it builds on Golden above

GOLDENS.update(SHARE_GOLDENS)

# Issue 36.6.
GOLDENS[reset_in_flight_attribution.__name__] = reset_in_flight_attribution
GOLDENS[unread_answer_attribution.__name__] = unread_answer_attribution


def together_skewed() -> Golden:
    """Issue 45.2: a `together` group (a kill and a pause) whose faults began 1,500 ms apart (and whose third
    fault was never injected): `faults_together` does not hold, so the clean history is an error, not a pass."""
    g = Golden("together_skewed", status="error")
    g.fault("k", "kill", 100, 900, target="node:1", effect={"node_states": {"1": "dead"}, "group": 0, "group_size": 3})
    g.fault("p", "pause", 1600, 2400, target="node:2", effect={"node_states": {"2": "paused"}, "group": 0,
                                                                "group_size": 3})
    for seq in range(5):
        g.acked(0, seq, seq * 10)
    return g


GOLDENS[together_skewed.__name__] = together_skewed


# Issue 43: the delayed-Produce and hanging-transaction histories (tests/golden_pipeline.py).
from golden_pipeline import PIPELINE_GOLDENS  # noqa: E402 - it builds on Golden above

GOLDENS.update(PIPELINE_GOLDENS)
