"""Faults: process faults (signals) and network faults (nftables, tc) on a LocalCluster.

A `FaultSpec` says what to do (kind, target expression, parameters). A
`FaultInjector` resolves the target at injection time (e.g. the *current*
leader of a partition), applies the fault, records it in the cluster's state
file with everything needed to heal it, and appends inject/heal events with
monotonic and wall-clock times to a JSON-lines fault log. Every fault has a
heal; `heal_all` heals what a crashed run left behind.
"""
from __future__ import annotations

import json
import logging
import random
import re
import signal
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from . import network, process, state
from .errors import ClusterError, FaultError

log = logging.getLogger(__name__)

PROCESS_KINDS = ("kill", "stop", "pause", "restart")
NETWORK_KINDS = ("isolate", "cut", "partition", "cut_clients", "packet_loss", "bandwidth")
FAULT_KINDS = PROCESS_KINDS + NETWORK_KINDS

# Parameters each kind accepts: name -> (type, required)
FAULT_PARAMS: dict[str, dict[str, tuple[type | tuple[type, ...], bool]]] = {
    "kill": {},
    "stop": {"timeout_s": ((int, float), False)},
    "pause": {},
    "restart": {"graceful": (bool, False)},
    "isolate": {},
    "cut": {"to": (str, True)},
    "partition": {"groups": ((list, str), True)},
    "cut_clients": {},
    "packet_loss": {"percent": ((int, float), True)},
    "bandwidth": {"rate_kbit": (int, True)},
}
# Kinds whose target is implied by params; target is optional for them.
TARGETLESS = ("partition",)

TARGET_FORMS = ("node:<id>", "nodes:<id>,<id>", "leader:<partition>", "leader:<topic>:<partition>",
                "follower:<partition>", "follower:<topic>:<partition>", "controller", "random", "brokers", "all")
PARTITION_SHAPES = ("majority-minority", "leader-minority:<partition>", "bridge", "controller-minority")
_TARGET_RE = re.compile(r"^(node:\d+|nodes:\d+(,\d+)*|leader:([\w.-]+:)?\d+|follower:([\w.-]+:)?\d+|"
                        r"controller|random|brokers|all)$")


@dataclass(frozen=True)
class FaultSpec:
    """A fault to inject: `kind` on `target` with `params`."""

    kind: str
    target: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)

    def validate(self, where: str = "fault") -> "FaultSpec":
        """Check kind, target form and parameters; raises FaultError naming `where` and what is allowed."""
        if self.kind not in FAULT_KINDS:
            raise FaultError(f"{where}.kind: unknown fault kind {self.kind!r}; allowed: {', '.join(FAULT_KINDS)}")
        if self.kind in TARGETLESS:
            if self.target:
                raise FaultError(f"{where}.target: {self.kind} takes no target; give params.groups")
        elif not _TARGET_RE.match(self.target or ""):
            raise FaultError(f"{where}.target: {self.target!r} is not a target; allowed forms: {', '.join(TARGET_FORMS)}")
        allowed = FAULT_PARAMS[self.kind]
        for name in self.params:
            if name not in allowed:
                raise FaultError(f"{where}.params.{name}: not a parameter of {self.kind}; "
                                 f"allowed: {', '.join(allowed) or 'none'}")
        for name, (typ, required) in allowed.items():
            if name not in self.params:
                if required:
                    raise FaultError(f"{where}.params.{name}: required for {self.kind}")
                continue
            value = self.params[name]
            if isinstance(value, bool) and typ is not bool or not isinstance(value, typ):
                raise FaultError(f"{where}.params.{name}: expected {_typename(typ)}, got {value!r}")
        if self.kind == "packet_loss" and not 0 < self.params["percent"] <= 100:
            raise FaultError(f"{where}.params.percent: must be in (0, 100], got {self.params['percent']}")
        if self.kind == "bandwidth" and self.params["rate_kbit"] <= 0:
            raise FaultError(f"{where}.params.rate_kbit: must be > 0")
        if self.kind == "cut" and not _TARGET_RE.match(self.params["to"]) and self.params["to"] != "clients":
            raise FaultError(f"{where}.params.to: {self.params['to']!r} is not a target; allowed: clients, "
                             f"{', '.join(TARGET_FORMS)}")
        if self.kind == "partition":
            _validate_groups(self.params["groups"], f"{where}.params.groups")
        return self

    @property
    def is_network(self) -> bool:
        return self.kind in NETWORK_KINDS


