#!/usr/bin/env python3
"""Producer throughput directly to a Kafka cluster vs. through the kafkaproof fault proxy (no rules).

Usage (from the repo root):

    PYTHONPATH=plugins .venv/bin/python bench/proxy.py --bootstrap 127.0.0.1:9092
    PYTHONPATH=plugins .venv/bin/python bench/proxy.py --bootstrap 10.0.0.1:9092 \\
        --listen 1@127.0.0.1:0=10.0.0.1:9092 --listen 2@127.0.0.1:0=10.0.0.2:9092 --repeat 3

What it does:
  1. reads the cluster's brokers from --bootstrap (a direct metadata request);
  2. starts the proxy as a subprocess (`python -m kafkaproof.proxy`), one listener per
     broker on a free 127.0.0.1 port unless --listen gives the mapping, with address
     rewriting on (so the unmodified cluster is reached only through the proxy);
  3. creates the topic if missing, then alternates direct and proxied runs (--repeat
     rounds), each producing --messages values of --size bytes, stopping early at
     --seconds; a run counts only values acknowledged by the broker;
  4. prints msgs/s and MB/s of both paths and the ratio proxied/direct (median over rounds),
     the proxy's CPU seconds per GB forwarded (steadier than throughput on a busy host),
     and the proxy's own counters, proving the proxied traffic went through it.

Exit code: 0, or 1 if --min-ratio is given and not reached, 2 on setup errors.
Bounded: at most 2 * repeat runs of --seconds each, plus topic creation and proxy start.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from confluent_kafka import KafkaException, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kafkaproof.proxy import ProxyError, ProxyProcess  # noqa: E402


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command line."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bootstrap", required=True, help="bootstrap.servers of the real cluster (direct path)")
    p.add_argument("--listen", action="append", default=[], metavar="[NODE_ID@]HOST:PORT=UPSTREAM_HOST:PORT",
                   help="proxy listener per broker (default: one per broker found, on 127.0.0.1:0)")
    p.add_argument("--proxy-bootstrap", help="use an already running proxy at this address instead of starting one")
    p.add_argument("--topic", default="kafkaproof-proxy-bench")
    p.add_argument("--partitions", type=int, default=6)
    p.add_argument("--replication-factor", type=int, default=0, help="default: min(3, brokers)")
    p.add_argument("--messages", type=int, default=1_000_000, help="values per run (default 1000000)")
    p.add_argument("--size", type=int, default=512, help="value size in bytes (default 512)")
    p.add_argument("--seconds", type=float, default=30.0, help="time limit per run (default 30)")
    p.add_argument("--repeat", type=int, default=3, help="rounds of (direct, proxied) runs (default 3)")
    p.add_argument("--acks", default="all")
    p.add_argument("--linger-ms", type=int, default=5)
    p.add_argument("--compression", default="none")
    p.add_argument("--events", help="proxy event file (default: none)")
    p.add_argument("--min-ratio", type=float, help="exit 1 if proxied/direct msgs/s is below this")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = p.parse_args(argv)
    if args.messages < 1 or args.size < 1 or args.seconds <= 0 or args.repeat < 1:
        p.error("--messages, --size, --seconds and --repeat must be positive")
    return args


def cluster_brokers(bootstrap: str) -> list[tuple[int, str, int]]:
    """(node id, host, port) of every broker, as the cluster advertises them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    md = admin.list_topics(timeout=15)
    return sorted((b.id, b.host, b.port) for b in md.brokers.values())


