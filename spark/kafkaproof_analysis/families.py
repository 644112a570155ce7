"""The fault families as the job needs them: each family's kinds (and step kinds), and the fields of the
fault log's `effect` and heal record that are its evidence. No pyspark.

A copy of kafkaproof's registry (kafkaproof.spec.fault_families, `plain()`): the job runs without the
package. tests/unit/analysis/test_job_package.py fails when the two drift; change both together.
"""
from __future__ import annotations

from typing import Any, Mapping

FAMILIES: dict[str, dict[str, Any]] = {
    "process": {"kinds": ["kill", "stop", "pause", "restart"], "steps": [],
                "effect_fields": ["node_states", "restarted"], "heal_fields": [], "target_prefix": ""},
    "network": {"kinds": ["isolate", "cut", "partition", "cut_clients", "packet_loss", "bandwidth"], "steps": [],
                "effect_fields": [],
                "heal_fields": ["dropped_packets", "dropped_bytes", "tbf_overlimits", "tbf_dropped"],
                "target_prefix": ""},
    "proxy": {"kinds": ["lost_ack", "error", "latency", "proxy_bandwidth", "reset", "blackhole", "metadata",
                        "fetch_corrupt", "fetch_duplicate"], "steps": [],
              "effect_fields": [], "heal_fields": ["proxy_fired", "proxy_matched"], "target_prefix": ""},
    "rolling": {"kinds": ["rolling_upgrade", "rolling_restart"], "steps": ["roll_node", "finalize_features"],
                "effect_fields": ["rolled", "versions_after", "finalized"], "heal_fields": ["step", "effect_error"],
                "target_prefix": ""},
    "clock": {"kinds": ["clock_skew"], "steps": [], "effect_fields": ["clocks"], "heal_fields": [],
              "target_prefix": ""},
    "disk": {"kinds": ["disk_error", "disk_full", "disk_latency", "power_loss"], "steps": [],
             "effect_fields": ["disk_rule", "node_states", "power_loss"], "heal_fields": ["disk_fired"],
             "target_prefix": ""},
    "consumer": {"kinds": ["kill", "stop", "pause"], "steps": [], "effect_fields": ["consumer_state"],
                 "heal_fields": ["consumer_restarted"], "target_prefix": "consumer:"},
    "app": {"kinds": ["kill", "stop", "pause", "restart"], "steps": [], "effect_fields": ["app_states"],
            "heal_fields": ["app_restarted", "app_resumed"], "target_prefix": "app:"},
}


def kinds_of(*names: str) -> tuple[str, ...]:
    """The kinds of the families `names`, in the registry's order."""
    return tuple(k for name in names for k in FAMILIES[name]["kinds"])


def family_of(fault: Mapping[str, Any]) -> str | None:
    """The family of a fault row (its kind and target; a step kind is its fault's family), None for a kind
    the job does not know."""
    kind, target = fault["kind"], fault.get("target") or ""
    for name, family in FAMILIES.items():
        if family["target_prefix"] and target.startswith(family["target_prefix"]):
            return name
    for name, family in FAMILIES.items():
        if not family["target_prefix"] and (kind in family["kinds"] or kind in family["steps"]):
            return name
    return None
