#!/usr/bin/env python3
"""What entering a container's network costs a network fault: the attached namespace (`netns`
mode) against a tools container through the engine (`engine` mode, any engine).

    PYTHONPATH=plugins .venv/bin/python bench/container_faults.py [--rounds 5]

Starts one 3-node compose cluster (netns mode, so both ways in exist: the attached namespace
`kp<slot>n1` and `docker:<container>` of the same node), then per round applies an isolate
ruleset to node 1 and deletes it again, once each way (the order alternates between rounds),
timing the apply (what delays a fault against its schedule) and the heal (reading the drop
counters, then deleting the table, as the injector does). Prints every round and the medians
side by side with the ratio engine / netns. Needs root and the engine on this host; run it under
the shared lock on a quiet host.
"""
from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from kafkaproof.cluster import network, start_cluster  # noqa: E402
from kafkaproof.faults.network_rules import isolate_rules  # noqa: E402
from kafkaproof.spec.cluster import ClusterConfig  # noqa: E402


def one(namespace: str, round_no: int) -> tuple[float, float]:
    """(seconds to apply, seconds to heal) of one isolate ruleset in `namespace`."""
    table = f"kp_bench_{round_no}"
    ruleset = network.nft_ruleset(table, *isolate_rules())
    t = time.monotonic()
    network.nft_apply(namespace, ruleset)
    applied = time.monotonic() - t
    if table not in network.nft_tables(namespace):
        raise SystemExit(f"{table} is not in {namespace} after nft_apply")
    t = time.monotonic()
    network.nft_dropped(namespace, table)
    network.nft_delete_table(namespace, table)
    return applied, time.monotonic() - t


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cluster = start_cluster(ClusterConfig(name="bench-cfaults", brokers=3, backend="compose"))
    try:
        if cluster.state()["network"] != "netns":
            raise SystemExit("the cluster came up in engine mode: run as root with the engine on this host")
        ways = {"netns": cluster.node_link(1).namespace, "engine": f"docker:{cluster.node(1)['container']}"}
        figures: dict[str, list[tuple[float, float]]] = {w: [] for w in ways}
        print(f"{'round':>5} {'way':>7} {'apply s':>8} {'heal s':>7}")
        for r in range(args.rounds):
            order = ("netns", "engine") if r % 2 == 0 else ("engine", "netns")
            for way in order:
                applied, healed = one(ways[way], r)
                figures[way].append((applied, healed))
                print(f"{r + 1:>5} {way:>7} {applied:>8.3f} {healed:>7.3f}", flush=True)
    finally:
        cluster.down(keep_logs=False, graceful=False)
    med = {w: (statistics.median(x[0] for x in f), statistics.median(x[1] for x in f)) for w, f in figures.items()}
    print(f"median  netns: apply {med['netns'][0]:.3f} s, heal {med['netns'][1]:.3f} s | "
          f"engine: apply {med['engine'][0]:.3f} s, heal {med['engine'][1]:.3f} s | "
          f"engine / netns: apply x{med['engine'][0] / med['netns'][0]:.1f}, heal x{med['engine'][1] / med['netns'][1]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
