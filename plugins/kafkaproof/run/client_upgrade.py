"""What the upgrade page says about the clients: which libraries each side of a scenario ran on, and — when
the Java clients moved from one kafka-clients version to another — every client default that differs
between the two versions for the properties the scenario does not set (`spec.client_upgrade`), read from
the two jars themselves (`java_driver.client_defaults`).
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..errors import KafkaproofError, LedgerError
from ..spec.client_upgrade import default_changes, scenario_set
from ..spec.client_versions import ProcessClient, summary as client_summary
from ..spec.manifest import Manifest

log = logging.getLogger(__name__)

SIDES = ("current", "candidate")


def java_versions(processes: Sequence[ProcessClient]) -> list[str]:
    """Pure: the kafka-clients versions the Java processes of a run ran on, sorted."""
    return sorted({lib.version for p in processes for lib in p.libraries
                   if lib.name == "kafka-clients" and lib.version})


def _manifest(summary: Mapping[str, Any] | None) -> Manifest | None:
    if not summary or not summary.get("run_dir"):
        return None
    try:
        return Manifest.read(Path(summary["run_dir"]))
    except (LedgerError, OSError, ValueError):
        return None


def client_upgrade_facts(summaries: Sequence[Mapping[str, Any]],
                         defaults: Callable[[str], Mapping[str, Any]] | None = None) -> dict[str, Any]:
    """Per scenario run on both sides of an upgrade check: `{"clients": {side: [summary lines]}, "java":
    {side: version}, "diff": DefaultsDiff JSON | None, "error": str | None}`, under `"scenarios"`; and under
    `"versions"` each (current, candidate) kafka-clients pair with the full diff (no property left out).
    `defaults(version)` reads a jar's defaults (default `java_driver.client_defaults`: a JVM per version,
    cached)."""
    if defaults is None:
        from .java_driver import client_defaults as defaults
    cache: dict[str, Mapping[str, Any] | str] = {}

    def read(version: str) -> Mapping[str, Any] | str:
        if version not in cache:
            try:
                cache[version] = defaults(version)
            except KafkaproofError as e:
                log.warning("kafka-clients %s defaults: %s", version, e)
                cache[version] = f"kafka-clients {version}'s defaults could not be read: {e}"
        return cache[version]

    by: dict[str, dict[str, Mapping[str, Any]]] = {}
    for s in summaries:
        if s and s.get("label") in SIDES:
            by.setdefault(s["scenario"], {})[s["label"]] = s
    scenarios: dict[str, Any] = {}
    pairs: dict[tuple[str, str], Any] = {}
    for name, sides in sorted(by.items()):
        manifests = {side: _manifest(sides.get(side)) for side in SIDES}
        if not all(manifests.values()):
            continue
        processes = {side: m.client_versions for side, m in manifests.items() if m}
        fact: dict[str, Any] = {"clients": {side: client_summary(p) for side, p in processes.items()},
                                "java": {}, "diff": None, "error": None}
        versions = {side: java_versions(p) for side, p in processes.items()}
        if all(len(v) == 1 for v in versions.values()) and versions["current"] != versions["candidate"]:
            cur, cand = versions["current"][0], versions["candidate"][0]
            fact["java"] = {"current": cur, "candidate": cand}
            a, b = read(cur), read(cand)
            if isinstance(a, str) or isinstance(b, str):
                fact["error"] = a if isinstance(a, str) else b
            else:
                scenario = (manifests["candidate"].data.get("scenario") or {}) if manifests["candidate"] else {}
                fact["diff"] = default_changes(a, b, scenario_set(scenario)).to_json()
                if (cur, cand) not in pairs:
                    pairs[(cur, cand)] = default_changes(a, b).to_json()
        scenarios[name] = fact
    return {"scenarios": scenarios, "versions": [pairs[k] for k in sorted(pairs)]}
