"""Undoing faults: the mechanics of a heal, from the recipe each fault recorded in the state file.

A fault (see `kafkaproof.faults`) records how to heal it before it is relied on: nodes to
restart or resume, nft tables to delete, tc links to clear, proxy or disk rules to remove. Anything
that tears a cluster down can undo them, whoever injected them and whether that process still
lives; `heal_recorded` is what `down` and `fault heal --all` use. The fault log (JSON lines)
records every injection and heal with monotonic and wall-clock times.
"""
from __future__ import annotations

import json
import logging
import re
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from ..errors import ClusterError, FaultError
from ..spec.cluster import NodeLink
from ..spec.faults import PROXY_KINDS
from . import network
from .state import cluster_dir

log = logging.getLogger(__name__)

PROXY_RULE_ID_RE = re.compile(r"^(" + "|".join(PROXY_KINDS) + r")-[0-9a-f]{8}$")


def now() -> tuple[int, str]:
    """(monotonic ns, ISO-8601 UTC wall time) read together."""
    return time.monotonic_ns(), datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def append_fault_log(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def remove_proxy_rules(cluster, pairs: list) -> dict[str, int]:
    """Remove proxy rules ([node id, rule id] pairs); returns how often they fired/matched in total.

    A proxy that is not running has no rules left to remove.
    """
    from ..proxy import ControlError
    fired = matched = 0
    errors = []
    for nid, rule_id in pairs:
        try:
            client = cluster.proxy_control(nid)
        except FaultError as e:
            log.warning("rule %s on node %d: %s; nothing to remove", rule_id, nid, e)
            continue
        try:
            # The counters come with the removal: read before it, a firing in between went uncounted.
            # A proxy of an older kafkaproof (a cluster kept running across an upgrade) removes
            # without them; its counters read just before the removal are the best there is.
            before = {str(r.get("id")): r for r in client.rules()}
            r = client.remove_rule(rule_id) or before.get(str(rule_id), {})
            # a bandwidth rule never "fires"; it paces what it matches
            fired += int(r.get("matched" if r.get("action") == "bandwidth" else "fired", 0))
            matched += int(r.get("matched", 0))
        except ControlError as e:
            if cluster.proxy_state(nid) != "dead":
                errors.append(f"proxy of node {nid}: {e}")
        finally:
            client.close()
    if errors:
        raise FaultError("removing proxy rules failed: " + "; ".join(errors))
    return {"proxy_fired": fired, "proxy_matched": matched}


def remove_disk_rules(cluster, pairs: list) -> dict[str, int]:
    """Remove diskfs rules ([node id, rule id] pairs); returns how often they fired in total. A disk that is
    not mounted (the cluster going down) has no rules left."""
    fired = 0
    for nid, rule_id in pairs:
        if cluster.disk_state(nid) != "running":
            log.warning("rule %s on node %d: its disk is not mounted; nothing to remove", rule_id, nid)
            continue
        with cluster.disk_control(nid) as control:
            removed = control.remove_rule(rule_id)
        fired += int((removed or {}).get("fired", 0))
    return {"disk_fired": fired}


def _undo_proxy_rules(cluster, pairs: list, restart_nodes: bool) -> tuple[dict | None, list[str]]:
    return remove_proxy_rules(cluster, pairs), []


def _undo_disk_rules(cluster, pairs: list, restart_nodes: bool) -> tuple[dict | None, list[str]]:
    try:
        return remove_disk_rules(cluster, pairs), []
    except (FaultError, OSError) as e:
        return None, [f"disk rules {pairs}: {e}"]


def _undo_nft(cluster, tables: list, restart_nodes: bool) -> tuple[dict | None, list[str]]:
    dropped = {"dropped_packets": 0, "dropped_bytes": 0}
    for ns, table in tables:
        counters = network.nft_dropped(ns, table)
        dropped["dropped_packets"] += counters.get("packets", 0)
        dropped["dropped_bytes"] += counters.get("bytes", 0)
        network.nft_delete_table(ns, table)
    return dropped, []


def _undo_tc(cluster, links: list, restart_nodes: bool) -> tuple[dict | None, list[str]]:
    held = {"tbf_overlimits": 0, "tbf_dropped": 0}
    for link in links:
        tc = network.tc_stats(NodeLink.from_json(link))
        held["tbf_overlimits"] += tc["overlimits"]
        held["tbf_dropped"] += tc["dropped"]
        network.tc_clear(NodeLink.from_json(link))
    return held, []


def _undo_clock(cluster, nodes: list, restart_nodes: bool) -> tuple[dict | None, list[str]]:
    try:
        cluster.set_clock_offsets({nid: 0.0 for nid in nodes})
    except (ClusterError, FaultError, OSError) as e:
        return None, [f"clocks of nodes {nodes}: {e}"]
    return None, []


def _undo_resume(cluster, nodes: list, restart_nodes: bool) -> tuple[dict | None, list[str]]:
    for nid in nodes:
        cluster.resume_node(nid)
    return None, []


def _undo_restart(cluster, nodes: list, restart_nodes: bool) -> tuple[dict | None, list[str]]:
    errors = []
    if restart_nodes:
        for nid in nodes:
            try:
                cluster.start_node(nid)
            except (ClusterError, FaultError, OSError) as e:
                errors.append(f"node {nid}: {e}")
        for nid in nodes:
            try:
                cluster.wait_node_listening(nid, timeout_s=60)
            except ClusterError as e:
                errors.append(str(e))
    return None, errors


# The mechanisms a heal recipe may name, in the order they are undone: a recipe is `{step: what}`, written by
# the fault's family handler (kafkaproof.faults.families) and kept in the state file, so anything that tears
# a cluster down heals it without the fault layer. Each step returns (what the fault did, errors to report).
UNDO_STEPS: dict[str, Callable[[Any, Any, bool], tuple[dict | None, list[str]]]] = {
    "proxy_rules": _undo_proxy_rules,  # [[node id, rule id]]
    "disk_rules": _undo_disk_rules,  # [[node id, rule id]]
    "nft": _undo_nft,  # [[namespace, table]]
    "tc": _undo_tc,  # [NodeLink json]
    "clock": _undo_clock,  # [node id]: back to true time
    "resume": _undo_resume,  # [node id]
    "restart": _undo_restart,  # [node id], started again only with `restart_nodes`
}


def undo(cluster, heal: dict, restart_nodes: bool) -> dict | None:
    """Undo a fault's effects (its heal recipe, see UNDO_STEPS); returns what it did while active (proxy
    rule, nft and tc counters), or None. Restarts stopped nodes only with `restart_nodes` (a teardown does not)."""
    unknown = sorted(set(heal) - set(UNDO_STEPS))
    if unknown:
        raise FaultError(f"heal recipe {heal} names steps this kafkaproof cannot undo: {', '.join(unknown)}; "
                         f"heal it with the kafkaproof version that injected it")
    errors: list[str] = []
    stats = None
    for name, step in UNDO_STEPS.items():
        if heal.get(name):
            did, failed = step(cluster, heal[name], restart_nodes)
            errors += failed
            if did is not None:
                stats = {**(stats or {}), **did}
    if errors:
        raise FaultError("healing failed: " + "; ".join(errors))
    return stats


def log_heal(cluster, fault: dict, stats: dict | None, extra_logs: tuple[Path, ...] = ()) -> None:
    """Append the heal record of `fault` to the cluster's fault log (and to `extra_logs`)."""
    mono, wall = now()
    record = {"event": "heal", "fault_id": fault["fault_id"], "kind": fault["kind"], "target": fault["target"],
              "nodes": fault["nodes"], "params": fault["params"], "mono_ns": mono, "wall": wall}
    if fault.get("rule") is not None:
        record["rule"] = fault["rule"]
    record.update(stats or {})
    for path in (cluster_fault_log(cluster), *extra_logs):
        append_fault_log(path, record)


def cluster_fault_log(cluster) -> Path:
    """The cluster's own fault log (every injection and heal, whoever made it)."""
    return cluster_dir(cluster.name) / "faults.jsonl"


def heal_recorded(cluster, restart_nodes: bool = True) -> list[str]:
    """Heal every fault recorded in the cluster's state (also those of a crashed process), then clear
    rules a crash left between applying them and recording the fault. Returns the healed fault ids."""
    ids = []
    for fault in cluster.active_faults():
        stats = undo(cluster, fault["heal"], restart_nodes=restart_nodes)
        cluster.forget_fault(fault["fault_id"])
        log_heal(cluster, fault, stats)
        ids.append(fault["fault_id"])
    for nid in cluster.node_ids():
        link = cluster.node_link(nid)
        if link is not None:
            for table in network.nft_tables(link.namespace):
                if network.NFT_TABLE_RE.match(table):
                    network.nft_delete_table(link.namespace, table)
    for nid in cluster.proxy_ids():
        try:
            client = cluster.proxy_control(nid)
        except FaultError:
            continue
        try:
            for r in client.rules():
                if PROXY_RULE_ID_RE.match(str(r.get("id"))):
                    client.remove_rule(r["id"])
        except Exception as e:  # a proxy that cannot be reached is stopped by `down` anyway
            log.warning("could not clear leftover rules of node %d's proxy: %s", nid, e)
        finally:
            client.close()
    return ids
