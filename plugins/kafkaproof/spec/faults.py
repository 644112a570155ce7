"""Fault specifications: the kinds, their parameters and targets, as pure data with validation.

A `FaultSpec` says what to do (kind, target expression, parameters); the fault
layer (`kafkaproof.faults`) resolves its target when it is injected, applies it on a
cluster backend and heals it. docs: README "Faults", docs/proxy.md for proxy faults.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import FaultError

PROCESS_KINDS = ("kill", "stop", "pause", "restart")
NETWORK_KINDS = ("isolate", "cut", "partition", "cut_clients", "packet_loss", "bandwidth")
PROXY_KINDS = ("lost_ack", "error", "latency", "proxy_bandwidth", "reset", "blackhole", "metadata", "fetch_corrupt",
               "fetch_duplicate")
# One node at a time: stop, start again on another version and/or with other settings, wait until it
# is back in every ISR (docs/upgrades.md). Instantaneous on the timeline: no `duration`.
ROLLING_KINDS = ("rolling_upgrade", "rolling_restart")
# A node's wall clock shifted by `offset_s` (libfaketime; its monotonic clock is left alone), back
# to true time at heal. Needs a cluster started with clock faults on (docs/clock.md).
CLOCK_KINDS = ("clock_skew",)
# A node's log directory on a FUSE filesystem (diskfs) that fails or slows operations, fills up, or loses
# power: every write since a file's last fsync dropped. Needs a cluster started with disk faults on
# (docs/disk.md).
DISK_KINDS = ("disk_error", "disk_full", "disk_latency", "power_loss")
# What a disk fault's `op` may say: data reads, data writes (and size changes), fsync, the namespace
# (create, mkdir, rename, unlink, rmdir), or all of them; the errno names a `disk_error` may return.
DISK_OPS = ("read", "write", "sync", "meta", "all")
DISK_ERRNOS = ("EIO", "EROFS", "EDQUOT")
MAX_DISK_LATENCY_MS = 60_000
FAULT_KINDS = PROCESS_KINDS + NETWORK_KINDS + PROXY_KINDS + ROLLING_KINDS + CLOCK_KINDS + DISK_KINDS
# Largest clock offset a scenario may ask for (about ten years either way).
MAX_CLOCK_OFFSET_S = 10 * 366 * 86400
# The steps of a rolling fault, each a row of the fault log of its own (not injectable by themselves).
ROLLING_STEP_KINDS = ("roll_node", "finalize_features")

_NUM = (int, float)
# Request filters of every proxy fault (docs/proxy.md "Rules"), and the random draw/limit.
_PROXY_MATCH = {"api": ((str, int, list), False), "topic": (str, False), "partitions": ((int, list), False),
                "client_id": (str, False)}
_PROXY_DRAW = {"probability": (_NUM, False), "every": (int, False), "count": (int, False)}
# Proxy rule action of each proxy fault kind (`bandwidth` is taken by the tc fault).
PROXY_ACTIONS = {"lost_ack": "lost_ack", "error": "error", "latency": "latency", "proxy_bandwidth": "bandwidth",
                 "reset": "reset", "blackhole": "blackhole", "metadata": "metadata", "fetch_corrupt": "corrupt",
                 "fetch_duplicate": "duplicate"}
# The diskfs rule action of each disk fault kind that is a rule (`power_loss` is not: it happens once).
DISK_ACTIONS = {"disk_error": "error", "disk_full": "full", "disk_latency": "latency"}
# Kinds whose rule applies to Produce unless `api` says otherwise.
PROXY_DEFAULT_API = {"lost_ack": "produce", "error": "produce"}

# Parameters each kind accepts: name -> (type, required)
FAULT_PARAMS: dict[str, dict[str, tuple[type | tuple[type, ...], bool]]] = {
    "kill": {},
    "stop": {"timeout_s": ((int, float), False)},
    "pause": {},
    "restart": {"graceful": (bool, False)},
    "isolate": {},
    "cut": {"to": (str, True)},
    "partition": {"groups": ((list, str), True)},
    "cut_clients": {},
    "packet_loss": {"percent": ((int, float), True)},
    "bandwidth": {"rate_kbit": (int, True)},
    "lost_ack": {**_PROXY_MATCH, **_PROXY_DRAW, "reset": (bool, False)},
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
    "rolling_upgrade": {"version": (str, True), "config": (dict, False), "graceful": (bool, False),
                        "finalize": (bool, False), "timeout_s": (_NUM, False)},
    "rolling_restart": {"config": (dict, False), "graceful": (bool, False), "timeout_s": (_NUM, False)},
    "clock_skew": {"offset_s": (_NUM, True)},
    "disk_error": {"op": (str, False), "path": (str, False), "errno": (str, False)},
    "disk_full": {"path": (str, False)},
    "disk_latency": {"ms": (_NUM, True), "op": (str, False), "path": (str, False)},
    "power_loss": {},
}


# Kinds whose target is implied by params; target is optional for them.
TARGETLESS = ("partition",)
# Kinds whose target may be left out, and what it then is.
DEFAULT_TARGETS = {"rolling_upgrade": "all", "rolling_restart": "all"}

TARGET_FORMS = ("node:<id>", "broker:<id>", "nodes:<id>,<id>", "leader:<partition>", "leader:<topic>:<partition>",
                "follower:<partition>", "follower:<topic>:<partition>", "followers:<partition>",
                "followers:<topic>:<partition>", "controller", "random", "brokers", "all")

PARTITION_SHAPES = ("majority-minority", "leader-minority:<partition>", "bridge", "controller-minority")
_TARGET_RE = re.compile(r"^(node:\d+|broker:\d+|nodes:\d+(,\d+)*|leader:([\w.-]+:)?\d+|followers?:([\w.-]+:)?\d+|"
                        r"controller|random|brokers|all)$")


@dataclass(frozen=True)
class FaultSpec:
    """A fault to inject: `kind` on `target` with `params`."""

    kind: str
    target: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)

    def validate(self, where: str = "fault") -> "FaultSpec":
        """Check kind, target form and parameters; raises FaultError naming `where` and what is allowed.

        A proxy fault's rule is checked further by the proxy's own parser (faults.check_fault).
        """
        if self.kind not in FAULT_KINDS:
            raise FaultError(f"{where}.kind: unknown fault kind {self.kind!r}; allowed: {', '.join(FAULT_KINDS)}")
        if self.kind in TARGETLESS:
            if self.target:
                raise FaultError(f"{where}.target: {self.kind} takes no target; give params.groups")
        elif not _TARGET_RE.match(self.resolved_target):
            raise FaultError(f"{where}.target: {self.target!r} is not a target; allowed forms: {', '.join(TARGET_FORMS)}")
        allowed = FAULT_PARAMS[self.kind]
        for name in self.params:
            if name not in allowed:
                raise FaultError(f"{where}.params.{name}: not a parameter of {self.kind}; "
                                 f"allowed: {', '.join(allowed) or 'none'}")
        for name, (typ, required) in allowed.items():
            if name not in self.params:
                if required:
                    raise FaultError(f"{where}.params.{name}: required for {self.kind}")
                continue
            value = self.params[name]
            if isinstance(value, bool) and typ is not bool or not isinstance(value, typ):
                raise FaultError(f"{where}.params.{name}: expected {_typename(typ)}, got {value!r}")
        if self.kind == "packet_loss" and not 0 < self.params["percent"] <= 100:
            raise FaultError(f"{where}.params.percent: must be in (0, 100], got {self.params['percent']}")
        if self.kind == "bandwidth" and self.params["rate_kbit"] <= 0:
            raise FaultError(f"{where}.params.rate_kbit: must be > 0")
        if self.kind == "cut" and not _TARGET_RE.match(self.params["to"]) and self.params["to"] != "clients":
            raise FaultError(f"{where}.params.to: {self.params['to']!r} is not a target; allowed: clients, "
                             f"{', '.join(TARGET_FORMS)}")
        if self.kind == "partition":
            _validate_groups(self.params["groups"], f"{where}.params.groups")
        if self.kind in ROLLING_KINDS:
            _validate_rolling(self.params, where)
        if self.kind in DISK_KINDS:
            check_disk_params(self.params, where)
        if self.kind in CLOCK_KINDS and not 0 < abs(self.params["offset_s"]) <= MAX_CLOCK_OFFSET_S:
            raise FaultError(f"{where}.params.offset_s: must be non-zero and at most {MAX_CLOCK_OFFSET_S} s "
                             f"(ten years) either way, got {self.params['offset_s']}")
        return self

    @property
    def resolved_target(self) -> str:
        """The target, or the kind's default when it was left out."""
        return self.target or DEFAULT_TARGETS.get(self.kind, "")

    @property
    def is_network(self) -> bool:
        return self.kind in NETWORK_KINDS

    @property
    def is_proxy(self) -> bool:
        return self.kind in PROXY_KINDS

    @property
    def is_rolling(self) -> bool:
        return self.kind in ROLLING_KINDS

    @property
    def is_clock(self) -> bool:
        return self.kind in CLOCK_KINDS

    @property
    def is_disk(self) -> bool:
        return self.kind in DISK_KINDS


