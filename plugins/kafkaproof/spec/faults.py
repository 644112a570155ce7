"""Fault specifications: a fault's kind, target and parameters, as pure data with validation.

A `FaultSpec` says what to do (kind, target expression, parameters); the fault
layer (`kafkaproof.faults`) resolves its target when it is injected, applies it on a
cluster backend and heals it. The kinds, their parameters and value checks are their families'
(`spec.fault_families`, the registry); the lists here are derived from it. docs: README "Faults",
docs/proxy.md for proxy faults.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ..errors import FaultError
from .fault_families import (CLOCK, CORRUPTION, DISK, DISK_ERRNOS, DISK_OPS, MAX_CLOCK_OFFSET_S,  # noqa: F401
                             MAX_DISK_LATENCY_MS, NETWORK, NODE_FAMILIES, PARTITION_SHAPES, PROCESS, PROXY, PROXY_DEFAULT_API,
                             QUORUM, ROLLING, TARGET_FORMS, TARGET_RE, check_disk_params, family_of)

# The kinds of each family, as the registry (spec/fault_families.py) lists them; named here for their readers.
PROCESS_KINDS = tuple(PROCESS.kinds)
NETWORK_KINDS = tuple(NETWORK.kinds)
PROXY_KINDS = tuple(PROXY.kinds)
ROLLING_KINDS = tuple(ROLLING.kinds)
CLOCK_KINDS = tuple(CLOCK.kinds)
DISK_KINDS = tuple(DISK.kinds)
CORRUPTION_KINDS = tuple(CORRUPTION.kinds)
QUORUM_KINDS = tuple(QUORUM.kinds)
# Every kind injected on cluster nodes (consumer faults are the run's: spec.scenario).
FAULT_KINDS = tuple(k for f in NODE_FAMILIES for k in f.kinds)
ROLLING_STEP_KINDS = ROLLING.steps
PROXY_ACTIONS = PROXY.actions
DISK_ACTIONS = DISK.actions
# Parameters each kind accepts: name -> (type, required)
FAULT_PARAMS: dict[str, dict[str, tuple[type | tuple[type, ...], bool]]] = {
    k: dict(params) for f in NODE_FAMILIES for k, params in f.kinds.items()}
# Kinds whose target is implied by params; target is optional for them.
TARGETLESS = tuple(k for f in NODE_FAMILIES for k in f.targetless)
# Kinds whose target may be left out, and what it then is.
DEFAULT_TARGETS = {k: f.default_target for f in NODE_FAMILIES if f.default_target for k in f.kinds
                   if k not in f.targetless}


@dataclass(frozen=True)
class FaultSpec:
    """A fault to inject: `kind` on `target` with `params`."""

    kind: str
    target: str = ""
    params: Mapping[str, Any] = field(default_factory=dict)

    def validate(self, where: str = "fault") -> "FaultSpec":
        """Check kind, target form and parameters; raises FaultError naming `where` and what is allowed.

        A target of a family with a prefix of its own (`consumer:<i>`, `app:<service>`) is checked for its form
        only: the scenario knows which consumers and services exist.

        A proxy fault's rule is checked further by the proxy's own parser (faults.check_fault).
        """
        try:
            family = family_of(self.kind, self.target)
        except FaultError as e:
            raise FaultError(f"{where}.kind: {e}") from None
        if family.target_re is not None:  # a family with targets of its own (`consumer:<i>`, `app:<service>`)
            if not family.target_re.match(self.target):
                raise FaultError(f"{where}.target: {self.target!r} is not a target of {family.name} faults; "
                                 f"allowed forms: {', '.join(family.target_forms)}")
        elif self.kind in TARGETLESS:
            if self.target:
                raise FaultError(f"{where}.target: {self.kind} takes no target; give params.groups")
        elif not TARGET_RE.match(self.resolved_target):
            raise FaultError(f"{where}.target: {self.target!r} is not a target; allowed forms: {', '.join(TARGET_FORMS)}")
        allowed = family.kinds[self.kind]
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
        if family.check is not None:
            family.check(self.kind, self.params, where)
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


def _typename(typ) -> str:
    if isinstance(typ, tuple):
        return " or ".join(t.__name__ for t in typ)
    return typ.__name__
