"""Faults: process faults (signals), network faults (nftables, tc) and proxy faults on a LocalCluster.

A `FaultSpec` says what to do (kind, target expression, parameters). A
`FaultInjector` resolves the target at injection time (e.g. the *current*
leader of a partition), applies the fault, records it in the cluster's state
file with everything needed to heal it, and appends inject/heal events with
monotonic and wall-clock times to a JSON-lines fault log. Every fault has a
heal; `heal_all` heals what a crashed run left behind.

Proxy faults (`lost_ack`, `error`, `latency`, `proxy_bandwidth`, `reset`,
`blackhole`) need a cluster started with the fault proxy (`cluster up --proxy`,
scenario `cluster.proxy`). Each is one rule, whose id is the fault id, installed
over the control port of the proxy in front of every broker the target resolves
to; healing removes the rule. The proxies log every action on a request with
that rule id (see docs/proxy.md), which ties it to the fault.
"""
from __future__ import annotations

import contextlib
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
PROXY_KINDS = ("lost_ack", "error", "latency", "proxy_bandwidth", "reset", "blackhole")
FAULT_KINDS = PROCESS_KINDS + NETWORK_KINDS + PROXY_KINDS

_NUM = (int, float)
# Request filters of every proxy fault (docs/proxy.md "Rules"), and the random draw/limit.
_PROXY_MATCH = {"api": ((str, int, list), False), "topic": (str, False), "partitions": ((int, list), False),
                "client_id": (str, False)}
_PROXY_DRAW = {"probability": (_NUM, False), "every": (int, False), "count": (int, False)}
# Proxy rule action of each proxy fault kind (`bandwidth` is taken by the tc fault).
PROXY_ACTIONS = {"lost_ack": "lost_ack", "error": "error", "latency": "latency", "proxy_bandwidth": "bandwidth",
                 "reset": "reset", "blackhole": "blackhole"}
# Kinds whose rule applies to Produce unless `api` says otherwise.
PROXY_DEFAULT_API = {"lost_ack": "produce", "error": "produce"}
_PROXY_RULE_ID_RE = re.compile(r"^(" + "|".join(PROXY_KINDS) + r")-[0-9a-f]{8}$")

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
    "lost_ack": {**_PROXY_MATCH, **_PROXY_DRAW, "reset": (bool, False)},
    "error": {**_PROXY_MATCH, **_PROXY_DRAW, "error": ((int, str), True), "forward": (bool, False)},
    "latency": {**_PROXY_MATCH, **_PROXY_DRAW, "direction": (str, False), "ms": (_NUM, False),
                "min_ms": (_NUM, False), "max_ms": (_NUM, False), "mean_ms": (_NUM, False),
                "stddev_ms": (_NUM, False), "dist": (str, False)},
    "proxy_bandwidth": {**_PROXY_MATCH, "bytes_per_s": (_NUM, True), "direction": (str, False)},
    "reset": {**_PROXY_MATCH, **_PROXY_DRAW, "after_bytes": (int, False), "direction": (str, False)},
    "blackhole": {**_PROXY_MATCH, **_PROXY_DRAW},
}
# Kinds whose target is implied by params; target is optional for them.
TARGETLESS = ("partition",)

TARGET_FORMS = ("node:<id>", "broker:<id>", "nodes:<id>,<id>", "leader:<partition>", "leader:<topic>:<partition>",
                "follower:<partition>", "follower:<topic>:<partition>", "controller", "random", "brokers", "all")
