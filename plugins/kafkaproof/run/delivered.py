"""What the fault proxies handed the application's consumers in Fetch answers (issue 39): "delivered", measured
passively beside what the consumer side says it "processed".

With fault proxies in front of the brokers, the run turns each proxy's delivery log on (`proxy/deliveries.py`,
only the run's topic) before it starts the services, and reads it once they are stopped. Only the
application's consumers fetch through the proxies (kafkaproof's own drain and snapshots go to the brokers
directly), so what the log holds is what the consumer group was handed. Each record's identity is read
with the application's identity reader; `delivered.parquet` has one row per record handed over, and the
manifest's `application.delivered` compares the events accepted, delivered and processed. Without
proxies nothing is measured, and the manifest says so ("not measured (no proxy)"), never a zero.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Iterable, Mapping

import pyarrow as pa

from ..proxy.deliveries import DEFAULT_LIMIT, unb64
from ..spec import ledger
from .app_ledger import EventDecoder

log = logging.getLogger(__name__)

NOT_MEASURED_NO_PROXY = "not measured (no proxy)"
NOT_READ = "not measured (the run ended before the proxies' delivery logs were read)"
SOURCE = "the fault proxies' Fetch answers to the application's consumers"
EXAMPLES = 5


def not_measured(reason: str) -> dict[str, Any]:
    """The manifest's `application.delivered` when nothing was measured, with the reason."""
    return {"measured": False, "reason": reason}


class DeliveryRecorder:
    """The delivery logs of a cluster's fault proxies for one run: `start` before the services start,
    `collect` once they are stopped (each log is then cleared). A proxy that cannot be reached is recorded
    in `problems`, never fatal to the run: the measure then says it is incomplete."""

    def __init__(self, cluster: Any, topic: str, topic_id: str | None = None, limit: int = DEFAULT_LIMIT) -> None:
        """`topic_id`: the topic's id, by which a proxy that saw no Metadata answer naming it knows it (Fetch
        v13+ names topics by id, and a client may ask another broker's proxy for metadata)."""
        self.cluster, self.topic, self.limit = cluster, topic, limit
        self.topic_ids = {topic_id: topic} if topic_id else {}
        self.problems: dict[str, str] = {}
        self.started: list[int] = []

    def start(self) -> None:
        """Turn every proxy's delivery log on (anew), for the run's topic only."""
        for nid in self.cluster.proxy_ids():
            try:
                client = self.cluster.proxy_control(nid)
                try:
                    client.deliveries_start(limit=self.limit, topics=[self.topic, *self.topic_ids])
                finally:
                    client.close()
                self.started.append(nid)
            except Exception as e:  # noqa: BLE001 - measured without this proxy, and said so
                self.problems[f"broker {nid}"] = f"delivery log not started: {e}"
                log.warning("the delivery log of the proxy of broker %d did not start: %s", nid, e)

    def collect(self) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        """Every started proxy's log: (its records, each with `broker`; each proxy's summary by broker)."""
        records: list[dict[str, Any]] = []
        summaries: dict[str, dict[str, Any]] = {}
        for nid in self.started:
            try:
                client = self.cluster.proxy_control(nid)
                try:
                    got = client.deliveries()
                    client.deliveries_stop(clear=True)
                finally:
                    client.close()
            except Exception as e:  # noqa: BLE001 - e.g. the proxy was restarted: its log is gone
                self.problems[f"broker {nid}"] = f"delivery log not read: {e}"
                log.warning("the delivery log of the proxy of broker %d could not be read: %s", nid, e)
                continue
            records += got.pop("records")
            summaries[str(nid)] = got
        return records, summaries


def delivered_table(records: Iterable[Mapping[str, Any]], decoder: EventDecoder,
                    topic_ids: Mapping[str, str] | None = None) -> pa.Table:
    """Pure but for `decoder`'s counts: the DELIVERED rows of a delivery log's records, each record's identity
    read with the application's identity reader (null and -1 when it cannot be read or is not the run's);
    a topic a proxy knew only by its id is named from `topic_ids` (id -> name)."""
    names = topic_ids or {}
    rows: dict[str, list[Any]] = {f.name: [] for f in ledger.DELIVERED}
    for r in records:
        key, value = unb64(r["key"]), unb64(r["value"])
        headers = [(name, unb64(v)) for name, v in r["headers"]]
        event_id = decoder.identity.read(key, value, headers)
        rows["event_id"].append(event_id)
        rows["value_id"].append(decoder(key, value, headers))
        rows["delivered_ms"].append(r["at_ms"])
        rows["topic"].append(names.get(r["topic"], r["topic"]))
        for name in ("broker", "conn", "client_id", "partition", "offset", "timestamp_ms"):
            rows[name].append(r[name])
    return pa.Table.from_pydict(rows, schema=ledger.DELIVERED)


