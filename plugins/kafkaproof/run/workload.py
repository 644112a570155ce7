"""Producer and consumer processes that record every send, ack, read, rebalance and commit.

Each runs as its own OS process (`python -m kafkaproof.run.workload producer|consumer SPEC.json`)
and appends Arrow IPC record batches to files in its working directory, so a
process killed by a fault loses at most the batch it was building. Consumers
write what they read *before* committing offsets (except for the
commit-before-processing strategy, whose point is the opposite), so the ledger
never claims less than was processed.

Streams written (assembled into the ledger by `assemble.py`):
  producer-<i>.sends.arrow        value_id, producer, producer_pid, seq, key, intended_ns, send_ns, txn_id
  producer-<i>.completions.arrow  value_id, complete_ns, partition, offset, error_code, error_name, error_message
  producer-<i>.txns.arrow         producer, txn_id, txn_outcome
  consumer-<i>-<inc>.reads.arrow  columns of ledger.READS
  consumer-<i>-<inc>.events.arrow columns of ledger.CONSUMER_EVENTS
  <role>-<i>.progress.json        counters for progress display
"""
from __future__ import annotations

import gc
import json
import os
import random
import signal
import socket
import sys
import threading
import time
from array import array
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from ..paths import write_text_atomic
from ..spec.connection import CONNECTION_ENV
from ..spec.ledger import CONSUMER_EVENTS, PAYLOAD_PREFIX, READS, decode_value_id, make_value_id

SEND_STREAM = pa.schema([("value_id", pa.int64()), ("producer", pa.int32()), ("producer_pid", pa.int32()),
                         ("seq", pa.int64()), ("key", pa.string()), ("intended_ns", pa.int64()),
                         ("send_ns", pa.int64()), ("txn_id", pa.int64())])
COMPLETION_STREAM = pa.schema([("value_id", pa.int64()), ("complete_ns", pa.int64()), ("partition", pa.int32()),
                               ("offset", pa.int64()), ("error_code", pa.int32()), ("error_name", pa.string()),
                               ("error_message", pa.string())])
TXN_STREAM = pa.schema([("producer", pa.int32()), ("txn_id", pa.int64()), ("txn_outcome", pa.string())])

# Errors that mean "this record was never written", whatever happened before.
DEFINITE_FAILURES = frozenset({
    "_UNKNOWN_TOPIC", "_UNKNOWN_PARTITION", "UNKNOWN_TOPIC_OR_PART", "MSG_SIZE_TOO_LARGE", "_MSG_SIZE_TOO_LARGE",
    "INVALID_RECORD", "CORRUPT_MESSAGE", "RECORD_LIST_TOO_LARGE", "INVALID_REQUIRED_ACKS",
    "TOPIC_AUTHORIZATION_FAILED", "CLUSTER_AUTHORIZATION_FAILED", "_PURGE_QUEUE", "_INVALID_ARG", "INVALID_TOPIC_EXCEPTION",
})


def classify_delivery(error_name: str | None, partition: int) -> str:
    """Outcome of one delivery report: ok, fail (definitely not written) or indefinite.

    A final error describes only the last attempt; an earlier attempt may have
    been written. `_MSG_TIMED_OUT` is definite only when the record never got a
    partition (the producer never had metadata for the topic, so never sent it).
    """
    if error_name is None:
        return "ok"
    if error_name in DEFINITE_FAILURES:
        return "fail"
    if error_name == "_MSG_TIMED_OUT" and partition < 0:
        return "fail"
    return "indefinite"


def assignment_after(current: list[int], event: str, partitions: list[int], incremental: bool) -> list[int]:
    """Pure: a consumer's whole assignment (sorted) after rebalance `event` (assign/revoke/lost) names `partitions`.

    An eager rebalance revokes everything and assigns the whole new set; an incremental one
    (cooperative-sticky, the consumer group protocol) names only the partitions it moves, so an
    assign adds to what the consumer kept.
    """
    if event == "assign":
        return sorted(set(partitions) | set(current if incremental else ()))
    if event in ("revoke", "lost"):
        return sorted(set(current) - set(partitions))
    raise ValueError(f"not a rebalance event: {event!r} (assign, revoke or lost)")


