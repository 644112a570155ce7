"""Dynamic KRaft quorums (KIP-853): `cluster.quorum`, `cluster.spare_controllers`, the quorum faults' checks and
the `quorum` exercised condition. Pure (docs/quorum.md).

A `static` quorum (the default) lists its voters in `controller.quorum.voters`: nothing can change them while it
runs. A `dynamic` one is formatted with its initial voters (`kafka-storage format --initial-controllers`, or
`--standalone` for a single one) and its nodes find it through `controller.quorum.bootstrap.servers`; then
`kafka-metadata-quorum add-controller` / `remove-controller` change the voters. Spare controllers are dedicated
controller nodes formatted with `--no-initial-controllers`: they start as observers, ready to be added. Their ids
follow the controllers' (`101 + controllers` on), so a combined cluster's first spare is 101.

Refused before anything starts (each naming the field and the version): a quorum fault on a static quorum,
spare controllers on a static quorum, a dynamic quorum on Kafka before 3.9, or off the local backend.
"""
from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from .fault_families import QUORUM

QUORUM_MODES = ("static", "dynamic")
MIN_KAFKA = (3, 9)
MAX_SPARES = 3
CONTROLLER_ID_BASE = 100
# The fault kinds that change the voters (spec.fault_families.QUORUM lists their parameters).
QUORUM_KINDS = tuple(QUORUM.kinds)
REMOVING_KINDS = tuple(k for k, action in QUORUM.actions.items() if "remove" in action.split("+"))
ADDING_KINDS = tuple(k for k, action in QUORUM.actions.items() if "add" in action.split("+"))

CLUSTER_SCHEMA: dict[str, Any] = {
    "quorum": {"enum": list(QUORUM_MODES),
               "description": "static (controller.quorum.voters, default) or dynamic (KIP-853: formatted with its "
                              "initial controllers, so add_controller / remove_controller / replace_controller "
                              "faults can change the voters; Kafka 3.9 or later, local backend)"},
    "spare_controllers": {"type": "integer", "minimum": 0, "maximum": MAX_SPARES,
                          "description": "dynamic quorum: dedicated controllers started as observers (formatted "
                                         "with --no-initial-controllers), for add_controller to add; ids follow "
                                         "the controllers' (101 + controllers on)"},
}

# exercised[] parameters of the `quorum` condition.
EXERCISE_CHECK = "quorum"
EXERCISE_PROPERTIES: dict[str, Any] = {
    "voters": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1,
               "description": "quorum: the voters after the last quorum fault, exactly (any order)"},
    "voter_count": {"type": "integer", "minimum": 1, "description": "quorum: how many voters after the last quorum fault"},
    "min_elections": {"type": "integer", "minimum": 1,
                      "description": "quorum: at least this many quorum leader elections (epoch changes) during "
                                     "the quorum faults"},
}
EXERCISE_PARAMS = ((), ("voters", "voter_count", "min_elections"))


def version_tuple(version: str) -> tuple[int, int]:
    """Pure: a Kafka version's major and minor."""
    major, minor = str(version).split(".")[:2]
    return int(major), int(minor)


def voter_ids(brokers: int, controllers: int) -> list[int]:
    """Pure: the initial voters: the dedicated controllers, or every broker of a combined cluster."""
    if controllers == 0:
        return list(range(1, brokers + 1))
    return list(range(CONTROLLER_ID_BASE + 1, CONTROLLER_ID_BASE + 1 + controllers))


def spare_ids(controllers: int, spares: int) -> list[int]:
    """Pure: the spare controllers' ids, after the dedicated controllers'."""
    first = CONTROLLER_ID_BASE + 1 + controllers
    return list(range(first, first + spares))


