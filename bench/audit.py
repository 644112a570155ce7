"""Audit wall time: it grows with reliability classes, not with topics.

Starts a 3-broker cluster the way a team's would be (Kafka's defaults for auto-created topics: RF 1,
min ISR 1), with 3 topics of 3 classes (auto-created RF 1, RF 3 / min ISR 2, compacted RF 3), and
times `kafkaproof audit` on it; then adds topics of the same 3 classes up to `--topics` (default 50)
and times it again. The replica runs one scenario per class and fault, producing to the class's first
topic, so only discovery and the plan see the extra topics. Prints both wall times, the classes and
runs of each, and the ratio.

    .venv/bin/python bench/audit.py [--topics 50] [--faults leader-kill] [--fixes]

Default: one short fault (`leader-kill`, ~1 min per class) and no fix search, so the two audits run
the same 3 replica runs; with `--fixes` the failing class's fix rounds are timed too.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins"))

from kafkaproof import logs  # noqa: E402
from kafkaproof.audit import AuditRequest, run_audit  # noqa: E402
from kafkaproof.cluster import ClusterConfig, LocalCluster  # noqa: E402

CLASSES = ("auto", "safe", "compacted")


def add_topics(cluster: LocalCluster, names: list[str]) -> None:
    """Create `names`, cycling the 3 classes: auto-created by a producer's first send, RF 3 / min ISR 2, compacted."""
    from confluent_kafka import Producer
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers(), "acks": "1"})
    for i, name in enumerate(names):
        kind = CLASSES[i % len(CLASSES)]
        if kind == "auto":
            producer.produce(name, value=b"x")
        elif kind == "safe":
            cluster.create_topic(name, 3, 3, {"min.insync.replicas": 2})
        else:
            cluster.create_topic(name, 1, 3, {"cleanup.policy": "compact"})
    if producer.flush(60):
        raise RuntimeError("the producer that auto-creates the topics could not deliver")


def timed_audit(bootstrap: str, out: Path, faults: tuple[str, ...], fixes: bool) -> tuple[float, dict]:
    """One audit's wall time (s) and its audit.json."""
    t0 = time.monotonic()
    result = run_audit(AuditRequest(out=out, bootstrap=bootstrap, faults=faults, fixes=fixes))
    return time.monotonic() - t0, result.audit


def summary(audit: dict) -> str:
    runs = sum(len(c["runs"]) + sum(len(t["runs"]) for t in c["fixes_tried"]) for c in audit["classes"])
    topics = sum(len(c["topics"]) for c in audit["classes"])
    return (f"{topics} topics, {len(audit['classes'])} classes, {runs} replica runs, verdict {audit['verdict']} "
            f"({', '.join(c['label'] + ' ' + c['verdict'] for c in audit['classes'])})")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=50)
    parser.add_argument("--faults", default="leader-kill", help="the matrix's faults to run (comma-separated)")
    parser.add_argument("--fixes", action="store_true", help="search fixes too (default: the matrix alone)")
    parser.add_argument("--out", type=Path, default=None, help="where the two audits write (default: a temp dir)")
    args = parser.parse_args()
    logs.setup()
    out = args.out or Path(tempfile.mkdtemp(prefix="kp-bench-audit-"))
    faults = tuple(f for f in args.faults.split(",") if f)
    suffix = uuid.uuid4().hex[:6]
    cluster = LocalCluster.up(ClusterConfig(name=f"bench-audit-{suffix}", brokers=3, broker_config={
        "auto.create.topics.enable": "true", "default.replication.factor": 1, "num.partitions": 1,
        "min.insync.replicas": 1}))
    try:
        add_topics(cluster, [f"t{i:02d}-{suffix}" for i in range(3)])
        small_s, small = timed_audit(cluster.bootstrap_servers(), out / "three", faults, args.fixes)
        print(f"3 topics:  {small_s:7.1f} s  {summary(small)}", flush=True)
        add_topics(cluster, [f"t{i:02d}-{suffix}" for i in range(3, args.topics)])
        big_s, big = timed_audit(cluster.bootstrap_servers(), out / "many", faults, args.fixes)
        print(f"{args.topics} topics: {big_s:7.1f} s  {summary(big)}", flush=True)
    finally:
        cluster.down(graceful=False)
    print(f"ratio {args.topics} topics / 3 topics: {big_s / small_s:.2f} (faults: {', '.join(faults)}; "
          f"fixes {'searched' if args.fixes else 'not searched'}; audits in {out})")
    print(json.dumps({"three_s": round(small_s, 1), "many_s": round(big_s, 1), "topics": args.topics,
                      "ratio": round(big_s / small_s, 2), "faults": list(faults)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
