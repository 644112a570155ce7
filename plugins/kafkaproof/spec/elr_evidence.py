"""What a run's ELR evidence says (the manifest's `elr` section, run/elr.py): elections and leaderless windows.

The section holds each change of a partition's leader, leader epoch, ISR, eligible leader replicas (ELR), last
known ELR and offline replicas, as DescribeTopicPartitions answered it twice a second. From those: every
election (a new leader; `from_elr` when it was in the last ELR seen before and not in that ISR: KIP-966's
election from the ELR) and every window a broker answered with no leader. A sample no broker answered is no
evidence either way (all replicas down, or the brokers unreachable): the section counts those as `failures`.
Pure: no I/O.
"""
from __future__ import annotations

from typing import Any, Mapping


def elections(section: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Pure: each new leader of each partition, in time order: `ts_ns`, `partition`, `leader`, `epoch`,
    `previous` (leader before, -1: none seen), `from_elr` and the ISR/ELR seen last before it."""
    out, last = [], {}
    for c in sorted(section.get("changes") or [], key=lambda c: c["ts_ns"]):
        before = last.get(c["partition"])
        leader = int(c["leader"])
        prev_leader = before["leader"] if before else None
        if leader >= 0 and leader != prev_leader and before is not None:
            elr_before = before.get("elr") or []
            out.append({"ts_ns": c["ts_ns"], "partition": c["partition"], "leader": leader,
                        "epoch": c.get("leader_epoch"), "previous": prev_leader,
                        "isr_before": list(before.get("isr") or []), "elr_before": list(elr_before),
                        "from_elr": leader in elr_before and leader not in (before.get("isr") or [])})
        last[c["partition"]] = c
    return out


def leaderless_windows(section: Mapping[str, Any], end_ns: int | None = None) -> list[dict[str, Any]]:
    """Pure: per partition, each span from the first change that said "no leader" (-1) to the next that named
    one (`end_ns` None: still leaderless at the last sample, or `end_ns` when given)."""
    out, open_at = [], {}
    for c in sorted(section.get("changes") or [], key=lambda c: c["ts_ns"]):
        p = c["partition"]
        if int(c["leader"]) < 0 and p not in open_at:
            open_at[p] = c["ts_ns"]
        elif int(c["leader"]) >= 0 and p in open_at:
            start = open_at.pop(p)
            out.append({"partition": p, "start_ns": start, "end_ns": c["ts_ns"]})
    out += [{"partition": p, "start_ns": s, "end_ns": end_ns} for p, s in open_at.items()]
    return sorted(out, key=lambda w: (w["start_ns"], w["partition"]))


def ids_text(ids: Any) -> str:
    """Pure: a replica list as the page shows it ("–" for none or unknown)."""
    return "–" if ids is None else ("[" + ",".join(str(i) for i in ids) + "]")
