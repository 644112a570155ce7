"""Seeded random fault schedules (a nemesis rotation, as Jepsen draws one), as pure data.

A scenario may give `faults: {random: {...}}` instead of a timeline: the kinds to draw from (each
with its parameters and, optionally, its own targets), the targets, the time between injections
and each fault's duration as `[min, max]` ranges, how many faults may be active at once, a quiet
period after each heal, and the window to draw in. `draw_schedule(spec, seed, horizon_s)` turns
it into an ordinary timeline; the same spec and seed always give the same timeline, byte for
byte. The run records the seed and the drawn timeline in its manifest (`random_schedule`), and
`kafkaproof run --replay RUN_DIR` runs that timeline again.
"""
from __future__ import annotations

import random
from typing import Any, Callable, Mapping, Sequence

from .fault_families import FAMILIES
from .faults import FAULT_KINDS, PROXY_KINDS, ROLLING_KINDS
from .together import MAX_TOGETHER, MIN_TOGETHER

# Targets of the families on the run's own processes (consumer:, app:), which random schedules do not draw.
RUN_TARGET_PREFIXES = tuple(f.target_prefix for f in FAMILIES.values() if f.target_prefix)
DRAWABLE_KINDS = tuple(k for k in FAULT_KINDS if k not in ROLLING_KINDS)
DEFAULT_TARGETS = ("random",)
DEFAULT_MAX_FAULTS = 100

_RANGE = {"type": "array", "items": {"type": "number", "minimum": 0}, "minItems": 2, "maxItems": 2}
_KIND = {"type": "object", "additionalProperties": False, "required": ["kind"],
         "properties": {"kind": {"enum": list(DRAWABLE_KINDS)}, "params": {"type": "object"},
                        "targets": {"type": "array", "minItems": 1, "items": {"type": "string"}}}}
SCHEMA: dict[str, Any] = {
    "type": "object", "additionalProperties": False, "required": ["kinds", "interval_s", "duration_s"],
    "description": "a seeded random fault schedule instead of a timeline (docs: README, Random schedules)",
    "properties": {
        "seed": {"type": "integer", "minimum": 0, "description": "default: a new one per run, recorded in its manifest"},
        "kinds": {"type": "array", "minItems": 1, "items": {
            **_KIND, "properties": {**_KIND["properties"], "weight": {"type": "number", "exclusiveMinimum": 0}}}},
        "combinations": {"type": "array", "minItems": 1, "items": {
            "type": "object", "additionalProperties": False, "required": ["faults"],
            "description": "faults drawn together, started at one instant (a `together` block), drawn like a kind",
            "properties": {"faults": {"type": "array", "minItems": MIN_TOGETHER, "maxItems": MAX_TOGETHER,
                                      "items": _KIND},
                           "weight": {"type": "number", "exclusiveMinimum": 0}}}},
        "targets": {"type": "array", "minItems": 1, "items": {"type": "string"},
                    "description": "targets to draw from (default: random)"},
        "interval_s": {**_RANGE, "description": "[min, max] seconds from one injection to the next"},
        "duration_s": {**_RANGE, "description": "[min, max] seconds each fault lasts"},
        "max_concurrent": {"type": "integer", "minimum": 1, "description": "faults active at once (default 1)"},
        "quiet_s": {"type": "number", "minimum": 0, "description": "no injection this long after a heal (default 0)"},
        "start_s": {"type": "number", "minimum": 0, "description": "first injection no earlier (default 2)"},
        "until_s": {"type": "number", "exclusiveMinimum": 0,
                    "description": "no injection after, every fault healed by (default: the workload's length)"},
        "max_faults": {"type": "integer", "minimum": 1, "description": f"at most this many (default {DEFAULT_MAX_FAULTS})"},
    },
}


def check_spec(spec: Mapping[str, Any], where: str, check_fault: Callable[[str, str, Mapping, str], None],
               fail: Callable[[str, str], None]) -> None:
    """Semantic checks a JSON schema cannot make: ranges in order, and every kind valid on every target
    it may be drawn with (`check_fault(kind, target, params, where)` raises on an invalid one)."""
    for name in ("interval_s", "duration_s"):
        lo, hi = spec[name]
        if lo > hi:
            fail(f"{where}.{name}", f"[{lo}, {hi}]: the minimum is above the maximum")
    if spec["interval_s"][1] <= 0:
        fail(f"{where}.interval_s", "the maximum must be > 0")
    if "until_s" in spec and spec["until_s"] <= spec.get("start_s", 2.0):
        fail(f"{where}.until_s", f"{spec['until_s']} is not after start_s ({spec.get('start_s', 2.0)})")
    drawn = [(f"{where}.kinds[{i}]", k) for i, k in enumerate(spec["kinds"])]
    drawn += [(f"{where}.combinations[{i}].faults[{j}]", k) for i, c in enumerate(spec.get("combinations") or [])
              for j, k in enumerate(c["faults"])]
    for at, k in drawn:
        for target in k.get("targets") or spec.get("targets") or DEFAULT_TARGETS:
            if any(target.startswith(p) for p in RUN_TARGET_PREFIXES):
                fail(f"{at}.targets", f"{target!r}: random schedules target the cluster, not the run's "
                                      f"consumers or application services")
            check_fault(k["kind"], target, k.get("params") or {}, at)


