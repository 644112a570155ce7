"""A scenario's fault timeline during a run: each fault in a thread of its own, waiting for its trigger."""
from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from ..errors import KafkaproofError
from ..faults import AppHandler, ConsumerHandler, FaultInjector
from ..faults.families.app import Fleet
from ..spec.fault_families import APP, CONSUMER
from ..spec import together
from ..spec.scenario import TimelineFault
from .control import POLL_S, RunControl
from .workers import WorkerEvents, Workers

if TYPE_CHECKING:
    from .scenario_run import ScenarioRun

log = logging.getLogger(__name__)

# How long past its `at` (or its duration) a run waits for a fault task's request before it
# calls the fault not injected (or heals it itself): Airflow starts tasks within seconds.
REQUEST_GRACE_S = 60.0


class Timeline:
    """Runs a scenario's fault timeline, each fault in a thread of its own.

    A fault waits until its `at`, then (with `after`) for the state it needs — the next commit of
    a consumer, a partition's ISR shrinking — and `delay_s`; it is injected, and healed `duration`
    seconds after the injection (without a duration: when the workload is over). One fault
    taking seconds to inject or heal (a node slow to stop or to listen again) never delays
    another. A trigger that never happens is an error of the run, not a silent skip.

    With a `control` (the nightly DAG's fault tasks, see run/control.py) the fault tasks time the
    faults: an entry is injected when its task asks (its trigger still awaited here, where the
    workers are) and healed when the task asks again; a request that never comes is an error of
    the run, and what is still injected is healed when the workload ends, as always.

    Faults on the run's own processes (`consumer:<i>`, and `app:<service>` on its `services`, a
    `ServiceFleet` or `ContainerFleet`; None when the scenario has no application) are the run's handlers',
    not the injector's.
    """

    def __init__(self, run: ScenarioRun, injector: FaultInjector | None, workers: Workers, t0: float,
                 events: WorkerEvents | None = None, control: RunControl | None = None,
                 services: Fleet | None = None):
        self.run, self.injector, self.workers, self.t0, self.events = run, injector, workers, t0, events
        self.control = control
        self.entries = run.scenario.timeline()
        self.fault_ids: dict[int, str] = {}  # entry position -> fault id, once injected
        self.active: dict[str, str] = {}
        # Target prefix -> the handler of the family the run injects itself (it owns those processes).
        self.run_faults = {CONSUMER.target_prefix: ConsumerHandler(workers), APP.target_prefix: AppHandler(services)}
        self.healed: set[int] = set()
        self._threads: list[threading.Thread] = []
        # One barrier per group of correlated faults (a `together` block): its faults start at one instant.
        self._barriers = {g: threading.Barrier(len(ps)) for g, ps in together.groups(
            [{"group": e.group} for e in self.entries]).items()}
        # A group's trigger (a together block's `after`) is awaited once, by the first of its faults to get there.
        self._group_locks = {g: threading.Lock() for g in self._barriers}
        self._group_triggers: dict[int, dict | None] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        for pos, entry in enumerate(self.entries):
            thread = threading.Thread(target=self._lifecycle, args=(pos, entry), name=f"fault-{entry.index}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Stop waiting: faults not yet injected never will be; faults waiting out their duration heal now."""
        self._stop.set()
        for barrier in self._barriers.values():
            barrier.abort()
        for thread in self._threads:
            thread.join(timeout=120)

    def finished(self) -> bool:
        """Every fault injected, and every fault with a duration healed."""
        return not any(t.is_alive() for t in self._threads)

    def active_descriptions(self) -> list[str]:
        with self._lock:
            return list(self.active.values())

    def _sleep_until(self, t: float) -> bool:
        """Sleep until `t` seconds after t0; False when stopped first."""
        return not self._stop.wait(max(0.0, self.t0 + t - time.monotonic()))

    def _lifecycle(self, pos: int, entry: TimelineFault) -> None:
        if not self._await_time(entry, "inject", entry.at):
            if entry.group is not None:  # the others of its group need not wait out their grace
                self._barriers[entry.group].abort()
            return
        annotations: dict[str, Any] = {"scenario_index": entry.index}
        if entry.after:
            trigger = self._await_trigger(entry) if entry.group is None else self._group_trigger(entry)
            if trigger is None:
                self._acknowledge(entry, "inject", error="not injected: its trigger did not happen")
                return
            annotations.update(trigger)
        if entry.group is not None:
            if not self._await_group(entry):
                self._acknowledge(entry, "inject", error="not injected: the other faults of its group did not start")
                return
            annotations.update(group=entry.group, group_size=self._barriers[entry.group].parties)
        began_s = round(time.monotonic() - self.t0, 3)  # a graceful stop takes seconds to be in effect
        injected = self._inject(pos, entry, annotations)
        self._acknowledge(entry, "inject", **({**injected, "began_s": began_s} if injected else
                                              {"error": "not injected: see the run's log"}))
        if injected is None:
            return
        if entry.duration is not None or self._run_handler(entry) is not None:
            # A consumer or app fault without a duration starts (resumes) the process again at once.
            healed_at = injected["at_s"] + (entry.duration or 0.0)
            if self.control is None or entry.duration is None:
                self._stop.wait(max(0.0, self.t0 + healed_at - time.monotonic()))
            elif not self._await_time(entry, "heal", healed_at):
                if self._stop.is_set():
                    return
            self._heal_position(pos)
            self._acknowledge(entry, "heal", at_s=round(time.monotonic() - self.t0, 3))

    def _await_time(self, entry: TimelineFault, action: str, at_s: float) -> bool:
        """Until `at_s` (own clock), or until the entry's fault task asks for `action`; False when
        stopped first or when the task never asked (an error of the run)."""
        if self.control is None:
            return self._sleep_until(at_s)
        give_up = self.t0 + at_s + REQUEST_GRACE_S
        outcome = ", so the fault was never injected" if action == "inject" else "; the run healed it"
        while not self._stop.is_set():
            if self.control.requested(entry.index, action) is not None:
                return True
            gone = self.control.task_gone(entry.index)
            if gone is not None or time.monotonic() > give_up:
                why = (f"its fault task (pid {gone}) ended before it asked for the {action}" if gone is not None else
                       f"its fault task did not ask for the {action} within {REQUEST_GRACE_S:g}s of t={at_s:g}s")
                msg = f"faults[{entry.index}] ({entry.describe()}): {why}{outcome}"
                log.error("%s", msg)
                self.run.fault_errors.append(msg)
                return False
            self._stop.wait(POLL_S)
        return False

    def _await_group(self, entry: TimelineFault) -> bool:
        """Wait until every fault of the entry's group is due (its time, or its fault task's request), so they
        are injected at one instant; False when stopped, or when one of them never came (an error of the run)."""
        try:
            self._barriers[entry.group].wait(timeout=REQUEST_GRACE_S)
            return True
        except threading.BrokenBarrierError:
            if not self._stop.is_set():
                msg = (f"faults[{entry.index}] ({entry.describe()}): not every fault of group {entry.group} was due "
                       f"within {REQUEST_GRACE_S:g}s of the others, so none of them was injected")
                log.error("%s", msg)
                self.run.fault_errors.append(msg)
            return False

    def _group_trigger(self, entry: TimelineFault) -> dict | None:
        """The trigger of the entry's group, awaited once (by the first of its faults to ask; the others wait for
        that answer and share it), so the group's faults reach their barrier together."""
        with self._group_locks[entry.group]:
            if entry.group not in self._group_triggers:
                self._group_triggers[entry.group] = self._await_trigger(entry)
            return self._group_triggers[entry.group]

    def _acknowledge(self, entry: TimelineFault, action: str, **result: Any) -> None:
        if self.control is not None:
            self.control.acknowledge(entry.index, action, result)

    def _await_trigger(self, entry: TimelineFault) -> dict | None:
        """Wait for the fault's trigger; what was awaited and how long, or None (stopped or timed out)."""
        after, started = entry.after, time.monotonic()
        if after["event"] == "consumer_commit":
            held = self._await_commit(after["consumer"], entry.trigger_timeout_s)
        else:
            held = self._await_isr_shrunk(after["partition"], entry.trigger_timeout_s)
        if self._stop.is_set():
            return None
        if not held:
            msg = (f"faults[{entry.index}] ({entry.describe()}): its trigger {after['event']} did not happen within "
                   f"{entry.trigger_timeout_s:g}s, so the fault was never injected")
            log.error("%s", msg)
            self.run.fault_errors.append(msg)
            return None
        waited = time.monotonic() - started
        if after.get("delay_s") and self._stop.wait(after["delay_s"]):
            return None
        log.info("faults[%d]: trigger %s held after %.3fs", entry.index, after["event"], waited)
        return {"trigger": {**after, "waited_s": round(waited, 3), "at_s": round(time.monotonic() - self.t0, 3)}}

    def _await_commit(self, consumer: int, timeout_s: float) -> bool:
        if self.events is None:
            return False
        seen = self.events.count("commit", consumer)
        return self.events.wait_next("commit", consumer, seen, timeout_s, self._stop)

    def _await_isr_shrunk(self, partition: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        cluster, topic = self.run.cluster, self.run.scenario.topic
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                p = cluster.partitions(topic).get(partition)
                if p and len(p["isr"]) < len(p["replicas"]):
                    return True
            except (KafkaproofError, OSError):
                pass  # a metadata read may fail under faults; ask again
            self._stop.wait(0.2)
        return False

    def _inject(self, pos: int, entry: TimelineFault, annotations: dict | None) -> dict[str, Any] | None:
        """Inject an entry; its fault id, the nodes its target resolved to and when (seconds after t0),
        or None when it could not be injected (an error of the run)."""
        try:
            handler = self._run_handler(entry)
            if handler is not None:
                fid, nodes = handler.inject(entry.spec, self.run.fault_log, annotations), []
            else:
                fault = self.injector.inject(entry.spec, annotations)
                fid, nodes = fault.fault_id, list(fault.nodes)
        except (KafkaproofError, OSError) as e:
            msg = f"faults[{entry.index}] ({entry.describe()}): {e}"
            log.error("fault not injected: %s", msg)
            self.run.fault_errors.append(msg)
            return None
        with self._lock:
            self.fault_ids[pos] = fid
            self.active[fid] = f"{entry.spec.kind} {entry.spec.target or entry.spec.params.get('groups')}"
        return {"fault_id": fid, "nodes": nodes, "at_s": round(time.monotonic() - self.t0, 3)}

    def _run_handler(self, entry: TimelineFault) -> ConsumerHandler | AppHandler | None:
        """The run's handler of the entry's fault (a consumer or app fault), or None (the injector's)."""
        return next((h for prefix, h in self.run_faults.items() if entry.spec.target.startswith(prefix)), None)

    def _heal_position(self, pos: int) -> None:
        with self._lock:
            if pos in self.healed or pos not in self.fault_ids:
                return
            self.healed.add(pos)
            fid = self.fault_ids[pos]
        self._heal(fid)

    def _heal(self, fid: str) -> None:
        try:
            handler = next((h for h in self.run_faults.values() if fid in h.active), None)
            if handler is not None:
                handler.heal(fid, self.run.fault_log)
            else:
                self.injector.heal(fid)
        except (KafkaproofError, OSError) as e:
            self.run.fault_errors.append(f"heal {fid}: {e}")
            log.error("heal of %s failed: %s", fid, e)
        with self._lock:
            self.active.pop(fid, None)

    def heal_everything(self) -> None:
        """Heal what is still active: faults without a duration, at the end of the workload."""
        self.stop()
        for pos in list(self.fault_ids):
            self._heal_position(pos)
        for handler in self.run_faults.values():
            for fid in list(handler.active):
                self._heal(fid)
        if self.injector is not None:
            for fid in list(self.injector.injected):
                self._heal(fid)
