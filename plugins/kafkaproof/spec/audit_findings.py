"""An audit's findings: what the discovered settings mean for reliability, before any replica runs.

Pure functions over what discovery read (`ClusterInventory`), the team's client settings (`ClientSettings`,
or None: the client's defaults) and the audit's plan (`AuditPlan`). STUB: the findings are being built.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from .audit_plan import AuditPlan
from .client_settings import ClientSettings
from .inventory import ClusterInventory

SEVERITIES = ("high", "medium", "low")
SCOPES = ("broker", "client", "topic")


@dataclass(frozen=True)
class Finding:
    """One thing the audit noticed: `severity` (high|medium|low), `scope` (broker|client|topic), `subject`
    (the broker setting, client role or topic it is about), `setting` and `value` (what was read), `text`
    (what it means under a broker outage, in one sentence a person can act on)."""

    severity: str
    scope: str
    subject: str
    setting: str
    value: Any
    text: str

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict."""
        return asdict(self)


def audit_findings(inventory: ClusterInventory, settings: ClientSettings | None, plan: AuditPlan) -> list[Finding]:
    """Every finding: broker scope first, then client, then topic; high severity first within a scope."""
    del inventory, settings, plan
    return []
