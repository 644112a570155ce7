"""Was the check exercised? Whether each injected fault took effect, and the scenario's own conditions.

One judge per fault family (`FAMILY_JUDGES`), reading the evidence its family lists (families.py; docs/analysis.md
"Was the check exercised?").
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Sequence

from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F

from .base import NS_PER_S
from .families import family_of, kinds_of

CLOCK_FAULT_KINDS = kinds_of("clock")
DISK_RULE_KINDS = tuple(k for k in kinds_of("disk") if k != "power_loss")  # each a diskfs rule


def power_loss_effect(effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a power loss took effect when every node it cut was dead afterwards; the evidence says what
    each node's disk dropped (nothing, when everything written had been fsynced)."""
    states = effect.get("node_states") or {}
    if not states:
        return False, "no node state was recorded after the power loss"
    lost = effect.get("power_loss") or {}

    def dropped(node: str) -> str:
        n_bytes, n_files = int((lost.get(node) or {}).get("bytes_dropped", 0)), int((lost.get(node) or {}).get("files", 0))
        return f"{n_bytes:,} unsynced bytes of {n_files} file{'' if n_files == 1 else 's'}"
    return all(v == "dead" for v in states.values()), "; ".join(
        f"node {n} {v}, its disk dropped {dropped(n)}" for n, v in sorted(states.items()))


