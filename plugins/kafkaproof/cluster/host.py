"""What a cluster backend shares with every other cluster on this host: slots, strays, forgetting a cluster.

A cluster's slot (`slots.py`) decides its subnets, namespaces and loopback ports; `claimed_slot`
picks one that nothing on this host uses (a cluster of this state directory, a leftover namespace, a
route, another state directory's claim) and claims it while the cluster's state file is written.
`forget_cluster` removes a cluster's state file and its slot's claim; `clear_strays` stops what a
crash left outside any state file (processes still naming a cluster's directory, FUSE mounts, this
state directory's namespaces). Tearing every cluster down (`backend.down_all`) builds on these.

This module knows no backend: the backends import it, never the other way round.
"""
from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from typing import Iterator

from ..errors import ClusterError, ClusterNotRunning
from ..paths import state_dir
from ..spec.cluster import MAX_SLOTS, plan_link, routed_slots
from . import network, process, slots, state
from .disks import unmount_leftovers

log = logging.getLogger(__name__)


def used_slots(use_netns: bool) -> set[int]:
    """The cluster slots (namespace names kp<slot>n<id>, subnets, loopback ports) a cluster of this state
    directory, a leftover namespace or a route of this host uses (`routed_slots`)."""
    used = routed_slots(network.route_destinations())
    for name in state.list_clusters():
        try:
            slot = state.load_state(name).slot
        except (ClusterNotRunning, KeyError, TypeError, ValueError):  # half-written, or not a state file
            continue
        if slot is not None:
            used.add(slot)
    if use_netns:
        for ns in network.list_kafkaproof_namespaces():
            used.add(int(ns[2:ns.index("n", 2)]))
    return used


def free_slot(use_netns: bool) -> int:
    """A cluster slot nothing uses (`used_slots`) and no cluster of any state directory on this host claims
    (`slots`), without claiming it."""
    used = used_slots(use_netns) | slots.taken_slots()
    for slot in range(1, MAX_SLOTS + 1):
        if slot not in used:
            return slot
    raise ClusterError("no free cluster slot: run `kafkaproof cluster down --all`")


@contextlib.contextmanager
def claimed_slot(name: str, use_netns: bool) -> Iterator[int]:
    """Claim a free slot for cluster `name` in the host's registry (`slots`), so that no cluster of another
    state directory takes it; the caller writes the cluster's state file, naming the slot, inside the block."""
    with slots.locked() as registry:
        yield slots.claim(registry, state.state_path(name), name, range(1, MAX_SLOTS + 1), used_slots(use_netns))


def forget_cluster(name: str) -> None:
    """Forget a cluster that is down: its state file, and its claim of a host-wide slot (`slots`)."""
    slot = state.remove_state(name)
    if slot:
        slots.release(slot, state.state_path(name))


def sweep(directory: Path) -> list[int]:
    """Stop any process still naming `directory` (a node or proxy started an instant before a crash,
    before its pid reached the state file; a storage format in flight). Returns their pids."""
    refs = process.find_by_cmdline(f"{directory}/")
    for ref in refs:
        log.warning("stopping process %d, which still uses %s", ref.pid, directory)
        process.terminate(ref, grace_s=5.0)
    return [r.pid for r in refs]


def clear_strays() -> None:
    """Stop what crashed runs left outside any state file of this state directory: processes still naming
    its clusters' directories, FUSE mounts under them, and its stray `kp<s>n<id>` namespaces. Namespaces of
    another state directory on this host (its slots' claims, `slots`) stay."""
    clusters = state_dir() / "clusters"
    sweep(clusters)
    unmount_leftovers(clusters)
    if network.namespaces_supported():
        for ns in network.list_kafkaproof_namespaces():
            slot, node_id = ns[2:].split("n")
            if slots.claimed_by_others(int(slot), state_dir()):
                continue
            network.destroy_link(plan_link(int(slot), 0, int(node_id)))
