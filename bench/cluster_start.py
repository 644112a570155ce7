#!/usr/bin/env python3
"""Time to ready of a cluster: the local backend (JVMs here) against the compose backend (containers).

    PYTHONPATH=plugins .venv/bin/python bench/cluster_start.py [--brokers 3] [--controllers 0] [--rounds 3] [--graceful]

Each round starts a local and a compose cluster of the same layout and Kafka version, one
after the other (the order alternates between rounds), through `start_cluster`, which
returns once every broker is registered and the quorum has a leader; then it tears each
down and times that too (killing the nodes, as runs do; with `--graceful` as `kafkaproof
cluster down` does). Prints every round and the medians side by side, and the ratio
compose / local. The compose engine, image and CLI are set up (cached) before the first
round, so their one-off cost is not counted. Run it under the shared lock on a quiet host.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from rounds import alternate  # noqa: E402  (bench/, the script's own directory)

from kafkaproof.cluster import start_cluster  # noqa: E402
from kafkaproof.cluster import docker_engine as de  # noqa: E402
from kafkaproof.spec.cluster import ClusterConfig  # noqa: E402
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION  # noqa: E402


def one(backend: str, brokers: int, controllers: int, version: str, round_no: int,
        graceful: bool = False) -> tuple[float, float]:
    """(seconds to ready, seconds to tear down) of one cluster."""
    config = ClusterConfig(name=f"bench-start-{backend}-{round_no}", brokers=brokers, controllers=controllers,
                           kafka_version=version, backend=backend)
    t = time.monotonic()
    cluster = start_cluster(config)
    ready = time.monotonic() - t
    t = time.monotonic()
    cluster.down(keep_logs=False, graceful=graceful)
    return ready, time.monotonic() - t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--brokers", type=int, default=3)
    parser.add_argument("--controllers", type=int, default=0)
    parser.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--graceful", action="store_true",
                        help="tear down gracefully (SIGTERM, as `kafkaproof cluster down` does) "
                             "instead of as runs do (SIGKILL)")
    args = parser.parse_args()
    de.ensure_engine()
    de.ensure_compose_cli()
    de.ensure_image(args.kafka_version)
    print(f"{args.brokers} brokers, {args.controllers} dedicated controllers, Kafka {args.kafka_version}, "
          f"{'graceful' if args.graceful else 'killing'} teardown")
    print(f"{'round':>5} {'backend':>8} {'ready s':>8} {'down s':>7}")
    med = alternate(("local", "compose"), args.rounds,
                    lambda backend, r: one(backend, args.brokers, args.controllers, args.kafka_version, r,
                                           args.graceful),
                    lambda n, backend, x: f"{n:>5} {backend:>8} {x[0]:>8.1f} {x[1]:>7.1f}")
    print(f"median ready: local {med['local'][0]:.1f} s, compose {med['compose'][0]:.1f} s "
          f"(compose / local = {med['compose'][0] / med['local'][0]:.2f}); "
          f"teardown: local {med['local'][1]:.1f} s, compose {med['compose'][1]:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
