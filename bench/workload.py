#!/usr/bin/env python3
"""The Python recording producer (kafkaproof's librdkafka worker) next to a plain confluent-kafka producer.

    flock /work/cluster.lock .venv/bin/python bench/workload.py [--records 300000] [--rounds 5]

Starts a local 3-broker cluster (torn down at the end), then alternates the two producers for
`--rounds` rounds (even rounds the plain one first, odd rounds the recorder first) after one
unmeasured warm-up run of each, each writing `--records` records of `--record-size` bytes to a
fresh topic (3 partitions, RF 3, min ISR 2) at full speed, with identical explicit settings:

    acks=all batch.size=262144 linger.ms=5 enable.idempotence=false
    max.in.flight.requests.per.connection=5 compression.type=none

- the plain producer: `produce()` of the same payload in a loop with a delivery callback that only
  counts (an application that wants to know its sends landed needs at least that), `poll(0)`
  after each send, `flush()` at the end; rate = acked / (first send .. last ack);
- the recorder: `python -m kafkaproof.run.workload producer` with `rate: null`; rate from its own
  ledger streams, acked / (first send_ns .. last complete_ns).

Both run in their own process and exclude interpreter start-up. Prints every round, the medians
and the ratio recorder / plain (target >= 0.8), and each process's CPU seconds.
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins"))

from rounds import alternate  # noqa: E402  (bench/, the script's own directory)

from kafkaproof import logs  # noqa: E402
from kafkaproof.cluster import ClusterConfig, LocalCluster  # noqa: E402
from kafkaproof.run.workers import worker_env  # noqa: E402
from kafkaproof.run.workload import COMPLETION_STREAM, SEND_STREAM, read_stream  # noqa: E402

SETTINGS = {"acks": "all", "batch.size": 262144, "linger.ms": 5, "enable.idempotence": False,
            "max.in.flight.requests.per.connection": 5, "compression.type": "none"}

PLAIN = textwrap.dedent("""
    import json, sys, time
    from confluent_kafka import Producer
    args = json.loads(sys.argv[1])
    acked = 0
    last = 0
    def done(err, msg):
        global acked, last
        if err is None:
            acked += 1
            last = time.monotonic_ns()
    p = Producer({"bootstrap.servers": args["bootstrap"], **args["settings"]})
    value = b"x" * args["size"]
    first = time.monotonic_ns()
    for _ in range(args["records"]):
        while True:
            try:
                p.produce(args["topic"], value=value, on_delivery=done)
                break
            except BufferError:
                p.poll(0.01)
        p.poll(0)
    p.flush(120)
    print(json.dumps({"acked": acked, "seconds": (last - first) / 1e9}))
""")


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def plain(bootstrap: str, topic: str, records: int, size: int) -> tuple[float, float]:
    """(records/s acked, CPU s) of a plain confluent-kafka producer."""
    cpu = cpu_of_children()
    out = subprocess.run([sys.executable, "-c", PLAIN, json.dumps(
        {"bootstrap": bootstrap, "topic": topic, "records": records, "size": size, "settings": SETTINGS})],
        capture_output=True, text=True, timeout=600, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["acked"] / result["seconds"], cpu_of_children() - cpu


def recorder(bootstrap: str, topic: str, records: int, size: int) -> tuple[float, float]:
    """(records/s acked, CPU s) of kafkaproof's recording producer at full speed."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"run_id": "bench", "out": tmp, "index": 0, "topic": topic, "bootstrap": bootstrap, "rate": None,
                "messages": records, "value_size": size, "keys": {"distribution": "none"}, "config": SETTINGS}
        path = Path(tmp) / "spec.json"
        path.write_text(json.dumps(spec))
        cpu = cpu_of_children()
        subprocess.run([sys.executable, "-m", "kafkaproof.run.workload", "producer", str(path)], check=True, timeout=600,
                       env=worker_env())
        cpu = cpu_of_children() - cpu
        sends = read_stream(Path(tmp) / "producer-0.sends.arrow", SEND_STREAM).to_pandas()
        done = read_stream(Path(tmp) / "producer-0.completions.arrow", COMPLETION_STREAM).to_pandas()
        ok = done[done["error_name"].isna()]
        return len(ok) / ((ok["complete_ns"].max() - sends["send_ns"].min()) / 1e9), cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=50_000)
    args = parser.parse_args()
    logs.setup()
    runs = {"plain": plain, "recorder": recorder}
    with LocalCluster.up(ClusterConfig(name="bench-workload")) as cluster:
        bootstrap = cluster.bootstrap_servers()

        def once(name: str, label: str, records: int) -> tuple[float, float]:
            topic = f"bench-{name}-{label}"
            cluster.create_topic(topic, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
            return runs[name](bootstrap, topic, records, args.record_size)

        for name in runs:
            once(name, "warmup", args.warmup)
        print(f"{args.records} records of {args.record_size} B, {json.dumps(SETTINGS)}")
        print(f"{'round':>5} {'producer':>9} {'records/s':>10} {'CPU s':>6}")
        med = alternate(("plain", "recorder"), args.rounds, lambda name, r: once(name, str(r), args.records),
                        lambda n, name, x: f"{n:>5} {name:>9} {x[0]:>10.0f} {x[1]:>6.1f}")
    print(f"median  plain {med['plain'][0]:.0f} rec/s ({med['plain'][1]:.1f} CPU s) | recorder "
          f"{med['recorder'][0]:.0f} rec/s ({med['recorder'][1]:.1f} CPU s) | recorder / plain "
          f"{med['recorder'][0] / med['plain'][0]:.2f} (target >= 0.8)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