def clock_effect(params: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a clock fault took effect when every node it targets holds the offset and runs with libfaketime
    loaded (so the offset reaches its JVM)."""
    clocks = effect.get("clocks") or {}
    if not clocks:
        return False, "no node clock was recorded"
    want = float(params.get("offset_s", 0))
    held = {n: bool(c.get("faketime_loaded")) and abs(float(c.get("offset_s", 0)) - want) < 0.001
            for n, c in clocks.items()}
    return all(held.values()), ", ".join(
        f"node {n} clock {float(c.get('offset_s', 0)):+g} s" + ("" if c.get("faketime_loaded") else " (libfaketime not loaded)")
        for n, c in sorted(clocks.items()))


def timestamp_regressions(audit: DataFrame, limit: int = 5) -> dict[str, Any]:
    """Records of the committed log whose timestamp is earlier than the record before them in their
    partition: a leader's clock that moved (LogAppendTime), or producers stamping from different clocks
    (CreateTime). Kafka allows it; time-based retention and timestamp lookups see it. Computed for runs
    with clock faults only (a sort of the whole log)."""
    log = audit.filter(F.col("isolation") == "read_committed").select("partition", "offset", "timestamp_ms")
    back = (log.withColumn("previous_ms", F.lag("timestamp_ms").over(Window.partitionBy("partition").orderBy("offset")))
            .filter(F.col("timestamp_ms") < F.col("previous_ms"))
            .withColumn("back_ms", F.col("previous_ms") - F.col("timestamp_ms"))).cache()
    total = back.agg(F.count("*").alias("n"), F.max("back_ms").alias("max_back_ms")).first()
    examples = [r.asDict() for r in back.orderBy(F.desc("back_ms"), "partition", "offset").limit(limit).collect()]
    back.unpersist()
    return {"regressions": int(total["n"]), "max_back_ms": total["max_back_ms"], "examples": examples}


def restarted(step: Mapping[str, Any]) -> bool:
    """Pure: a roll's node step restarted the node: its incarnation (container or process start) changed, when
    both were recorded (older ledgers have neither)."""
    before, after = step.get("started_before"), step.get("started_after")
    return before is None or after is None or before != after


def step_evidence(step: Mapping[str, Any]) -> str:
    """Pure: what a node's step changed: its Kafka version, else (an attached project, a plain restart) its
    start (`started_before` → `started_after`)."""
    if step.get("version_before") is not None and step.get("version_before") != step.get("version_after"):
        return f"{step['version_before']} → {step['version_after']}"
    if step.get("started_before") or step.get("started_after"):
        return f"restarted: started {step.get('started_before')} → {step.get('started_after')}"
    return f"{step.get('version_before')} → {step.get('version_after')}"


def rolling_effect(kind: str, params: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a rolling fault took effect when every node it rolled came back on what it was rolled to
    (and, for a finalised upgrade, the release's features were finalised)."""
    rolled = effect.get("rolled") or {}
    if not rolled:
        return False, "no node was rolled"
    after = effect.get("versions_after") or {}
    want = params.get("version")
    off = sorted(n for n, step in rolled.items() if step.get("caught_up_s") is None
                 or (want is not None and after.get(n) != want) or not restarted(step))
    evidence = f"{len(rolled)} nodes rolled" + (f" to Kafka {want}" if want else "") + (
        (f"; nodes {', '.join(off)} did not come back on it" if want else
         f"; nodes {', '.join(off)} did not restart and serve again") if off else "")
    finalized = True
    if want is not None and params.get("finalize", True):
        finalized = bool((effect.get("finalized") or {}).get("finalized"))
        evidence += "; features finalised" if finalized else "; features NOT finalised"
    return not off and finalized, evidence


def consumer_effect(kind: str, fault: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a consumer fault took effect when the consumer process was in the state it causes (and, but for a
    pause, was started again at heal)."""
    want = "paused" if kind == "pause" else "dead"
    state = effect.get("consumer_state")
    restarted = effect.get("consumer_restarted")
    held = state == want and (kind == "pause" or restarted is not False)
    return held, (f"consumer process {state or 'state not recorded'} after the {kind}"
                  + ("" if kind == "pause" else
                     f"; {'restarted' if restarted else 'not restarted' if restarted is False else 'restart not recorded'}"))


def app_effect(kind: str, fault: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: an application fault took effect when every instance it targeted was in the state it causes (dead;
    paused; running again after a restart) and, as far as its heal record says, came back: started again and
    ready after a kill or stop, resumed after a pause. A restart needs its record that each came back ready."""
    states = effect.get("app_states") or {}
    if not states:
        return False, "no instance state was recorded after the injection"
    want = "paused" if kind == "pause" else "running" if kind == "restart" else "dead"
    back = effect.get("app_resumed" if kind == "pause" else "app_restarted")
    word = "resumed" if kind == "pause" else "restarted"
    if kind == "restart" and not back:
        return False, "no restart was recorded"

    def came_back(instance: str) -> str:
        if back is None or instance not in back:
            return f"{word} not recorded"
        return word if back[instance] else f"NOT {word}"

    held = all(v == want for v in states.values()) and all((back or {}).get(i) is not False for i in states)
    return held, "; ".join(f"{i} {state}, {came_back(i)}" for i, state in sorted(states.items()))


def process_effect(kind: str, fault: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a restart took effect when every node runs a new process; a kill, stop or pause when every node
    was dead (paused) afterwards."""
    if kind == "restart":
        restarted = effect.get("restarted") or {}
        if not restarted:
            return False, "no restart was recorded"
        return all(restarted.values()), ", ".join(f"node {n} {'restarted' if v else 'NOT restarted'}"
                                                  for n, v in sorted(restarted.items()))
    states = effect.get("node_states") or {}
    want = "paused" if kind == "pause" else "dead"
    if not states:
        return False, "no node state was recorded after the injection"
    return all(v == want for v in states.values()), ", ".join(f"node {n} {v}" for n, v in sorted(states.items()))


def network_effect(kind: str, fault: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a bandwidth limit took effect when its token buckets held packets back; an nft fault when its
    rules dropped packets."""
    if kind == "bandwidth":
        held_back = (effect.get("tbf_overlimits") or 0) + (effect.get("tbf_dropped") or 0)
        return held_back > 0, f"the token buckets held back {held_back} packets"
    n = effect.get("dropped_packets")
    return bool(n), ("no packet counts were recorded" if n is None else f"its rules dropped {n} packets")


def proxy_effect(kind: str, fault: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a proxy fault took effect when its rule fired."""
    n = effect.get("proxy_fired", fault.get("proxy_fired"))
    return bool(n), ("the proxy rule's count was not recorded" if n is None else f"the proxy rule fired {n} times")


def disk_effect(kind: str, fault: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a power loss as `power_loss_effect` says; a disk rule took effect when it fired."""
    if kind == "power_loss":
        return power_loss_effect(effect)
    n = effect.get("disk_fired")
    return bool(n), ("the disk rule's count was not recorded" if n is None else
                     f"the disk rule {'slowed' if kind == 'disk_latency' else 'failed'} {n} "
                     f"operation{'' if n == 1 else 's'}")


def corruption_effect(kind: str, fault: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a file corruption took effect when every node it targeted had files changed (bits flipped or bytes
    cut); the evidence names each node's files and what changed in them, and each node that refused to start on
    them at the heal (`start_refused`, with Kafka's exception line)."""
    corrupted = effect.get("corrupted") or {}
    refused = effect.get("start_refused") or {}
    nodes = [str(n) for n in fault.get("nodes") or []] or list(corrupted)
    if not nodes:
        return False, "no node was corrupted"

    def changed(files: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
        return [f for f in files if f.get("flipped") or f.get("cut")]

    def said(node: str) -> str:
        files = corrupted.get(node) or []
        hit = changed(files)
        if not files:
            return f"node {node}: no file of the kind found"
        if not hit:
            return f"node {node}: {len(files)} file{'' if len(files) == 1 else 's'} left unchanged"
        return f"node {node}: " + ", ".join(
            f"{f['file']} ({f['flipped']} bit{'' if f['flipped'] == 1 else 's'} flipped)" if f.get("flipped") else
            f"{f['file']} ({f['cut']:,} of {f['size']:,} bytes cut)" for f in hit[:4]) + (
            f" and {len(hit) - 4} more" if len(hit) > 4 else "")
    evidence = "; ".join(said(n) for n in sorted(nodes))
    evidence += "".join(f"; node {n} refused to start on them: {line}" for n, line in sorted(refused.items()))
    return all(changed(corrupted.get(n) or []) for n in nodes), evidence


def rolling_family_effect(kind: str, fault: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a rolling fault as `rolling_effect` says; a node's step when it served again; the finalising step
    when the features were finalised."""
    if kind == "roll_node":
        step = effect.get("step")
        if not step:
            return False, f"the node did not come back: {effect.get('effect_error') or 'no step was recorded'}"
        return (step["caught_up_s"] is not None and restarted(step),
                f"{step_evidence(step)}, serving again {step['caught_up_s']}s after its start")
    if kind == "finalize_features":
        step = effect.get("step") or {}
        return bool(step.get("finalized")), (f"release {step['release']} finalised" if step.get("finalized") else
                                             f"not finalised: {effect.get('effect_error') or 'no result recorded'}")
    return rolling_effect(kind, json.loads(fault.get("params") or "{}"), effect)


# The judge of each family's faults: (kind, fault row, its effect) -> (took effect, evidence).
def log_dir_effect(kind: str, fault: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a log-directory failure took effect when, on every node it failed a directory of, the broker's log
    says it stopped serving that directory's replicas (more often at the heal than at the injection)."""
    dirs = effect.get("log_dir") or {}
    after, before = effect.get("log_dir_offline") or {}, effect.get("offline_before") or {}
    if not dirs:
        return False, "no log directory was failed"
    offline = {n: int(after.get(n, 0)) > int(before.get(n, 0)) for n in dirs}
    return all(offline.values()), "; ".join(
        f"node {n} {'took' if offline[n] else 'did NOT take'} {d} offline" for n, d in sorted(dirs.items()))


def quorum_effect(kind: str, fault: Mapping[str, Any], effect: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: a quorum fault took effect when the voters changed as its kind says (the removed controller no voter,
    the added one a voter) and the quorum had a leader among them afterwards; the evidence: voters before and
    after, how long each change took, the elections (epoch changes)."""
    q = effect.get("quorum") or {}
    if not q:
        return False, f"no quorum change was recorded: {effect.get('effect_error') or 'no record'}"
    after = list(q.get("voters_after") or [])
    removed, added = q.get("removed"), q.get("added")
    held = bool(after) and q.get("leader_after") in after
    if kind != "add_controller":  # it removes a voter (remove_controller, replace_controller)
        held = held and removed is not None and removed not in after
    if kind != "remove_controller":  # it adds one (add_controller, replace_controller)
        held = held and added is not None and added in after
    parts = [f"voters {q.get('voters_before')} → {after}"]
    if removed is not None:
        parts.append(f"{removed} removed in {q.get('remove_s')} s")
    if added is not None:
        parts.append(f"{added} added in {q.get('add_s')} s")
    parts.append(f"leader {q.get('leader_before')} → {q.get('leader_after')}, epoch {q.get('epoch_before')} → "
                 f"{q.get('epoch_after')} ({q.get('elections', 0)} election{'' if q.get('elections') == 1 else 's'})")
    return held, "; ".join(parts)


def quorum_condition(cond: Mapping[str, Any], faults: Sequence[Mapping[str, Any]]) -> tuple[bool, str]:
    """Pure: the `quorum` condition: the voters after the last quorum fault (by start) are `voters` exactly /
    `voter_count` many, and the quorum faults saw at least `min_elections` elections between them."""
    changes = sorted(((int(f["start_ns"]), json.loads(f.get("effect") or "{}").get("quorum"))
                      for f in faults if family_of(f) == "quorum"), key=lambda c: c[0])
    changes = [q for _, q in changes if q]
    if not changes:
        return False, "no quorum fault recorded a change"
    final = sorted(changes[-1].get("voters_after") or [])
    elections = sum(int(q.get("elections") or 0) for q in changes)
    held, said = True, [f"voters at the end {final}", f"{elections} election{'' if elections == 1 else 's'} during "
                                                       f"{len(changes)} quorum change{'' if len(changes) == 1 else 's'}"]
    if "voters" in cond:
        held = held and final == sorted(cond["voters"])
        said[0] += f" (want {sorted(cond['voters'])})"
    if "voter_count" in cond:
        held = held and len(final) == int(cond["voter_count"])
        said[0] += f" (want {cond['voter_count']} voters)"
    if "min_elections" in cond:
        held = held and elections >= int(cond["min_elections"])
        said[1] += f" (need {cond['min_elections']})"
    return held, "; ".join(said)


FAMILY_JUDGES = {
    "process": process_effect,
    "network": network_effect,
    "proxy": proxy_effect,
    "rolling": rolling_family_effect,
    "clock": lambda kind, fault, effect: clock_effect(json.loads(fault.get("params") or "{}"), effect),
    "disk": disk_effect,
    "log_dir": log_dir_effect,
    "corruption": corruption_effect,
    "quorum": quorum_effect,
    "consumer": consumer_effect,
    "app": app_effect,
}


def fault_effect(fault: Mapping[str, Any]) -> tuple[bool, str]:
    """Pure: whether one injected fault observably took effect, and the evidence, from its `effect` record."""
    effect = json.loads(fault.get("effect") or "{}")
    family = family_of(fault)
    if family is None:
        return False, f"kafkaproof has no check for fault kind {fault['kind']!r}"
    return FAMILY_JUDGES[family](fault["kind"], fault, effect)


def exercise_results(faults: Sequence[Mapping[str, Any]], conditions: Sequence[Mapping[str, Any]],
                     snapshots: Sequence[Mapping[str, Any]], proxy_phases: Mapping[str, int],
                     incarnations: Mapping[int, int], aborted_in_log: int, outcomes: Mapping[str, int],
                     t0: int) -> list[dict[str, Any]]:
    """Pure: one result per injected fault (did it take effect?) and per condition the scenario states.

    Each is `{check, subject, held, evidence}`; a condition not held makes the run an error.
    """
    out = []
    for f in faults:
        held, evidence = fault_effect(f)
        out.append({"check": "fault_took_effect", "subject": f"{f['kind']} {f.get('target') or ''} ({f['fault_id']})",
                    "fault_id": f["fault_id"], "held": held, "evidence": evidence})
    out += together_results(faults)
    by_index = {}
    for f in faults:
        idx = (json.loads(f.get("effect") or "{}")).get("scenario_index")
        if idx is not None:
            by_index.setdefault(int(idx), f)
    snaps = sorted(snapshots, key=lambda r: r["ts_ns"])

    def rel(ns: int) -> str:
        return f"t={(ns - t0) / NS_PER_S:.1f}s"

    for c in conditions:
        check = c["check"]
        held, evidence, subject = False, "", ""
        if check == "leader_change":
            p = c["partition"]
            subject = f"partition {p}"
            seen = [(r["ts_ns"], r["leader"]) for r in snaps if r["partition"] == p]
            changes = [(ts, a, b) for (_, a), (ts, b) in zip(seen, seen[1:]) if a != b]
            held = bool(changes)
            evidence = ("; ".join(f"leader {a} -> {b} at {rel(ts)}" for ts, a, b in changes[:5]) if changes
                        else f"leader stayed {seen[0][1] if seen else 'unknown'} in {len(seen)} snapshots")
        elif check == "isr_shrink":
            p = c["partition"]
            subject = f"partition {p}"
            limit, before = None, ""
            if "before_fault" in c:
                f = by_index.get(int(c["before_fault"]))
                limit = f["start_ns"] if f else None
                before = f" before faults[{c['before_fault']}]" + ("" if f else " (never injected)")
            shrunk = [r for r in snaps if r["partition"] == p and len(r["isr"] or []) < len(r["replicas"] or [])
                      and (limit is None or r["ts_ns"] < limit)]
            held = bool(shrunk) and not ("before_fault" in c and limit is None)
            evidence = (f"ISR {list(shrunk[0]['isr'])} of replicas {list(shrunk[0]['replicas'])} at "
                        f"{rel(shrunk[0]['ts_ns'])}{before}" if shrunk else f"the ISR never shrank{before}")
        elif check == "proxy_phase":
            n, want = int(proxy_phases.get(c["phase"], 0)), int(c.get("min", 1))
            subject, held = c["phase"], n >= want
            evidence = f"{n} proxy events in phase {c['phase']} (need {want})"
        elif check == "aborted_in_log":
            want = int(c.get("min", 1))
            subject, held = "aborted transactions", aborted_in_log >= want
            evidence = f"{aborted_in_log} records of aborted transactions in the log (need {want})"
        elif check == "consumer_restarted":
            i = c["consumer"]
            n = incarnations.get(i, 0)
            subject, held = f"consumer {i}", n >= 1
            evidence = f"{n + 1} process(es) of consumer {i} ran"
        elif check == "send_errors":
            which, want = c.get("outcome", "any"), int(c.get("min", 1))
            n = (outcomes.get("failed", 0) + outcomes.get("indefinite", 0) if which == "any"
                 else outcomes.get("failed" if which == "fail" else "indefinite", 0))
            subject, held = f"{which} sends", n >= want
            evidence = f"{n} {which} sends (need {want})"
        elif check == "quorum":
            subject = "controller quorum"
            held, evidence = quorum_condition(c, faults)
        else:
            evidence = f"unknown check {check!r}"
        out.append({"check": check, "subject": subject, "fault_id": None, "held": held, "evidence": evidence,
                    **({"why": c["why"]} if c.get("why") else {})})
    return out


MAX_TOGETHER_SKEW_MS = 1000.0


def together_results(faults: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Pure: one `faults_together` result per group of correlated faults (a `together` block, whose faults'
    `effect` records their `group` and `group_size`): held when every fault of the group was injected and
    they began at most MAX_TOGETHER_SKEW_MS apart; the skew is the evidence."""
    groups: dict[int, list[Mapping[str, Any]]] = {}
    sizes: dict[int, int] = {}
    for f in faults:
        effect = json.loads(f.get("effect") or "{}")
        if effect.get("group") is not None:
            groups.setdefault(int(effect["group"]), []).append(f)
            sizes[int(effect["group"])] = int(effect.get("group_size") or 0)
    out = []
    for group, members in sorted(groups.items()):
        starts = [int(f["start_ns"]) for f in members]
        skew_ms = (max(starts) - min(starts)) / 1e6
        missing = max(0, sizes[group] - len(members))
        held = not missing and skew_ms <= MAX_TOGETHER_SKEW_MS
        evidence = (f"{len(members)} faults ({', '.join(f['kind'] + ' ' + str(f.get('target') or '') for f in members)})"
                    f" began {skew_ms:.1f} ms apart (at most {MAX_TOGETHER_SKEW_MS:g})"
                    + (f"; {missing} of the group's {sizes[group]} never injected" if missing else ""))
        out.append({"check": "faults_together", "subject": f"group {group}", "fault_id": None, "held": held,
                    "evidence": evidence})
    return out
