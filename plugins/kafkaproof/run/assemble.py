"""Assembling the ledger: the workers' streams, the fault log and the proxies' events into Parquet tables."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Mapping

import pyarrow as pa

from ..cluster.backend import ClusterBackend
from ..spec import ledger
from ..spec.clients import producer_settings
from ..spec.fault_families import heal_fields
from .java_driver import COMPLETIONS_TSV, EVENTS_TSV, READS_TSV, SENDS_TSV, TXNS_TSV, read_tsv
from .workload import COMPLETION_STREAM, SEND_STREAM, TXN_STREAM, classify_delivery, read_stream

log = logging.getLogger(__name__)

# Where a run's fault log and its proxies' events are kept in its `work/` directory.
FAULT_LOG = "faults.jsonl"
PROXY_EVENTS = "proxy-events.jsonl"


def assemble_sends(work: Path, producers: int, audit_value_ids: set[int], offsets_from_broker: bool = True) -> pa.Table:
    """Join each producer's send and completion streams into ledger `sends` rows.

    Without `offsets_from_broker` (acks=0: no broker assigned the offsets in the delivery
    reports) every offset is null: the ledger never records an offset no broker confirmed.
    """
    import pandas as pd
    frames = []
    for i in range(producers):
        s, c, t = (table.to_pandas() for table in producer_streams(work, i))
        c = c.drop_duplicates("value_id", keep="first")
        df = s.merge(c, on="value_id", how="outer")
        df["producer"] = i
        df["seq"] = df["value_id"] - (i << ledger.VALUE_ID_PRODUCER_SHIFT)
        # Values in the log that this producer never got to record (it died): in flight, so indefinite.
        known = set(df["value_id"].tolist())
        orphans = sorted(v for v in audit_value_ids if v >> ledger.VALUE_ID_PRODUCER_SHIFT == i and v not in known)
        if orphans:
            df = pd.concat([df, pd.DataFrame({"value_id": orphans, "producer": i,
                                              "seq": [v - (i << ledger.VALUE_ID_PRODUCER_SHIFT) for v in orphans]})],
                           ignore_index=True)
        df["partition"] = df["partition"].fillna(-1)
        # The Java driver classifies its exceptions itself (docs/java-client.md); librdkafka's errors here.
        given = df["outcome"] if "outcome" in df else [None] * len(df)
        df["outcome"] = [("indefinite" if pd.isna(ts) else o if isinstance(o, str)
                          else classify_delivery(None if pd.isna(n) else n, int(p)))
                         for n, p, ts, o in zip(df["error_name"], df["partition"], df["complete_ns"], given)]
        df.loc[df["outcome"] != "ok", "offset"] = None
        if not offsets_from_broker:
            df["offset"] = None
        if len(t):
            df = df.merge(t[["txn_id", "txn_outcome"]], on="txn_id", how="left")
        else:
            df["txn_outcome"] = None
        frames.append(df)
    if not frames:
        return ledger.SENDS.empty_table()
    df = pd.concat(frames, ignore_index=True).sort_values("value_id")
    if "error_message" not in df:
        df["error_message"] = None
    df["producer_pid"] = df["producer_pid"].fillna(-1)
    df["intended_ns"] = df["intended_ns"].fillna(-1)
    df["send_ns"] = df["send_ns"].fillna(-1)
    cols = {f.name: df[f.name] for f in ledger.SENDS}
    return pa.Table.from_pandas(pd.DataFrame(cols), schema=ledger.SENDS, preserve_index=False)


def assemble_ledger(run_dir: Path, data: Mapping[str, Any], audit_rows: list[dict], snapshots: list[dict],
                    topic_id: str | None = None, *, sends: pa.Table | None = None,
                    reads: pa.Table | None = None) -> dict:
    """Write a run's ledger tables from what its workers streamed into `work/` (and its fault log and proxy
    events there), the audit rows of its drain and the cluster snapshots; returns the row counts.
    `topic_id`: the run topic's id, which names it in proxy events that know only the id. `sends` and
    `reads` replace the workers' (an application run: its HTTP requests and what it processed)."""
    work = Path(run_dir) / "work"
    audit_ids = {r["value_id"] for r in audit_rows if r["value_id"] >= 0}
    counts = {}
    if sends is None:
        sends = assemble_sends(work, data["producers"]["count"], audit_ids,
                               producer_settings(data["producers"], 0)["offsets_from_broker"])
    ledger.write_arrow(run_dir, "sends", sends)
    worker_reads, events = assemble_consumer_tables(work)
    reads = worker_reads if reads is None else reads
    ledger.write_arrow(run_dir, "reads", reads)
    ledger.write_arrow(run_dir, "consumer_events", events)
    counts["sends"], counts["reads"], counts["consumer_events"] = sends.num_rows, reads.num_rows, events.num_rows
    counts["audit"] = ledger.write_table(run_dir, "audit", audit_rows)
    faults = fault_rows(work / FAULT_LOG)
    counts["faults"] = ledger.write_table(run_dir, "faults", faults)
    proxy_events = []
    if (work / PROXY_EVENTS).exists():
        from ..proxy import read_events
        proxy_events = proxy_event_rows(read_events(work / PROXY_EVENTS), {f["fault_id"] for f in faults},
                                        {topic_id: data["topic"]["name"]} if topic_id else None)
    counts["proxy_events"] = ledger.write_table(run_dir, "proxy_events", proxy_events)
    counts["cluster_snapshots"] = ledger.write_table(run_dir, "cluster_snapshots", snapshots)
    outcomes = sends.column("outcome").to_pylist()
    counts.update({f"sends_{o}": outcomes.count(o) for o in ledger.SEND_OUTCOMES})
    return counts