def incremental_rebalances(conf: dict[str, Any]) -> bool:
    """Pure: whether a librdkafka consumer of this config rebalances incrementally (its callbacks name only
    the partitions that move): the cooperative-sticky assignor or the consumer group protocol (KIP-848)."""
    strategy = str(conf.get("partition.assignment.strategy", "")).lower()
    return "cooperative" in strategy or str(conf.get("group.protocol", "classic")).lower() == "consumer"


class StreamWriter:
    """Appends rows to an Arrow IPC stream file in batches; each flush is one write() call.

    A row is kept as the tuple it came in (one list append); `flush` turns the rows into columns.
    The producer's per-message streams use the columnar `SendLog` / `CompletionLog` instead.
    """

    def __init__(self, path: Path, schema: pa.Schema):
        self.schema = schema
        self.rows: list[tuple] = []
        self.sink = open(path, "wb")
        self.writer = pa.ipc.new_stream(self.sink, schema)

    def append(self, *values: Any) -> None:
        self.rows.append(values)

    def __len__(self) -> int:
        return len(self.rows)

    def write_columns(self, columns: list) -> None:
        """Write one batch made of whole columns (Arrow arrays or Python lists), at once."""
        batch = pa.record_batch([c if isinstance(c, pa.Array) else pa.array(c, type=f.type)
                                 for c, f in zip(columns, self.schema)], schema=self.schema)
        self.writer.write_batch(batch)
        self.sink.flush()

    def flush(self) -> None:
        if not self.rows:
            return
        self.write_columns(list(zip(*self.rows)))
        self.rows = []

    def close(self) -> None:
        self.flush()
        self.writer.close()
        self.sink.close()


def take_column(values: list, typecode: str = "q") -> pa.Array:
    """An Arrow int64 (`q`) or int32 (`i`) array of a list of ints, emptying the list in place (the
    hot path holds its bound `append`).

    A list append and one `array` conversion per flush cost about 30 ns a value; `array.append`
    parses its argument (about 50 ns) and `pa.array(list)` converts each int (about 90 ns)."""
    packed = array(typecode, values)
    del values[:]
    return pa.Array.from_buffers(pa.int64() if typecode == "q" else pa.int32(), len(packed),
                                 [None, pa.py_buffer(packed)])


def constant_column(value: int, n: int, typecode: str = "i") -> pa.Array:
    return take_column([value] * n, typecode)


class SendLog:
    """A producer's sends stream, kept as columns: the hot path appends to two lists.

    Per-message cost matters here (it is what the recorder takes from the client's throughput).
    The producer sends seq 0, 1, 2, ... and records every send, so a batch's value ids and seqs
    follow from its first seq; the producer and pid are constants; keys and transaction ids are
    kept only when the run has them.
    """

    def __init__(self, path: Path, producer: int, pid: int, keyed: bool, transactional: bool):
        self.stream = StreamWriter(path, SEND_STREAM)
        self.producer, self.pid, self.first_id = producer, pid, make_value_id(producer, 0)
        self.next_seq = 0
        self.intended: list[int] = []
        self.sent: list[int] = []
        self.keys: list | None = [] if keyed else None
        self.txn_ids: list | None = [] if transactional else None

    def flush(self) -> None:
        n = len(self.sent)
        if not n:
            return
        seqs = range(self.next_seq, self.next_seq + n)
        self.next_seq += n
        self.stream.write_columns([
            take_column([self.first_id + q for q in seqs]), constant_column(self.producer, n),
            constant_column(self.pid, n), take_column(list(seqs)),
            self.keys[:] if self.keys is not None else pa.nulls(n, pa.string()), take_column(self.intended),
            take_column(self.sent), self.txn_ids[:] if self.txn_ids is not None else pa.nulls(n, pa.int64())])
        for column in (self.keys, self.txn_ids):
            if column is not None:
                del column[:]

    def close(self) -> None:
        self.flush()
        self.stream.close()


