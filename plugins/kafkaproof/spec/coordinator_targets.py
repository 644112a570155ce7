"""Coordinator targets of node faults (issues 43 and 46): the broker coordinating a key, resolved when injected.

- `group_coordinator[:<group>]`: the coordinator of the run's consumer group (`consumers.group`) or of a named one;
- `share_coordinator[:<group>]`: that of the run's share group (`share.group`) or of a named one;
- `txn_coordinator:<copier>`: that of copier `<copier>`'s transactional.id (the `pipeline` section's copiers).

The broker is the leader of the key's partition of the kind's internal topic (`__consumer_offsets` for groups of
every type, `__transaction_state` for transactional ids; cluster/coordinators.py computes it as Kafka does). One
entry per kind in `COORDINATOR_TARGETS`: the forms, the pattern, the scenario check and the injector's resolver all
read it. Pure data and pure functions.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

from .copier import transactional_id

OFFSETS_TOPIC = "__consumer_offsets"
TRANSACTION_STATE_TOPIC = "__transaction_state"
GROUP_ID = r"[A-Za-z0-9._-]{1,200}"


@dataclass(frozen=True)
class CoordinatorKind:
    """One kind of coordinator target: the internal topic its keys hash onto, what the key names, and which
    section of a scenario gives the key (`indexed`: the target names an index into the section's keys, as
    `txn_coordinator:<copier>` does, and never the key itself)."""

    name: str        # the target's form without its key: `share_coordinator`
    topic: str       # the internal topic whose partition leader coordinates the key
    key_name: str    # what the key is, for messages: `share group`
    section: str     # the scenario section whose keys the target means: `share`
    indexed: bool = False


COORDINATOR_TARGETS: dict[str, CoordinatorKind] = {
    "group_coordinator": CoordinatorKind("group_coordinator", OFFSETS_TOPIC, "consumer group", "consumers"),
    "share_coordinator": CoordinatorKind("share_coordinator", OFFSETS_TOPIC, "share group", "share"),
    "txn_coordinator": CoordinatorKind("txn_coordinator", TRANSACTION_STATE_TOPIC, "copier's transactional id",
                                       "pipeline", indexed=True),
}
TARGET_FORMS: tuple[str, ...] = tuple(
    f for kind in COORDINATOR_TARGETS.values()
    for f in ((f"{kind.name}:<copier>",) if kind.indexed else (kind.name, f"{kind.name}:<group>")))
_NAMED = "|".join(k.name for k in COORDINATOR_TARGETS.values() if not k.indexed)
_INDEXED = "|".join(k.name for k in COORDINATOR_TARGETS.values() if k.indexed)
TARGET_PATTERN = r"(?:(?:" + _NAMED + r")(?::" + GROUP_ID + r")?|(?:" + _INDEXED + r"):\d+)"
_TARGET_RE = re.compile(r"^(" + "|".join(COORDINATOR_TARGETS) + r")(?::(" + GROUP_ID + r"))?$")


def parse_target(target: str) -> tuple[CoordinatorKind, str | None] | None:
    """Pure: (kind, key or copier index; None when the target leaves it to the run) of a coordinator target;
    None for any other target (and for an indexed kind without a number: not a target)."""
    m = _TARGET_RE.match(target)
    if not m:
        return None
    kind, key = COORDINATOR_TARGETS[m.group(1)], m.group(2)
    if kind.indexed and not (key and key.isdigit()):
        return None
    return kind, key


def run_keys(data: dict[str, Any]) -> dict[str, Any]:
    """Pure: what a scenario run's coordinator targets stand for, by section: its consumer group, its share group,
    its copiers' transactional ids (copier i's at index i). Empty sections are left out."""
    keys: dict[str, Any] = {}
    if (data.get("consumers") or {}).get("group"):
        keys["consumers"] = data["consumers"]["group"]
    if (data.get("share") or {}).get("group"):
        keys["share"] = data["share"]["group"]
    if data.get("pipeline"):
        keys["pipeline"] = tuple(transactional_id(data["pipeline"], i) for i in range(data["pipeline"]["copiers"]))
    return keys


def _targets(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(field, target) of every fault target of a loaded scenario, random schedules' included."""
    found = [(f"faults[{i}].target", f.get("target", "")) for i, f in enumerate(data.get("faults") or [])]
    rnd = data.get("random_faults") or {}
    found += [(f"random_faults.targets[{i}]", t) for i, t in enumerate(rnd.get("targets") or [])]
    found += [(f"random_faults.kinds[{k}].targets[{i}]", t) for k, kind in enumerate(rnd.get("kinds") or [])
              for i, t in enumerate(kind.get("targets") or [])]
    return found


def check(data: dict[str, Any], fail: Callable[[str, str], None]) -> None:
    """Refuse a coordinator target the scenario has no key for, naming the fault's field (after the defaults:
    `consumers.group` is set when the scenario has group consumers); `fail(field, message)` raises."""
    for where, target in _targets(data):
        parsed = parse_target(target)
        if parsed is None:
            continue
        kind, key = parsed
        section = data.get(kind.section)
        if kind.indexed:
            if not section:
                fail(where, f"{target!r}: a transaction coordinator target needs a pipeline section (the copiers "
                            f"whose transactional ids it stands for)")
            elif int(key) >= section["copiers"]:
                fail(where, f"{target!r}: copiers are {kind.name}:0..{kind.name}:{section['copiers'] - 1}")
        elif key is None and kind.section == "consumers" and not (section and section.get("count")
                                                                  and section.get("group")):
            fail(where, f"{target!r} needs consumers in a group (consumers.count >= 1, mode subscribe) or a "
                        f"pipeline section; or name one as {kind.name}:<group>")
        elif key is None and kind.section != "consumers" and not section:
            fail(where, f"{target!r}: the {kind.key_name} whose coordinator it means is the {kind.section} "
                        f"section's group; the scenario has no {kind.section} section (name one: "
                        f"{kind.name}:<group>)")