def producer_streams(work: Path, index: int) -> tuple[pa.Table, pa.Table, pa.Table]:
    """A producer's sends, completions and transactions, as the Python worker (Arrow streams) or the
    Java driver (TSV; its completions carry their own `outcome`) wrote them."""
    if (work / f"producer-{index}.sends.tsv").exists():
        return (read_tsv(work / f"producer-{index}.sends.tsv", SENDS_TSV),
                read_tsv(work / f"producer-{index}.completions.tsv", COMPLETIONS_TSV),
                read_tsv(work / f"producer-{index}.txns.tsv", TXNS_TSV))
    return (read_stream(work / f"producer-{index}.sends.arrow", SEND_STREAM),
            read_stream(work / f"producer-{index}.completions.arrow", COMPLETION_STREAM),
            read_stream(work / f"producer-{index}.txns.arrow", TXN_STREAM))


def assemble_consumer_tables(work: Path) -> tuple[pa.Table, pa.Table]:
    """Every consumer incarnation's reads and events (Arrow streams of the Python worker, TSV of the Java one)."""
    reads = [read_stream(p, ledger.READS) for p in sorted(work.glob("consumer-*.reads.arrow"))]
    reads += [read_tsv(p, READS_TSV) for p in sorted(work.glob("consumer-*.reads.tsv"))]
    events = [read_stream(p, ledger.CONSUMER_EVENTS) for p in sorted(work.glob("consumer-*.events.arrow"))]
    events += [read_tsv(p, EVENTS_TSV) for p in sorted(work.glob("consumer-*.events.tsv"))]
    return (pa.concat_tables(reads) if reads else ledger.READS.empty_table(),
            pa.concat_tables(events) if events else ledger.CONSUMER_EVENTS.empty_table())


def fault_rows(fault_log: Path) -> list[dict]:
    """Pair inject and heal events of the fault log into ledger `faults` rows."""
    if not fault_log.exists():
        return []
    rows: dict[str, dict] = {}
    effects: dict[str, dict] = {}
    for line in fault_log.read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "inject":
            rows[e["fault_id"]] = {"fault_id": e["fault_id"], "kind": e["kind"], "target": e["target"],
                                   "nodes": e["nodes"], "params": json.dumps(e["params"], sort_keys=True),
                                   "start_ns": e["mono_ns"], "start_wall": e["wall"], "heal_ns": None, "heal_wall": None,
                                   "proxy_rule": json.dumps(e["rule"], sort_keys=True) if e.get("rule") else None,
                                   "proxy_fired": None}
            effects[e["fault_id"]] = {**(e.get("effect") or {}), **(e.get("annotations") or {})}
        elif e["event"] == "heal" and e["fault_id"] in rows:
            rows[e["fault_id"]].update(heal_ns=e["mono_ns"], heal_wall=e["wall"])
            if e.get("proxy_fired") is not None:
                rows[e["fault_id"]]["proxy_fired"] = e["proxy_fired"]
            effects[e["fault_id"]].update({k: e[k] for k in HEAL_EFFECTS if e.get(k) is not None})
    for fid, row in rows.items():
        row["effect"] = json.dumps(effects[fid], sort_keys=True)
    return sorted(rows.values(), key=lambda r: r["start_ns"])


