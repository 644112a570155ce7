"""What a fault family's handler is: the interface `FaultInjector` drives, and what an injection returns.

A handler owns its family's kinds (`spec.fault_families` lists them, their parameters and their evidence):
the checks past the spec's, which nodes a fault acts on, the injection with its heal recipe and its
`effect` record, and the heal. The heal recipe names mechanisms of `cluster.heal.UNDO_STEPS`, so a crashed
run's faults are healed by `cluster down` without this layer.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ...cluster.heal import undo
from ...spec.fault_families import FamilySpec
from ...spec.faults import FaultSpec

if TYPE_CHECKING:
    from ..injector import FaultInjector


@dataclass
class Injection:
    """What injecting a fault did: how to heal it, what it observably did, and what the fault records."""

    heal: dict[str, Any]  # the heal recipe: {undo step: what} (cluster.heal.UNDO_STEPS)
    effect: dict[str, Any] = field(default_factory=dict)  # the fault log's `effect` (family's effect_fields)
    nodes: list[int] | None = None  # the nodes it acted on, when not those its target resolved to
    params: dict[str, Any] = field(default_factory=dict)  # recorded beside the spec's (e.g. resolved_groups)
    rule: dict[str, Any] | None = None  # the rule it installed (proxy faults)
    over: bool = False  # over once injected, whatever its kind (a corruption of a running node)


class FaultHandler:
    """One fault family on cluster nodes. Subclasses set `family` and implement `inject`."""

    family: FamilySpec
    at_once: bool = False  # done when injected (the fault's window ends at once)

    def check(self, spec: FaultSpec, where: str) -> None:
        """Checks past `FaultSpec.validate` (e.g. the proxy's own rule parser); FaultError naming `where`."""

    def require(self, cluster, spec: FaultSpec) -> None:
        """What the cluster must have for `spec` beyond supporting its kind; FaultError saying how to get it."""

    def nodes(self, injector: "FaultInjector", spec: FaultSpec) -> list[int]:
        """The nodes `spec`'s target means right now."""
        return [] if spec.kind in self.family.targetless else injector.resolve(spec.resolved_target)

    def inject(self, injector: "FaultInjector", spec: FaultSpec, nodes: list[int], fault_id: str) -> Injection:
        """Apply `spec` on `nodes`; what it did and how to heal it."""
        raise NotImplementedError

    def heals_at_once(self, kind: str) -> bool:
        """Whether a fault of `kind` is over once injected (healed right after)."""
        return self.at_once

    def heal(self, cluster, recipe: dict[str, Any]) -> dict[str, Any] | None:
        """Undo a fault of the family from its recipe; what it did while active (its heal evidence), or None."""
        return undo(cluster, recipe, restart_nodes=True)

    def node_states(self, cluster, nodes: list[int]) -> dict[str, str]:
        """Each node's state now, as an effect record holds it."""
        return {str(n): cluster.node_state(n) for n in nodes}