class CompletionLog:
    """A producer's completions stream: acks as four int lists (the once-per-message case), errors
    as rows; each flush writes a batch of each."""

    def __init__(self, path: Path, offsets_from_broker: bool):
        self.stream = StreamWriter(path, COMPLETION_STREAM)
        self.offsets_from_broker = offsets_from_broker
        self.errors: list[tuple] = []
        self.value_ids: list[int] = []
        self.completed: list[int] = []
        self.partitions: list[int] = []
        self.offsets: list[int] = []

    @property
    def acked(self) -> int:
        """Acks not yet flushed."""
        return len(self.value_ids)

    def flush(self) -> None:
        n = len(self.value_ids)
        if n:
            try:
                offsets = take_column(self.offsets)
            except TypeError:  # an ack without a broker offset (None): null, never a made-up 0
                import pyarrow.compute as pc
                self.offsets[:] = [-1 if o is None else o for o in self.offsets]
                offsets = take_column(self.offsets)
                offsets = pc.if_else(pc.less(offsets, 0), pa.scalar(None, pa.int64()), offsets)
            self.stream.write_columns([
                take_column(self.value_ids), take_column(self.completed), take_column(self.partitions, "i"),
                offsets if self.offsets_from_broker else pa.nulls(n, pa.int64()),
                pa.nulls(n, pa.int32()), pa.nulls(n, pa.string()), pa.nulls(n, pa.string())])
        if self.errors:
            self.stream.write_columns(list(zip(*self.errors)))
            del self.errors[:]

    def close(self) -> None:
        self.flush()
        self.stream.close()


def read_stream(path: Path, schema: pa.Schema) -> pa.Table:
    """Read an Arrow IPC stream, keeping every complete batch of a file cut short by a crash."""
    batches = []
    try:
        with open(path, "rb") as f:
            reader = pa.ipc.open_stream(f)
            while True:
                try:
                    batches.append(reader.read_next_batch())
                except StopIteration:
                    break
    except (pa.ArrowInvalid, OSError, EOFError):
        pass  # truncated tail: keep what was read
    return pa.Table.from_batches(batches, schema=schema) if batches else schema.empty_table()


def connection_config() -> dict[str, Any]:
    """The cluster's connection config the runner put in this worker's environment (empty: plaintext)."""
    return json.loads(os.environ.get(CONNECTION_ENV) or "{}")


def write_progress(path: Path, counters: dict) -> None:
    write_text_atomic(path, json.dumps(counters))


@dataclass
class KeyChooser:
    """Chooses record keys: none, one fixed key, `count` keys uniformly, or sequentially."""

    distribution: str = "none"
    count: int = 1
    key: str = "key"

    def choose(self, seq: int, rng: random.Random) -> str | None:
        if self.distribution == "none":
            return None
        if self.distribution == "single":
            return self.key
        if self.distribution == "sequential":
            return f"k{seq % self.count}"
        return f"k{rng.randrange(self.count)}"


_stop = False
STOP_GRACE_S = 10.0  # after a stop request: flush/close for at most this long
HARD_EXIT_AFTER_S = 5.0  # ... and the process is gone this long after that, whatever blocks
PARENT_CHECK_S = 0.2


def _request_stop(*_) -> None:
    global _stop
    if not _stop:
        _stop = True
        _start_hard_exit_timer(STOP_GRACE_S + HARD_EXIT_AFTER_S)


def _start_hard_exit_timer(seconds: float) -> None:
    """Exit even if a client call blocks (a cluster that is gone): the streams were flushed as we went."""
    timer = threading.Timer(seconds, lambda: os._exit(3))
    timer.daemon = True
    timer.start()


def watch_parent(parent_pid: int, interval_s: float = PARENT_CHECK_S) -> threading.Thread:
    """Stop this worker within `interval_s` of its runner's death (it is re-parented; getppid changes).

    A worker must never outlive its run: an orphaned producer would keep writing into whatever
    cluster next takes the address, an orphaned consumer would poll forever.
    """
    def loop() -> None:
        while not _stop:
            if os.getppid() != parent_pid:
                print(f"runner (pid {parent_pid}) is gone: stopping", file=sys.stderr, flush=True)
                _request_stop()
                return
            time.sleep(interval_s)

    thread = threading.Thread(target=loop, name="parent-watch", daemon=True)
    thread.start()
    return thread


class Notifier:
    """Tells the runner about events it may trigger faults on (one UDP datagram each, to loopback)."""

    def __init__(self, address: str | None):
        self.target = None
        self.sock = None
        if address:
            host, port = address.rsplit(":", 1)
            self.target = (host, int(port))
            self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            # Connected: bound to loopback and deaf to other senders. A bare sendto() binds the socket to
            # every interface (0.0.0.0), where anyone could send to it.
            self.sock.connect(self.target)

    def send(self, **event: Any) -> None:
        if self.sock is None:
            return
        try:
            self.sock.send(json.dumps(event).encode())
        except OSError:
            pass  # the runner is gone or busy: notifications are best effort