def _typename(typ) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return typ.__name__


def _validate_groups(groups: Any, where: str) -> None:
    if isinstance(groups, str):
        if groups in ("majority-minority", "bridge", "controller-minority") or re.match(r"^leader-minority:\d+$", groups):
            return
        raise FaultError(f"{where}: unknown partition shape {groups!r}; allowed: {', '.join(PARTITION_SHAPES)} "
                         f"or a list of node-id lists")
    if not (isinstance(groups, list) and len(groups) >= 2 and
            all(isinstance(g, list) and g and all(isinstance(i, int) for i in g) for g in groups)):
        raise FaultError(f"{where}: expected at least two non-empty lists of node ids, e.g. [[1], [2, 3]]")
    flat = [i for g in groups for i in g]
    if len(flat) != len(set(flat)):
        raise FaultError(f"{where}: a node appears in two groups: {groups}")


@dataclass
class ActiveFault:
    """A fault that was injected and is not yet healed; serialised into the cluster state."""

    fault_id: str
    kind: str
    target: str
    nodes: list[int]
    params: dict
    start_ns: int
    start_wall: str
    heal: dict  # how to heal: {"restart": [ids]} / {"resume": [ids]} / {"nft": [[ns, table]], "tc": [links]}

    def to_json(self) -> dict:
        return dict(self.__dict__)


def now() -> tuple[int, str]:
    """(monotonic ns, ISO-8601 UTC wall time) read together."""
    return time.monotonic_ns(), datetime.now(timezone.utc).isoformat(timespec="milliseconds")


# --- pure planning of network rules ---------------------------------------------

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


# --- the injector ---------------------------------------------------------------

