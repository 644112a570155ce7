#!/usr/bin/env python3
"""What diskfs costs: a producer's throughput on a cluster whose log directories are on diskfs, next to
the same cluster on the plain filesystem.

    flock /work/cluster.lock .venv/bin/python bench/disk.py [--records 200000] [--rounds 4]

Starts two local 3-broker clusters, one with `--disk` (diskfs, FUSE) and one without (both torn
down at the end; the idle one waits while the other is measured), then alternates them for
`--rounds` rounds (even rounds the plain one first) after one unmeasured warm-up run on each. Each
run is bench/workload.py's plain confluent-kafka producer writing `--records` records of
`--record-size` bytes to a fresh topic (3 partitions, RF 3, min ISR 2, acks=all) at full speed.
Prints every round, the medians, the ratio diskfs / plain, and the CPU seconds the diskfs
processes used per run.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins"))

from rounds import alternate  # noqa: E402  (bench/, the script's own directory)
from workload import plain  # noqa: E402

from kafkaproof import logs  # noqa: E402
from kafkaproof.cluster import ClusterConfig, LocalCluster  # noqa: E402


def disk_cpu_s(cluster: LocalCluster) -> float:
    """CPU seconds the cluster's diskfs processes used so far (0 without disks)."""
    total = 0.0
    for node in cluster.state().nodes:
        pid = node.disk.process.pid if node.disk and node.disk.process else None
        if pid:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--record-size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=30_000)
    args = parser.parse_args()
    logs.setup()
    with LocalCluster.up(ClusterConfig(name="bench-plainfs")) as plainfs, \
            LocalCluster.up(ClusterConfig(name="bench-diskfs", disk=True)) as diskfs:
        clusters = {"plain": plainfs, "diskfs": diskfs}

        def once(name: str, label: str, records: int) -> tuple[float, float, float]:
            cluster = clusters[name]
            topic = f"bench-{label}"
            cluster.create_topic(topic, partitions=3, replication_factor=3, config={"min.insync.replicas": 2})
            before = disk_cpu_s(cluster)
            rate, cpu = plain(cluster.bootstrap_servers(), topic, records, args.record_size)
            return rate, cpu, disk_cpu_s(cluster) - before

        for name in clusters:
            once(name, "warmup", args.warmup)
        print(f"{args.records} records of {args.record_size} B, acks=all, 3 partitions RF 3")
        print(f"{'round':>5} {'disk':>7} {'records/s':>10} {'producer CPU s':>15} {'diskfs CPU s':>13}")
        med = alternate(("plain", "diskfs"), args.rounds, lambda name, r: once(name, str(r), args.records),
                        lambda n, name, x: f"{n:>5} {name:>7} {x[0]:>10.0f} {x[1]:>15.1f} {x[2]:>13.1f}")
    print(f"median  plain {med['plain'][0]:.0f} rec/s | diskfs {med['diskfs'][0]:.0f} rec/s "
          f"(diskfs processes {med['diskfs'][2]:.1f} CPU s a run) | diskfs / plain "
          f"{med['diskfs'][0] / med['plain'][0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
