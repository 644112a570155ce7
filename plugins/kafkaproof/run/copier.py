"""One exactly-once copier process and the downstream reader of its output (issue 43), librdkafka driver.

`python -m kafkaproof.run.workload copier SPEC.json` (started by `Workers` in a consumer's place): consume
the input topic in the group, and per batch: begin a transaction, produce one output per input (its value id
kept; the key carries the transaction, `output_key`), `send_offsets_to_transaction`, then commit, or abort
with `abort_probability` and re-read the batch. At start it calls `init_transactions` with the copier's fixed
`transactional.id`, which aborts whatever its previous incarnation left open and fences that incarnation.

Streams written (assembled by `copier_run.py` into the pipeline ledger, spec/pipeline_ledger.py):
  copier-<i>-<inc>.txns.arrow        TRANSACTIONS rows: one when a transaction begins (outcome indefinite),
                                     one when it ends (the last row of a txn wins)
  copier-<i>-<inc>.records.arrow     TRANSACTION_RECORDS: inputs when produced, outputs when delivered
  copier-<i>-<inc>.offsets.arrow     PIPELINE_PARTITIONS: the offsets each committed transaction committed
  consumer-<i>-<inc>.reads|events    the input reads and group events, as a consumer's (workload.py)
`python -m kafkaproof.run.copier reader SPEC.json`: the downstream reader, writing reader-<i>.reads.arrow
(OUTPUT_READS).
"""
from __future__ import annotations

import json
import os
import random
import signal
import sys
import time
from pathlib import Path
from typing import Any

from ..spec.copier import transactional_id
from ..spec.ledger import CONSUMER_EVENTS, READS, decode_value_id
from ..spec.pipeline_ledger import OUTPUT_READS, PIPELINE_PARTITIONS, TRANSACTION_RECORDS, TRANSACTIONS
from . import workload as w

EXIT_FATAL = 3  # fenced or a fatal transactional error: the run restarts the copier (a new incarnation)
COMMIT_RETRIES = 5
TXN_COPIER_SHIFT, TXN_INCARNATION_SHIFT = 40, 24


def txn_number(copier: int, incarnation: int, seq: int) -> int:
    """Pure: the run-unique number of copier `copier`'s `seq`-th transaction in incarnation `incarnation`."""
    return (copier << TXN_COPIER_SHIFT) | (incarnation << TXN_INCARNATION_SHIFT) | seq


def output_key(input_key: bytes | None, txn: int) -> bytes:
    """Pure: an output's key: its input's key and the transaction that wrote it (the audit reads it back)."""
    return (input_key or b"") + b"|" + str(txn).encode()


def txn_of_key(key: str | bytes | None) -> int | None:
    """Pure: the transaction number an output's key carries (`output_key`); None for another key."""
    if key is None:
        return None
    text = key.decode(errors="replace") if isinstance(key, bytes) else key
    head, sep, tail = text.rpartition("|")
    return int(tail) if sep and tail.isdigit() else None


class EosState:
    """The producer id and epoch librdkafka reports in its statistics (`eos`): the API does not expose them."""

    def __init__(self) -> None:
        self.producer_id: int | None = None
        self.epoch: int | None = None

    def on_stats(self, raw: str) -> None:
        try:
            eos = json.loads(raw).get("eos") or {}
        except ValueError:
            return
        pid, epoch = eos.get("producer_id"), eos.get("producer_epoch")
        if isinstance(pid, int) and pid >= 0:
            self.producer_id, self.epoch = pid, epoch