class PayloadMaker:
    """`ledger.encode_payload` for one run and value size, without its per-call formatting: a
    payload is `template % (value_id, pad)`, and the pad changes only when the id gains a digit."""

    def __init__(self, run_id: str, size: int):
        self.prefix = f"{PAYLOAD_PREFIX}|{run_id}|".encode()
        self.template = self.prefix.replace(b"%", b"%%") + b"%d|%s"
        self.size = size

    def pad_for(self, value_id: int) -> tuple[bytes, int]:
        """The padding for ids with as many digits as `value_id`, and the first id that needs another."""
        digits = len(str(value_id))
        return b"x" * max(0, self.size - len(self.prefix) - digits - 1), 10 ** digits

    def make(self, value_id: int) -> bytes:
        return self.template % (value_id, self.pad_for(value_id)[0])


def run_producer(spec: dict) -> int:
    """Open-loop producer: send `messages` values at `rate`/s (or for `duration_s`), recording everything."""
    from confluent_kafka import KafkaException, Producer

    signal.signal(signal.SIGTERM, _request_stop)
    if spec.get("parent_pid"):
        watch_parent(spec["parent_pid"])
    out, index, run_id = Path(spec["out"]), spec["index"], spec["run_id"]
    pid = os.getpid()
    # acks=0 delivery reports carry offsets no broker assigned (librdkafka counts them per batch): never record them.
    offsets_from_broker = spec.get("offsets_from_broker", True)
    rng = random.Random(spec.get("seed", 0) * 1000 + index)
    keys = KeyChooser(**spec.get("keys", {}))
    value_size, topic = spec["value_size"], spec["topic"]
    rate = spec.get("rate")
    messages = spec.get("messages")
    duration_ns = int(spec["duration_s"] * 1e9) if spec.get("duration_s") else None
    txn = spec.get("transactions")
    keyed = keys.distribution != "none"
    sends = SendLog(out / f"producer-{index}.sends.arrow", index, pid, keyed, bool(txn))
    completions = CompletionLog(out / f"producer-{index}.completions.arrow", offsets_from_broker)
    txns = StreamWriter(out / f"producer-{index}.txns.arrow", TXN_STREAM)
    counts = {"sent": 0, "ok": 0, "fail": 0, "indefinite": 0, "errors": {}}
    progress = out / f"producer-{index}.progress.json"
    monotonic_ns = time.monotonic_ns
    payload = PayloadMaker(run_id, value_size)
    id_at = len(payload.prefix)

    acked_id, acked_ns = completions.value_ids.append, completions.completed.append
    acked_partition, acked_offset = completions.partitions.append, completions.offsets.append

    def on_delivery(err, msg) -> None:
        if err is None:  # the common case, once per message: kept to appends (counted at each flush)
            value = msg.value()  # our own payload: its id sits right after the known prefix
            acked_id(int(value[id_at:value.index(b"|", id_at)]))
            acked_ns(monotonic_ns())
            acked_partition(msg.partition())
            acked_offset(msg.offset())  # None when librdkafka has no broker offset for it: kept null
            return
        value = msg.value()
        try:
            vid = int(value[id_at:value.index(b"|", id_at)])
        except (TypeError, ValueError):
            vid = decode_value_id(value)
        name = err.name()
        part = msg.partition() if msg.partition() is not None else -1
        counts[classify_delivery(name, part)] += 1
        counts["errors"][name] = counts["errors"].get(name, 0) + 1
        completions.errors.append((vid, monotonic_ns(), part, None, err.code(), name, err.str()))

    def flush_streams() -> None:
        counts["ok"] += completions.acked
        sends.flush()
        completions.flush()
        txns.flush()

    conf = {**connection_config(), "bootstrap.servers": spec["bootstrap"], "log_level": 3, **spec.get("config", {})}
    if txn:
        conf.setdefault("transactional.id", f"kp-{run_id}-p{index}")
    producer = Producer(conf)
    txn_id = None
    if txn:
        producer.init_transactions(30)

    def end_transaction(abort: bool) -> None:
        nonlocal txn_id
        outcome = None
        try:
            if abort:
                if txn.get("abort", "flush") == "flush":
                    # Write the records first, so the abort marker really rolls back records in the log
                    # (aborting while they are queued purges them: read_committed would never be tested).
                    producer.flush(30)
                producer.abort_transaction(30)
                outcome = "abort"
            else:
                producer.commit_transaction(30)
                outcome = "commit"
        except KafkaException as e:
            try:
                producer.abort_transaction(30)
                outcome = "abort"
            except KafkaException:
                outcome = None  # unknown: the analysis treats its values as indefinite
            print(f"transaction {txn_id} did not commit: {e}", file=sys.stderr)
        txns.append(index, txn_id, outcome)
        txn_id = None

    # What exists now lives for the whole run: keep the collector from walking it again and again
    # (the send loop allocates a few objects per message, so collections are frequent).
    gc.freeze()
    t0 = monotonic_ns()
    last_flush = t0
    seq = 0
    limit = messages if messages is not None else float("inf")
    interval_ns = int(1e9 / rate) if rate else 0
    first_id = make_value_id(index, 0)
    produce, poll = producer.produce, producer.poll
    template, pad, pad_until = payload.template, b"", -1
    add_intended, add_sent = sends.intended.append, sends.sent.append
    while not _stop and seq < limit:
        now = monotonic_ns()
        if duration_ns is not None and now - t0 >= duration_ns:
            break
        if rate:
            intended = t0 + seq * interval_ns
            if intended > now:
                poll(min((intended - now) / 1e9, 0.05))
                continue
        else:
            intended = now
        if txn and txn_id is None:
            producer.begin_transaction()
            txn_id = seq // txn["batch"]
        vid = first_id + seq
        if vid >= pad_until:
            pad, pad_until = payload.pad_for(vid)
        key = keys.choose(seq, rng) if keyed else None
        send_ns = now
        while True:
            try:
                produce(topic, template % (vid, pad), key, on_delivery=on_delivery)
                break
            except BufferError:
                poll(0.01)  # local queue full: back-pressure shows up as publish delay
                send_ns = monotonic_ns()
        add_intended(intended)
        add_sent(send_ns)
        if keyed:
            sends.keys.append(key)
        if txn:
            sends.txn_ids.append(txn_id)
        seq += 1
        if not seq & 15:  # delivery reports are served in bulk: a poll call per send costs more than it serves
            poll(0)
        if txn and seq % txn["batch"] == 0:
            end_transaction(rng.random() < txn.get("abort_probability", 0.0))
        if send_ns - last_flush > 200_000_000:
            counts["sent"] = seq
            flush_streams()
            write_progress(progress, counts)
            last_flush = send_ns
    counts["sent"] = seq
    if txn and txn_id is not None:
        end_transaction(rng.random() < txn.get("abort_probability", 0.0))
    sends.flush()
    # Asked to stop (SIGTERM, runner gone): a bounded flush, even if the cluster is gone.
    deadline = time.monotonic() + (STOP_GRACE_S if _stop else spec.get("flush_timeout_s", 120))
    while len(producer) and time.monotonic() < deadline:
        producer.flush(0.5)
        flush_streams()
        write_progress(progress, counts)
    flush_streams()
    for w in (sends, completions, txns):
        w.close()
    counts["done"] = True
    counts["unfinished"] = len(producer)
    write_progress(progress, counts)
    return 0


