"""Injecting faults on any cluster backend: process faults, network faults (nftables, tc), proxy faults,
clock faults (libfaketime, see cluster/clock.py), disk faults (diskfs, see cluster/disk.py).

A `FaultSpec` (kafkaproof.spec.faults) says what to do (kind, target expression, parameters). A
`FaultInjector` resolves the target at injection time (e.g. the *current*
leader of a partition), applies the fault, records it in the cluster's state
file with everything needed to heal it, and appends inject/heal events with
monotonic and wall-clock times to a JSON-lines fault log. Every fault has a
heal; `heal_all` heals what a crashed run left behind.

Proxy faults (`lost_ack`, `error`, `latency`, `proxy_bandwidth`, `reset`,
`blackhole`) need a cluster started with the fault proxy (`cluster up --proxy`,
scenario `cluster.proxy`). Each is one rule, whose id is the fault id, installed
over the control socket of the proxy in front of every broker the target resolves
to; healing removes the rule. The proxies log every action on a request with
that rule id (see docs/proxy.md), which ties it to the fault.

Disk faults (`disk_error`, `disk_full`, `disk_latency`) are rules of the diskfs under each target
node's log directory, removed at heal; the heal also starts a node the failing disk made stop
(Kafka halts a broker whose every log directory failed). `power_loss` kills the nodes at once
and drops every write since a file's last fsync; they stay down until the heal (docs/disk.md).
"""
from __future__ import annotations

import contextlib
import logging
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..cluster import network
from ..cluster.backend import ClusterBackend
from ..cluster.heal import (append_fault_log, cluster_fault_log, heal_recorded, now, remove_disk_rules,
                            remove_proxy_rules, undo)
from ..errors import FaultError
from ..spec.faults import TARGET_FORMS, TARGETLESS, FaultSpec, disk_rule, proxy_rule
from .checks import check_fault
from .network_rules import (NetworkPlan, cut_clients_rules, isolate_rules, one_way_cut_rules, packet_loss_rules,
                            partition_rules, resolve_partition_groups)
from .rolling import roll

log = logging.getLogger(__name__)


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
    #            / {"proxy_rules": [[node id, rule id]]} / {"clock": [ids]} (back to true time)
    #            / {"disk_rules": [[node id, rule id]], "restart": [ids]}
    rule: dict | None = None  # proxy faults: the rule installed in the proxies

    def to_json(self) -> dict:
        return dict(self.__dict__)


# --- pure planning of network rules ---------------------------------------------


# --- the injector ---------------------------------------------------------------

