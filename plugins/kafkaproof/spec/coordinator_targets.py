"""Coordinator targets of node faults (issue 46): the broker coordinating a group, resolved when injected.

`share_coordinator` is the coordinator of the run's share group (the scenario's `share.group`),
`share_coordinator:<group>` that of a named one. The broker is the leader of the group's partition of
`__consumer_offsets` (cluster/coordinators.py computes it as Kafka does). One entry per kind of coordinator in
`COORDINATOR_TARGETS`: the forms, the pattern and the resolver all read it. Pure data.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable

OFFSETS_TOPIC = "__consumer_offsets"
GROUP_ID = r"[A-Za-z0-9._-]{1,200}"


@dataclass(frozen=True)
class CoordinatorKind:
    """One kind of coordinator target: the internal topic its keys hash onto, what the key names, and which
    section of a scenario gives the key when the target leaves it out."""

    name: str        # the target's form without its key: `share_coordinator`
    topic: str       # the internal topic whose partition leader coordinates the key
    key_name: str    # what the key is, for messages: `share group`
    section: str     # the scenario section whose `group` is the default key: `share`


COORDINATOR_TARGETS: dict[str, CoordinatorKind] = {
    "share_coordinator": CoordinatorKind("share_coordinator", OFFSETS_TOPIC, "share group", "share"),
}
TARGET_FORMS: tuple[str, ...] = tuple(f for name in COORDINATOR_TARGETS for f in (name, f"{name}:<group>"))
TARGET_PATTERN = r"(" + "|".join(COORDINATOR_TARGETS) + r")(:" + GROUP_ID + r")?"
_TARGET_RE = re.compile(r"^" + TARGET_PATTERN + r"$")


def parse_target(target: str) -> tuple[CoordinatorKind, str | None] | None:
    """Pure: (kind, key; None when the target leaves it to the run) of a coordinator target; None for any other
    target."""
    m = _TARGET_RE.match(target)
    if not m:
        return None
    return COORDINATOR_TARGETS[m.group(1)], (m.group(2) or "")[1:] or None


def check_scenario_targets(data: dict[str, Any], fail: Callable[[str, str], None]) -> None:
    """A loaded scenario's coordinator targets that leave their group out need the section that names it:
    `share_coordinator` needs a `share` section; `fail(field, message)` raises. Random schedules' targets too."""
    faults = [(f"faults[{i}].target", f.get("target", "")) for i, f in enumerate(data.get("faults") or [])]
    rnd = data.get("random_faults") or {}
    faults += [(f"random_faults.targets[{i}]", t) for i, t in enumerate(rnd.get("targets") or [])]
    faults += [(f"random_faults.kinds[{k}].targets[{i}]", t) for k, kind in enumerate(rnd.get("kinds") or [])
               for i, t in enumerate(kind.get("targets") or [])]
    for where, target in faults:
        parsed = parse_target(target)
        if parsed is not None and parsed[1] is None and not data.get(parsed[0].section):
            kind = parsed[0]
            fail(where, f"{target!r}: the {kind.key_name} whose coordinator it means is the {kind.section} "
                        f"section's group; the scenario has no {kind.section} section (name one: "
                        f"{kind.name}:<group>)")