def draw_schedule(spec: Mapping[str, Any], seed: int, horizon_s: float, node_ids: Sequence[int] = (),
                  broker_ids: Sequence[int] = ()) -> list[dict[str, Any]]:
    """Pure: the timeline a random spec gives with `seed` (faults sorted by `at`, each with a duration).

    Injections are `interval_s` apart (drawn), not while `max_concurrent` faults are active, and not
    within `quiet_s` of a heal; each lasts `duration_s` (drawn) but ends by `until_s` (default:
    `horizon_s`, the workload's length). Kinds are drawn by `weight` (default 1), targets evenly.
    The target `random` is drawn here too, as `node:<id>` among `node_ids` (`broker_ids` for proxy
    faults), when they are given: a replay hits the same nodes. A drawn combination (`combinations`, drawn by
    its weight among the kinds) is its faults with one `at`, one duration and a `group` (the first one's
    position), `random` targets on distinct nodes; it takes the place of one fault for `max_concurrent`.
    """
    rng = random.Random(seed)
    ms = lambda lo_hi: round(rng.uniform(*lo_hi) * 1000)  # noqa: E731  (whole milliseconds: no rounding drift)
    until = round(float(spec.get("until_s", horizon_s)) * 1000)
    t = round(float(spec.get("start_s", 2.0)) * 1000)
    max_concurrent, quiet = int(spec.get("max_concurrent", 1)), round(float(spec.get("quiet_s", 0.0)) * 1000)
    kinds = list(spec["kinds"])
    weights = [float(k.get("weight", 1.0)) for k in kinds]
    combinations = list(spec.get("combinations") or [])
    combination_weights = [float(c.get("weight", 1.0)) for c in combinations]
    heals: list[int] = []
    out: list[dict[str, Any]] = []
    while len(out) < int(spec.get("max_faults", DEFAULT_MAX_FAULTS)):
        if out:
            t += ms(spec["interval_s"])
        while True:  # later until no more than max_concurrent - 1 are active and none healed within quiet
            active = sorted(h for h in heals if h > t)
            ended = [h for h in heals if h <= t]
            if len(active) >= max_concurrent:
                t = active[len(active) - max_concurrent] + quiet
            elif ended and t < max(ended) + quiet:
                t = max(ended) + quiet
            else:
                break
        if t >= until - 500:
            break
        # without combinations, the draws of schedules written before them (their replays stay byte for byte)
        kind = rng.choices(kinds + combinations, weights + combination_weights)[0] if combinations else \
            rng.choices(kinds, weights)[0]
        members = kind["faults"] if "faults" in kind else [kind]
        taken: set[int] = set()  # a combination's `random` targets draw distinct nodes: they must run at once
        drawn = [(k, _draw_target(rng, k, spec, broker_ids if k["kind"] in PROXY_KINDS else node_ids, taken))
                 for k in members]
        duration = min(ms(spec["duration_s"]), until - t)
        group = {"group": len(out)} if len(members) > 1 else {}
        for k, target in drawn:
            entry: dict[str, Any] = {"at": t / 1000, "kind": k["kind"], "target": target, "duration": duration / 1000,
                                     **group}
            if k.get("params"):
                entry["params"] = dict(k["params"])
            out.append(entry)
        heals.append(t + duration)
    return out


def _draw_target(rng: random.Random, kind: Mapping[str, Any], spec: Mapping[str, Any], among: Sequence[int],
                 taken: set[int]) -> str:
    """One target of a drawn fault; `random` as `node:<id>` among `among` not yet `taken` (when known)."""
    targets = kind.get("targets") or spec.get("targets") or DEFAULT_TARGETS
    target = targets[rng.randrange(len(targets))]
    free = [n for n in among if n not in taken] or list(among)
    if target == "random" and free:
        node = free[rng.randrange(len(free))]
        taken.add(node)
        target = f"node:{node}"
    return target


def workload_horizon_s(producers: Mapping[str, Any]) -> float:
    """Pure: how long the producers run, as a scenario says it (its duration, or messages at its rate)."""
    if producers.get("duration_s"):
        return float(producers["duration_s"])
    rate = producers.get("rate")
    if rate:
        return float(producers["messages"]) / float(rate)
    return 30.0  # an unpaced producer: a guess; give `until_s` to be sure