class FaultInjector:
    """Injects and heals faults on a cluster; heals everything it injected on exit."""

    def __init__(self, cluster: ClusterBackend, topic: str | None = None, log_path: Path | None = None,
                 rng: random.Random | None = None):
        self.cluster = cluster
        self.topic = topic
        self.log_paths = [cluster_fault_log(cluster)]
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
            raise FaultError("target needs a topic: write it as <kind>:<topic>:<partition> or pass --topic")
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
        elif target.startswith("followers:"):
            ids = c.followers(*self._topic_partition(target[10:]))
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
        check_fault(spec)
        if spec.kind not in self.cluster.supported_faults:
            raise FaultError(self.cluster.unsupported_reason(spec.kind))
        if spec.is_proxy and not self.cluster.has_proxy:
            raise FaultError(f"proxy fault {spec.kind!r} needs the fault proxy: start the cluster with "
                             f"`kafkaproof cluster up --proxy` (scenarios: cluster.proxy: true)")
        fault_id = f"{spec.kind}-{uuid.uuid4().hex[:8]}"
        if spec.is_proxy:
            nodes = self.resolve_proxied(spec.target)
        else:
            nodes = [] if spec.kind in TARGETLESS else self.resolve(spec.resolved_target)
        heal: dict[str, Any] = {}
        rule = None
        params = dict(spec.params)
        links = {nid: link for nid in self.cluster.node_ids() if (link := self.cluster.node_link(nid)) is not None}
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
                self.cluster.pause_node(n)
            heal = {"resume": nodes}
            effect["node_states"] = {str(n): self.cluster.node_state(n) for n in nodes}
        elif spec.kind == "restart":
            before = {n: self.cluster.node_incarnation(n) for n in nodes}
            for n in nodes:
                self.cluster.stop_node(n, graceful=bool(params.get("graceful", True)))
                self.cluster.start_node(n)
            heal = {}
            effect["restarted"] = {str(n): self.cluster.node_incarnation(n) != before[n] for n in nodes}
        elif spec.is_rolling:
            effect.update(roll(self, spec, nodes))
        elif spec.is_clock:
            offset = float(params["offset_s"])
            heal = {"clock": nodes}
            effect["clocks"] = {str(n): e for n, e in self.cluster.set_clock_offsets({n: offset for n in nodes}).items()}
        elif spec.kind == "power_loss":
            lost = self.cluster.power_loss(nodes)
            heal = {"restart": nodes}
            effect["node_states"] = {str(n): e.pop("node_state") for n, e in lost.items()}
            effect["power_loss"] = {str(n): e for n, e in lost.items()}
        elif spec.is_disk:
            effect["disk_rule"] = disk_rule(spec, fault_id)
            added = []
            try:
                for n in nodes:
                    with self.cluster.disk_control(n) as control:
                        control.add_rule(effect["disk_rule"])
                    added.append([n, fault_id])
            except Exception as e:
                with contextlib.suppress(Exception):
                    remove_disk_rules(self.cluster, added)
                raise FaultError(f"{spec.kind} on {spec.target}: the disk refused the rule: {e}") from e
            heal = {"disk_rules": added, "restart": nodes}
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
                    remove_proxy_rules(self.cluster, added)
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
                undo(self.cluster, {"nft": applied, "tc": [links[n].to_json() for n in plan.tc_nodes]}, False)
                raise
            heal = {"nft": applied, "tc": [links[n].to_json() for n in plan.tc_nodes]}
            if plan.groups is not None:
                nodes = sorted(i for g in plan.groups for i in g)
                params["resolved_groups"] = plan.groups

        fault = ActiveFault(fault_id, spec.kind, spec.resolved_target, nodes, params, start_ns, start_wall, heal, rule)
        self.cluster.record_fault(fault.to_json())
        self.injected.append(fault_id)
        self._log("inject", fault.to_json(), start_ns, start_wall,
                  {"effect": effect, **({"annotations": dict(annotations)} if annotations else {})})
        log.info("fault %s: %s on %s -> nodes %s %s", fault_id, spec.kind, spec.resolved_target or "-", nodes,
                 params or "")
        if spec.kind == "restart" or spec.is_rolling:  # done when injected: its window ends now
            self.heal(fault_id)
        return fault

    def log_step(self, event: str, fault: dict, extra: dict | None = None) -> None:
        """Log one step of a fault made of steps (a rolling fault's nodes): `inject` at its start, `heal`
        at its end, each step a row of the run's faults table of its own."""
        mono, wall = (fault["start_ns"], fault["start_wall"]) if event == "inject" else now()
        self._log(event, fault, mono, wall, extra)

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
        match = [f for f in self.cluster.active_faults() if f["fault_id"] == fault_id]
        if not match:
            if fault_id in self.injected:
                self.injected.remove(fault_id)
            return
        fault = match[0]
        stats = undo(self.cluster, fault["heal"], restart_nodes=True)
        heal_ns, heal_wall = now()
        self.cluster.forget_fault(fault_id)
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


def heal_all(cluster: ClusterBackend, restart_nodes: bool = True) -> list[str]:
    """Heal every fault recorded in the cluster's state (also those of a crashed process)."""
    return heal_recorded(cluster, restart_nodes=restart_nodes)
