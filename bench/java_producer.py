"""The Java recording producer (kafkaproof's driver) next to Kafka's own ProducerPerformance.

Starts a local 3-broker cluster (torn down at the end), then alternates the two producers for
`--rounds` rounds (even rounds ProducerPerformance first, odd rounds the driver first), after one
unmeasured warm-up run of each (`--warmup` records: brokers and page cache), each
writing `--records` records of `--record-size` bytes to a fresh topic (3 partitions, RF 3,
min ISR 2) at full speed with identical, explicit producer settings:

    acks=all batch.size=262144 linger.ms=5 enable.idempotence=false
    max.in.flight.requests.per.connection=5 compression.type=none

Both run on the kafka-clients of `--kafka-version` from the same `libs/` (the driver adds only its
own jar). How each rate is measured:
  - ProducerPerformance: its own final line (records completed / time from before the first
    send to after close), run as `java -cp 'libs/*' org.apache.kafka.tools.ProducerPerformance`;
  - the driver: from its ledger, acknowledged records / (last complete_ns - first send_ns), i.e.
    also from before the first send (which waits for metadata) to the last ack.
Neither includes JVM start-up. Prints every round, the medians and their ratio (target >= 0.85),
and each process's CPU seconds (user+sys, JVM start-up included): steadier than a rate on a busy
2-core host, where every CPU second a client spends is one the brokers do not get.

    flock /work/cluster.lock .venv/bin/python bench/java_producer.py [--records 300000] [--rounds 5]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins"))

from kafkaproof import logs  # noqa: E402
from kafkaproof.cluster import install  # noqa: E402
from kafkaproof.run import java_driver  # noqa: E402
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION  # noqa: E402
from kafkaproof.cluster import ClusterConfig, LocalCluster  # noqa: E402

PROPS = {"acks": "all", "batch.size": 262144, "linger.ms": 5, "enable.idempotence": "false",
         "max.in.flight.requests.per.connection": 5, "compression.type": "none"}
TIMEOUT_S = 600


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def producer_performance(dist: install.KafkaDistribution, bootstrap: str, topic: str, records: int,
                         size: int) -> tuple[float, float]:
    """Run Kafka's ProducerPerformance as the brief gives it; returns (its records/s, CPU seconds)."""
    props = [f"{k}={v}" for k, v in {"bootstrap.servers": bootstrap, **PROPS}.items()]
    cmd = [install.java_binary(), "-cp", f"{dist.libs}/*", "org.apache.kafka.tools.ProducerPerformance",
           "--topic", topic, "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
           "--producer-props", *props]
    cpu0 = _children_cpu_s()
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, check=True).stdout
    cpu = _children_cpu_s() - cpu0
    final = [line for line in out.splitlines() if "records sent" in line][-1]
    return float(re.search(r"([\d.]+) records/sec", final).group(1)), cpu