def quorum_faults(data: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """Pure: (where, fault) of every quorum fault of a scenario's timeline and random kinds."""
    found = [(f"faults[{i}]", f) for i, f in enumerate(data.get("faults") or []) if f["kind"] in QUORUM_KINDS]
    found += [("faults.random", k) for k in (data.get("random_faults") or {}).get("kinds", [])
              if k["kind"] in QUORUM_KINDS]
    return found


def check(data: Mapping[str, Any], fail: Callable[[str, str], None]) -> None:
    """Refuse what cannot run: quorum faults or spares on a static quorum, a dynamic quorum before Kafka 3.9 or off
    the local backend, more controllers added than there are spares, a named spare that is none, quorum
    faults drawn at random (each needs a spare and a plan)."""
    cluster = data["cluster"]
    mode = cluster.get("quorum", "static")
    spares = int(cluster.get("spare_controllers", 0))
    faults = quorum_faults(data)
    version = str(cluster["kafka_version"])
    if mode == "static":
        if faults:
            where, f = faults[0]
            fail("cluster.quorum", f"static, but {where} ({f['kind']}) changes the controller quorum, which a static "
                                   f"quorum (controller.quorum.voters) cannot; set cluster.quorum: dynamic "
                                   f"(Kafka 3.9 or later)")
        if spares:
            fail("cluster.spare_controllers", f"{spares}: spare controllers join a dynamic quorum; set "
                                              f"cluster.quorum: dynamic")
        return
    if version_tuple(version) < MIN_KAFKA:
        fail("cluster.quorum", f"dynamic: Kafka {version} has no dynamic KRaft quorum (KIP-853); use "
                               f"{'.'.join(map(str, MIN_KAFKA))} or later")
    backend = cluster.get("backend", "local")
    if backend != "local" or cluster.get("attach"):
        fail("cluster.quorum", f"dynamic: only the local backend formats and changes a dynamic quorum (backend "
                               f"{'attached' if cluster.get('attach') else backend}, Kafka {version})")
    if any(where == "faults.random" for where, _ in faults):
        fail("faults.random", "quorum faults are not drawn at random: give them in a timeline")
    for where, f in faults:
        if f.get("duration") is not None:
            fail(f"{where}.duration", f"{f['kind']} takes no duration: it is over once the new voters are committed")
    adding = [(where, f) for where, f in faults if f["kind"] in ADDING_KINDS]
    if len(adding) > spares:
        fail("cluster.spare_controllers", f"{spares}, but the timeline adds {len(adding)} controller"
                                          f"{'' if len(adding) == 1 else 's'} ({', '.join(w for w, _ in adding)}); "
                                          f"each add takes a fresh spare")
    allowed = spare_ids(int(cluster["controllers"]), spares)
    for where, f in adding:
        node = (f.get("params") or {}).get("node")
        if node is not None and node not in allowed:
            fail(f"{where}.params.node", f"{node} is not a spare controller; spares are {allowed or 'none'} "
                                         f"(cluster.spare_controllers)")


def check_condition(cond: Mapping[str, Any], where: str, data: Mapping[str, Any],
                    fail: Callable[[str, str], None]) -> None:
    """The `quorum` exercised condition needs a quorum fault to judge and at least one expectation."""
    if not quorum_faults(data):
        fail(f"{where}.check", "quorum judges the quorum faults (add_controller, remove_controller, "
                               "replace_controller); the timeline has none")
    if not any(k in cond for k in EXERCISE_PARAMS[1]):
        fail(f"{where}.check", f"quorum needs one of {', '.join(EXERCISE_PARAMS[1])}")


# --- formatting ----------------------------------------------------------------------------------
def initial_controllers(voters: Sequence[Mapping[str, Any]]) -> str:
    """Pure: `--initial-controllers`' value: `<id>@<host>:<port>:<directory id>` per voter, comma-separated."""
    return ",".join(f"{v['id']}@{v['host']}:{v['controller_port']}:{v['directory_id']}" for v in voters)


def format_args(node_id: int, roles: str, voters: Sequence[Mapping[str, Any]]) -> list[str]:
    """Pure: the storage tool's quorum arguments of one node of a dynamic quorum: an initial voter gets its
    directory id and the initial controllers (`--standalone` when it is the only one), a spare controller
    `--no-initial-controllers`, a broker none."""
    if "controller" not in roles:
        return []
    mine = [v for v in voters if v["id"] == node_id]
    if not mine:
        return ["--no-initial-controllers"]
    if len(voters) == 1:
        return ["--standalone"]
    return ["--initial-controllers", initial_controllers(voters)]


def bootstrap_servers(voters: Sequence[Mapping[str, Any]]) -> str:
    """Pure: `controller.quorum.bootstrap.servers` of a dynamic quorum: the initial voters' controller endpoints."""
    return ",".join(f"{v['host']}:{v['controller_port']}" for v in voters)
