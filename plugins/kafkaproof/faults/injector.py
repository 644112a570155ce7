"""Injecting faults on any cluster backend, one handler per fault family (`faults.families`).

A `FaultSpec` (kafkaproof.spec.faults) says what to do (kind, target expression, parameters). A
`FaultInjector` resolves the target at injection time (e.g. the *current*
leader of a partition), has the kind's family handler apply the fault, records it in the cluster's state
file with the handler's recipe to heal it, and appends inject/heal events with
monotonic and wall-clock times to a JSON-lines fault log. Every fault has a
heal; `heal_all` heals what a crashed run left behind (cluster/heal.py, from the recipes).
"""
from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from ..cluster.backend import ClusterBackend
from ..cluster.coordinators import Coordinator, find_coordinator
from ..cluster.heal import append_fault_log, cluster_fault_log, heal_recorded, now
from ..errors import FaultError
from ..spec.coordinator_targets import CoordinatorKind, parse_target
from ..spec.fault_families import family_of
from ..spec.faults import TARGET_FORMS, FaultSpec
from .checks import check_fault
from .families import handler_for

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
    heal: dict  # how to heal: the family handler's recipe, {undo step: what} (cluster.heal.UNDO_STEPS)
    rule: dict | None = None  # proxy faults: the rule installed in the proxies

    def to_json(self) -> dict:
        return dict(self.__dict__)


# --- the injector ---------------------------------------------------------------

class FaultInjector:
    """Injects and heals faults on a cluster; heals everything it injected on exit."""

    def __init__(self, cluster: ClusterBackend, topic: str | None = None, log_path: Path | None = None,
                 rng: random.Random | None = None, coordinator_keys: Mapping[str, Any] | None = None):
        self.cluster = cluster
        self.topic = topic
        # What a scenario run's coordinator targets stand for, by section (spec/coordinator_targets.run_keys):
        # `{"consumers": group, "share": share group, "pipeline": (copier 0's transactional id, ...)}`.
        self.coordinator_keys = dict(coordinator_keys or {})
        self.coordinators: list[Coordinator] = []  # every coordinator target resolved, in order
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
    def topic_partition(self, rest: str) -> tuple[str, int]:
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
            ids = [c.leader_of(*self.topic_partition(target[7:]))]
        elif target.startswith("followers:"):
            ids = c.followers(*self.topic_partition(target[10:]))
        elif target.startswith("follower:"):
            ids = [c.random_follower(*self.topic_partition(target[9:]), rng=self.rng)]
        elif target == "controller":
            ctl = c.active_controller()
            if ctl is None:
                raise FaultError("no active controller right now (quorum has no leader)")
            ids = [ctl]
        elif (coordinator := parse_target(target)) is not None:
            ids = [self.coordinator(*coordinator).node]
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

    def coordinator_key(self, kind: CoordinatorKind, given: str | None) -> str:
        """The key a coordinator target means: the one it names, else the run's of `kind.section`; for an indexed
        kind (`txn_coordinator:<copier>`) the run's key at that index. FaultError when the run has none."""
        if kind.indexed:
            keys = self.coordinator_keys.get(kind.section) or ()
            index = int(given or 0)
            if index >= len(keys):
                have = f"copiers 0..{len(keys) - 1}" if keys else "no copiers"
                raise FaultError(f"{kind.name}:{index}: this run has {have} ({kind.name}:<copier> needs a "
                                 f"{kind.section} section)")
            return keys[index]
        key = given or self.coordinator_keys.get(kind.section)
        if not key:
            raise FaultError(f"target {kind.name}: no {kind.key_name} to find the coordinator of: the run has no "
                             f"{kind.section} section; name one as {kind.name}:<group>")
        return key

    def coordinator(self, kind: CoordinatorKind, key: str | None) -> Coordinator:
        """Where the coordinator of `key` (default: the run's of `kind.section`) is right now; recorded in
        `coordinators`."""
        key = self.coordinator_key(kind, key)
        found = find_coordinator(self.cluster, kind, key)
        self.coordinators.append(found)
        log.info("%s of %s: %s-%d led by node %d", kind.name, key, found.topic, found.partition, found.node)
        return found

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
        family = family_of(spec.kind, spec.target)
        if family.target_prefix:  # consumer:, app: act on processes a scenario run owns, not on the cluster
            raise FaultError(f"{spec.kind} {spec.target}: {family.name} faults act on a scenario run's own processes; "
                             f"give them in a scenario's faults")
        if spec.kind not in self.cluster.supported_faults:
            raise FaultError(self.cluster.unsupported_reason(spec.kind))
        handler = handler_for(spec.kind)
        handler.require(self.cluster, spec)
        fault_id = f"{spec.kind}-{uuid.uuid4().hex[:8]}"
        resolved_before = len(self.coordinators)
        nodes = handler.nodes(self, spec)
        start_ns, start_wall = now()
        done = handler.inject(self, spec, nodes, fault_id)
        nodes = nodes if done.nodes is None else done.nodes
        params = {**spec.params, **done.params}
        if len(self.coordinators) > resolved_before:  # a coordinator target: which group partition it meant
            params["coordinator"] = self.coordinators[-1].as_json()
        fault = ActiveFault(fault_id, spec.kind, spec.resolved_target, nodes, params, start_ns, start_wall, done.heal,
                            done.rule)
        self.cluster.record_fault(fault.to_json())
        self.injected.append(fault_id)
        self._log("inject", fault.to_json(), start_ns, start_wall,
                  {"effect": done.effect, **({"annotations": dict(annotations)} if annotations else {})})
        log.info("fault %s: %s on %s -> nodes %s %s", fault_id, spec.kind, spec.resolved_target or "-", nodes,
                 params or "")
        if done.over or handler.heals_at_once(spec.kind):  # done when injected: its window ends now
            self.heal(fault_id)
        return fault

    def log_step(self, event: str, fault: dict, extra: dict | None = None) -> None:
        """Log one step of a fault made of steps (a rolling fault's nodes): `inject` at its start, `heal`
        at its end, each step a row of the run's faults table of its own."""
        mono, wall = (fault["start_ns"], fault["start_wall"]) if event == "inject" else now()
        self._log(event, fault, mono, wall, extra)

    def heal(self, fault_id: str) -> None:
        """Undo one fault (its family handler's heal: restart/resume nodes, delete nft tables, clear tc, remove
        rules) and log it."""
        match = [f for f in self.cluster.active_faults() if f["fault_id"] == fault_id]
        if not match:
            if fault_id in self.injected:
                self.injected.remove(fault_id)
            return
        fault = match[0]
        stats = handler_for(fault["kind"]).heal(self.cluster, fault["heal"])
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
