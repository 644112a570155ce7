"""The last word on a fault's parameters: for proxy faults, the proxy's own rule parser.

`FaultSpec.validate` (spec layer) checks kind, target and parameter types; a proxy fault's
rule also has to satisfy the proxy (value ranges, error names, combinations). Runs check
every fault of a scenario with `check_scenario_faults` before anything starts.
"""
from __future__ import annotations

import re

from ..errors import FaultError, ScenarioError
from ..spec.faults import FAULT_PARAMS, PROXY_KINDS, FaultSpec, proxy_rule


def check_fault(spec: FaultSpec, where: str = "fault") -> FaultSpec:
    """Validate a fault completely (the spec's checks and, for a proxy fault, the proxy's); FaultError otherwise."""
    spec.validate(where)
    if spec.kind in PROXY_KINDS:
        _validate_proxy_rule(spec, where)
    return spec


def check_scenario_faults(scenario) -> None:
    """Every fault of a scenario passes `check_fault`; ScenarioError naming the file and field otherwise."""
    for i, f in enumerate(scenario.data["faults"]):
        if f.get("target", "").startswith("consumer:"):
            continue
        try:
            check_fault(FaultSpec(f["kind"], f.get("target", ""), f.get("params", {})), f"faults[{i}]")
        except FaultError as e:
            raise ScenarioError(f"{scenario.path}: {e}") from None


def _validate_proxy_rule(spec: FaultSpec, where: str) -> None:
    """The proxy's own rule parser has the last word (value ranges, error names, combinations)."""
    from ..proxy.errors import RuleError
    from ..proxy.rules import parse_rule
    try:
        parse_rule(proxy_rule(spec))
    except RuleError as e:
        message = str(e)
        names = [n for n in re.findall(r"'(\w+)'", message) if n in FAULT_PARAMS[spec.kind]]
        field_ = f"params.{names[0]}" if names else "params"
        raise FaultError(f"{where}.{field_}: {message}") from None