def run_copier(spec: dict[str, Any]) -> int:
    """Copy until told to stop (SIGTERM), one transaction per batch; exit EXIT_FATAL when fenced."""
    from confluent_kafka import Consumer, KafkaException, Producer

    signal.signal(signal.SIGTERM, w._request_stop)
    if spec.get("parent_pid"):
        w.watch_parent(spec["parent_pid"])
    notifier = w.Notifier(spec.get("notify"))
    out, index, inc = Path(spec["out"]), spec["index"], spec.get("incarnation", 0)
    pipe = spec["pipeline"]
    tid = transactional_id(pipe, index)
    pid = os.getpid()
    rng = random.Random(f"{spec['run_id']}-{index}-{inc}")
    name = f"copier-{index}-{inc}"
    txns = w.StreamWriter(out / f"{name}.txns.arrow", TRANSACTIONS)
    records = w.StreamWriter(out / f"{name}.records.arrow", TRANSACTION_RECORDS)
    offsets = w.StreamWriter(out / f"{name}.offsets.arrow", PIPELINE_PARTITIONS)
    reads = w.StreamWriter(out / f"consumer-{index}-{inc}.reads.arrow", READS)
    events = w.StreamWriter(out / f"consumer-{index}-{inc}.events.arrow", CONSUMER_EVENTS)
    progress = out / f"consumer-{index}-{inc}.progress.json"
    counts: dict[str, Any] = {"read": 0, "committed": 0, "aborted": 0, "indefinite": 0, "errors": {}}
    eos = EosState()
    assigned: list[int] = []

    def event(what: str, partitions=(), offs=None, success=None, error=None, after=None) -> None:
        events.append(index, pid, inc, time.monotonic_ns(), what, list(partitions), offs, success, error, after)
        events.flush()

    def rebalanced(what: str, parts) -> None:
        nonlocal assigned
        assigned = w.assignment_after(assigned, what, [p.partition for p in parts], False)
        event(what, [p.partition for p in parts], after=assigned)

    current: dict[str, int] = {"txn": -1}

    def delivered(err, msg) -> None:
        if err is not None:
            counts["errors"][err.name()] = counts["errors"].get(err.name(), 0) + 1
            return
        records.append(current["txn"], "output", msg.partition(), msg.offset(), decode_value_id(msg.value()))

    base = {**w.connection_config(), "bootstrap.servers": spec["bootstrap"], "log_level": 3}
    consumer = Consumer({**base, "group.id": spec["group"], "auto.offset.reset": "earliest",
                         "enable.auto.commit": False, "isolation.level": spec.get("isolation_level", "read_committed"),
                         **spec.get("config", {})})
    producer = Producer({**base, "transactional.id": tid, "acks": "all",
                         "enable.idempotence": True, "transaction.timeout.ms": pipe["transaction_timeout_ms"],
                         "statistics.interval.ms": 1000, "stats_cb": eos.on_stats, **pipe.get("producer_config", {})})
    event("start")
    try:
        producer.init_transactions(30)
    except KafkaException as e:
        event("init_transactions", success=False, error=str(e))
        print(f"init_transactions failed: {e}", file=sys.stderr, flush=True)
        return EXIT_FATAL
    producer.poll(0)
    consumer.subscribe([spec["topic"]], on_assign=lambda c, p: rebalanced("assign", p),
                       on_revoke=lambda c, p: rebalanced("revoke", p), on_lost=lambda c, p: rebalanced("lost", p))

    def txn_row(txn: int, seq: int, outcome: str, begin: int, commit: int | None, end: int | None) -> None:
        txns.append(txn, tid, index, eos.producer_id, eos.epoch, seq, outcome, begin, commit, end)
        txns.flush()

    def rewind(batch) -> None:
        """Back to the batch's first offsets: an aborted batch is copied again."""
        from confluent_kafka import TopicPartition
        first: dict[int, int] = {}
        for m in batch:
            first[m.partition()] = min(first.get(m.partition(), m.offset()), m.offset())
        for p, off in first.items():
            try:
                consumer.seek(TopicPartition(spec["topic"], p, off))
            except KafkaException:
                pass  # revoked meanwhile: its next owner starts from the committed offset

    def report_progress() -> None:
        from confluent_kafka import TopicPartition
        try:
            counts["positions"] = {str(tp.partition): tp.offset for tp in
                                   consumer.committed([TopicPartition(spec["topic"], p) for p in assigned], 5)}
        except KafkaException:
            pass
        w.write_progress(progress, counts)

    def poll_producer() -> bool:
        """Serve the producer's callbacks; False when it raised its fatal error (e.g. INVALID_TXN_STATE after a
        failed abort): this incarnation is done, like a fenced one, and its streams still close."""
        try:
            producer.poll(0)
            return True
        except KafkaException as e:
            err = e.args[0]
            counts["errors"][err.name()] = counts["errors"].get(err.name(), 0) + 1
            print(f"producer: {err}", file=sys.stderr, flush=True)
            return False

    seq, poll_id, last_progress, exit_code = 0, 0, 0.0, 0
    processing_s = spec.get("processing_ms", 0) / 1000
    while not w._stop:
        batch = [m for m in consumer.consume(num_messages=pipe["batch_size"], timeout=0.2) if m.error() is None]
        if not poll_producer():
            exit_code = EXIT_FATAL
            break
        if time.monotonic() - last_progress > 0.5:
            report_progress()
            last_progress = time.monotonic()
        if not batch:
            continue
        poll_id += 1
        now = time.monotonic_ns()
        for i, m in enumerate(batch):
            key = m.key()
            reads.append(index, pid, inc, 0, m.partition(), m.offset(),
                         key.decode(errors="replace") if key is not None else None,
                         decode_value_id(m.value()), now, poll_id, i)
        reads.flush()
        counts["read"] += len(batch)
        seq += 1
        txn = current["txn"] = txn_number(index, inc, seq)
        begin = time.monotonic_ns()
        outcome, commit_ns = "indefinite", None
        try:
            producer.begin_transaction()
            txn_row(txn, seq, "indefinite", begin, None, None)
            for m in batch:
                records.append(txn, "input", m.partition(), m.offset(), decode_value_id(m.value()))
                part = {"partition": m.partition()} if pipe["ordered_output"] else {}
                producer.produce(pipe["output_topic"], value=m.value(), key=output_key(m.key(), txn),
                                 on_delivery=delivered, **part)
            records.flush()
            time.sleep(processing_s)
            positions = [tp for tp in consumer.position(consumer.assignment()) if tp.offset >= 0]
            producer.send_offsets_to_transaction(positions, consumer.consumer_group_metadata(), 30)
            if rng.random() < pipe["abort_probability"]:
                producer.abort_transaction(30)
                outcome = "aborted"
                rewind(batch)
            else:
                commit_ns = time.monotonic_ns()
                outcome = _commit(producer, KafkaException)
                if outcome == "committed":
                    for tp in positions:
                        offsets.append(tp.partition, txn, tp.offset)
                    offsets.flush()
                    notifier.send(consumer=index, incarnation=inc, event="commit", ts_ns=time.monotonic_ns())
                elif outcome == "aborted":
                    rewind(batch)
        except KafkaException as e:
            err = e.args[0]
            counts["errors"][err.name()] = counts["errors"].get(err.name(), 0) + 1
            print(f"transaction {txn}: {err}", file=sys.stderr, flush=True)
            if err.txn_requires_abort() or err.retriable():  # e.g. a coordinator moved: abort, copy again
                outcome = _abort(producer, KafkaException)
                rewind(batch)
            else:  # fenced, or fatal: this incarnation is done; its transaction's fate is the broker's
                exit_code = EXIT_FATAL
        if not poll_producer():
            exit_code = EXIT_FATAL
        records.flush()
        counts[outcome] += 1
        txn_row(txn, seq, outcome, begin, commit_ns, None if outcome == "indefinite" else time.monotonic_ns())
        if exit_code:
            break
    report_progress()
    for s in (txns, records, offsets, reads):
        s.close()

    def close_events() -> None:
        event("exit")
        events.close()

    _finish(consumer, progress, counts, KafkaException, close_events)
    return exit_code