def driver(version: str, bootstrap: str, topic: str, records: int, size: int) -> tuple[float, float, float, int]:
    """Run the Java recording producer; returns (records/s from its ledger, wall s incl. JVM, CPU s, acked)."""
    with tempfile.TemporaryDirectory(prefix="kp-bench-java-") as tmp:
        spec = {"run_id": "bench", "out": tmp, "index": 0, "topic": topic, "bootstrap": bootstrap, "rate": None,
                "messages": records, "value_size": size, "keys": {"distribution": "none"}, "config": PROPS}
        path = Path(tmp) / "spec.json"
        path.write_text(json.dumps(spec))
        t0, cpu0 = time.monotonic(), _children_cpu_s()
        proc = subprocess.run(java_driver.command("producer", path, version), capture_output=True, text=True,
                              timeout=TIMEOUT_S)
        wall, cpu = time.monotonic() - t0, _children_cpu_s() - cpu0
        if proc.returncode != 0:
            raise RuntimeError(f"driver exited {proc.returncode}: {proc.stderr[-2000:]}")
        sends = java_driver.read_tsv(Path(tmp) / "producer-0.sends.tsv", java_driver.SENDS_TSV)
        done = java_driver.read_tsv(Path(tmp) / "producer-0.completions.tsv", java_driver.COMPLETIONS_TSV)
        acked = done.filter(done.column("outcome").to_numpy(zero_copy_only=False) == "ok")
        if sends.num_rows != records or done.num_rows != records:
            raise RuntimeError(f"driver recorded {sends.num_rows} sends, {done.num_rows} completions of {records}")
        first = min(sends.column("send_ns").to_pylist())
        last = max(done.column("complete_ns").to_pylist())
        return acked.num_rows / ((last - first) / 1e9), wall, cpu, acked.num_rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=300_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=100_000, help="records of one unmeasured run of each first (0: none)")
    ap.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    ap.add_argument("--target", type=float, default=0.85)
    args = ap.parse_args()
    logs.setup()
    dist = install.ensure_kafka(args.kafka_version)
    java_driver.build()
    java_driver.client_classpath(args.kafka_version)
    pp: list[float] = []
    kp: list[float] = []
    cpu: dict[str, list[float]] = {"pp": [], "kp": []}
    with LocalCluster.up(ClusterConfig(name="bench-java", kafka_version=args.kafka_version)) as cluster:
        bootstrap = cluster.bootstrap_servers()
        if args.warmup:  # a fresh cluster's first topic is slow whoever writes it: warm both paths, unmeasured
            for who in ("pp", "kp"):
                topic = f"bench-warmup-{who}"
                cluster.create_topic(topic, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
                if who == "pp":
                    producer_performance(dist, bootstrap, topic, args.warmup, args.record_size)
                else:
                    driver(args.kafka_version, bootstrap, topic, args.warmup, args.record_size)
        for r in range(args.rounds):
            order = ("pp", "kp") if r % 2 == 0 else ("kp", "pp")
            for who in order:
                topic = f"bench-{who}-{r}"
                cluster.create_topic(topic, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
                load = os.getloadavg()[0]
                if who == "pp":
                    rate, used = producer_performance(dist, bootstrap, topic, args.records, args.record_size)
                    pp.append(rate)
                    print(f"round {r}: ProducerPerformance  {rate:10.0f} records/s  CPU {used:5.2f} s  "
                          f"(load {load:.1f})", flush=True)
                else:
                    rate, wall, used, acked = driver(args.kafka_version, bootstrap, topic, args.records,
                                                     args.record_size)
                    kp.append(rate)
                    print(f"round {r}: kafkaproof driver    {rate:10.0f} records/s  CPU {used:5.2f} s  "
                          f"(load {load:.1f}; {acked} acked, every send and ack recorded; process {wall:.1f} s)",
                          flush=True)
                cpu[who].append(used)
    ratio = statistics.median(kp) / statistics.median(pp)
    print(f"records={args.records} size={args.record_size}B kafka-clients {args.kafka_version}, 3 brokers, RF 3, "
          f"min ISR 2, 3 partitions; " + " ".join(f"{k}={v}" for k, v in PROPS.items()))
    print(f"ProducerPerformance median: {statistics.median(pp):10.0f} records/s  (rounds: "
          f"{', '.join(f'{x:.0f}' for x in pp)})")
    print(f"kafkaproof driver median:   {statistics.median(kp):10.0f} records/s  (rounds: "
          f"{', '.join(f'{x:.0f}' for x in kp)})")
    print(f"ratio driver/ProducerPerformance: {ratio:.2f} (target >= {args.target}); per round: "
          f"{', '.join(f'{a / b:.2f}' for a, b in zip(kp, pp))}")
    cpu_pp, cpu_kp = statistics.median(cpu["pp"]), statistics.median(cpu["kp"])
    print(f"CPU seconds per run, median: ProducerPerformance {cpu_pp:.2f}, driver {cpu_kp:.2f} "
          f"(ratio {cpu_kp / cpu_pp:.2f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
