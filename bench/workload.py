"""Producer throughput with every ack recorded, next to Kafka's own ProducerPerformance.

Runs on a local 3-broker cluster (started and torn down here), same topic
settings and producer settings for both, and prints both rates and their ratio.

    .venv/bin/python bench/workload.py [--records 200000] [--record-size 100] [--acks all]
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins"))

from kafkaproof import logs  # noqa: E402
from kafkaproof.cluster import ClusterConfig, LocalCluster  # noqa: E402
from kafkaproof.run.workload import COMPLETION_STREAM, SEND_STREAM, read_stream  # noqa: E402


def kafkaproof_producer(bootstrap: str, topic: str, records: int, size: int, props: dict) -> tuple[float, int]:
    """Run one recording producer process at full speed; returns (records/s acked, acked)."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = {"run_id": "bench", "out": tmp, "index": 0, "topic": topic, "bootstrap": bootstrap, "rate": None,
                "messages": records, "value_size": size, "keys": {"distribution": "none"}, "config": props}
        path = Path(tmp) / "spec.json"
        path.write_text(json.dumps(spec))
        subprocess.run([sys.executable, "-m", "kafkaproof.run.workload", "producer", str(path)], check=True, timeout=600)
        sends = read_stream(Path(tmp) / "producer-0.sends.arrow", SEND_STREAM).to_pandas()
        done = read_stream(Path(tmp) / "producer-0.completions.arrow", COMPLETION_STREAM).to_pandas()
        acked = int(done["error_name"].isna().sum())
        seconds = (done["complete_ns"].max() - sends["send_ns"].min()) / 1e9
        return acked / seconds, acked


def kafka_producer_performance(cluster: LocalCluster, topic: str, records: int, size: int, props: dict) -> float:
    """Run org.apache.kafka.tools.ProducerPerformance; returns its records/s."""
    prop_args = [f"{k}={v}" for k, v in {"bootstrap.servers": cluster.bootstrap_servers(), **props}.items()]
    cmd = cluster.dist.java_command("org.apache.kafka.tools.ProducerPerformance", "--topic", topic,
                                    "--num-records", str(records), "--record-size", str(size), "--throughput", "-1",
                                    "--producer-props", *prop_args, heap="512m")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=True).stdout
    final = [line for line in out.splitlines() if "records sent" in line][-1]
    return float(re.search(r"([\d.]+) records/sec", final).group(1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--record-size", type=int, default=100)
    ap.add_argument("--acks", default="all")
    ap.add_argument("--linger-ms", type=int, default=5)
    args = ap.parse_args()
    logs.setup()
    # Java and librdkafka share these names and meanings.
    props = {"acks": args.acks, "linger.ms": args.linger_ms}
    with LocalCluster.up(ClusterConfig(name="bench-workload")) as cluster:
        for topic in ("bench-kafkaproof", "bench-kafka"):
            cluster.create_topic(topic, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
        ours, acked = kafkaproof_producer(cluster.bootstrap_servers(), "bench-kafkaproof", args.records,
                                          args.record_size, props)
        theirs = kafka_producer_performance(cluster, "bench-kafka", args.records, args.record_size, props)
    print(f"records={args.records} size={args.record_size}B acks={args.acks} linger.ms={args.linger_ms} "
          f"(3 brokers, RF 3, min ISR 2, 3 partitions)")
    print(f"kafkaproof producer (every ack recorded): {ours:10.0f} records/s ({acked} acked)")
    print(f"Kafka ProducerPerformance:               {theirs:10.0f} records/s")
    print(f"ratio: {ours / theirs:.2f} (target >= 0.70)")


if __name__ == "__main__":
    main()