def _finish(consumer, progress: Path, counts: dict[str, Any], kafka_exception: type, after_close=None) -> None:
    """Leave the group (best effort: the cluster may be gone), then `after_close` (the consumer's revoke callback
    still writes events while it closes, so they are closed after it), and mark the progress file done."""
    try:
        consumer.close()
    except kafka_exception:
        pass
    if after_close is not None:
        after_close()
    counts["done"] = True
    w.write_progress(progress, counts)


def _commit(producer, kafka_exception: type) -> str:
    """commit_transaction, retried while the error is retriable; aborted when it requires an abort;
    `indefinite` when no definite answer came."""
    for _ in range(COMMIT_RETRIES):
        try:
            producer.commit_transaction(30)
            return "committed"
        except kafka_exception as e:
            err = e.args[0]
            if err.retriable():
                continue
            if err.txn_requires_abort():
                return _abort(producer, kafka_exception)
            raise
    return "indefinite"


def _abort(producer, kafka_exception: type) -> str:
    try:
        producer.abort_transaction(30)
        return "aborted"
    except kafka_exception:
        return "indefinite"


def run_reader(spec: dict[str, Any]) -> int:
    """The downstream reader: read the output topic in its own group with `isolation` until told to stop,
    recording when each record was read (the checks compare it with its transaction's commit)."""
    from confluent_kafka import Consumer, KafkaException

    signal.signal(signal.SIGTERM, w._request_stop)
    if spec.get("parent_pid"):
        w.watch_parent(spec["parent_pid"])
    out, index, isolation = Path(spec["out"]), spec["index"], spec["isolation"]
    rows = w.StreamWriter(out / f"reader-{index}.reads.arrow", OUTPUT_READS)
    progress = out / f"reader-{index}.progress.json"
    consumer = Consumer({**w.connection_config(), "bootstrap.servers": spec["bootstrap"], "group.id": spec["group"],
                         "auto.offset.reset": "earliest", "enable.auto.commit": True, "isolation.level": isolation,
                         "log_level": 3})
    consumer.subscribe([spec["topic"]])
    counts: dict[str, Any] = {"read": 0}
    last = 0.0
    while not w._stop:
        for m in consumer.consume(num_messages=500, timeout=0.2):
            if m.error() is None:
                rows.append(index, isolation, m.partition(), m.offset(), decode_value_id(m.value()),
                            time.monotonic_ns())
                counts["read"] += 1
        rows.flush()
        if time.monotonic() - last > 0.5:
            try:
                counts["positions"] = {str(tp.partition): tp.offset for tp in consumer.position(consumer.assignment())}
            except KafkaException:
                pass
            w.write_progress(progress, counts)
            last = time.monotonic()
    rows.close()
    _finish(consumer, progress, counts, KafkaException)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    if len(argv) != 2 or argv[0] not in ("copier", "reader"):
        print("usage: python -m kafkaproof.run.copier copier|reader SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text())
    return run_copier(spec) if argv[0] == "copier" else run_reader(spec)


if __name__ == "__main__":
    sys.exit(main())
