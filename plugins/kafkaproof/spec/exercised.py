"""A scenario's `exercised` conditions: what makes its check meaningful, their schema and their checks. Pure.

Each condition is judged by the analysis (spark/kafkaproof_analysis/exercised.py); docs/analysis.md defines them.
One not met makes the run an error, never a pass.
"""
from __future__ import annotations

from typing import Any, Callable

from . import quorum

# exercised[].check -> (parameters it needs, parameters it may take)
EXERCISE_PARAMS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "leader_change": (("partition",), ()),
    "isr_shrink": (("partition",), ("before_fault",)),
    "proxy_phase": (("phase",), ("min",)),
    "aborted_in_log": ((), ("min",)),
    "consumer_restarted": (("consumer",), ()),
    "send_errors": ((), ("outcome", "min")),
    quorum.EXERCISE_CHECK: quorum.EXERCISE_PARAMS,
}
EXERCISE_CHECKS = tuple(EXERCISE_PARAMS)

SCHEMA: dict[str, Any] = {
    "type": "array",
    "description": "conditions that make the scenario's check meaningful; one not met makes the run an error",
    "items": {"type": "object", "additionalProperties": False, "required": ["check"],
              "properties": {"check": {"enum": list(EXERCISE_CHECKS)},
                             "partition": {"type": "integer", "minimum": 0},
                             "consumer": {"type": "integer", "minimum": 0},
                             "phase": {"type": "string", "description": "proxy_phase: a proxy_events phase"},
                             "outcome": {"enum": ["fail", "indefinite", "any"]},
                             "min": {"type": "integer", "minimum": 1},
                             "before_fault": {"type": "integer", "minimum": 0,
                                              "description": "isr_shrink: seen before faults[i] was injected"},
                             **quorum.EXERCISE_PROPERTIES,
                             "why": {"type": "string"}}}}


def check_exercise(cond: dict, where: str, data: dict, fail: Callable[[str, str], None]) -> None:
    """One condition's parameters against its check and the scenario; `fail(field, message)` otherwise."""
    check = cond["check"]
    needs, may = EXERCISE_PARAMS[check]
    for name in needs:
        if name not in cond:
            fail(f"{where}.{name}", f"required for {check}")
    extra = sorted(set(cond) - {"check", "why", *needs, *may})
    if extra:
        fail(f"{where}.{extra[0]}", f"not a parameter of {check}; allowed: {', '.join(needs + may) or 'none'}")
    if "partition" in cond and cond["partition"] >= data["topic"]["partitions"]:
        fail(f"{where}.partition", f"partition {cond['partition']} does not exist; the topic has partitions "
                                   f"0..{data['topic']['partitions'] - 1}")
    if "consumer" in cond and cond["consumer"] >= data["consumers"]["count"]:
        fail(f"{where}.consumer", f"consumer {cond['consumer']} does not exist")
    if "before_fault" in cond and cond["before_fault"] >= len(data["faults"]):
        fail(f"{where}.before_fault", f"faults[{cond['before_fault']}] does not exist")
    if check == "aborted_in_log" and not data["producers"].get("transactions"):
        fail(f"{where}.check", "aborted_in_log needs producers.transactions")
    if check == "proxy_phase" and not data["cluster"].get("proxy"):
        fail(f"{where}.check", "proxy_phase needs the fault proxy (a proxy fault, or cluster.proxy: true)")
    if check == quorum.EXERCISE_CHECK:
        quorum.check_condition(cond, where, data, fail)
