"""`kafkaproof report --night DIR`: a batch page for a directory of run directories (no Airflow, no history row)."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

from ..spec.ledger import MANIFEST
from ..verdict.summary import judge_run
from .batch_page import write_batch_report
from .run_page import application_lead, write_run_report


def find_run_dirs(root: Path) -> list[Path]:
    """Run directories (holding manifest.json) directly under `root`, or `root` itself if it is one."""
    root = Path(root)
    if (root / MANIFEST).exists():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / MANIFEST).exists()) if root.is_dir() else []


def find_batch_summaries(night_dir: Path, write_reports: bool = False, history_url: str | None = None) -> list[dict]:
    """Summaries of every run directory under `night_dir` (`verdict.summary.judge_run`: no history, no regressions;
    an application's run with its view, `run_page.application_lead`).

    With `write_reports`, each run's report is (re)written first so the index can link it.
    """
    out = []
    for rd in find_run_dirs(night_dir):
        if write_reports:
            write_run_report(rd, history_url=history_url)
        out.append({**asdict(judge_run(rd)), "label": "", "application": application_lead(rd)})
    return out


def write_night_report(night_dir: Path, batch_id: str | None = None, out: Path | None = None,
                       write_reports: bool = True, history_url: str | None = None) -> Path:
    """`kafkaproof report --night DIR`: each run's report, then the batch index of the directory.

    The batch id defaults to the directory's name; the index goes to
    `<out>/batches/<safe batch id>/index.html` with `out` defaulting to `DIR` itself.
    """
    night_dir = Path(night_dir)
    summaries = find_batch_summaries(night_dir, write_reports=write_reports, history_url=history_url)
    return write_batch_report(summaries, batch_id or night_dir.resolve().name, out or night_dir, history_url)
