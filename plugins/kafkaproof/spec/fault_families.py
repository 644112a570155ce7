"""The fault families, registered in one place: each family's kinds, their parameters and value checks,
what its heal recipe undoes and which fields of its fault log show it took effect. Pure data.

One `FamilySpec` per family is the single source of truth for its kinds: `spec.faults` (FaultSpec's
checks), the scenario schema, the CLI's list, the backends' supported kinds and the fault layer's
handlers (`kafkaproof.faults.families`, one per family, registered against these) all read it, and so does
the Spark job, which runs without the package: the zip spark-submit gets carries `plain()` of this registry
as a generated module (kafkaproof.analysis.submit.family_registry_source). README "Development" says how to
add a family or a kind.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ..errors import FaultError
from .coordinator_targets import TARGET_FORMS as COORDINATOR_FORMS, TARGET_PATTERN as COORDINATOR_PATTERN
from .corruption import check_corruption_params

Params = Mapping[str, tuple[Any, bool]]  # parameter name -> (type or types, required)
# A family's value checks past the parameters' types: (kind, params, where) -> None, or FaultError.
Check = Callable[[str, Mapping[str, Any], str], None]

# Coordinator targets (group_coordinator, share_coordinator, txn_coordinator:<copier>): the broker coordinating a
# key of the run (spec/coordinator_targets.py; resolved when injected, by faults/injector.py).
TARGET_FORMS = ("node:<id>", "broker:<id>", "nodes:<id>,<id>", "leader:<partition>", "leader:<topic>:<partition>",
                "follower:<partition>", "follower:<topic>:<partition>", "followers:<partition>",
                "followers:<topic>:<partition>", "controller", *COORDINATOR_FORMS, "random", "brokers", "all")
TARGET_RE = re.compile(r"^(node:\d+|broker:\d+|nodes:\d+(,\d+)*|leader:([\w.-]+:)?\d+|followers?:([\w.-]+:)?\d+|"
                       r"controller|" + COORDINATOR_PATTERN + r"|random|brokers|all)$")


@dataclass(frozen=True)
class FamilySpec:
    """One fault family: its kinds and what every part of kafkaproof needs to know about them.

    `kinds`: kind -> its parameters. `effect_fields`, `heal_fields`: the evidence, the fields of its fault log's
    inject `effect` and of its heal record that show what a fault did (the analysis judges whether it took
    effect from them; a step's heal record says how the step went). `undo`: the keys of its heal recipe
    (the mechanisms `cluster.heal` undoes, also after a crash). `steps`: kinds of the fault log rows a
    fault of the family writes for its steps (not injectable). `target_prefix`: the family's faults target
    that (`consumer:`) instead of nodes; `target_forms` says the forms and `target_re` checks them (a prefixed
    family's; nodes' targets are `TARGET_FORMS`). `needs`: the cluster option its kinds need (`proxy`, `clock`,
    `disk`). `actions`: each kind's action (a proxy or diskfs rule's, a consumer's signal). `check`: value
    checks past types. `colors`: what the report's timeline draws each kind in (others grey).
    """

    name: str
    kinds: Mapping[str, Params]
    effect_fields: tuple[str, ...] = ()
    heal_fields: tuple[str, ...] = ()
    undo: tuple[str, ...] = ()
    steps: tuple[str, ...] = ()
    target_prefix: str = ""
    target_forms: tuple[str, ...] = ()
    target_re: re.Pattern[str] | None = None
    needs: str = ""
    targetless: tuple[str, ...] = ()  # kinds whose target is implied by their parameters
    default_target: str = ""  # what a left-out target means
    actions: Mapping[str, str] = field(default_factory=dict)
    check: Check | None = None
    colors: Mapping[str, str] = field(default_factory=dict)

    def plain(self) -> dict[str, Any]:
        """Pure: what the Spark job knows of the family (JSON-like): kinds, steps, evidence fields, target prefix."""
        return {"kinds": list(self.kinds), "steps": list(self.steps), "effect_fields": list(self.effect_fields),
                "heal_fields": list(self.heal_fields), "target_prefix": self.target_prefix}


_NUM = (int, float)


# --- network -------------------------------------------------------------------------------------
PARTITION_SHAPES = ("majority-minority", "leader-minority:<partition>", "bridge", "controller-minority")


def _check_network(kind: str, params: Mapping[str, Any], where: str) -> None:
    if kind == "packet_loss" and not 0 < params["percent"] <= 100:
        raise FaultError(f"{where}.params.percent: must be in (0, 100], got {params['percent']}")
    if kind == "bandwidth" and params["rate_kbit"] <= 0:
        raise FaultError(f"{where}.params.rate_kbit: must be > 0")
    if kind == "cut" and not TARGET_RE.match(params["to"]) and params["to"] != "clients":
        raise FaultError(f"{where}.params.to: {params['to']!r} is not a target; allowed: clients, "
                         f"{', '.join(TARGET_FORMS)}")
    if kind == "partition":
        _check_groups(params["groups"], f"{where}.params.groups")


def _check_groups(groups: Any, where: str) -> None:
    if isinstance(groups, str):
        if groups in ("majority-minority", "bridge", "controller-minority") or re.match(r"^leader-minority:\d+$", groups):
            return
        raise FaultError(f"{where}: unknown partition shape {groups!r}; allowed: {', '.join(PARTITION_SHAPES)} "
                         f"or a list of node-id lists")
    if not (isinstance(groups, list) and len(groups) >= 2 and
            all(isinstance(g, list) and g and all(isinstance(i, int) for i in g) for g in groups)):
        raise FaultError(f"{where}: expected at least two non-empty lists of node ids, e.g. [[1], [2, 3]]")
    flat = [i for g in groups for i in g]
    if len(flat) != len(set(flat)):
        raise FaultError(f"{where}: a node appears in two groups: {groups}")


# --- proxy ---------------------------------------------------------------------------------------
# Request filters of every proxy fault (docs/proxy.md "Rules"), and the random draw/limit.
_PROXY_MATCH = {"api": ((str, int, list), False), "topic": (str, False), "partitions": ((int, list), False),
                "client_id": (str, False)}
_PROXY_DRAW = {"probability": (_NUM, False), "every": (int, False), "count": (int, False)}
# Kinds whose rule applies to Produce unless `api` says otherwise.
PROXY_DEFAULT_API = {"lost_ack": "produce", "error": "produce"}


# --- rolling -------------------------------------------------------------------------------------
def _check_rolling(kind: str, params: Mapping[str, Any], where: str) -> None:
    from .versions import check_version
    from ..errors import InstallError
    if "version" in params:
        try:
            check_version(params["version"])
        except InstallError as e:
            raise FaultError(f"{where}.params.version: {e}") from None
    for key, value in (params.get("config") or {}).items():
        if not isinstance(key, str) or not re.fullmatch(r"[a-z][a-z0-9._-]*", key):
            raise FaultError(f"{where}.params.config: {key!r} is not a Kafka setting name (e.g. num.replica.fetchers)")
        if not isinstance(value, (str, int, float, bool)):
            raise FaultError(f"{where}.params.config.{key}: expected a string, number or boolean, got {value!r}")
    if params.get("timeout_s", 1) <= 0:
        raise FaultError(f"{where}.params.timeout_s: must be > 0")


# --- clock ---------------------------------------------------------------------------------------
# Largest clock offset a scenario may ask for (about ten years either way).
MAX_CLOCK_OFFSET_S = 10 * 366 * 86400


def _check_clock(kind: str, params: Mapping[str, Any], where: str) -> None:
    if not 0 < abs(params["offset_s"]) <= MAX_CLOCK_OFFSET_S:
        raise FaultError(f"{where}.params.offset_s: must be non-zero and at most {MAX_CLOCK_OFFSET_S} s "
                         f"(ten years) either way, got {params['offset_s']}")


# --- disk ----------------------------------------------------------------------------------------
# What a disk fault's `op` may say: data reads, data writes (and size changes), fsync, the namespace
# (create, mkdir, rename, unlink, rmdir), or all of them; the errno names a `disk_error` may return.
DISK_OPS = ("read", "write", "sync", "meta", "all")
DISK_ERRNOS = ("EIO", "EROFS", "EDQUOT")
MAX_DISK_LATENCY_MS = 60_000


def check_disk_params(params: Mapping[str, Any], where: str) -> None:
    """Pure: the values of a disk fault's (or diskfs rule's) `op`, `errno`, `ms` and `path`; FaultError naming
    `where`.params.<name> otherwise."""
    if params.get("op", "all") not in DISK_OPS:
        raise FaultError(f"{where}.params.op: {params['op']!r} is not an operation; allowed: {', '.join(DISK_OPS)}")
    if params.get("errno", "EIO") not in DISK_ERRNOS:
        raise FaultError(f"{where}.params.errno: {params['errno']!r} is not one a disk fault returns; allowed: "
                         f"{', '.join(DISK_ERRNOS)} (ENOSPC: disk_full)")
    if "ms" in params and not 0 < params["ms"] <= MAX_DISK_LATENCY_MS:
        raise FaultError(f"{where}.params.ms: must be in (0, {MAX_DISK_LATENCY_MS}], got {params['ms']:g}")
    if ".." in str(params.get("path", "")).split("/"):
        raise FaultError(f"{where}.params.path: {params['path']!r} must stay inside the log directory (no '..')")


# --- app -----------------------------------------------------------------------------------------
def _check_app(params: Mapping[str, Any], where: str) -> None:
    if params.get("timeout_s", 1) <= 0:
        raise FaultError(f"{where}.params.timeout_s: must be > 0 (seconds a stopped instance has to exit)")


def app_target(target: str) -> tuple[str, int | None]:
    """Pure: the service and instance (None: every instance) an `app:` target names; FaultError otherwise."""
    match = APP.target_re.match(target)
    if match is None:
        raise FaultError(f"{target!r} is not an application target; allowed forms: {', '.join(APP.target_forms)} "
                         f"(a service name is lowercase letters, digits and '-')")
    instance = match.group("instance")
    return match.group("service"), None if instance is None else int(instance)


# --- the registry --------------------------------------------------------------------------------
PROCESS = FamilySpec(
    "process",
    {"kill": {}, "stop": {"timeout_s": (_NUM, False)}, "pause": {}, "restart": {"graceful": (bool, False)}},
    effect_fields=("node_states", "restarted"), undo=("restart", "resume"),
    colors={"kill": "#d62728", "stop": "#e377c2", "pause": "#9467bd", "restart": "#8c564b"})
NETWORK = FamilySpec(
    "network",
    {"isolate": {}, "cut": {"to": (str, True)}, "partition": {"groups": ((list, str), True)}, "cut_clients": {},
     "packet_loss": {"percent": (_NUM, True)}, "bandwidth": {"rate_kbit": (int, True)}},
    heal_fields=("dropped_packets", "dropped_bytes", "tbf_overlimits", "tbf_dropped"), undo=("nft", "tc"),
    targetless=("partition",), check=_check_network,
    colors={"isolate": "#ff7f0e", "cut": "#e6550d", "partition": "#fd8d3c", "cut_clients": "#bcbd22",
            "packet_loss": "#17becf", "bandwidth": "#3182bd"})
# Each proxy fault is one rule of the fault proxy (docs/proxy.md); `bandwidth` is taken by the tc fault.
PROXY = FamilySpec(
    "proxy",
    {"lost_ack": {**_PROXY_MATCH, **_PROXY_DRAW, "reset": (bool, False)},
     "error": {**_PROXY_MATCH, **_PROXY_DRAW, "error": ((int, str), True), "forward": (bool, False)},
     "latency": {**_PROXY_MATCH, **_PROXY_DRAW, "direction": (str, False), "ms": (_NUM, False),
                 "min_ms": (_NUM, False), "max_ms": (_NUM, False), "mean_ms": (_NUM, False),
                 "stddev_ms": (_NUM, False), "dist": (str, False)},
     "proxy_bandwidth": {**_PROXY_MATCH, "bytes_per_s": (_NUM, True), "direction": (str, False)},
     "reset": {**_PROXY_MATCH, **_PROXY_DRAW, "after_bytes": (int, False), "direction": (str, False)},
     "blackhole": {**_PROXY_MATCH, **_PROXY_DRAW},
     # Answers altered on their way back: Metadata leaders (`mode` missing or stale), Fetch record batches.
     "metadata": {**_PROXY_MATCH, **_PROXY_DRAW, "mode": (str, True)},
     "fetch_corrupt": {**_PROXY_MATCH, **_PROXY_DRAW},
     "fetch_duplicate": {**_PROXY_MATCH, **_PROXY_DRAW},
     # A (transactional) Produce held `ms`, past the client's timeout, then delivered on the proxy's own
     # broker connection after the client gave up on it (proxy/held.py).
     "hold": {**_PROXY_MATCH, **_PROXY_DRAW, "ms": (_NUM, True), "transactional": (bool, False)}},
    heal_fields=("proxy_fired", "proxy_matched"), undo=("proxy_rules",), needs="proxy",
    actions={"lost_ack": "lost_ack", "error": "error", "latency": "latency", "proxy_bandwidth": "bandwidth",
             "reset": "reset", "blackhole": "blackhole", "metadata": "metadata", "fetch_corrupt": "corrupt",
             "fetch_duplicate": "duplicate", "hold": "hold"})
# One node at a time: stop, start again on another version and/or with other settings (a rolling_restart
# without `config`: as it was), wait until it is back in every ISR (docs/upgrades.md). Instantaneous on the timeline: no `duration`. Each step is
# a row of the fault log of its own (not injectable by itself).
ROLLING = FamilySpec(
    "rolling",
    {"rolling_upgrade": {"version": (str, True), "config": (dict, False), "graceful": (bool, False),
                         "finalize": (bool, False), "timeout_s": (_NUM, False)},
     "rolling_restart": {"config": (dict, False), "graceful": (bool, False), "timeout_s": (_NUM, False)}},
    effect_fields=("rolled", "versions_after", "finalized"), heal_fields=("step", "effect_error"), undo=("restart",),
    steps=("roll_node", "finalize_features"), default_target="all", check=_check_rolling)
# A node's wall clock shifted by `offset_s` (libfaketime; its monotonic clock is left alone), back
# to true time at heal. Needs a cluster started with clock faults on (docs/clock.md).
CLOCK = FamilySpec("clock", {"clock_skew": {"offset_s": (_NUM, True)}}, effect_fields=("clocks",), undo=("clock",),
                   needs="clock", check=_check_clock)
# A node's log directory on a FUSE filesystem (diskfs) that fails or slows operations, fills up, or loses
# power: every write since a file's last fsync dropped. Needs a cluster started with disk faults on
# (docs/disk.md). `power_loss` is no rule: it happens once.
DISK = FamilySpec(
    "disk",
    {"disk_error": {"op": (str, False), "path": (str, False), "errno": (str, False)},
     "disk_full": {"path": (str, False)},
     "disk_latency": {"ms": (_NUM, True), "op": (str, False), "path": (str, False)},
     "power_loss": {}},
    effect_fields=("disk_rule", "node_states", "power_loss"), heal_fields=("disk_fired",),
    undo=("disk_rules", "restart"),
    needs="disk", actions={"disk_error": "error", "disk_full": "full", "disk_latency": "latency"},
    check=lambda kind, params, where: check_disk_params(params, where))
# One log directory of a broker with several (cluster.log_dirs) fails: a diskfs rule fails every operation under
# it until the heal, which removes the rule and bounces the broker (Kafka brings an offline directory back
# only on a restart). `dir`: its index (default: the one holding the partition the target names).
LOG_DIR = FamilySpec(
    "log_dir", {"log_dir_failure": {"dir": (int, False), "partition": (int, False)}},
    effect_fields=("log_dir", "offline_before"), heal_fields=("disk_fired", "log_dir_offline"),
    undo=("disk_rules", "restart"), needs="disk", default_target="leader:0",
    colors={"log_dir_failure": "#7f7f7f"})
# Files of a node's log directory (segments, indexes, checkpoints, the KRaft metadata log and snapshots) with
# bits flipped or cut short (spec/corruption.py, cluster/corrupt.py; docs/corruption.md). Nothing heals the data:
# that is the point; a node corrupted while stopped (`when: stopped`) is started at the heal, and one that refuses
# its damaged files (exits at its start) is the fault's outcome, recorded in the heal (`start_refused`).
CORRUPTION = FamilySpec(
    "corruption",
    {"file_corrupt": {"file": (str, True), "mode": (str, True), "segment": (str, False),
                      "checkpoint": (str, False), "metadata": (str, False), "partition": ((int, str), False),
                      "probability": (_NUM, False), "range_bytes": (int, False), "fraction": (_NUM, False),
                      "when": (str, False), "seed": (int, False), "allow_majority": (bool, False)}},
    effect_fields=("corrupted", "node_states"), heal_fields=("start_refused",), undo=("restart",),
    check=lambda kind, params, where: check_corruption_params(params, where), colors={"file_corrupt": "#7f2704"})
# A consumer process of the run (target `consumer:<i>`) killed, stopped or paused; the run starts it again
# at heal, a killed or stopped one with `params.config` over `consumers.config` when given (an online
# migration of the group protocol, spec.group_protocol). Injected by the run (it owns the consumer
# processes), not on the cluster.
def _check_consumer(kind: str, params: Mapping[str, Any], where: str) -> None:
    from .group_protocol import check_restart_config
    problem = check_restart_config(params["config"], f"{where}.params.config") if "config" in params else None
    if problem:
        raise FaultError(problem)


CONSUMER = FamilySpec("consumer", {"kill": {"config": (dict, False)}, "stop": {"config": (dict, False)}, "pause": {}},
                      check=_check_consumer,
                      effect_fields=("consumer_state",), heal_fields=("consumer_restarted",),
                      target_prefix="consumer:", target_forms=("consumer:<index>",),
                      target_re=re.compile(r"^consumer:\d+$"),
                      actions={"kill": "SIGKILL", "stop": "SIGTERM", "pause": "SIGSTOP"})

# An instance of the application's services (issue 39, docs/application.md): `app:<service>` is every
# instance of a service of the scenario's `application`, `app:<service>:<i>` one. Killed (SIGKILL), stopped
# (SIGTERM, waited for up to `timeout_s`), paused (SIGSTOP), or restarted at once (killed and started again on
# the same port); the heal starts a killed or stopped instance again and waits until it is ready, or resumes
# a paused one. Injected by the run (it owns the services' fleet), not on the cluster. The form is checked
# here; the scenario checks the names against its services.
APP_SERVICE_NAME = r"[a-z0-9][a-z0-9-]*"
APP = FamilySpec(
    "app", {"kill": {}, "stop": {"timeout_s": (_NUM, False)}, "pause": {}, "restart": {}},
    effect_fields=("app_states",), heal_fields=("app_restarted", "app_resumed"),
    target_prefix="app:", target_forms=("app:<service>", "app:<service>:<instance>"),
    target_re=re.compile(rf"^app:(?P<service>{APP_SERVICE_NAME})(?::(?P<instance>\d+))?$"),
    actions={"kill": "SIGKILL", "stop": "SIGTERM", "pause": "SIGSTOP", "restart": "SIGKILL"},
    check=lambda kind, params, where: _check_app(params, where),
    colors={"kill": "#a50f15", "stop": "#c51b8a", "pause": "#6a51a3", "restart": "#636363"})

# The controller quorum changed (KIP-853, spec/quorum.py, docs/quorum.md): a spare controller added as a voter
# (`node`: which spare; default the first that is no voter), a voter removed (target: the active controller by
# default, or `node:<id>`), or replaced (removed, then a fresh spare added). Over once done: the change is the
# point, nothing heals it. Needs a dynamic quorum (`cluster.quorum: dynamic`, local backend).
_QUORUM_WAIT = {"timeout_s": (_NUM, False)}


def _check_quorum(kind: str, params: Mapping[str, Any], where: str) -> None:
    if params.get("timeout_s", 1) <= 0:
        raise FaultError(f"{where}.params.timeout_s: must be > 0 (seconds the voters have to change)")
    if params.get("node", 101) <= 0:
        raise FaultError(f"{where}.params.node: must be a node id (a spare controller's)")


QUORUM = FamilySpec(
    "quorum",
    {"add_controller": {"node": (int, False), **_QUORUM_WAIT},
     "remove_controller": dict(_QUORUM_WAIT),
     "replace_controller": {"node": (int, False), **_QUORUM_WAIT}},
    effect_fields=("quorum",), targetless=("add_controller",), default_target="controller", check=_check_quorum,
    actions={"add_controller": "add", "remove_controller": "remove", "replace_controller": "remove+add"},
    colors={"add_controller": "#2ca02c", "remove_controller": "#8c6d31", "replace_controller": "#637939"})

# The registry, in the order kinds are listed (CLI, schema, random draws).
FAMILIES: dict[str, FamilySpec] = {f.name: f for f in (PROCESS, NETWORK, PROXY, ROLLING, CLOCK, DISK, LOG_DIR,
                                                        CORRUPTION, QUORUM, CONSUMER, APP)}
# The families injected on cluster nodes (the others have a target prefix of their own).
NODE_FAMILIES = tuple(f for f in FAMILIES.values() if not f.target_prefix)


def family_of(kind: str, target: str = "") -> FamilySpec:
    """The family a fault of `kind` on `target` belongs to; FaultError naming the kinds otherwise."""
    for family in FAMILIES.values():
        if family.target_prefix and target.startswith(family.target_prefix):
            if kind in family.kinds:
                return family
            raise FaultError(f"{kind!r} cannot target {family.target_prefix.rstrip(':')}s; allowed: "
                             f"{', '.join(family.kinds)}")
    for family in NODE_FAMILIES:
        if kind in family.kinds:
            return family
    raise FaultError(f"unknown fault kind {kind!r}; allowed: {', '.join(node_kinds())}")


def node_kinds(*names: str) -> tuple[str, ...]:
    """Pure: the kinds of the node families `names` (all of them when none is named), in registry order."""
    return tuple(k for f in NODE_FAMILIES if not names or f.name in names for k in f.kinds)


def kinds_needing(option: str) -> tuple[str, ...]:
    """Pure: the kinds whose cluster needs `option` (`proxy`, `clock`, `disk`)."""
    return tuple(k for f in NODE_FAMILIES if f.needs == option for k in f.kinds)


def heal_fields() -> tuple[str, ...]:
    """Pure: every field a heal record of any family may carry as evidence, in registry order."""
    return tuple(dict.fromkeys(k for f in FAMILIES.values() for k in f.heal_fields))


def plain() -> dict[str, dict[str, Any]]:
    """Pure: the registry as the Spark job reads it (generated into its zip; spark/kafkaproof_analysis/families.py)."""
    return {name: f.plain() for name, f in FAMILIES.items()}
