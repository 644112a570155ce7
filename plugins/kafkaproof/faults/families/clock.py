"""Clock faults: a node's wall clock shifted by `offset_s` through libfaketime (cluster/clock.py; its
monotonic clock is left alone), back to true time at heal. Needs a cluster started with clock faults on
(docs/clock.md)."""
from __future__ import annotations

from ...spec.fault_families import CLOCK
from ...spec.faults import FaultSpec
from .base import FaultHandler, Injection


class ClockHandler(FaultHandler):
    family = CLOCK

    def inject(self, injector, spec: FaultSpec, nodes: list[int], fault_id: str) -> Injection:
        offset = float(spec.params["offset_s"])
        clocks = injector.cluster.set_clock_offsets({n: offset for n in nodes})
        return Injection({"clock": nodes}, {"clocks": {str(n): e for n, e in clocks.items()}})
