"""Pure planning of network faults: which nft rules go into which node's namespace.

A partition shape becomes explicit groups (`resolve_partition_groups`), groups become per
node input/output drop rules (`partition_rules`), and so on; `FaultInjector` applies them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import FaultError


def resolve_partition_groups(shape: Any, node_ids: list[int], leader: int | None = None,
                             controller: int | None = None, rng: random.Random | None = None) -> list[list[int]]:
    """Pure: turn a partition shape (or explicit groups) into explicit groups of node ids.

    For `bridge` the result is [A, B, [bridge]] where the bridge node keeps talking to both sides.
    """
    rng = rng or random.Random()
    if isinstance(shape, list):
        unknown = sorted({i for g in shape for i in g} - set(node_ids))
        if unknown:
            raise FaultError(f"partition groups name nodes {unknown} that the cluster does not have ({node_ids})")
        return [list(g) for g in shape]
    ids = list(node_ids)
    if shape == "majority-minority":
        rng.shuffle(ids)
        k = len(ids) // 2
        return [sorted(ids[:k]), sorted(ids[k:])]
    if shape.startswith("leader-minority:"):
        if leader is None:
            raise FaultError("leader-minority: the partition has no leader to isolate")
        return [[leader], sorted(i for i in ids if i != leader)]
    if shape == "controller-minority":
        if controller is None:
            raise FaultError("controller-minority: no active controller to isolate")
        return [[controller], sorted(i for i in ids if i != controller)]
    if shape == "bridge":
        if len(ids) < 3:
            raise FaultError("a bridge partition needs at least 3 nodes")
        rng.shuffle(ids)
        bridge, rest = ids[0], ids[1:]
        k = len(rest) // 2
        return [sorted(rest[:k]), sorted(rest[k:]), [bridge]]
    raise FaultError(f"unknown partition shape {shape!r}")


def partition_rules(groups: list[list[int]], ips: Mapping[int, str], bridge: bool = False) -> dict[int, tuple[list[str], list[str]]]:
    """Pure: per node, (input rules, output rules) cutting it from nodes of the other groups.

    With `bridge`, the last group is the bridge: its nodes keep talking to everyone.
    """
    sides = groups[:-1] if bridge else groups
    rules: dict[int, tuple[list[str], list[str]]] = {}
    for gi, group in enumerate(sides):
        others = [ips[n] for gj, g in enumerate(sides) if gj != gi for n in g]
        if not others:
            continue
        peer_set = "{ " + ", ".join(others) + " }"
        for n in group:
            rules[n] = ([f"ip saddr {peer_set} drop"], [f"ip daddr {peer_set} drop"])
    return rules


def isolate_rules() -> tuple[list[str], list[str]]:
    return ['iifname "eth0" drop'], ['oifname "eth0" drop']


def cut_clients_rules(cluster_ips: list[str]) -> tuple[list[str], list[str]]:
    peer_set = "{ " + ", ".join(cluster_ips) + " }"
    return ([f'iifname "eth0" ip saddr != {peer_set} drop'], [f'oifname "eth0" ip daddr != {peer_set} drop'])


def one_way_cut_rules(dest_ips: list[str] | None, cluster_ips: list[str]) -> list[str]:
    """Output rules of the source node: drop what it sends to `dest_ips` (None: to clients)."""
    if dest_ips is None:
        return [f'oifname "eth0" ip daddr != {{ {", ".join(cluster_ips)} }} drop']
    return [f"ip daddr {{ {', '.join(dest_ips)} }} drop"]


def packet_loss_rules(percent: float) -> tuple[list[str], list[str]]:
    """Drop `percent`% of packets each way, chosen at random per packet (nft numgen)."""
    threshold = int(round(percent * 100))
    rule = f"numgen random mod 10000 < {threshold} drop"
    return [f'iifname "eth0" {rule}'], [f'oifname "eth0" {rule}']


@dataclass
class NetworkPlan:
    """Pure result of planning a network fault: nft rules per node, nodes to rate-limit, resolved groups."""

    rules: dict[int, tuple[list[str], list[str]]]
    tc_nodes: list[int] = field(default_factory=list)
    groups: list[list[int]] | None = None
