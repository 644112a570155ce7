"""Correlated faults: a timeline entry `{at: <s>, together: [2..8 faults]}` whose faults start at the same instant.

Pure. A `together` block is expanded, when its scenario is loaded, into ordinary timeline entries that share
the block's `at`, its `after` (one trigger for the whole block) and a `group` (the block's position in the
file's `faults`); the run awaits a group's trigger once, holds every fault of the group at one barrier
(run/timeline.py) and injects them at once, and the analysis judges `faults_together`
(docs/analysis.md). A group whose faults cannot run at once is refused here: two rolls of one node, two faults
that change one node's process (kill, stop, pause, restart, power_loss, a roll), the same kind twice on one node.
docs: docs/scenario-format.md "Correlated faults".
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping

from .fault_families import DISK, LOG_DIR, PROCESS, ROLLING

MIN_TOGETHER, MAX_TOGETHER = 2, 8
# Kinds that change a node's process: two of them on one node at one instant contradict each other (the disk
# kind that is no diskfs rule is power_loss; a log-directory failure's heal bounces the broker).
PROCESS_CHANGING = (*PROCESS.kinds, *(k for k in DISK.kinds if k not in DISK.actions), *LOG_DIR.kinds,
                    *ROLLING.kinds)
ROLLS = tuple(ROLLING.kinds)
GROUP_DOC = "faults of one group start at one instant (what a `together` block is expanded into)"
# Targets that name every node (or every broker): they meet any other target on a node.
_EVERY = ("all", "brokers")


def member_schema(fault_item: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: the schema of one fault of a `together` block: a timeline fault without `at`, `after` or `group`
    (the block has the time and the trigger: one of its own would start one fault later than the others)."""
    props = {k: v for k, v in fault_item["properties"].items() if k not in ("at", "after", "group")}
    return {"type": "object", "additionalProperties": False, "required": ["kind"], "properties": props}


def timeline_item_schema(fault_item: Mapping[str, Any]) -> dict[str, Any]:
    """Pure: a timeline entry: one fault (`fault_item`), or a `together` block (chosen by the `together` key,
    so a mistake is reported against the form it was meant as)."""
    block = {"type": "object", "additionalProperties": False, "required": ["at", "together"],
             "properties": {"at": fault_item["properties"]["at"],
                            "after": {**fault_item["properties"]["after"],
                                      "description": "from `at` on, wait for this state once; then every fault of "
                                                     "the block starts at the same instant"},
                            "together": {"type": "array", "minItems": MIN_TOGETHER, "maxItems": MAX_TOGETHER,
                                         "items": member_schema(fault_item),
                                         "description": f"{MIN_TOGETHER} to {MAX_TOGETHER} faults that start at "
                                                        f"the same instant (docs/scenario-format.md)"}}}
    return {"if": {"type": "object", "required": ["together"]}, "then": block, "else": dict(fault_item)}


def expand(faults: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pure: the timeline with each `together` block replaced by its faults, each with the block's `at`, its
    `after` when it has one, and `group` (the block's position in `faults`); other entries as they are."""
    out: list[dict[str, Any]] = []
    for i, entry in enumerate(faults):
        if "together" not in entry:
            out.append(dict(entry))
            continue
        trigger = {"after": dict(entry["after"])} if entry.get("after") else {}
        out += [{"at": entry["at"], **member, **trigger, "group": i} for member in entry["together"]]
    return out


def groups(faults: Iterable[Mapping[str, Any]]) -> dict[int, list[int]]:
    """Pure: group -> the positions of its faults in an expanded timeline."""
    out: dict[int, list[int]] = {}
    for pos, f in enumerate(faults):
        if f.get("group") is not None:
            out.setdefault(int(f["group"]), []).append(pos)
    return out


def static_nodes(target: str, brokers: int, node_ids: list[int]) -> set[int] | None:
    """Pure: the nodes a target names up front (node:, broker:, nodes:, all, brokers); None when only the
    cluster knows at injection time (leader:, follower(s):, controller, random)."""
    if target.startswith(("node:", "broker:")):
        return {int(target.split(":", 1)[1])}
    if target.startswith("nodes:"):
        return {int(x) for x in target[6:].split(",")}
    if target == "all":
        return set(node_ids)
    if target == "brokers":
        return set(range(1, brokers + 1))
    return None


def _meet(a: str, b: str, brokers: int, node_ids: list[int]) -> bool:
    """Whether two targets surely share a node: overlapping named nodes, the same cluster-resolved target
    (`leader:0` twice; not `random`), or every node against any target."""
    if not a or not b:  # a targetless kind (a partition's groups): no node to meet on
        return False
    if a in _EVERY or b in _EVERY:
        return True
    na, nb = static_nodes(a, brokers, node_ids), static_nodes(b, brokers, node_ids)
    if na is not None and nb is not None:
        return bool(na & nb)
    return a == b and a != "random"


def check_groups(faults: list[Mapping[str, Any]], brokers: int, node_ids: list[int],
                 default_target: Callable[[str], str], fail: Callable[[str, str], None]) -> None:
    """Refuse groups whose faults cannot run at once (`fail(field, message)`): 2..8 faults with one `at` and one
    trigger (the block's `after`, or none), not two rolls of one node, not two process-changing faults on one
    node, not one kind twice on one node. `default_target(kind)`: what a left-out target means."""
    for group, positions in groups(faults).items():
        where = f"faults[{group}].together"
        if not MIN_TOGETHER <= len(positions) <= MAX_TOGETHER:
            fail(where, f"{len(positions)} fault(s) in group {group}; a together block holds "
                        f"{MIN_TOGETHER} to {MAX_TOGETHER}")
        if len({faults[p]["at"] for p in positions}) > 1:
            fail(where, f"the faults of group {group} have different `at`s; they start at one instant")
        first = faults[positions[0]].get("after")
        for p in positions[1:]:
            if faults[p].get("after") != first:
                fail(f"faults[{p}].after", f"a fault of group {group} starts with the others, on the group's one "
                                           f"trigger: give `after` to the together block, not to one of its faults")
        for n, p in enumerate(positions):
            for q in positions[n + 1:]:
                a, b = faults[p], faults[q]
                ta, tb = a.get("target") or default_target(a["kind"]), b.get("target") or default_target(b["kind"])
                if not _meet(ta, tb, brokers, node_ids):
                    continue
                pair = f"{a['kind']} {ta} and {b['kind']} {tb}"
                if a["kind"] in ROLLS and b["kind"] in ROLLS:
                    why = "two rolls of one node"
                elif a["kind"] == b["kind"]:
                    why = f"the same kind ({a['kind']}) twice on one node"
                elif a["kind"] in PROCESS_CHANGING and b["kind"] in PROCESS_CHANGING:
                    why = "two faults that change one node's process"
                else:
                    continue
                fail(where, f"{pair} cannot run at once: {why}; put them on different nodes or at different times")
