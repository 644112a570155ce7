"""Process faults: a node killed (SIGKILL), stopped (SIGTERM, a controlled shutdown), paused (SIGSTOP), or
restarted at once. Healed by starting (or resuming) the nodes; a restart is over when injected."""
from __future__ import annotations

from ...spec.fault_families import PROCESS
from ...spec.faults import FaultSpec
from .base import FaultHandler, Injection


class ProcessHandler(FaultHandler):
    family = PROCESS

    def heals_at_once(self, kind: str) -> bool:
        return kind == "restart"

    def inject(self, injector, spec: FaultSpec, nodes: list[int], fault_id: str) -> Injection:
        cluster, params = injector.cluster, spec.params
        if spec.kind == "restart":
            before = {n: cluster.node_incarnation(n) for n in nodes}
            for n in nodes:
                cluster.stop_node(n, graceful=bool(params.get("graceful", True)))
                cluster.start_node(n)
            return Injection({}, {"restarted": {str(n): cluster.node_incarnation(n) != before[n] for n in nodes}})
        if spec.kind == "pause":
            for n in nodes:
                cluster.pause_node(n)
            return Injection({"resume": nodes}, {"node_states": self.node_states(cluster, nodes)})
        for n in nodes:
            cluster.stop_node(n, graceful=spec.kind == "stop", timeout_s=float(params.get("timeout_s", 30)))
        return Injection({"restart": nodes}, {"node_states": self.node_states(cluster, nodes)})
