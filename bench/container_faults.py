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
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from rounds import alternate  # noqa: E402  (bench/, the script's own directory)

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
        if cluster.state().network != "netns":
            raise SystemExit("the cluster came up in engine mode: run as root with the engine on this host")
        ways = {"netns": cluster.node_link(1).namespace, "engine": f"docker:{cluster.node(1).container}"}
        print(f"{'round':>5} {'way':>7} {'apply s':>8} {'heal s':>7}")
        med = alternate(("netns", "engine"), args.rounds, lambda way, r: one(ways[way], r),
                        lambda n, way, x: f"{n:>5} {way:>7} {x[0]:>8.3f} {x[1]:>7.3f}")
    finally:
        cluster.down(keep_logs=False, graceful=False)
    print(f"median  netns: apply {med['netns'][0]:.3f} s, heal {med['netns'][1]:.3f} s | "
          f"engine: apply {med['engine'][0]:.3f} s, heal {med['engine'][1]:.3f} s | "
          f"engine / netns: apply x{med['engine'][0] / med['netns'][0]:.1f}, heal x{med['engine'][1] / med['netns'][1]:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