def run_consumer(spec: dict) -> int:
    """Consume until told to stop (SIGTERM), recording every record, rebalance and commit."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    signal.signal(signal.SIGTERM, _request_stop)
    if spec.get("parent_pid"):
        watch_parent(spec["parent_pid"])
    notifier = Notifier(spec.get("notify"))
    out, index, inc = Path(spec["out"]), spec["index"], spec.get("incarnation", 0)
    pid = os.getpid()
    strategy = spec.get("commit", "sync")
    processing_s = spec.get("processing_ms", 0) / 1000
    reads = StreamWriter(out / f"consumer-{index}-{inc}.reads.arrow", READS)
    events = StreamWriter(out / f"consumer-{index}-{inc}.events.arrow", CONSUMER_EVENTS)
    progress = out / f"consumer-{index}-{inc}.progress.json"
    counts = {"read": 0, "polls": 0, "rebalances": 0, "commits": 0, "commit_errors": 0}
    generation = -1 if spec.get("mode") == "assign" else 0
    assigned: list[int] = []

    def event(name: str, partitions=(), offsets=None, success=None, error=None, after=None) -> None:
        events.append(index, pid, inc, time.monotonic_ns(), name, list(partitions), offsets, success, error, after)
        events.flush()

    def rebalanced(name: str, parts) -> None:
        nonlocal assigned
        partitions = [p.partition for p in parts]
        assigned = assignment_after(assigned, name, partitions, incremental)
        event(name, partitions, after=assigned)

    def on_assign(consumer, parts) -> None:
        nonlocal generation
        generation += 1
        counts["rebalances"] += 1
        rebalanced("assign", parts)

    def on_revoke(consumer, parts) -> None:
        rebalanced("revoke", parts)

    def on_lost(consumer, parts) -> None:
        rebalanced("lost", parts)

    def on_commit(err, parts) -> None:
        ok = err is None and all(p.error is None for p in parts)
        counts["commits" if ok else "commit_errors"] += 1
        event("commit", [p.partition for p in parts], [p.offset for p in parts], ok,
              str(err) if err else next((str(p.error) for p in parts if p.error), None))
        if ok:
            notifier.send(consumer=index, incarnation=inc, event="commit", ts_ns=time.monotonic_ns())

    conf = {**connection_config(), "bootstrap.servers": spec["bootstrap"], "group.id": spec["group"],
            "auto.offset.reset": "earliest",
            "enable.auto.commit": strategy == "auto", "isolation.level": spec.get("isolation_level", "read_committed"),
            "on_commit": on_commit, "log_level": 3, **spec.get("config", {})}
    consumer = Consumer(conf)
    incremental = incremental_rebalances(conf)
    event("start")
    if spec.get("mode") == "assign":
        parts = [TopicPartition(spec["topic"], p) for p in spec["partitions"]]
        consumer.assign(parts)
        event("assign", spec["partitions"], after=sorted(spec["partitions"]))
    else:
        consumer.subscribe([spec["topic"]], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

    def commit_now() -> None:
        try:
            if strategy == "async":
                consumer.commit(asynchronous=True)  # reported through on_commit
            else:
                on_commit(None, consumer.commit(asynchronous=False))  # on_commit only fires for async commits
        except KafkaException as e:
            if e.args[0].name() != "_NO_OFFSET":
                event("commit", success=False, error=str(e))

    def record(batch, now: int, poll_id: int) -> None:
        seq = 0  # the records' order as the client returned them (the analysis checks it)
        for m in batch:
            if m.error() is not None:
                continue
            key = m.key()
            reads.append(index, pid, inc, generation, m.partition(), m.offset(),
                         key.decode(errors="replace") if key is not None else None,
                         decode_value_id(m.value()), now, poll_id, seq)
            seq += 1
        reads.flush()
        counts["read"] += seq

    def report_progress() -> None:
        # Next fetch positions (past transaction markers too): the runner compares them with the high watermarks.
        try:
            counts["positions"] = {str(tp.partition): tp.offset for tp in consumer.position(consumer.assignment())}
        except KafkaException:
            pass
        write_progress(progress, counts)

    poll_id = 0
    last_progress = 0.0
    while not _stop:
        batch = consumer.consume(num_messages=spec.get("batch", 500), timeout=0.2)
        now = time.monotonic_ns()
        counts["polls"] += 1
        if not batch:
            if time.monotonic() - last_progress > 0.5:
                report_progress()
                last_progress = time.monotonic()
            continue
        poll_id += 1
        if strategy == "before":
            commit_now()
            time.sleep(processing_s)
            record(batch, now, poll_id)
        else:
            record(batch, now, poll_id)
            time.sleep(processing_s)
            if strategy in ("sync", "async"):
                commit_now()
        if time.monotonic() - last_progress > 0.5:
            report_progress()
            last_progress = time.monotonic()
    try:
        if strategy in ("sync", "async", "before"):
            commit_now()
        consumer.close()
    except KafkaException as e:
        event("commit", success=False, error=f"on close: {e}")
    event("exit")
    reads.close()
    events.close()
    counts["done"] = True
    write_progress(progress, counts)
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = argv if argv is not None else sys.argv[1:]
    if len(argv) != 2 or argv[0] not in ("producer", "consumer", "copier", "reader"):
        print("usage: python -m kafkaproof.run.workload producer|consumer|copier|reader SPEC.json", file=sys.stderr)
        return 2
    spec = json.loads(Path(argv[1]).read_text())
    if argv[0] in ("copier", "reader"):  # an exactly-once pipeline's (run/copier.py)
        from .copier import run_copier, run_reader
        return run_copier(spec) if argv[0] == "copier" else run_reader(spec)
    return run_producer(spec) if argv[0] == "producer" else run_consumer(spec)


if __name__ == "__main__":
    sys.exit(main())