PARTITION_SHAPES = ("majority-minority", "leader-minority:<partition>", "bridge", "controller-minority")
_TARGET_RE = re.compile(r"^(node:\d+|broker:\d+|nodes:\d+(,\d+)*|leader:([\w.-]+:)?\d+|follower:([\w.-]+:)?\d+|"
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
        if self.kind in PROXY_KINDS:
            _validate_proxy_rule(self, where)
        return self

    @property
    def is_network(self) -> bool:
        return self.kind in NETWORK_KINDS

    @property
    def is_proxy(self) -> bool:
        return self.kind in PROXY_KINDS


def proxy_rule(spec: FaultSpec, rule_id: str | None = None) -> dict[str, Any]:
    """Pure: the proxy rule (docs/proxy.md) of a proxy fault; its id is the fault id."""
    rule: dict[str, Any] = {"action": PROXY_ACTIONS[spec.kind], **spec.params}
    if spec.kind in PROXY_DEFAULT_API:
        rule.setdefault("api", PROXY_DEFAULT_API[spec.kind])
    if rule_id is not None:
        rule["id"] = rule_id
    return rule


def _validate_proxy_rule(spec: FaultSpec, where: str) -> None:
    """The proxy's own rule parser has the last word (value ranges, error names, combinations)."""
    from .proxy.errors import RuleError
    from .proxy.rules import parse_rule
    try:
        parse_rule(proxy_rule(spec))
    except RuleError as e:
        message = str(e)
        names = [n for n in re.findall(r"'(\w+)'", message) if n in FAULT_PARAMS[spec.kind]]
        field_ = f"params.{names[0]}" if names else "params"
        raise FaultError(f"{where}.{field_}: {message}") from None


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
    #            / {"proxy_rules": [[node id, rule id]]}
    rule: dict | None = None  # proxy faults: the rule installed in the proxies

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
        if target.startswith("node:") or target.startswith("broker:"):
            ids = [int(target.split(":", 1)[1])]
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
    def resolve_proxied(self, target: str) -> list[int]:
        """Brokers with a fault proxy that a target means right now (`all`/`random`: among them)."""
        proxied = self.cluster.proxy_ids()
        if target == "all":
            return proxied
        if target == "random":
            return [self.rng.choice(proxied)]
        ids = self.resolve(target)
        for i in ids:
            if i not in proxied:
                raise FaultError(f"node {i} has no fault proxy (target {target!r}); proxied brokers: {proxied}")
        return ids

    def inject(self, spec: FaultSpec, annotations: Mapping[str, Any] | None = None) -> ActiveFault:
        """Resolve the target, apply the fault, record it; returns the active fault.

        `annotations` (e.g. the trigger the fault waited for) go into the fault log's inject record.
        The record's `effect` says what the injection observably did (node states after a kill,
        new processes after a restart); the heal record adds what the fault held back while active
        (packets its nft rules dropped, what its token buckets delayed, how often its proxy rule fired).
        """
        spec.validate()
        st = self.cluster.state()
        if spec.is_network and st["network"] != "netns":
            raise FaultError(f"network fault {spec.kind!r} needs nodes in network namespaces (run as root); "
                             f"this cluster runs on loopback")
        if spec.is_proxy and not st.get("proxy"):
            raise FaultError(f"proxy fault {spec.kind!r} needs the fault proxy: start the cluster with "
                             f"`kafkaproof cluster up --proxy` (scenarios: cluster.proxy: true)")
        fault_id = f"{spec.kind}-{uuid.uuid4().hex[:8]}"
        if spec.is_proxy:
            nodes = self.resolve_proxied(spec.target)
        else:
            nodes = [] if spec.kind in TARGETLESS else self.resolve(spec.target)
        heal: dict[str, Any] = {}
        rule = None
        params = dict(spec.params)
        links = {n["id"]: network.NodeLink.from_json(n["link"]) for n in st["nodes"] if n.get("link")}
        ips = {nid: link.node_ip for nid, link in links.items()}
        table = "kp_" + fault_id.replace("-", "_")
        start_ns, start_wall = now()

        effect: dict[str, Any] = {}
        if spec.kind in ("kill", "stop"):
            for n in nodes:
                self.cluster.stop_node(n, graceful=spec.kind == "stop", timeout_s=float(params.get("timeout_s", 30)))
            heal = {"restart": nodes}
            effect["node_states"] = {str(n): self.cluster.node_state(n) for n in nodes}
        elif spec.kind == "pause":
            for n in nodes:
                self.cluster.signal_node(n, signal.SIGSTOP)
            heal = {"resume": nodes}
            effect["node_states"] = {str(n): self.cluster.node_state(n) for n in nodes}
        elif spec.kind == "restart":
            before = {n: self.cluster.node_ref(n) for n in nodes}
            for n in nodes:
                self.cluster.stop_node(n, graceful=bool(params.get("graceful", True)))
                self.cluster.start_node(n)
            heal = {}
            effect["restarted"] = {str(n): before[n] is None or self.cluster.node_ref(n) != before[n] for n in nodes}
        elif spec.is_proxy:
            rule = proxy_rule(spec, fault_id)
            added: list[list] = []
            try:
                for n in nodes:
                    client = self.cluster.proxy_control(n)
                    try:
                        client.add_rule(rule)
                    finally:
                        client.close()
                    added.append([n, fault_id])
            except Exception as e:
                with contextlib.suppress(Exception):
                    _remove_proxy_rules(self.cluster, added)
                raise FaultError(f"{spec.kind} on {spec.target}: the proxy refused the rule: {e}") from e
            heal = {"proxy_rules": added}
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

        fault = ActiveFault(fault_id, spec.kind, spec.target, nodes, params, start_ns, start_wall, heal, rule)
        with state.update_state(self.cluster.name) as s:
            s["faults"].append(fault.to_json())
        self.injected.append(fault_id)
        self._log("inject", fault.to_json(), start_ns, start_wall,
                  {"effect": effect, **({"annotations": dict(annotations)} if annotations else {})})
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
        stats = _apply_heal(self.cluster, fault["heal"], restart_nodes=True)
        heal_ns, heal_wall = now()
        with state.update_state(self.cluster.name) as s:
            s["faults"] = [f for f in s["faults"] if f["fault_id"] != fault_id]
        if fault_id in self.injected:
            self.injected.remove(fault_id)
        self._log("heal", fault, heal_ns, heal_wall, stats)
        log.info("healed %s%s", fault_id, f" ({', '.join(f'{k}={v}' for k, v in sorted(stats.items()))})" if stats else "")

    def _log(self, event: str, fault: dict, mono_ns: int, wall: str, extra: dict | None = None) -> None:
        record = {"event": event, "fault_id": fault["fault_id"], "kind": fault["kind"], "target": fault["target"],
                  "nodes": fault["nodes"], "params": fault["params"], "mono_ns": mono_ns, "wall": wall}
        if fault.get("rule") is not None:
            record["rule"] = fault["rule"]
        record.update(extra or {})
        for path in self.log_paths:
            append_fault_log(path, record)


def append_fault_log(path: Path, record: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        f.write(json.dumps(record, sort_keys=True) + "\n")


def _remove_proxy_rules(cluster, pairs: list) -> dict[str, int]:
    """Remove proxy rules ([node id, rule id] pairs); returns how often they fired/matched in total.

    A proxy that is not running has no rules left to remove.
    """
    from .proxy import ControlError
    fired = matched = 0
    errors = []
    for nid, rule_id in pairs:
        try:
            client = cluster.proxy_control(nid)
        except FaultError as e:
            log.warning("rule %s on node %d: %s; nothing to remove", rule_id, nid, e)
            continue
        try:
            for r in client.rules():
                if r.get("id") == rule_id:  # a bandwidth rule never "fires"; it paces what it matches
                    fired += int(r.get("matched" if r.get("action") == "bandwidth" else "fired", 0))
                    matched += int(r.get("matched", 0))
            client.remove_rule(rule_id)
        except ControlError as e:
            if cluster.proxy_state(nid) != "dead":
                errors.append(f"proxy of node {nid}: {e}")
        finally:
            client.close()
    if errors:
        raise FaultError("removing proxy rules failed: " + "; ".join(errors))
    return {"proxy_fired": fired, "proxy_matched": matched}


def _apply_heal(cluster, heal: dict, restart_nodes: bool) -> dict | None:
    """Undo a fault's effects; returns what the fault did while active (proxy rule, nft and tc counters), or None."""
    errors = []
    stats = _remove_proxy_rules(cluster, heal["proxy_rules"]) if heal.get("proxy_rules") else None
    if heal.get("nft"):
        dropped = {"dropped_packets": 0, "dropped_bytes": 0}
        for ns, table in heal["nft"]:
            counters = network.nft_dropped(ns, table)
            dropped["dropped_packets"] += counters.get("packets", 0)
            dropped["dropped_bytes"] += counters.get("bytes", 0)
            network.nft_delete_table(ns, table)
        stats = {**(stats or {}), **dropped}
    if heal.get("tc"):
        held = {"tbf_overlimits": 0, "tbf_dropped": 0}
        for link in heal["tc"]:
            tc = network.tc_stats(network.NodeLink.from_json(link))
            held["tbf_overlimits"] += tc["overlimits"]
            held["tbf_dropped"] += tc["dropped"]
            network.tc_clear(network.NodeLink.from_json(link))
        stats = {**(stats or {}), **held}
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
    return stats


def heal_all(cluster, restart_nodes: bool = True) -> list[str]:
    """Heal every fault recorded in the cluster's state (also those of a crashed process)."""
    injector = FaultInjector(cluster)
    ids = [f["fault_id"] for f in cluster.state()["faults"]]
    for fid in ids:
        if restart_nodes:
            injector.heal(fid)
        else:
            fault = next(f for f in cluster.state()["faults"] if f["fault_id"] == fid)
            stats = _apply_heal(cluster, fault["heal"], restart_nodes=False)
            heal_ns, heal_wall = now()
            with state.update_state(cluster.name) as s:
                s["faults"] = [f for f in s["faults"] if f["fault_id"] != fid]
            injector._log("heal", fault, heal_ns, heal_wall, stats)
    # Rules a crash left between applying them and recording the fault.
    for nid in cluster.node_ids():
        link = cluster.node(nid).get("link")
        if link:
            for table in network.nft_tables(link["namespace"]):
                if network.NFT_TABLE_RE.match(table):
                    network.nft_delete_table(link["namespace"], table)
    # Proxy rules a crash left between installing them and recording the fault.
    for nid in cluster.proxy_ids():
        try:
            client = cluster.proxy_control(nid)
        except FaultError:
            continue
        try:
            for r in client.rules():
                if _PROXY_RULE_ID_RE.match(str(r.get("id"))):
                    client.remove_rule(r["id"])
        except Exception as e:  # a proxy that cannot be reached is stopped by `down` anyway
            log.warning("could not clear leftover rules of node %d's proxy: %s", nid, e)
        finally:
            client.close()
    return ids