# What a heal record says the fault did while active: the heal fields of every family (spec/fault_families.py).
HEAL_EFFECTS = heal_fields()


def collect_proxy_events(cluster: ClusterBackend, since_ns: int, dest: Path) -> int:
    """Copy the events the cluster's fault proxies logged since `since_ns` into `dest` (JSON lines, by time)."""
    from ..proxy import read_events
    events = []
    for nid in cluster.proxy_ids():
        path = cluster.proxy_events_path(nid)
        if path.exists():
            events += [e for e in read_events(path) if e.get("ts_ns", 0) >= since_ns]
    events.sort(key=lambda e: e.get("ts_ns", 0))
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w") as f:
        for e in events:
            f.write(json.dumps(e, sort_keys=True) + "\n")
    return len(events)


def proxy_event_rows(events: list[dict], fault_ids: set[str], topic_ids: Mapping[str, str] | None = None) -> list[dict]:
    """Ledger `proxy_events` rows: one per action a proxy took on a request (its `fault` events).

    A topic a proxy knew only by its id (Produce and Fetch v13+ name topics by id, and a proxy
    learns names only from the Metadata answers it carries) is named from `topic_ids` (id -> name,
    e.g. the run topic's) or from another event of the run that names both."""
    names = dict(topic_ids or {})
    for e in events:
        for t in [*(e.get("topics") or []), *((e.get("detail") or {}).get("results") or [])]:
            if t.get("topic_id") and t.get("topic") and t["topic"] != t["topic_id"]:
                names.setdefault(t["topic_id"], t["topic"])
    rows = []
    for e in events:
        if e.get("event") != "fault":
            continue
        detail = e.get("detail") or {}
        topics = e.get("topics") or []
        topic = topics[0]["topic"] if topics else None
        partitions = list(topics[0]["partitions"]) if topics else []
        base_offsets = None
        counts = topics[0].get("record_counts") if topics else None
        results = detail.get("results")
        if results and not topics:
            # The request's topics are unknown (the proxy no longer had its frame): its answer names them.
            topic = results[0].get("topic")
            partitions = [r["partition"] for r in results if r.get("topic") == topic]
        if results is not None:
            # What the broker wrote for the request whose answer was dropped, replaced or
            # discarded: its base offset per partition, -1 where it wrote nothing (it answered an error).
            # The proxy may have learned the topic's name between the request and its answer
            # (one names it by id, the other by name): the id, where both have it, decides.
            same = {topic, topics[0].get("topic_id") if topics else None} - {None}
            by_part = {r["partition"]: (r["base_offset"] if r.get("error_code") == 0 else -1)
                       for r in results if r.get("topic") in same or r.get("topic_id") in same}
            base_offsets = [by_part.get(p, -1) for p in partitions]
        rule_id = e.get("rule_id")
        rows.append({
            "ts_ns": e["ts_ns"], "fault_id": rule_id if rule_id in fault_ids else None, "rule_id": rule_id,
            "broker": e.get("broker"), "proxy": e.get("proxy"), "conn": e.get("conn"),
            "client_id": e.get("client_id"), "api": e.get("api"), "api_key": e.get("api_key"),
            "api_version": e.get("api_version"), "correlation_id": e.get("correlation_id"),
            "action": e.get("action"), "phase": e.get("phase"), "topic": names.get(topic, topic),
            "partitions": partitions,
            "base_offsets": base_offsets,
            "error_code": detail.get("error_code"), "delay_ms": detail.get("delay_ms"),
            "detail": json.dumps(detail, sort_keys=True) if detail else None,
            "record_counts": list(counts) if counts and len(counts) == len(partitions) else None,
        })
    return rows
