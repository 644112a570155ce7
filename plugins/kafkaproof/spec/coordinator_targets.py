"""A scenario's coordinator fault targets (issue 43), checked against what the scenario runs.

`txn_coordinator:<copier>` is the broker coordinating copier `<copier>`'s transactional.id (the leader of its
`__transaction_state` partition), so it needs a pipeline section with that copier; `group_coordinator` is the
broker coordinating the scenario's consumer group (the leader of its `__consumer_offsets` partition), so it
needs consumers in a group. faults/coordinators.py resolves both when the fault is injected.
"""
from __future__ import annotations

import re
from typing import Any, Callable

TXN_TARGET_RE = re.compile(r"^txn_coordinator:(\d+)$")
GROUP_TARGET = "group_coordinator"


def check(data: dict[str, Any], fail: Callable[[str, str], None]) -> None:
    """Refuse a coordinator target the scenario has no key for, naming the fault's field (after the defaults:
    `consumers.group` is set when the scenario has group consumers)."""
    pipeline = data.get("pipeline")
    cons = data["consumers"]
    for i, f in enumerate(data.get("faults") or []):
        target = f.get("target", "")
        m = TXN_TARGET_RE.match(target)
        if m and not pipeline:
            fail(f"faults[{i}].target", f"{target!r}: a transaction coordinator target needs a pipeline section "
                                        f"(the copiers whose transactional ids it stands for)")
        elif m and int(m.group(1)) >= pipeline["copiers"]:
            fail(f"faults[{i}].target", f"{target!r}: copiers are txn_coordinator:0..txn_coordinator:"
                                        f"{pipeline['copiers'] - 1}")
        elif target == GROUP_TARGET and not (cons.get("count") and cons.get("group")):
            fail(f"faults[{i}].target", f"{target!r} needs consumers in a group (consumers.count >= 1, mode "
                                        f"subscribe) or a pipeline section")
