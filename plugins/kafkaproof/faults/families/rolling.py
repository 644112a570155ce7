"""Rolling faults: a rolling upgrade or a rolling settings change, one node at a time, as operators do it.

Each node in `roll_order` (dedicated controllers first, as Kafka's upgrade notes say, then the
brokers; the active controller last in each group) is stopped (SIGTERM: a controlled shutdown,
or SIGKILL with `graceful: false`), started again on the target version and/or with the new
settings on the same data (`start_node_as`), and waited for until it is back in every ISR
(`wait_node_caught_up`). Then, for an upgrade with `finalize` (default), the feature levels of the
target release are finalised with Kafka's own `kafka-features upgrade`. Every step is a row of
the fault log (`roll_node`, `finalize_features`) with its window, so the report shows the
mixed-version period node by node. A `rolling_restart` without `config` restarts each node as it was;
every step records the node's incarnation (container or process start) before and after, the evidence
that it did restart. A backend may refuse what it cannot roll (`roll_refused`: an attached compose
project is restarted in place, never recreated on another image or settings) before any node is
touched. docs/upgrades.md.

While a node is out, the state file holds a fault that restarts it, so a crashed run's
`cluster down --all` or `fault heal --all` leaves nothing stopped. A node that does not come
back on the new version (e.g. a downgrade Kafka refuses after finalisation) is put back on its
old version and settings at once, and the fault fails with the node's own log line.
"""
from __future__ import annotations

import logging
import re
import subprocess
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from ...cluster.heal import now
from ...cluster.install import ensure_kafka
from ...errors import ClusterError, FaultError
from ...spec.fault_families import ROLLING
from ...spec.faults import FaultSpec
from .base import FaultHandler, Injection

if TYPE_CHECKING:
    from ..injector import FaultInjector

log = logging.getLogger(__name__)

DEFAULT_CATCH_UP_TIMEOUT_S = 120.0
FINALIZE_RETRY_S = 60.0  # a broker restarted last may not be visible to the controller yet
# Finalising leaves out kraft.version: a static quorum (controller.quorum.voters) stays static.
FINALIZE_SKIP = ("kraft.version",)
_FEATURE_LINE = re.compile(r"^([a-z][a-z.]*)=(\d+)\b")


def roll_order(nodes: Sequence[int], roles: Mapping[int, Sequence[str]], active_controller: int | None) -> list[int]:
    """Pure: the order a rolling fault takes `nodes` in: dedicated controllers first, then brokers
    (combined nodes among them), the active controller last within its group, else by id."""
    def key(n: int) -> tuple[int, int, int]:
        dedicated = "broker" not in roles[n]
        return (0 if dedicated else 1, 1 if n == active_controller else 0, n)
    return sorted(nodes, key=key)


def feature_levels(version_mapping: str) -> dict[str, int]:
    """Pure: the feature levels `kafka-features version-mapping` prints (`name=level (...)` lines),
    without those finalising leaves alone (FINALIZE_SKIP)."""
    levels = {}
    for line in version_mapping.splitlines():
        m = _FEATURE_LINE.match(line.strip())
        if m and m.group(1) not in FINALIZE_SKIP:
            levels[m.group(1)] = int(m.group(2))
    return levels


def release_of(version: str) -> str:
    """Pure: the release (`major.minor`) of a Kafka version, as `--release-version` takes it."""
    return ".".join(version.split(".")[:2])


@dataclass
class NodeStep:
    """One node of a roll: what it ran before and after, and how long it took to serve again."""

    node: int
    version_before: str
    version_after: str
    settings: dict
    caught_up_s: float | None = None  # from its start until it served again
    out_s: float | None = None  # from the stop until it served again
    started_before: str | None = None  # the node's incarnation (`node_incarnation`) before and after its step
    started_after: str | None = None

    def effect(self) -> dict[str, Any]:
        return {"version_before": self.version_before, "version_after": self.version_after,
                "settings": self.settings, "caught_up_s": self.caught_up_s, "out_s": self.out_s,
                "started_before": self.started_before, "started_after": self.started_after}


def roll(injector: "FaultInjector", spec: FaultSpec, nodes: list[int]) -> dict[str, Any]:
    """Roll `nodes` as `spec` says (see module docstring); returns the fault's effect record."""
    cluster = injector.cluster
    params = dict(spec.params)
    target_version = params.get("version")
    changes = dict(params.get("config") or {})
    timeout_s = float(params.get("timeout_s", DEFAULT_CATCH_UP_TIMEOUT_S))
    refused = cluster.roll_refused(target_version, changes)
    if refused:
        raise FaultError(f"{spec.kind}: {refused}")
    roles = {n: cluster.node(n).roles for n in nodes}
    order = roll_order(nodes, roles, cluster.active_controller())
    log.info("%s: rolling nodes %s %s", spec.kind, order,
             f"to Kafka {target_version}" if target_version else f"with {changes}")
    steps = []
    for n in order:
        step = NodeStep(n, cluster.node_version(n), target_version or cluster.node_version(n),
                        {**cluster.node_settings(n), **changes})
        _roll_node(injector, spec, step, bool(params.get("graceful", True)), timeout_s)
        steps.append(step)
        log.info("%s: node %d back (Kafka %s, started %s -> %s) in %.1fs", spec.kind, n, step.version_after,
                 step.started_before, step.started_after, step.caught_up_s)
    effect: dict[str, Any] = {"rolled": {str(s.node): s.effect() for s in steps},
                              "versions_after": {str(k): v for k, v in cluster.node_versions().items()}}
    if target_version and params.get("finalize", True):
        effect["finalized"] = _finalize(injector, spec, target_version)
    return effect


