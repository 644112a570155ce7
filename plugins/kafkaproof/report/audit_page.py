"""audit.html: an audit's report page, from its audit.json (docs/audit.md). STUB: the page is being built."""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Mapping

PAGE = "audit.html"


def write_audit_page(audit: Mapping[str, Any], out_dir: str | Path) -> Path:
    """Write `out_dir`/audit.html for the audit document `audit` (the content of audit.json); returns its path."""
    path = Path(out_dir) / PAGE
    path.write_text(f"<!doctype html><title>kafkaproof audit</title><pre>{html.escape(json.dumps(audit, indent=2, default=str))}</pre>")
    return path
