"""Which worker host runs which scenario group of a batch: the placement Airflow's queues and pools carry out.

A deployment on several hosts (Celery executor, issue 42) gives every kafkaproof worker host a queue of its
own (`kafkaproof-<host>`, `airflow celery worker --queues kafkaproof-<host>`) and a pool of cluster slots
(`kafka_cluster_<host>`). A batch's plan assigns each scenario group to one host, and every task of the
group — provision, workload, fault tasks, teardown — carries that host's queue: a run and its fault tasks
always share a host (`run.control` refuses a fault task elsewhere). Scenarios that share a cluster
(`reuse_clusters`) stay on one host; the rest go round robin over the hosts that are up, unless pinned.

One host (the default: this host only) is today's layout: the one pool `kafka_cluster` and Airflow's default
queue, so LocalExecutor and a single Celery worker on the default queue run it unchanged.

Settings, each from the environment or else the Airflow Variable of the same name in lower case
(`settings_lookup`):

- `KAFKAPROOF_HOSTS`: the worker hosts, comma-separated (default: `paths.this_host()`).
- `KAFKAPROOF_HOST_SLOTS`: cluster slots per host, `N` for every host or `host=N,...` (default 1): the size
  of the host's pool.
- `KAFKAPROOF_HOSTS_DOWN`: hosts left out of the round robin (maintenance, a dead worker).
- `KAFKAPROOF_HOST_PINS`: `scenario=host,...`, groups that must run on one host (a pin wins over down).

The placement is fixed when the DAG file is parsed (a task's queue is part of the serialized DAG), so a
change of these settings takes effect at the next parse, not through a DAG run's params.
"""
from __future__ import annotations

import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from .errors import KafkaproofError
from .paths import this_host

LOCAL_POOL = "kafka_cluster"
LOCAL_POOL_DESCRIPTION = "one Kafka cluster per host"
QUEUE_PREFIX = "kafkaproof-"
POOL_PREFIX = "kafka_cluster_"
SETTINGS = ("KAFKAPROOF_HOSTS", "KAFKAPROOF_HOST_SLOTS", "KAFKAPROOF_HOSTS_DOWN", "KAFKAPROOF_HOST_PINS")
_HOST_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class HostPlanError(KafkaproofError):
    """The host settings are inconsistent (an unknown host, a bad slot count, every host down)."""


@dataclass(frozen=True)
class Host:
    """One worker host: its name, its cluster slots, whether it takes new groups, its queue and pool."""

    name: str
    slots: int = 1
    up: bool = True
    queue: str | None = None  # None: Airflow's default queue (one host)
    pool: str = LOCAL_POOL

    def task_args(self) -> dict[str, str]:
        """The arguments of a cluster task of this host (`pool`, and `queue` unless the default)."""
        return {"pool": self.pool, **({"queue": self.queue} if self.queue else {})}

    def queue_args(self) -> dict[str, str]:
        """The arguments of a task that must run on this host but takes no cluster slot (a fault task)."""
        return {"queue": self.queue} if self.queue else {}


@dataclass(frozen=True)
class HostLayout:
    """The worker hosts of a deployment and the groups pinned to them."""

    hosts: tuple[Host, ...]
    pins: Mapping[str, str] = field(default_factory=dict)

    @property
    def single(self) -> bool:
        return len(self.hosts) == 1

    def host(self, name: str) -> Host:
        """The host called `name`; HostPlanError naming the known ones otherwise."""
        for h in self.hosts:
            if h.name == name:
                return h
        raise HostPlanError(f"no host {name!r} in KAFKAPROOF_HOSTS ({', '.join(h.name for h in self.hosts)})")

    @property
    def up(self) -> list[Host]:
        return [h for h in self.hosts if h.up]

    @property
    def home(self) -> Host:
        """Where a DAG whose runs are one task each (manual, upgrade check) runs them: the first host that is up."""
        return (self.up or list(self.hosts))[0]

    def pools(self) -> list[tuple[str, int, str]]:
        """(name, slots, description) of every host's cluster pool, as the setup creates them."""
        if self.single:
            return [(self.hosts[0].pool, self.hosts[0].slots, LOCAL_POOL_DESCRIPTION)]
        return [(h.pool, h.slots, f"Kafka clusters on worker host {h.name} (queue {h.queue})") for h in self.hosts]

    def assign(self, names: Sequence[str], keep_for_next: Sequence[bool]) -> list[str]:
        """The host of each run of a plan, in plan order.

        Runs linked by `keep_for_next` (they share one cluster) form a unit that stays on one host: the first
        pin among them, else the next host that is up in round robin, skipping hosts that already have more
        runs than another (a unit of five shared-cluster runs counts five). A run pinned to another host than
        its unit's starts a unit of its own (its cluster is then not shared).
        """
        up = [h.name for h in self.up]
        units: list[list[int]] = []
        for i, name in enumerate(names):
            pin = self.pins.get(name)
            unit_pin = self._unit_pin(names, units[-1]) if units else None
            # an unpinned unit follows the first pin among its members
            if units and keep_for_next[i - 1] and (pin is None or unit_pin in (None, pin)):
                units[-1].append(i)
            else:
                units.append([i])
        placed = [""] * len(names)
        load = {h.name: 0 for h in self.hosts}
        turn = 0
        for unit in units:
            host = self._unit_pin(names, unit)
            if host is None:
                if not up:
                    raise HostPlanError(f"every host is down (KAFKAPROOF_HOSTS_DOWN: "
                                        f"{', '.join(h.name for h in self.hosts)}): no host can take "
                                        f"{names[unit[0]]}; bring one back or pin the groups")
                # round robin, but a host a long shared-cluster unit made busy is skipped until the others caught up
                order = up[turn % len(up):] + up[:turn % len(up)]
                host = min(order, key=lambda h: load[h])
                turn = up.index(host) + 1
            load[host] += len(unit)
            for i in unit:
                placed[i] = host
        return placed

    def _unit_pin(self, names: Sequence[str], unit: list[int]) -> str | None:
        return next((self.pins[names[i]] for i in unit if names[i] in self.pins), None)