def _roll_node(injector: "FaultInjector", spec: FaultSpec, step: NodeStep, graceful: bool, timeout_s: float) -> None:
    """One node: out, back on the new version/settings, caught up; put back when it does not come back."""
    cluster = injector.cluster
    before_settings = cluster.node_settings(step.node)
    fault = _step_fault("roll_node", spec, [step.node], {"from": step.version_before, "to": step.version_after,
                                                         "settings": step.settings})
    cluster.record_fault(fault)  # while the node is out, `fault heal --all` starts it again
    injector.log_step("inject", fault)
    try:
        step.started_before = cluster.node_incarnation(step.node)
        stopped = time.monotonic()
        cluster.stop_node(step.node, graceful=graceful)
        cluster.start_node_as(step.node, step.version_after, step.settings)
        started = time.monotonic()
        step.caught_up_s = round(cluster.wait_node_caught_up(step.node, timeout_s), 3)
        step.out_s = round(started - stopped + step.caught_up_s, 3)
        step.started_after = cluster.node_incarnation(step.node)
    except (ClusterError, FaultError, OSError) as e:
        put_back = _put_back(cluster, step.node, step.version_before, before_settings, timeout_s)
        cluster.forget_fault(fault["fault_id"])
        injector.log_step("heal", fault, {"effect_error": str(e)})
        raise FaultError(f"{spec.kind}: node {step.node} did not come back on Kafka {step.version_after}: {e}; "
                         f"{put_back}") from e
    cluster.forget_fault(fault["fault_id"])
    injector.log_step("heal", fault, {"step": step.effect()})


def _put_back(cluster, node: int, version: str, settings: Mapping[str, Any], timeout_s: float) -> str:
    """Start a node that failed its step on what it ran before; says how that went."""
    try:
        cluster.stop_node(node, graceful=False)
        cluster.start_node_as(node, version, dict(settings))
        cluster.wait_node_caught_up(node, timeout_s)
    except (ClusterError, FaultError, OSError) as e:
        log.error("node %d could not be put back on Kafka %s: %s", node, version, e)
        return f"it could not be put back on Kafka {version} ({e}): `kafkaproof cluster down` and start again"
    log.info("node %d is back on Kafka %s", node, version)
    return f"it was put back on Kafka {version}"


def _finalize(injector: "FaultInjector", spec: FaultSpec, version: str) -> dict[str, Any]:
    """Finalise the feature levels of `version`'s release (kafka-features upgrade); a step of its own."""
    cluster = injector.cluster
    fault = _step_fault("finalize_features", spec, cluster.node_ids(), {"release": release_of(version)})
    injector.log_step("inject", fault)
    dist = ensure_kafka(version)
    bootstrap = cluster.direct_bootstrap()
    mapping = _feature_command(dist, bootstrap, "version-mapping", "--release-version", release_of(version))
    levels = feature_levels(mapping)
    args = [a for name, level in sorted(levels.items()) for a in ("--feature", f"{name}={level}")]
    deadline = time.monotonic() + FINALIZE_RETRY_S
    while True:
        try:
            out = _feature_command(dist, bootstrap, "upgrade", *args)
            break
        except FaultError as e:
            if time.monotonic() > deadline:
                injector.log_step("heal", fault, {"effect_error": str(e)})
                raise
            log.info("finalising features not yet accepted (%s); trying again", str(e)[-200:])
            time.sleep(2.0)
    said = [ln.strip() for ln in out.splitlines() if "was upgraded to" in ln or "is already" in ln]
    log.info("features finalised for Kafka %s: %s", version, " ".join(said))
    result = {"release": release_of(version), "levels": levels, "finalized": True, "output": said}
    injector.log_step("heal", fault, {"step": result})
    return result


def _feature_command(dist, bootstrap: str, *args: str) -> str:
    cmd = dist.java_command("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server", bootstrap, *args,
                            heap="128m")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if proc.returncode != 0 or "Could not" in proc.stdout:
        raise FaultError(f"kafka-features {args[0]} failed ({proc.returncode}): "
                         f"{(proc.stdout + proc.stderr).strip()[-600:]}")
    return proc.stdout


class RollingHandler(FaultHandler):
    family = ROLLING
    at_once = True  # its steps have windows of their own; the fault's ends when the last node is back

    def inject(self, injector: "FaultInjector", spec: FaultSpec, nodes: list[int], fault_id: str) -> Injection:
        return Injection({}, roll(injector, spec, nodes))


def _step_fault(kind: str, spec: FaultSpec, nodes: list[int], params: dict) -> dict[str, Any]:
    start_ns, start_wall = now()
    target = f"node:{nodes[0]}" if kind == "roll_node" else spec.resolved_target
    return {"fault_id": f"{kind}-{uuid.uuid4().hex[:8]}", "kind": kind, "target": target,
            "nodes": nodes, "params": params, "start_ns": start_ns, "start_wall": start_wall,
            "heal": {"restart": nodes} if kind == "roll_node" else {}, "rule": None}
