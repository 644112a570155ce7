"""Quorum faults (KIP-853): a spare controller added as a voter, a voter removed (by default the active
controller), or replaced (removed, then a fresh spare added), with Kafka's own `kafka-metadata-quorum`
(cluster/quorum.py). Over once done: the new voter set is the point, nothing heals it; the cluster is marked
changed (never reused). The effect record `quorum` holds the voters, leader and epoch before and after, the
elections (epoch changes) and how long each change took: `remove_s` / `add_s` until Kafka's tool returned (the
new voter set committed; the tool's own JVM start, about 2 s here, included), `*_settled_s` until a describe showed
it with a leader among the voters (docs/quorum.md)."""
from __future__ import annotations

import threading
import time

from ...cluster import quorum
from ...errors import FaultError
from ...spec.fault_families import QUORUM
from ...spec.faults import FaultSpec
from ...spec.quorum import ADDING_KINDS, REMOVING_KINDS
from .base import FaultHandler, Injection

DEFAULT_TIMEOUT_S = 60.0
# Kafka takes one voter change at a time: a second quorum fault of a timeline waits for the first to finish.
_ONE_CHANGE_AT_A_TIME = threading.Lock()


def pick_spare(spares: list[int], voters: list[int], observers: list[int], given: int | None) -> int:
    """Pure: the spare controller to add: the one `given`, else the first spare that is no voter (an observer
    first); FaultError when there is none."""
    if given is not None:
        if given not in spares:
            raise FaultError(f"node {given} is not a spare controller; spares are {spares or 'none'}")
        if given in voters:
            raise FaultError(f"spare controller {given} is already a voter (voters {voters})")
        return given
    free = [s for s in spares if s not in voters]
    if not free:
        raise FaultError(f"no spare controller left to add (spares {spares}, voters {voters}); raise "
                         f"cluster.spare_controllers")
    return next((s for s in free if s in observers), free[0])


class QuorumHandler(FaultHandler):
    family = QUORUM
    at_once = True

    def require(self, cluster, spec: FaultSpec) -> None:
        if not quorum.is_dynamic(cluster):
            raise FaultError(f"{spec.kind} changes the controller quorum, and cluster {cluster.name!r} has a static "
                             f"one (controller.quorum.voters): start it with a dynamic quorum (scenario "
                             f"cluster.quorum: dynamic, `kafkaproof cluster up --quorum dynamic`; local backend, "
                             f"Kafka 3.9 or later)")

    def inject(self, injector, spec: FaultSpec, nodes: list[int], fault_id: str) -> Injection:
        with _ONE_CHANGE_AT_A_TIME:
            return self._change(injector, spec, nodes)

    def _change(self, injector, spec: FaultSpec, nodes: list[int]) -> Injection:
        cluster, params = injector.cluster, spec.params
        timeout_s = float(params.get("timeout_s", DEFAULT_TIMEOUT_S))
        before = quorum.wait_status(cluster, lambda s: True, "a quorum leader", timeout_s)
        record = {"action": spec.kind, "voters_before": before.voters, "leader_before": before.leader,
                  "epoch_before": before.epoch, "observers_before": before.observers}
        acted: list[int] = []
        status = before
        if spec.kind in REMOVING_KINDS:
            # `controller`: the quorum leader as the tool sees it now (another change may have moved it meanwhile)
            victim = before.leader if spec.resolved_target == "controller" else nodes[0]
            if victim not in before.voters:
                raise FaultError(f"{spec.kind}: node {victim} is no voter (voters {before.voters})")
            if len(before.voters) == 1:
                raise FaultError(f"{spec.kind}: node {victim} is the only voter; a quorum cannot remove its last one")
            t0 = time.monotonic()
            quorum.remove_controller(cluster, victim, before.directories[victim])  # returns once committed
            done = time.monotonic() - t0
            status = quorum.wait_status(cluster, lambda s: victim not in s.voters,
                                        f"voter {victim} removed", timeout_s)
            record.update(removed=victim, remove_s=round(done, 2), remove_settled_s=round(time.monotonic() - t0, 2),
                          leader_after_remove=status.leader, epoch_after_remove=status.epoch)
            acted.append(victim)
        if spec.kind in ADDING_KINDS:
            spare = pick_spare(quorum.spare_ids(cluster), status.voters, status.observers, params.get("node"))
            if cluster.node_state(spare) != "running":
                raise FaultError(f"{spec.kind}: spare controller {spare} is {cluster.node_state(spare)}, not running")
            quorum.wait_status(cluster, lambda s: spare in s.observers, f"spare {spare} fetching as an observer",
                               timeout_s)
            t0 = time.monotonic()
            quorum.add_controller(cluster, spare)  # returns once committed
            done = time.monotonic() - t0
            status = quorum.wait_status(cluster, lambda s: spare in s.voters, f"voter {spare} added", timeout_s)
            record.update(added=spare, add_s=round(done, 2), add_settled_s=round(time.monotonic() - t0, 2))
            acted.append(spare)
        quorum.mark_changed(cluster)
        record.update(voters_after=status.voters, leader_after=status.leader, epoch_after=status.epoch,
                      observers_after=status.observers, elections=max(0, status.epoch - before.epoch))
        return Injection({}, {"quorum": record}, nodes=acted, over=True)