def _items(value: str | None) -> list[str]:
    return [part.strip() for part in (value or "").split(",") if part.strip()]


def _pairs(value: str | None, setting: str) -> dict[str, str]:
    pairs = {}
    for item in _items(value):
        key, sep, val = item.partition("=")
        if not sep or not key.strip() or not val.strip():
            raise HostPlanError(f"{setting}: {item!r} is not NAME=VALUE (e.g. {setting}=a=2,b=1)")
        pairs[key.strip()] = val.strip()
    return pairs


def _slot_count(value: str, setting: str) -> int:
    try:
        slots = int(value)
    except ValueError:
        slots = 0
    if slots < 1:
        raise HostPlanError(f"{setting}: {value!r} is not a slot count (an integer of at least 1)")
    return slots


def layout(hosts: str | None = None, slots: str | None = None, down: str | None = None, pins: str | None = None,
           here: str | None = None) -> HostLayout:
    """The layout the settings describe (see the module docstring for their syntax); `here` is this host."""
    names = _items(hosts) or [here or this_host()]
    for name in names:
        if not _HOST_NAME.match(name):
            raise HostPlanError(f"KAFKAPROOF_HOSTS: {name!r} is not a host name (letters, digits, '.', '_', '-')")
    if len(set(names)) != len(names):
        raise HostPlanError(f"KAFKAPROOF_HOSTS names a host twice: {hosts}")
    if slots and "=" not in slots:
        per_host = {name: _slot_count(slots, "KAFKAPROOF_HOST_SLOTS") for name in names}
    else:
        per_host = {name: _slot_count(n, "KAFKAPROOF_HOST_SLOTS")
                    for name, n in _pairs(slots, "KAFKAPROOF_HOST_SLOTS").items()}
    pinned = _pairs(pins, "KAFKAPROOF_HOST_PINS")
    gone = _items(down)
    for setting, named in (("KAFKAPROOF_HOST_SLOTS", per_host), ("KAFKAPROOF_HOSTS_DOWN", gone),
                           ("KAFKAPROOF_HOST_PINS", pinned.values())):
        unknown = sorted(set(named) - set(names))
        if unknown:
            raise HostPlanError(f"{setting} names {', '.join(unknown)}, not in KAFKAPROOF_HOSTS ({', '.join(names)})")
    if len(names) == 1:
        return HostLayout((Host(names[0], per_host.get(names[0], 1), names[0] not in gone),), pinned)
    return HostLayout(tuple(Host(name, per_host.get(name, 1), name not in gone, QUEUE_PREFIX + name,
                                 POOL_PREFIX + name) for name in names), pinned)


def layout_from(lookup: Callable[[str], str | None], here: str | None = None) -> HostLayout:
    """The layout from the settings `lookup` finds (`settings_lookup`, or a dict's `get` in tests)."""
    return layout(*(lookup(name) for name in SETTINGS), here=here)


def settings_lookup(env: Mapping[str, str]) -> Callable[[str], str | None]:
    """A setting from `env`, else from the Airflow Variable of its name in lower case (None when Airflow, or the
    Variable, is not there). Airflow is asked only when it runs this process or `AIRFLOW_HOME` names one: the
    CLI elsewhere must not create a default Airflow home."""
    def lookup(name: str) -> str | None:
        if name in env:
            return env[name]
        if "airflow" not in sys.modules and "AIRFLOW_HOME" not in env:
            return None
        try:
            from airflow.sdk import Variable
            return Variable.get(name.lower(), default=None)
        except Exception:  # no Airflow, no metadata database reachable at parse time: the default layout
            return None
    return lookup
