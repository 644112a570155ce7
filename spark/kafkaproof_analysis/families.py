"""The fault families as the job needs them: each family's kinds (and step kinds), and the fields of the
fault log's `effect` and heal record that are its evidence. No pyspark.

`FAMILIES` is kafkaproof's registry (kafkaproof.spec.fault_families, each family's `plain()`), never a copy
kept here. The zip spark-submit gets (`kafkaproof.analysis.job_py_files`) carries it as a generated module,
`family_registry`, so the job runs without the package; run from the source tree (spark/ on the path, no
zip: unit tests, a local master without --py-files) the package beside it gives it.
"""
from __future__ import annotations

from typing import Any, Mapping


def _registry() -> dict[str, dict[str, Any]]:
    """The families from the zip's generated module, else from kafkaproof itself."""
    try:
        from .family_registry import FAMILIES as generated  # type: ignore[import-not-found]  # only in the zip
        return generated
    except ModuleNotFoundError:
        pass
    try:
        from kafkaproof.spec.fault_families import plain
    except ModuleNotFoundError as exc:
        raise ImportError("kafkaproof_analysis: the fault families are missing: run the job with the zip "
                          "kafkaproof.analysis.job_py_files() builds (spark-submit --py-files; `kafkaproof "
                          "analyze` does), or with the kafkaproof package importable") from exc
    return plain()


FAMILIES: dict[str, dict[str, Any]] = _registry()


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
