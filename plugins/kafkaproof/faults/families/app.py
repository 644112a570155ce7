"""Application faults: instances of the application's services (issue 39; targets `app:<service>`, every
instance, and `app:<service>:<i>`, one) killed (SIGKILL), stopped (SIGTERM), paused (SIGSTOP) or restarted
at once; services run as containers (the compose backend's image services) get `docker kill`, `docker stop`,
`docker pause` and `docker kill` + `docker start` instead. The heal starts a killed or stopped instance again and waits until it is ready (as a consumer
fault's heal starts the consumer again), or resumes a paused one. The run owns the services (their
`run.services.ServiceFleet`, handed in as `fleet`), and the faults are logged to the run's fault log only: the
cluster has nothing to heal after a crash, and the fleet stops every instance when the run ends."""
from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol

from ...cluster.heal import append_fault_log, now
from ...errors import ApplicationError, FaultError
from ...spec.fault_families import APP, app_target
from ...spec.faults import FaultSpec

log = logging.getLogger(__name__)

DEFAULT_STOP_TIMEOUT_S = 30.0


class Fleet(Protocol):
    """What the handler asks of the run's services (`run.services.ServiceFleet`, `run.app_containers.ContainerFleet`)."""

    instances: Mapping[tuple[str, int], Any]

    def kill(self, name: str, i: int) -> None: ...
    def terminate(self, name: str, i: int, timeout_s: float = ...) -> bool: ...
    def stop(self, name: str, i: int) -> None: ...  # SIGSTOP: the fleet's word for a pause
    def resume(self, name: str, i: int) -> None: ...
    def restart(self, name: str, i: int) -> None: ...
    def pid(self, name: str, i: int) -> int | None: ...
    def state(self, name: str, i: int) -> str: ...


def instances_of(fleet: Fleet, target: str) -> tuple[str, list[int]]:
    """The service an `app:` target names and the instances it means (all of them for `app:<service>`);
    FaultError naming the instances that run otherwise."""
    service, index = app_target(target)
    indices = sorted(i for name, i in fleet.instances if name == service)
    if not indices or index is not None and index not in indices:
        running = ", ".join(f"app:{n}:{i}" for n, i in sorted(fleet.instances)) or "none"
        raise FaultError(f"{target}: no such service instance in this run; its services' instances: {running}")
    return service, indices if index is None else [index]


def _each(service: str, indices: list[int], action: Callable[[str, int], object]) -> tuple[dict[str, bool], list[str]]:
    """Run `action` on every instance; which succeeded (by `<service>:<i>`) and the errors of those that did not."""
    done, errors = {}, []
    for i in indices:
        try:
            action(service, i)
            done[f"{service}:{i}"] = True
        except ApplicationError as e:
            done[f"{service}:{i}"] = False
            errors.append(str(e))
    return done, errors


class AppHandler:
    """Injects and heals the application faults of one run on its services' `fleet` (None: the run has no
    application, and an app fault is an error), logging them to the run's fault log."""

    family = APP

    def __init__(self, fleet: Fleet | None):
        self.fleet = fleet
        # fault id -> (its spec, the service, its instances, what the injection already did: a restart's result)
        self.active: dict[str, tuple[FaultSpec, str, list[int], dict[str, bool]]] = {}

    def inject(self, spec: FaultSpec, fault_log: Path, annotations: Mapping[str, Any] | None = None) -> str:
        """Kill, stop, pause or restart the instances `spec` targets and log it with each one's state after it
        to `fault_log`; the fault's id."""
        if self.fleet is None:
            raise FaultError(f"{spec.kind} {spec.target}: this run starts no application services; "
                             f"app: faults need the scenario's `application` section")
        fleet = self.fleet
        service, indices = instances_of(fleet, spec.target)
        pids = {f"{service}:{i}": fleet.pid(service, i) for i in indices}
        timeout_s = float(spec.params.get("timeout_s", DEFAULT_STOP_TIMEOUT_S))
        by_signal = {"SIGKILL": fleet.kill, "SIGTERM": lambda name, i: fleet.terminate(name, i, timeout_s),
                     "SIGSTOP": fleet.stop}  # the fleet's `stop` pauses
        action = fleet.restart if spec.kind == "restart" else by_signal[APP.actions[spec.kind]]
        done, errors = _each(service, indices, action)
        states = {f"{service}:{i}": fleet.state(service, i) for i in indices}
        fid = f"{spec.kind}-app-{spec.target[len(APP.target_prefix):].replace(':', '-')}-{uuid.uuid4().hex[:6]}"
        mono, wall = now()
        append_fault_log(fault_log, {"event": "inject", "fault_id": fid, "kind": spec.kind, "target": spec.target,
                                     "nodes": [], "params": {"pids": pids, **spec.params}, "mono_ns": mono,
                                     "wall": wall, "effect": {"app_states": states},
                                     **({"annotations": annotations} if annotations else {})})
        self.active[fid] = (spec, service, indices, done if spec.kind == "restart" else {})
        log.info("fault %s: %s %s (pids %s): %s", fid, spec.kind, spec.target, pids, states)
        for error in errors:
            log.error("fault %s: %s", fid, error)
        return fid

    def heal(self, fid: str, fault_log: Path) -> None:
        """Undo fault `fid`: start its killed or stopped instances again and wait until they are ready, resume
        paused ones (a restart is over already); log to `fault_log` which came back. ApplicationError naming
        the instances that did not, after logging."""
        spec, service, indices, restarted = self.active.pop(fid)
        errors: list[str] = []
        if spec.kind == "pause":
            resumed, errors = _each(service, indices, self.fleet.resume)
            evidence = {"app_resumed": resumed}
        elif spec.kind == "restart":
            evidence = {"app_restarted": restarted}
            errors = [f"app:{name} did not come back ready after the restart (the run's log says why)"
                      for name, ready in restarted.items() if not ready]
        else:
            restarted, errors = _each(service, indices, self.fleet.restart)
            evidence = {"app_restarted": restarted}
        mono, wall = now()
        append_fault_log(fault_log, {"event": "heal", "fault_id": fid, "kind": spec.kind, "target": spec.target,
                                     "nodes": [], "params": {}, "mono_ns": mono, "wall": wall, **evidence})
        if errors:
            raise ApplicationError(f"heal of {fid}: " + "; ".join(errors))