def _ids(value_ids: Iterable[int], names: Mapping[int, str]) -> list[str]:
    """Up to EXAMPLES event ids of value ids, in value id order."""
    return [names.get(v, str(v)) for v in sorted(value_ids)[:EXAMPLES]]


def delivery_summary(accepted: set[int], delivered: pa.Table, processed: set[int] | None, in_log: set[int],
                     names: Mapping[int, str], logs: Mapping[str, Mapping[str, Any]],
                     decode: Mapping[str, Any], problems: Mapping[str, str]) -> dict[str, Any]:
    """Pure: the manifest's `application.delivered`: of the accepted events (value ids), how many the consumer
    group was handed, processed, handed but never processed, and never handed (with how many of those are
    in the log), each with example ids (`names`: value id -> event id). `processed` None: the scenario has no
    processed source, so the comparison with it is not made."""
    handed = {v for v in delivered.column("value_id").to_pylist() if v >= 0}
    got = accepted & handed
    out: dict[str, Any] = {
        "measured": True, "source": SOURCE, "accepted": len(accepted), "delivered": len(got),
        "deliveries": delivered.num_rows, "processed": None if processed is None else len(accepted & processed),
        "never_delivered": {"count": len(accepted - handed), "in_log": len((accepted - handed) & in_log),
                            "examples": _ids(accepted - handed, names)},
        "delivered_not_processed": None, "processed_not_delivered": None,
        "unread_batches": sum(int(s.get("unread_batches") or 0) for s in logs.values()),
        "truncated": any(s.get("truncated") for s in logs.values()),
        "decode": dict(decode), "proxies": {k: dict(v) for k, v in logs.items()}, "problems": dict(problems),
        "complete": not problems and not any(s.get("truncated") or s.get("unread_batches") for s in logs.values()),
    }
    if processed is not None:
        missed = got - processed
        out["delivered_not_processed"] = {"count": len(missed), "examples": _ids(missed, names)}
        unseen = (accepted & processed) - handed  # handed over where the logs did not see it (incomplete logs)
        out["processed_not_delivered"] = {"count": len(unseen), "examples": _ids(unseen, names)}
    return out


def measure(run_dir: Path, recorder: DeliveryRecorder, decoder: EventDecoder, sends: pa.Table,
            reads: pa.Table | None, audit_value_ids: set[int], index: Mapping[str, int]) -> dict[str, Any]:
    """Collect the proxies' logs, write `delivered.parquet` and return the manifest's `application.delivered`.
    `sends`/`reads`: the run's SENDS and READS (None: no processed source); `index`: event id -> value id."""
    records, logs = recorder.collect()
    if not logs:  # not one log read (e.g. proxies of an older kafkaproof, without the log): no zero
        why = "; ".join(f"{k}: {v}" for k, v in recorder.problems.items()) or "no proxy"
        return not_measured(f"not measured (no fault proxy's delivery log could be read: {why})")
    table = delivered_table(records, decoder, recorder.topic_ids)
    ledger.write_arrow(run_dir, "delivered", table)
    accepted = {v for v, o in zip(sends.column("value_id").to_pylist(), sends.column("outcome").to_pylist())
                if o == "ok"}
    processed = None if reads is None else {v for v in reads.column("value_id").to_pylist() if v is not None and v >= 0}
    names = {v: k for k, v in index.items()}
    summary = delivery_summary(accepted, table, processed, audit_value_ids, names, logs,
                               decoder.counts.as_dict(), recorder.problems)
    log.info("delivered to the consumer group: %d of %d accepted events (%d records handed over)",
             summary["delivered"], summary["accepted"], table.num_rows)
    return summary
