"""Salvaging a run that ended before its drain (its runner was killed, the host went down): the ledger
tables from what its workers had streamed, so that the analysis can run on the partial run.

Producers and consumers flush their Arrow streams (or TSV files) every 200 ms, and the fault log is
written as faults happen, so `work/` holds everything up to the crash. What a salvaged run lacks is
the final drain: no acknowledged value can be checked against the log (the analysis counts them
`unseen`), so the run stays `incomplete` and never passes; what the consumers saw (duplicates,
reordering, skipped or rewound polls) is still counted and shown.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

from ..errors import LedgerError
from ..spec import ledger
from .assemble import assemble_ledger

log = logging.getLogger(__name__)


def salvage_run(run_dir: Path) -> dict:
    """Assemble the ledger of a run that did not finish; returns its manifest (status `incomplete`).

    LedgerError when `run_dir` is not a run, is complete already, or streamed nothing."""
    run_dir = Path(run_dir)
    manifest = ledger.read_manifest(run_dir)
    if manifest.get("status") == "complete":
        raise LedgerError(f"{run_dir}: the run is complete; there is nothing to salvage")
    work = run_dir / "work"
    if not work.is_dir() or not any(work.glob("producer-*")):
        raise LedgerError(f"{run_dir}: no producer wrote anything to {work}; there is nothing to salvage")
    counts = assemble_ledger(run_dir, manifest["scenario"], audit_rows=[], snapshots=[],
                             topic_id=(manifest.get("topic_description") or {}).get("topic_id"))
    before = manifest.get("status")
    why = manifest.get("error") or ("its runner stopped without a word (killed, or the host went down)"
                                    if before == "running" else f"it ended {before}")
    manifest.update(status="incomplete", counts=counts,
                    error=f"salvaged from its streams: the run ended before its final drain ({why}); "
                          f"acknowledged values cannot be checked against the log",
                    salvaged={"wall": time.time(), "status_before": before})
    ledger.write_manifest(run_dir, manifest)
    log.info("salvaged %s: %d sends, %d reads, %d faults", run_dir, counts["sends"], counts["reads"], counts["faults"])
    return manifest