class FaultInjector:
    """Injects and heals faults on a cluster; heals everything it injected on exit."""

    def __init__(self, cluster, topic: str | None = None, log_path: Path | None = None,
                 rng: random.Random | None = None):
        self.cluster = cluster
        self.topic = topic
        self.log_paths = [state.cluster_dir(cluster.name) / "faults.jsonl"]
        if log_path is not None:
            self.log_paths.append(Path(log_path))
        self.rng = rng or random.Random()
        self.injected: list[str] = []

    def __enter__(self) -> "FaultInjector":
        return self

    def __exit__(self, *exc) -> None:
        for fid in list(self.injected):
            try:
                self.heal(fid)
            except Exception as e:
                log.error("could not heal fault %s: %s (run `kafkaproof fault heal --all`)", fid, e)

    # target resolution ---------------------------------------------------------
    def _topic_partition(self, rest: str) -> tuple[str, int]:
        if ":" in rest:
            topic, part = rest.rsplit(":", 1)
            return topic, int(part)
        if not self.topic:
            raise FaultError(f"target needs a topic: write it as <kind>:<topic>:<partition> or pass --topic")
        return self.topic, int(rest)

    def resolve(self, target: str) -> list[int]:
        """Node ids a target expression means right now."""
        c = self.cluster
        if target.startswith("node:"):
            ids = [int(target[5:])]
        elif target.startswith("nodes:"):
            ids = [int(x) for x in target[6:].split(",")]
        elif target.startswith("leader:"):
            ids = [c.leader_of(*self._topic_partition(target[7:]))]
        elif target.startswith("follower:"):
            ids = [c.random_follower(*self._topic_partition(target[9:]), rng=self.rng)]
        elif target == "controller":
            ctl = c.active_controller()
            if ctl is None:
                raise FaultError("no active controller right now (quorum has no leader)")
            ids = [ctl]
        elif target == "random":
            ids = [self.rng.choice(c.node_ids())]
        elif target == "brokers":
            ids = c.broker_ids()
        elif target == "all":
            ids = c.node_ids()
        else:
            raise FaultError(f"unknown target {target!r}; allowed forms: {', '.join(TARGET_FORMS)}")
        known = c.node_ids()
        for i in ids:
            if i not in known:
                raise FaultError(f"node {i} is out of range: cluster {c.name!r} has nodes {known}")
        return ids

    # inject / heal ---------------------------------------------------------------
    def inject(self, spec: FaultSpec) -> ActiveFault:
        """Resolve the target, apply the fault, record it; returns the active fault."""
        spec.validate()
        st = self.cluster.state()
        if spec.is_network and st["network"] != "netns":
            raise FaultError(f"network fault {spec.kind!r} needs nodes in network namespaces (run as root); "
                             f"this cluster runs on loopback")
        fault_id = f"{spec.kind}-{uuid.uuid4().hex[:8]}"
        nodes = [] if spec.kind in TARGETLESS else self.resolve(spec.target)
        heal: dict[str, Any] = {}
        params = dict(spec.params)
        links = {n["id"]: network.NodeLink.from_json(n["link"]) for n in st["nodes"] if n.get("link")}
        ips = {nid: link.node_ip for nid, link in links.items()}
        table = "kp_" + fault_id.replace("-", "_")
        start_ns, start_wall = now()

        if spec.kind in ("kill", "stop"):
            for n in nodes:
                self.cluster.stop_node(n, graceful=spec.kind == "stop", timeout_s=float(params.get("timeout_s", 30)))
            heal = {"restart": nodes}
        elif spec.kind == "pause":
            for n in nodes:
                self.cluster.signal_node(n, signal.SIGSTOP)
            heal = {"resume": nodes}
        elif spec.kind == "restart":
            for n in nodes:
                self.cluster.stop_node(n, graceful=bool(params.get("graceful", True)))
                self.cluster.start_node(n)
            heal = {}
        else:
            plan = self._network_plan(spec, nodes, ips)
            applied: list[list[str]] = []
            try:
                for nid, (inp, out) in plan.rules.items():
                    network.nft_apply(links[nid].namespace, network.nft_ruleset(table, inp, out))
                    applied.append([links[nid].namespace, table])
                for nid in plan.tc_nodes:
                    network.tc_limit(links[nid], int(params["rate_kbit"]))
            except Exception:
                _apply_heal(self.cluster, {"nft": applied, "tc": [links[n].to_json() for n in plan.tc_nodes]}, False)
                raise
            heal = {"nft": applied, "tc": [links[n].to_json() for n in plan.tc_nodes]}
            if plan.groups is not None:
                nodes = sorted(i for g in plan.groups for i in g)
                params["resolved_groups"] = plan.groups

        fault = ActiveFault(fault_id, spec.kind, spec.target, nodes, params, start_ns, start_wall, heal)
        with state.update_state(self.cluster.name) as s:
            s["faults"].append(fault.to_json())
        self.injected.append(fault_id)
        self._log("inject", fault.to_json(), start_ns, start_wall)
        log.info("fault %s: %s on %s -> nodes %s %s", fault_id, spec.kind, spec.target or "-", nodes, params or "")
        if spec.kind == "restart":
            self.heal(fault_id)
        return fault

    def _network_plan(self, spec: FaultSpec, nodes: list[int], ips: dict[int, str]) -> "NetworkPlan":
        cluster_ips = sorted(ips.values())
        if spec.kind == "isolate":
            return NetworkPlan({n: isolate_rules() for n in nodes})
        if spec.kind == "cut_clients":
            return NetworkPlan({n: cut_clients_rules(cluster_ips) for n in nodes})
        if spec.kind == "packet_loss":
            return NetworkPlan({n: packet_loss_rules(float(spec.params["percent"])) for n in nodes})
        if spec.kind == "bandwidth":
            return NetworkPlan({}, tc_nodes=nodes)
        if spec.kind == "cut":
            to = spec.params["to"]
            dest = None if to == "clients" else [ips[n] for n in self.resolve(to)]
            return NetworkPlan({n: ([], one_way_cut_rules(dest, cluster_ips)) for n in nodes})
        if spec.kind == "partition":
            shape = spec.params["groups"]
            leader = controller = None
            if isinstance(shape, str) and shape.startswith("leader-minority:"):
                leader = self.cluster.leader_of(*self._topic_partition(shape.split(":", 1)[1]))
            if shape == "controller-minority":
                controller = self.cluster.active_controller()
            groups = resolve_partition_groups(shape, sorted(ips), leader, controller, self.rng)
            return NetworkPlan(partition_rules(groups, ips, bridge=shape == "bridge"), groups=groups)
        raise FaultError(f"not a network fault: {spec.kind}")

    def heal(self, fault_id: str) -> None:
        """Undo one fault (restart/resume nodes, delete nft tables, clear tc) and log it."""
        with state.locked(self.cluster.name):
            st = state.load_state(self.cluster.name)
            match = [f for f in st["faults"] if f["fault_id"] == fault_id]
        if not match:
            if fault_id in self.injected:
                self.injected.remove(fault_id)
            return
        fault = match[0]
        _apply_heal(self.cluster, fault["heal"], restart_nodes=True)
        heal_ns, heal_wall = now()
        with state.update_state(self.cluster.name) as s:
            s["faults"] = [f for f in s["faults"] if f["fault_id"] != fault_id]
        if fault_id in self.injected:
            self.injected.remove(fault_id)
        self._log("heal", fault, heal_ns, heal_wall)
        log.info("healed %s", fault_id)

    def _log(self, event: str, fault: dict, mono_ns: int, wall: str) -> None:
        record = {"event": event, "fault_id": fault["fault_id"], "kind": fault["kind"], "target": fault["target"],
                  "nodes": fault["nodes"], "params": fault["params"], "mono_ns": mono_ns, "wall": wall}
        for path in self.log_paths:
            append_fault_log(path, record)


