"""`kafkaproof audit`: an existing cluster audited on a replica (docs/audit.md). STUB: the runner is being built.

Between the batch runner and the CLI (tests/unit/test_architecture.py RANK 9.5): discovery (read-only) and the
plan come from spec/cluster, the replica runs from `batch.run_batch`, the page from `report.audit_page`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

VERDICT_EXIT = {"pass": 0, "fail": 1, "error": 2}


@dataclass(frozen=True)
class AuditRequest:
    """What to audit and how: the cluster (`bootstrap`, `client_config` path), the team's client settings
    (`app_config` path, its format and role as `kafkaproof audit --app-config` takes them), a topic filter,
    where the suite, runs, audit.json and audit.html go (`out`), the fault ids of the matrix to run (empty:
    all of spec.audit_plan.FAULTS), `max_classes`, whether to search fixes and how many tries per class."""

    out: Path
    bootstrap: str | None = None
    client_config: str | None = None
    app_config: str | None = None
    app_format: str | None = None
    app_role: str | None = None
    topics: tuple[str, ...] = ()
    faults: tuple[str, ...] = ()
    max_classes: int | None = None
    fixes: bool = True
    max_fix_tries: int = 3
    backend: str = "local"


@dataclass
class AuditResult:
    """An audit's outcome: the audit.json document, where it and audit.html were written, the verdict
    (pass | fail | error) and the process exit code that goes with it (0 | 1 | 2)."""

    audit: dict[str, Any]
    json_path: Path
    html_path: Path
    verdict: str
    lines: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return VERDICT_EXIT[self.verdict]


def run_audit(request: AuditRequest) -> AuditResult:
    """Discover, plan, write the suite, run the matrix on replicas, search fixes, write audit.json and audit.html."""
    raise NotImplementedError("the audit runner is being built")
