"""The Java (kafka-clients) workload driver: its stream reader, outcome table, config names, lifecycle,
and (marker `cluster`) exact ledger counts against a real 3-broker cluster.

The first test that needs the jar builds it (Maven, ~20-60 s once per source hash; then cached).
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pyarrow as pa
import pytest

from kafkaproof.run import java_driver
from kafkaproof.spec import ledger
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION

CLIENT = DEFAULT_KAFKA_VERSION


@pytest.fixture(scope="session")
def driver_jar() -> Path:
    return java_driver.build()


# --- read_tsv ---------------------------------------------------------------------

@pytest.mark.unit
def test_read_tsv_nulls_lists_bools_and_truncated_tail(tmp_path):
    p = tmp_path / "consumer-0-0.events.tsv"
    p.write_bytes(b"0\t11\t0\t100\tstart\t\t\\N\t\\N\t\\N\t\\N\n"
                  b"0\t11\t0\t200\tcommit\t0,2\t5,7\ttrue\t\\N\t\\N\n"
                  b"0\t11\t0\t300\tcommit\t1\t9\tfalse\tCommitFailedException: x y\t\\N\n"
                  b"0\t11\t0\t350\tassign\t1\t\\N\t\\N\t\\N\t0,1,2\n"
                  b"0\t11\t0\t400\texi")  # killed mid-write: dropped
    t = java_driver.read_tsv(p, java_driver.EVENTS_TSV)
    assert t.schema == ledger.CONSUMER_EVENTS
    rows = t.to_pylist()
    assert len(rows) == 4
    assert rows[0]["partitions"] == [] and rows[0]["offsets"] is None and rows[0]["success"] is None
    assert rows[0]["assigned"] is None and rows[3]["assigned"] == [0, 1, 2]
    assert rows[1]["partitions"] == [0, 2] and rows[1]["offsets"] == [5, 7] and rows[1]["success"] is True
    assert rows[2]["success"] is False and rows[2]["error"] == "CommitFailedException: x y"


@pytest.mark.unit
def test_read_tsv_completions_with_null_offsets_and_empty_key(tmp_path):
    p = tmp_path / "producer-0.completions.tsv"
    p.write_text("4294967296\t9\t2\t17\t\\N\t\\N\tok\t\\N\n"
                 "4294967297\t10\t-1\t\\N\t7\tTimeoutException\tindefinite\tExpiring 1 record(s) for t-0: 1018 ms\n")
    t = java_driver.read_tsv(p, java_driver.COMPLETIONS_TSV)
    assert t.column("offset").to_pylist() == [17, None]
    assert t.column("error_code").to_pylist() == [None, 7]
    assert t.column("outcome").to_pylist() == ["ok", "indefinite"]
    sends = tmp_path / "producer-0.sends.tsv"
    sends.write_text("1\t0\t5\t1\t\t10\t11\t\\N\n")  # an empty key is a key, not null
    s = java_driver.read_tsv(sends, java_driver.SENDS_TSV).to_pylist()
    assert s == [{"value_id": 1, "producer": 0, "producer_pid": 5, "seq": 1, "key": "", "intended_ns": 10,
                  "send_ns": 11, "txn_id": None}]


@pytest.mark.unit
def test_read_tsv_missing_empty_and_unterminated_only(tmp_path):
    assert java_driver.read_tsv(tmp_path / "nope.tsv", java_driver.TXNS_TSV).num_rows == 0
    (tmp_path / "empty.tsv").write_bytes(b"")
    assert java_driver.read_tsv(tmp_path / "empty.tsv", java_driver.TXNS_TSV).num_rows == 0
    (tmp_path / "half.tsv").write_bytes(b"0\t3\tcomm")
    assert java_driver.read_tsv(tmp_path / "half.tsv", java_driver.TXNS_TSV).num_rows == 0
    (tmp_path / "bad.tsv").write_bytes(b"0\t3\n")
    with pytest.raises(java_driver.JavaDriverError, match="not a driver stream"):
        java_driver.read_tsv(tmp_path / "bad.tsv", java_driver.TXNS_TSV)


@pytest.mark.unit
def test_source_hash_follows_the_sources(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "pom.xml").write_text("<project/>")
    (tmp_path / "src" / "A.java").write_text("class A {}")
    h1 = java_driver.source_hash(tmp_path)
    assert java_driver.source_hash(tmp_path) == h1
    (tmp_path / "src" / "A.java").write_text("class A { }")
    assert java_driver.source_hash(tmp_path) != h1


# --- outcome table ----------------------------------------------------------------

# (exception class, message, in_send, retries) -> outcome; docs/java-client.md explains each.
CLASSIFICATION = [
    ("TimeoutException", "Expiring 1 record(s) for orders-0: 1018 ms has passed since batch creation", False, None,
     "indefinite"),
    ("TimeoutException", "Topic orders not present in metadata after 60000 ms.", False, None, "fail"),
    ("TimeoutException", "anything", True, None, "fail"),  # thrown/reported inside send(): never sent
    ("NetworkException", "Disconnected from node 1", False, None, "indefinite"),
    ("DisconnectException", None, False, None, "indefinite"),
    ("NotLeaderOrFollowerException", None, False, None, "indefinite"),
    ("NotEnoughReplicasException", "Messages are rejected since there are fewer in-sync replicas than required.",
     False, None, "indefinite"),
    ("NotEnoughReplicasException", None, False, 0, "fail"),  # one attempt, refused before the append
    ("NotEnoughReplicasAfterAppendException", None, False, 0, "indefinite"),
    ("RecordTooLargeException", None, False, None, "fail"),
    ("InvalidTopicException", None, False, None, "fail"),
    ("TopicAuthorizationException", None, False, None, "fail"),
    ("SaslAuthenticationException", None, False, None, "fail"),
    ("org.apache.kafka.common.errors.SerializationException", None, False, None, "fail"),
    ("InterruptException", None, False, None, "fail"),
    ("BufferExhaustedException", None, False, None, "fail"),
    ("TransactionAbortedException", None, False, None, "fail"),
    ("KafkaException", "Producer is closed forcefully.", False, None, "indefinite"),
    ("OutOfOrderSequenceException", None, False, None, "indefinite"),
    ("com.example.SomethingNew", None, False, None, "indefinite"),
]


@pytest.fixture(scope="module")
def classified(driver_jar) -> dict:
    def one(case):
        cls, msg, in_send, retries, _ = case
        return case, java_driver.classify(cls, msg, CLIENT, in_send=in_send, retries=retries)
    with ThreadPoolExecutor(4) as pool:
        return dict(pool.map(one, CLASSIFICATION))


@pytest.mark.java
@pytest.mark.parametrize("case", CLASSIFICATION, ids=[f"{c[0].split('.')[-1]}-{i}" for i, c in enumerate(CLASSIFICATION)])
def test_classification(classified, case):
    assert classified[case] == case[-1], f"{case[0]} ({case[1]!r}, in_send={case[2]}, retries={case[3]})"


@pytest.mark.java
def test_config_names(driver_jar):
    producer = java_driver.config_names("producer", CLIENT)
    assert "max.block.ms" in producer and "delivery.timeout.ms" in producer
    assert "fetch.min.bytes" not in producer
    assert "fetch.min.bytes" in java_driver.config_names("consumers", CLIENT)
    with pytest.raises(java_driver.JavaDriverError, match="unknown client role"):
        java_driver.config_names("admin", CLIENT)


@pytest.mark.java
def test_command_line(driver_jar, tmp_path):
    cmd = java_driver.command("producer", tmp_path / "s.json", CLIENT)
    assert cmd[-3:] == [java_driver.MAIN_CLASS, "producer", str(tmp_path / "s.json")]
    cp = cmd[cmd.index("-cp") + 1].split(os.pathsep)
    assert cp[0] == str(driver_jar) and any(Path(j).name == f"kafka-clients-{CLIENT}.jar" for j in cp)
    assert "-Xmx256m" in cmd
    with pytest.raises(java_driver.JavaDriverError, match="unknown worker role"):
        java_driver.command("admin", tmp_path / "s.json", CLIENT)


# --- lifecycle without a cluster --------------------------------------------------

def _spec(tmp_path: Path, **kw) -> Path:
    spec = {"run_id": "t", "out": str(tmp_path), "topic": "t", "bootstrap": "127.0.0.1:1", "index": 0,
            "rate": None, "messages": 10, "value_size": 50, "keys": {"distribution": "none"},
            "config": {"max.block.ms": 30000, "reconnect.backoff.max.ms": 200}, "close_timeout_s": 2, **kw}
    path = tmp_path / f"spec-{time.monotonic_ns()}.json"
    path.write_text(json.dumps(spec))
    return path


def _progress(path: Path) -> dict:
    return json.loads(path.read_text()) if path.exists() else {}


@pytest.mark.java
def test_sigterm_while_send_blocks_on_metadata(driver_jar, tmp_path):
    """No broker: send() waits for metadata; SIGTERM interrupts it, the record is a `fail`, exit 0 quickly."""
    proc = subprocess.Popen(java_driver.command("producer", _spec(tmp_path), CLIENT), stderr=subprocess.PIPE)
    try:
        sends_path = tmp_path / "producer-0.sends.tsv"
        deadline = time.monotonic() + 30
        while not (sends_path.exists() and sends_path.stat().st_size) and time.monotonic() < deadline:
            time.sleep(0.1)  # the first send row is written just before send(), which then blocks
        time.sleep(0.5)
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0, proc.stderr.read().decode()[-2000:]
        assert time.monotonic() - t0 < 6
    finally:
        proc.kill()
    sends = java_driver.read_tsv(tmp_path / "producer-0.sends.tsv", java_driver.SENDS_TSV)
    done = java_driver.read_tsv(tmp_path / "producer-0.completions.tsv", java_driver.COMPLETIONS_TSV).to_pylist()
    assert sends.num_rows == 1 and len(done) == 1
    assert done[0]["outcome"] == "fail" and done[0]["error_name"] == "InterruptException"
    progress = _progress(tmp_path / "producer-0.progress.json")
    assert progress["done"] is True and progress["sent"] == 1 and progress["fail"] == 1


@pytest.mark.java
def test_exits_within_a_second_of_its_parent_dying(driver_jar, tmp_path):
    """The runner is SIGKILLed: the driver notices (parent pid changes) and exits by itself."""
    spec = _spec(tmp_path, mode="subscribe", group="g", commit="sync")
    launcher = ("import subprocess, sys, time\n"
                f"p = subprocess.Popen({java_driver.command('consumer', spec, CLIENT)!r})\n"
                "print(p.pid, flush=True)\n"
                "time.sleep(120)\n")
    parent = subprocess.Popen([sys.executable, "-c", launcher], stdout=subprocess.PIPE, text=True)
    pid = int(parent.stdout.readline())
    progress = tmp_path / "consumer-0-0.progress.json"
    try:
        deadline = time.monotonic() + 30
        while not progress.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert progress.exists(), "the consumer did not start"
        parent.kill()
        parent.wait()
        t0 = time.monotonic()
        while _alive(pid) and time.monotonic() - t0 < 15:
            time.sleep(0.05)
        gone_after = time.monotonic() - t0
        assert not _alive(pid)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
    events = java_driver.read_tsv(tmp_path / "consumer-0-0.events.tsv", java_driver.EVENTS_TSV)
    assert events.column("event").to_pylist()[0] == "start"
    # Noticed within 0.2 s, closed within 0.4 s more (then `exit` and `done` are written), halted 0.75 s
    # after it noticed at the latest (a loaded host may not finish the close: nobody waits for it).
    assert gone_after < 1.5, gone_after


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


# --- a real cluster ----------------------------------------------------------------

def _run_producer(tmp_path: Path, bootstrap: str, topic: str, **kw) -> tuple[pa.Table, pa.Table, dict]:
    spec = _spec(tmp_path, topic=topic, bootstrap=bootstrap, **kw)
    proc = subprocess.run(java_driver.command("producer", spec, CLIENT), capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sends = java_driver.read_tsv(tmp_path / "producer-0.sends.tsv", java_driver.SENDS_TSV)
    done = java_driver.read_tsv(tmp_path / "producer-0.completions.tsv", java_driver.COMPLETIONS_TSV)
    return sends, done, _progress(tmp_path / "producer-0.progress.json")


def _consume_until(tmp_path: Path, bootstrap: str, topic: str, expect: int, timeout_s: float = 90, **kw):
    fields = {"mode": "subscribe", "group": f"g-{topic}", "commit": "sync", "isolation_level": "read_committed",
              "config": {}, **kw}
    spec = _spec(tmp_path, topic=topic, bootstrap=bootstrap, **fields)
    proc = subprocess.Popen(java_driver.command("consumer", spec, CLIENT), stderr=subprocess.PIPE)
    progress = tmp_path / "consumer-0-0.progress.json"
    try:
        deadline = time.monotonic() + timeout_s
        while _progress(progress).get("read", 0) < expect and time.monotonic() < deadline:
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            time.sleep(0.3)
        time.sleep(1.0)  # anything beyond `expect` would show up now
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, proc.stderr.read().decode()[-3000:]
    finally:
        proc.kill()
    reads = java_driver.read_tsv(tmp_path / "consumer-0-0.reads.tsv", java_driver.READS_TSV)
    events = java_driver.read_tsv(tmp_path / "consumer-0-0.events.tsv", java_driver.EVENTS_TSV)
    return reads, events, _progress(progress)


@pytest.mark.cluster
def test_java_producer_and_consumer_exact_counts(make_cluster, driver_jar, tmp_path):
    cluster = make_cluster()
    topic = "java-counts"
    cluster.create_topic(topic, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
    n = 5000
    sends, done, progress = _run_producer(tmp_path, cluster.bootstrap_servers(), topic, messages=n,
                                          keys={"distribution": "uniform", "count": 50},
                                          config={"acks": "all", "linger.ms": 5, "enable.idempotence": True})
    assert sends.num_rows == n and done.num_rows == n
    assert sorted(sends.column("value_id").to_pylist()) == sorted(done.column("value_id").to_pylist())
    assert set(done.column("outcome").to_pylist()) == {"ok"}
    parts, offsets = done.column("partition").to_pylist(), done.column("offset").to_pylist()
    assert all(o is not None and o >= 0 for o in offsets) and all(0 <= p < 3 for p in parts)
    assert len(set(zip(parts, offsets))) == n  # every ack names its own log position
    assert progress["done"] is True and progress["ok"] == n and progress["unfinished"] == 0
    assert all(s <= c for s, c in zip(*_aligned(sends, done)))  # completion after send, same clock

    reads, events, cprog = _consume_until(tmp_path, cluster.bootstrap_servers(), topic, n, batch=300)
    assert reads.num_rows == n
    pairs = set(zip(reads.column("partition").to_pylist(), reads.column("offset").to_pylist()))
    assert pairs == set(zip(parts, offsets))  # each acked offset read exactly once
    assert sorted(reads.column("value_id").to_pylist()) == sorted(sends.column("value_id").to_pylist())
    assert min(reads.column("generation").to_pylist()) >= 1
    names = events.column("event").to_pylist()
    assert names[0] == "start" and "assign" in names and names[-1] == "exit" and "commit" in names
    assigned = {e["event"]: e["assigned"] for e in events.to_pylist()}  # the last of each kind
    assert assigned["assign"] == [0, 1, 2] and assigned["start"] is None and assigned["commit"] is None
    rows = reads.to_pylist()
    for poll_id in {r["poll_id"] for r in rows}:  # 0, 1, ... per poll, in the client's order
        poll = [r for r in rows if r["poll_id"] == poll_id]
        assert [r["poll_seq"] for r in poll] == list(range(len(poll)))
        for p in range(3):
            offs = [r["offset"] for r in poll if r["partition"] == p]
            assert offs == sorted(offs)
    commits = [e for e in events.to_pylist() if e["event"] == "commit" and e["success"]]
    final = {p: o for e in commits for p, o in zip(e["partitions"], e["offsets"])}
    assert sum(final.values()) == n  # committed offsets = records read (offsets start at 0, no markers)
    assert cprog["done"] is True and cprog["read"] == n
    assert sum(cprog["positions"].values()) == n


def _aligned(sends: pa.Table, done: pa.Table) -> tuple[list[int], list[int]]:
    send_ns = dict(zip(sends.column("value_id").to_pylist(), sends.column("send_ns").to_pylist()))
    vids = done.column("value_id").to_pylist()
    return [send_ns[v] for v in vids], done.column("complete_ns").to_pylist()


@pytest.mark.cluster
def test_java_transactions_commit_and_abort(make_cluster, driver_jar, tmp_path):
    cluster = make_cluster()
    topic = "java-txn"
    cluster.create_topic(topic, partitions=2, replication_factor=3, config={"min.insync.replicas": 2})
    n = 2000
    sends, done, progress = _run_producer(tmp_path, cluster.bootstrap_servers(), topic, messages=n, seed=7,
                                          rate=2000, transactions={"batch": 100, "abort_probability": 0.4},
                                          config={"acks": "all", "linger.ms": 5})
    txns = java_driver.read_tsv(tmp_path / "producer-0.txns.tsv", java_driver.TXNS_TSV).to_pylist()
    assert [t["txn_id"] for t in txns] == list(range(n // 100))
    outcome = {t["txn_id"]: t["txn_outcome"] for t in txns}
    assert set(outcome.values()) == {"commit", "abort"}, "seed 7 gives both outcomes"
    assert done.num_rows == n and set(done.column("outcome").to_pylist()) == {"ok"}  # abort=flush: all written
    txn_of = dict(zip(sends.column("value_id").to_pylist(), sends.column("txn_id").to_pylist()))
    committed = {v for v, t in txn_of.items() if outcome[t] == "commit"}
    reads, _, _ = _consume_until(tmp_path, cluster.bootstrap_servers(), topic, len(committed))
    assert sorted(reads.column("value_id").to_pylist()) == sorted(committed)


FAST_FAILOVER = {"replica.lag.time.max.ms": 4000, "broker.session.timeout.ms": 6000,
                 "broker.heartbeat.interval.ms": 1000}


@pytest.mark.cluster
def test_java_producer_and_consumer_through_a_leader_kill(make_cluster, driver_jar, tmp_path):
    """SIGKILL the partition leader mid-run: every send still gets exactly one completion, and with
    acks=all, idempotence, RF 3 and min ISR 2 every acknowledged value is read, each offset once."""
    cluster = make_cluster(broker_config=FAST_FAILOVER)
    topic = "java-kill"
    cluster.create_topic(topic, partitions=1, replication_factor=3, config={"min.insync.replicas": 2})
    n = 8000
    spec = _spec(tmp_path, topic=topic, bootstrap=cluster.bootstrap_servers(), rate=1000, messages=n,
                 config={"acks": "all", "enable.idempotence": True, "linger.ms": 5, "request.timeout.ms": 5000})
    proc = subprocess.Popen(java_driver.command("producer", spec, CLIENT), stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 60
        while _progress(tmp_path / "producer-0.progress.json").get("ok", 0) < 1500:
            assert time.monotonic() < deadline and proc.poll() is None, "the producer did not get going"
            time.sleep(0.1)
        leader = cluster.leader_of(topic, 0)
        cluster.stop_node(leader, graceful=False)
        time.sleep(4)
        cluster.start_node(leader)
        assert proc.wait(timeout=150) == 0, proc.stderr.read().decode()[-3000:]
    finally:
        proc.kill()
    sends = java_driver.read_tsv(tmp_path / "producer-0.sends.tsv", java_driver.SENDS_TSV)
    done = java_driver.read_tsv(tmp_path / "producer-0.completions.tsv", java_driver.COMPLETIONS_TSV).to_pylist()
    assert sends.num_rows == n and len(done) == n
    assert sorted(d["value_id"] for d in done) == sorted(sends.column("value_id").to_pylist())
    ok = {d["value_id"]: d["offset"] for d in done if d["outcome"] == "ok"}
    assert len(set(ok.values())) == len(ok) and None not in ok.values()
    assert all(d["outcome"] in ("ok", "fail", "indefinite") for d in done)

    reads, _, _ = _consume_until(tmp_path, cluster.bootstrap_servers(), topic, len(ok))
    offsets = reads.column("offset").to_pylist()
    assert len(set(offsets)) == len(offsets)  # each offset read once
    read_at = dict(zip(reads.column("value_id").to_pylist(), offsets))
    assert {v: read_at.get(v) for v in ok} == ok  # every acked value read, at the offset its ack named


@pytest.mark.cluster
def test_java_consumer_commit_strategies(make_cluster, driver_jar, tmp_path):
    """auto (commits seen through the interceptor), async and before: every record read once, and the
    last successful commit of each partition is its end offset."""
    cluster = make_cluster()
    topic = "java-commits"
    cluster.create_topic(topic, partitions=2, replication_factor=3, config={"min.insync.replicas": 2})
    n = 1000
    _, done, _ = _run_producer(tmp_path, cluster.bootstrap_servers(), topic, messages=n, config={"acks": "all"})
    ends: dict[int, int] = {}
    for d in done.to_pylist():
        ends[d["partition"]] = max(ends.get(d["partition"], 0), d["offset"] + 1)
    for strategy in ("auto", "async", "before"):
        out = tmp_path / strategy
        out.mkdir()
        reads, events, _ = _consume_until(out, cluster.bootstrap_servers(), topic, n, commit=strategy,
                                          group=f"g-{strategy}", batch=100,
                                          **({"config": {"auto.commit.interval.ms": 200}} if strategy == "auto" else {}))
        assert reads.num_rows == n, strategy
        commits = [e for e in events.to_pylist() if e["event"] == "commit" and e["success"]]
        assert commits, f"{strategy}: no successful commit recorded"
        last = {p: o for e in commits for p, o in zip(e["partitions"], e["offsets"])}
        # An empty partition may be committed at 0 (auto commit) or not at all (a batch never had it).
        assert {p: last.get(p, 0) for p in (0, 1)} == {p: ends.get(p, 0) for p in (0, 1)}, strategy