def append_fault_log(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def _apply_heal(cluster, heal: dict, restart_nodes: bool) -> None:
    errors = []
    for ns, table in heal.get("nft", []):
        network.nft_delete_table(ns, table)
    for link in heal.get("tc", []):
        network.tc_clear(network.NodeLink.from_json(link))
    for nid in heal.get("resume", []):
        ref = cluster.node_ref(nid)
        if process.state_of(ref) == "paused":
            process.send_signal(ref, signal.SIGCONT)
    if restart_nodes:
        for nid in heal.get("restart", []):
            try:
                cluster.start_node(nid)
            except (ClusterError, FaultError, OSError) as e:
                errors.append(f"node {nid}: {e}")
        for nid in heal.get("restart", []):
            try:
                cluster.wait_node_listening(nid, timeout_s=60)
            except ClusterError as e:
                errors.append(str(e))
    if errors:
        raise FaultError("healing failed: " + "; ".join(errors))


def heal_all(cluster, restart_nodes: bool = True) -> list[str]:
    """Heal every fault recorded in the cluster's state (also those of a crashed process)."""
    injector = FaultInjector(cluster)
    ids = [f["fault_id"] for f in cluster.state()["faults"]]
    for fid in ids:
        if restart_nodes:
            injector.heal(fid)
        else:
            fault = next(f for f in cluster.state()["faults"] if f["fault_id"] == fid)
            _apply_heal(cluster, fault["heal"], restart_nodes=False)
            heal_ns, heal_wall = now()
            with state.update_state(cluster.name) as s:
                s["faults"] = [f for f in s["faults"] if f["fault_id"] != fid]
            injector._log("heal", fault, heal_ns, heal_wall)
    # Rules a crash left between applying them and recording the fault.
    for nid in cluster.node_ids():
        link = cluster.node(nid).get("link")
        if link:
            for table in network.nft_tables(link["namespace"]):
                if network.NFT_TABLE_RE.match(table):
                    network.nft_delete_table(link["namespace"], table)
    return ids
