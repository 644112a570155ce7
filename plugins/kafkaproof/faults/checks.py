"""The last word on a fault's parameters: the spec's checks, then its family handler's (for proxy faults,
the proxy's own rule parser).

`FaultSpec.validate` (spec layer) checks kind, target and parameter types and values; a proxy fault's
rule also has to satisfy the proxy (value ranges, error names, combinations). Runs check
every fault of a scenario with `check_scenario_faults` before anything starts.
"""
from __future__ import annotations

from ..errors import FaultError, ScenarioError
from ..spec.fault_families import family_of
from ..spec.faults import FaultSpec
from .families import handler_for


def check_fault(spec: FaultSpec, where: str = "fault") -> FaultSpec:
    """Validate a fault completely (the spec's checks and, for a proxy fault, the proxy's); FaultError otherwise."""
    spec.validate(where)
    if not family_of(spec.kind, spec.target).target_prefix:  # the run's own processes: the spec's checks are all
        handler_for(spec.kind).check(spec, where)
    return spec


def check_scenario_faults(scenario) -> None:
    """Every fault of a scenario passes `check_fault`; ScenarioError naming the file and field otherwise."""
    for i, f in enumerate(scenario.data["faults"]):
        try:
            check_fault(FaultSpec(f["kind"], f.get("target", ""), f.get("params", {})), f"faults[{i}]")
        except FaultError as e:
            raise ScenarioError(f"{scenario.path}: {e}") from None
