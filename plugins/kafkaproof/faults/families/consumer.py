"""Consumer faults: a consumer process of the run (target `consumer:<i>`) killed (SIGKILL), stopped (SIGTERM)
or paused (SIGSTOP); the heal starts it again, a killed or stopped one with `params.config` over its
settings when given (an online migration of the group protocol). The run owns its consumer processes
(`run.workers`): it hands them in as `workers` (signal_consumer, reconfigure_consumer, restart_consumer,
consumers, incarnations), and the faults are logged to the run's fault log only (the cluster has nothing to
heal after a crash)."""
from __future__ import annotations

import logging
import signal
import uuid
from pathlib import Path
from typing import Any, Mapping

from ...cluster import process
from ...cluster.heal import append_fault_log, now
from ...spec.fault_families import CONSUMER
from ...spec.faults import FaultSpec

log = logging.getLogger(__name__)


class ConsumerHandler:
    """Injects and heals the consumer faults of one run on its `workers`, logging them to the run's fault log."""

    family = CONSUMER

    def __init__(self, workers):
        self.workers = workers
        self.active: dict[str, tuple[FaultSpec, int]] = {}  # fault id -> (its spec, the consumer's index)

    def inject(self, spec: FaultSpec, fault_log: Path, annotations: Mapping[str, Any] | None = None) -> str:
        """Signal the consumer `spec` targets and log it to `fault_log`; the fault's id."""
        index = int(spec.target.split(":")[1])
        sig = getattr(signal, CONSUMER.actions[spec.kind])
        pid = self.workers.signal_consumer(index, sig)
        if spec.params.get("config"):  # the heal starts it with these settings (e.g. an online migration)
            self.workers.reconfigure_consumer(index, spec.params["config"])
        if sig != signal.SIGSTOP:
            self.workers.consumers[index].wait(30)
            state_after = "dead" if self.workers.consumers[index].poll() is not None else "running"
        else:
            state_after = process.state_of(process.ref_for(pid)) if process.start_ticks(pid) else "dead"
        fid = f"{spec.kind}-consumer{index}-{uuid.uuid4().hex[:6]}"
        mono, wall = now()
        append_fault_log(fault_log, {"event": "inject", "fault_id": fid, "kind": spec.kind, "target": spec.target,
                                     "nodes": [], "params": {"pid": pid, **spec.params}, "mono_ns": mono,
                                     "wall": wall, "effect": {"consumer_state": state_after},
                                     **({"annotations": annotations} if annotations else {})})
        self.active[fid] = (spec, index)
        log.info("fault %s: %s consumer %d (pid %d)", fid, spec.kind, index, pid)
        return fid

    def heal(self, fid: str, fault_log: Path) -> None:
        """Start the consumer of fault `fid` again and log to `fault_log` whether a new process of it runs."""
        spec, index = self.active.pop(fid)
        before = self.workers.incarnations.get(index, 0)
        self.workers.restart_consumer(index)
        mono, wall = now()
        append_fault_log(fault_log, {
            "event": "heal", "fault_id": fid, "kind": spec.kind, "target": spec.target,
            "nodes": [], "params": {}, "mono_ns": mono, "wall": wall,
            "consumer_restarted": self.workers.incarnations.get(index, 0) > before})