def proxy_rule(spec: FaultSpec, rule_id: str | None = None) -> dict[str, Any]:
    """Pure: the proxy rule (docs/proxy.md) of a proxy fault; its id is the fault id."""
    rule: dict[str, Any] = {"action": PROXY_ACTIONS[spec.kind], **spec.params}
    if spec.kind in PROXY_DEFAULT_API:
        rule.setdefault("api", PROXY_DEFAULT_API[spec.kind])
    if rule_id is not None:
        rule["id"] = rule_id
    return rule


def disk_rule(spec: FaultSpec, rule_id: str) -> dict[str, Any]:
    """Pure: the diskfs rule (docs/disk.md) of a disk fault other than `power_loss`; its id is the fault id.
    A `disk_error` fails writes unless `op` says otherwise."""
    rule: dict[str, Any] = {"id": rule_id, "action": DISK_ACTIONS[spec.kind], **spec.params}
    if spec.kind == "disk_error":
        rule.setdefault("op", "write")
    return rule


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


def _typename(typ) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return typ.__name__


def _validate_rolling(params: Mapping[str, Any], where: str) -> None:
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
    if "version" not in params and not params.get("config"):
        raise FaultError(f"{where}.params.config: a rolling_restart needs settings to change "
                         f"(a restart without changes is `restart`)")


def _validate_groups(groups: Any, where: str) -> None:
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