def ensure_topic(bootstrap: str, topic: str, partitions: int, rf: int) -> None:
    """Create the bench topic unless it exists."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=15).topics:
        return
    futures = admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=rf)])
    try:
        futures[topic].result(30)
    except KafkaException as exc:
        if "TOPIC_ALREADY_EXISTS" not in str(exc):
            raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        md = admin.list_topics(topic=topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and all(p.leader >= 0 for p in md.partitions.values()):
            return
        time.sleep(0.2)
    raise RuntimeError(f"topic {topic} has no leaders after 30 s")


def run_producer(bootstrap: str, args: argparse.Namespace, label: str) -> dict[str, Any]:
    """Produce up to --messages values within --seconds; returns throughput of acknowledged values."""
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": args.acks, "linger.ms": args.linger_ms,
        "compression.type": args.compression, "queue.buffering.max.messages": 200_000,
        "queue.buffering.max.kbytes": 512 * 1024, "message.timeout.ms": int(args.seconds * 1000) + 30_000,
        "client.id": f"proxy-bench-{label}",
    })
    acked = [0]
    failed = [0]

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is None:
            acked[0] += 1
        else:
            failed[0] += 1

    # Warm-up: metadata and connections are not part of the measurement.
    producer.produce(args.topic, b"warmup", on_delivery=lambda *_: None)
    producer.flush(30)
    value = b"x" * args.size
    sent = 0
    start = time.monotonic()
    deadline = start + args.seconds
    while sent < args.messages and time.monotonic() < deadline:
        try:
            producer.produce(args.topic, value, on_delivery=on_delivery)
            sent += 1
        except BufferError:
            producer.poll(0.005)
        if sent % 1000 == 0:
            producer.poll(0)
    left = producer.flush(max(deadline - time.monotonic(), 0) + 30)
    elapsed = time.monotonic() - start
    return {
        "path": label, "sent": sent, "acked": acked[0], "failed": failed[0], "undelivered": left,
        "seconds": round(elapsed, 3), "msgs_per_s": round(acked[0] / elapsed, 1),
        "mb_per_s": round(acked[0] * args.size / elapsed / 1e6, 2),
    }


def process_cpu_s(pid: int | None) -> float | None:
    """User+system CPU seconds of a process so far (Linux /proc), None if unknown."""
    if pid is None:
        return None
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median throughput per path and the proxied/direct ratio."""
    def median(path: str, key: str) -> float:
        return statistics.median(r[key] for r in runs if r["path"] == path)

    direct, proxied = median("direct", "msgs_per_s"), median("proxy", "msgs_per_s")
    return {"direct_msgs_per_s": direct, "proxy_msgs_per_s": proxied,
            "direct_mb_per_s": median("direct", "mb_per_s"), "proxy_mb_per_s": median("proxy", "mb_per_s"),
            "ratio": round(proxied / direct, 3) if direct else 0.0}


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark; see the module docstring."""
    args = parse_args(argv)
    try:
        brokers = cluster_brokers(args.bootstrap)
    except KafkaException as exc:
        print(f"cannot read metadata from {args.bootstrap}: {exc}", file=sys.stderr)
        return 2
    if not brokers:
        print(f"no brokers reported by {args.bootstrap}", file=sys.stderr)
        return 2
    rf = args.replication_factor or min(3, len(brokers))
    ensure_topic(args.bootstrap, args.topic, args.partitions, rf)
    listen = args.listen or [f"{node}@127.0.0.1:0={host}:{port}" for node, host, port in brokers]
    runs: list[dict[str, Any]] = []
    proxy_stats: dict[str, Any] = {}
    proxy: ProxyProcess | None = None
    try:
        if args.proxy_bootstrap:
            proxy_bootstrap = args.proxy_bootstrap
        else:
            proxy = ProxyProcess(listen, events=args.events, log_level="WARNING").start()
            proxy_bootstrap = proxy.bootstrap
        for round_no in range(args.repeat):
            for label, bootstrap in (("direct", args.bootstrap), ("proxy", proxy_bootstrap)):
                cpu_before = process_cpu_s(proxy.pid if proxy else None)
                result = run_producer(bootstrap, args, label)
                cpu_after = process_cpu_s(proxy.pid if proxy else None)
                result["round"] = round_no
                if label == "proxy" and cpu_before is not None and cpu_after is not None:
                    # CPU the proxy burnt per GB forwarded: a steadier figure than throughput on a busy host.
                    gigabytes = result["acked"] * args.size / 1e9
                    result["proxy_cpu_s"] = round(cpu_after - cpu_before, 2)
                    result["proxy_cpu_s_per_gb"] = round((cpu_after - cpu_before) / gigabytes, 2) if gigabytes else None
                runs.append(result)
                if not args.json:
                    print(f"round {round_no} {label:>6}: {result['acked']:>8} acked in {result['seconds']:>7.2f} s"
                          f" = {result['msgs_per_s']:>10.1f} msg/s {result['mb_per_s']:>8.2f} MB/s"
                          f" (failed {result['failed']}, undelivered {result['undelivered']})"
                          + (f", proxy CPU {result['proxy_cpu_s']} s = {result['proxy_cpu_s_per_gb']} s/GB"
                             if "proxy_cpu_s" in result else ""), flush=True)
        if proxy is not None:
            proxy_stats = proxy.stats()
    except ProxyError as exc:
        print(f"proxy failed: {exc}", file=sys.stderr)
        return 2
    finally:
        if proxy is not None:
            proxy.stop()
    summary = summarize(runs)
    listeners = proxy_stats.get("listeners", [])
    if args.json:
        print(json.dumps({"args": vars(args), "brokers": brokers, "runs": runs, "summary": summary,
                          "proxy_listeners": listeners}))
    else:
        print(f"\nmessages <= {args.messages} x {args.size} B, acks={args.acks}, linger.ms={args.linger_ms}, "
              f"compression={args.compression}, {len(brokers)} broker(s), topic {args.topic}")
        print(f"direct : {summary['direct_msgs_per_s']:>10.1f} msg/s  {summary['direct_mb_per_s']:>8.2f} MB/s")
        print(f"proxied: {summary['proxy_msgs_per_s']:>10.1f} msg/s  {summary['proxy_mb_per_s']:>8.2f} MB/s")
        print(f"ratio proxied/direct: {summary['ratio']:.3f}")
        for item in listeners:
            print(f"  proxy {item['proxy']} -> broker {item['broker']} at {item['upstream']}: "
                  f"{item['requests']} requests, {item['bytes_from_clients'] / 1e6:.1f} MB in, "
                  f"{item['connections_total']} connections")
    if args.min_ratio is not None and summary["ratio"] < args.min_ratio:
        print(f"ratio {summary['ratio']} is below --min-ratio {args.min_ratio}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
