"""Copier throughput: Kafka's own TransactionalMessageCopier against kafkaproof's two copiers (issue 43).

Starts a local 3-broker cluster (torn down at the end), writes `--records` records once to an input topic
(`--partitions` partitions, RF 3, min ISR 2; kafkaproof payloads of `--record-size` bytes, by the Java
recording producer), then for `--rounds` rounds runs each copier once over that same input, in its own
consumer group, to an output topic of its own; the order rotates every round (round r starts with copier
r mod 3). Every copier is one process consuming every input partition in a group, with the same settings,
TransactionalMessageCopier's own:

    transaction size (max.poll.records) 200, transaction.timeout.ms 60000, batch.size 512,
    max.in.flight.requests.per.connection 5, isolation.level read_committed, session.timeout.ms 10000,
    heartbeat.interval.ms 3000, max.poll.interval.ms 180000, outputs to the input's partition, no aborts

  - `kafka`: org.apache.kafka.tools.TransactionalMessageCopier of `--kafka-version`'s distribution
    (`--group-mode --use-group-metadata`: subscribe, sendOffsetsToTransaction with the group's metadata),
    which exits by itself once it has copied everything there was when it joined;
  - `java`: the Java driver's CopierWorker on the same kafka-clients jars;
  - `librdkafka`: run/copier.py (confluent-kafka).
The rate is input records committed per second, from the moment the copier's group assignment arrived:
Kafka's copier from its `RebalanceComplete` status line to its `shutdown_complete` line (its closes
included), ours from the consumer's `assign` event to the end of the transaction that committed the last
input (their ledgers; they run until the bench sees every input committed, then get SIGTERM). JVM and
interpreter start-up are in none of them. Prints each run, the medians and the ratios to Kafka's copier
(aim >= 0.8); no assertion on times.

    flock /tmp/kafkaproof-heavy.lock .venv/bin/python bench/copier.py [--records 20000] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins"))

from kafkaproof import logs  # noqa: E402
from kafkaproof.cluster import ClusterConfig, LocalCluster, install  # noqa: E402
from kafkaproof.run import java_driver  # noqa: E402
from kafkaproof.run.copier_run import last_per_txn  # noqa: E402
from kafkaproof.run.workload import read_stream  # noqa: E402
from kafkaproof.spec import ledger  # noqa: E402
from kafkaproof.spec.pipeline_ledger import TRANSACTIONS  # noqa: E402
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION  # noqa: E402

TXN_SIZE = 200
TXN_TIMEOUT_MS = 60_000
PRODUCER = {"batch.size": 512, "max.in.flight.requests.per.connection": 5}
CONSUMER = {"session.timeout.ms": 10000, "heartbeat.interval.ms": 3000, "max.poll.interval.ms": 180000}
COPIERS = ("kafka", "java", "librdkafka")
TIMEOUT_S = 300
TMC_TIME = "%Y/%m/%d %H:%M:%S:%f"


def fill_input(version: str, bootstrap: str, topic: str, records: int, size: int) -> None:
    """Write the input once, at full speed, with the Java recording producer (kafkaproof payloads)."""
    with tempfile.TemporaryDirectory(prefix="kp-bench-copier-in-") as tmp:
        spec = {"run_id": "bench", "out": tmp, "index": 0, "topic": topic, "bootstrap": bootstrap, "rate": None,
                "messages": records, "value_size": size, "keys": {"distribution": "sequential", "count": 64},
                "config": {"acks": "all", "linger.ms": 5}}
        path = Path(tmp) / "spec.json"
        path.write_text(json.dumps(spec))
        subprocess.run(java_driver.command("producer", path, version), capture_output=True, text=True,
                       timeout=TIMEOUT_S, check=True)


def kafka_copier(dist: install.KafkaDistribution, bootstrap: str, topic: str, out: str, group: str,
                 records: int) -> float:
    """Run TransactionalMessageCopier to the end of the input; its records/s from its own status lines."""
    cmd = [install.java_binary(), "-cp", f"{dist.libs}/*", "org.apache.kafka.tools.TransactionalMessageCopier",
           "--input-topic", topic, "--input-partition", "0", "--output-topic", out, "--broker-list", bootstrap,
           "--consumer-group", group, "--transaction-size", str(TXN_SIZE), "--transaction-timeout",
           str(TXN_TIMEOUT_MS), "--transactional-id", f"{group}-tid", "--group-mode", "--use-group-metadata"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
    lines = [json.loads(x) for x in proc.stdout.splitlines() if x.startswith("{")]
    start = [x for x in lines if x.get("stage") == "RebalanceComplete"]
    end = [x for x in lines if "shutdown_complete" in x]
    if proc.returncode != 0 or not start or not end or end[-1]["totalProcessed"] != records:
        raise RuntimeError(f"TransactionalMessageCopier exited {proc.returncode} after "
                           f"{end[-1]['totalProcessed'] if end else '?'} of {records}: {proc.stderr[-2000:]}")
    took = (datetime.strptime(end[-1]["time"], TMC_TIME) - datetime.strptime(start[0]["time"], TMC_TIME))
    return records / took.total_seconds()


def our_copier(client: str, version: str, bootstrap: str, topic: str, out: str, group: str, records: int,
               partitions: int) -> tuple[float, int]:
    """Run one of kafkaproof's copiers until the group has committed every input; (records/s, transactions)."""
    with tempfile.TemporaryDirectory(prefix=f"kp-bench-copier-{client}-") as tmp:
        work = Path(tmp)
        pipeline = {"copiers": 1, "output_topic": out, "output_partitions": partitions, "batch_size": TXN_SIZE,
                    "abort_probability": 0.0, "downstream_isolation": "read_committed",
                    "transactional_id_prefix": group, "transaction_timeout_ms": TXN_TIMEOUT_MS,
                    "ordered_output": True, "producer_config": PRODUCER}
        spec = {"run_id": "bench", "out": tmp, "topic": topic, "bootstrap": bootstrap, "index": 0, "incarnation": 0,
                "group": group, "mode": "subscribe", "commit": "sync", "isolation_level": "read_committed",
                "processing_ms": 0, "config": dict(CONSUMER), "role": "copier", "pipeline": pipeline}
        path = work / "copier.spec.json"
        path.write_text(json.dumps(spec))
        if client == "java":
            cmd = java_driver.command("copier", path, version)
        else:
            cmd = [sys.executable, "-m", "kafkaproof.run.workload", "copier", str(path)]
        env = {**os.environ, "OPENBLAS_NUM_THREADS": "1",
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent / "plugins"),
                                              os.environ.get("PYTHONPATH", "")])}
        with open(work / "stderr.log", "wb") as err:
            proc = subprocess.Popen(cmd, stdout=err, stderr=subprocess.STDOUT, cwd=tmp, env=env)
        deadline = time.monotonic() + TIMEOUT_S
        try:
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    progress = json.loads((work / "consumer-0-0.progress.json").read_text())
                except (OSError, ValueError):
                    progress = {}
                if sum((progress.get("positions") or {}).values()) >= records:
                    break
                time.sleep(0.2)
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        events, txns = consumer_events_and_txns(work, client)
        committed = [t for t in txns if t["outcome"] == "committed"]
        assigned = min(e["ts_ns"] for e in events if e["event"] == "assign")
        copied = sum((json.loads((work / "consumer-0-0.progress.json").read_text()).get("positions") or {}).values())
        if copied != records or not committed:
            raise RuntimeError(f"{client} copier committed {copied} of {records}: "
                               f"{(work / 'stderr.log').read_text()[-2000:]}")
        return records / ((max(t["end_ns"] for t in committed) - assigned) / 1e9), len(committed)


def consumer_events_and_txns(work: Path, client: str) -> tuple[list[dict], list[dict]]:
    """The copier's group events and its transactions (the last row of each), from either driver's streams."""
    if client == "java":
        events = java_driver.read_tsv(work / "consumer-0-0.events.tsv", java_driver.EVENTS_TSV)
        txns = java_driver.read_tsv(work / "copier-0-0.txns.tsv", TRANSACTIONS)
    else:
        events = read_stream(work / "consumer-0-0.events.arrow", ledger.CONSUMER_EVENTS)
        txns = read_stream(work / "copier-0-0.txns.arrow", TRANSACTIONS)
    return events.to_pylist(), last_per_txn(txns.to_pylist())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=20_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    ap.add_argument("--aim", type=float, default=0.8)
    args = ap.parse_args()
    logs.setup()
    dist = install.ensure_kafka(args.kafka_version)
    java_driver.build()
    java_driver.client_classpath(args.kafka_version)
    rates: dict[str, list[float]] = {c: [] for c in COPIERS}
    with LocalCluster.up(ClusterConfig(name="bench-copier", kafka_version=args.kafka_version)) as cluster:
        bootstrap = cluster.bootstrap_servers()
        topic_config = {"min.insync.replicas": 2}
        cluster.create_topic("bench-in", args.partitions, 3, topic_config)
        started = time.monotonic()
        fill_input(args.kafka_version, bootstrap, "bench-in", args.records, args.record_size)
        print(f"input: {args.records} records of {args.record_size} B in {args.partitions} partitions "
              f"({time.monotonic() - started:.1f} s)", flush=True)
        for r in range(args.rounds):
            order = COPIERS[r % 3:] + COPIERS[:r % 3]
            for who in order:
                out, group = f"bench-out-{who}-{r}", f"bench-{who}-{r}"
                cluster.create_topic(out, args.partitions, 3, topic_config)
                load = os.getloadavg()[0]
                if who == "kafka":
                    rate, detail = kafka_copier(dist, bootstrap, "bench-in", out, group, args.records), ""
                else:
                    rate, n = our_copier(who, args.kafka_version, bootstrap, "bench-in", out, group, args.records,
                                         args.partitions)
                    detail = f"; {n} transactions committed"
                rates[who].append(rate)
                print(f"round {r}: {who:<10} {rate:8.0f} input records/s committed  (load {load:.1f}{detail})",
                      flush=True)
    base = statistics.median(rates["kafka"])
    print(f"records={args.records} size={args.record_size}B partitions={args.partitions} kafka-clients "
          f"{args.kafka_version}, 3 brokers, RF 3, min ISR 2; transaction size {TXN_SIZE}, "
          + " ".join(f"{k}={v}" for k, v in {**PRODUCER, **CONSUMER}.items()))
    for who in COPIERS:
        med = statistics.median(rates[who])
        print(f"{who:<10} median {med:8.0f} records/s  ratio to TransactionalMessageCopier {med / base:.2f}"
              f"  (rounds: {', '.join(f'{x:.0f}' for x in rates[who])})")
    print(f"aim: each of ours >= {args.aim} of TransactionalMessageCopier")
    return 0


if __name__ == "__main__":
    sys.exit(main())
