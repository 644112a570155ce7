"""Loading what a run report shows: the manifest, the analysis outputs, the validation result, the history."""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd
import pyarrow.parquet as pq

from ..spec import anomalies
from ..spec.ledger import MANIFEST
from ..spec.manifest import Manifest
from .kit import NS_PER_S, wall_time


REPORT_DIR = "report"


DEFAULT_EXAMPLES = 10


TREND_RUNS = 20


KINDS: tuple[str, ...] = anomalies.KINDS  # report order


@dataclass
class RunData:
    """Everything a run report reads, as loaded; `problems` says what was missing or unreadable."""

    run_dir: Path
    manifest: dict[str, Any] | None = None
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    metrics: dict[str, Any] | None = None
    anomalies: pd.DataFrame | None = None
    timeseries: pd.DataFrame | None = None
    validation: dict[str, Any] | None = None
    data_docs: Path | None = None
    problems: list[str] = field(default_factory=list)


def read_json(path: Path, problems: list[str]) -> dict[str, Any] | None:
    """A JSON object, or None with a line in `problems`."""
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        problems.append(f"{path.name}: unreadable ({e})")
        return None
    return data if isinstance(data, dict) else None


def read_parquet(path: Path, problems: list[str], columns: list[str] | None = None) -> pd.DataFrame | None:
    """A Parquet file or directory (Spark output) as pandas, or None with a line in `problems`."""
    if not path.exists():
        return None
    try:
        table = pq.read_table(path)
        if columns is not None:
            table = table.select([c for c in columns if c in table.column_names])
        return table.to_pandas()
    except Exception as e:  # noqa: BLE001 - a damaged file must not stop the report
        problems.append(f"{path.name}: unreadable ({type(e).__name__}: {e})")
        return None


def find_data_docs(run_dir: Path) -> Path | None:
    """The Great Expectations Data Docs entry page under validation/data_docs, if any."""
    root = run_dir / "validation" / "data_docs"
    if not root.is_dir():
        return None
    pages = sorted(root.rglob("index.html"), key=lambda p: (len(p.parts), str(p)))
    return pages[0] if pages else None


def load_run(run_dir: Path) -> RunData:
    """Read a run directory for a report; never raises on missing or damaged parts."""
    run_dir = Path(run_dir)
    data = RunData(run_dir)
    data.manifest = read_json(run_dir / MANIFEST, data.problems)
    if data.manifest is None:
        data.problems.append(f"no readable {MANIFEST}: not a kafkaproof run directory, or the run never started")
    for name, columns in LEDGER_COLUMNS.items():
        df = read_parquet(run_dir / f"{name}.parquet", data.problems, columns)
        if df is None:
            data.problems.append(f"ledger table {name}.parquet is missing")
        else:
            data.tables[name] = df
    analysis = run_dir / "analysis"
    data.metrics = read_json(analysis / "metrics.json", data.problems)
    data.anomalies = read_parquet(analysis / "anomalies.parquet", data.problems)
    data.timeseries = read_parquet(analysis / "timeseries.parquet", data.problems)
    if data.metrics is None:
        data.problems.append("no analysis (analysis/metrics.json): counts below come from the ledger alone, "
                             "anomalies are not classified")
    data.validation = read_json(run_dir / "validation" / "result.json", data.problems)
    if data.validation is None:
        data.problems.append("no validation result (validation/result.json): the run has not been judged")
    data.data_docs = find_data_docs(run_dir) or docs_from_result(data.validation)
    return data


def docs_from_result(validation: Mapping[str, Any] | None) -> Path | None:
    """The Data Docs page named in validation/result.json, if it exists."""
    path = (validation or {}).get("data_docs")
    return Path(path) if path and Path(path).exists() else None


def load_history(scenario: str | None, url: str | None = None, limit: int = TREND_RUNS) -> tuple[list[dict], str | None]:
    """The scenario's most recent history rows (newest first), or ([], why not)."""
    if not scenario:
        return [], "the scenario is unknown"
    try:
        from ..verdict import history
        return history.runs(scenario=scenario, limit=limit, url=url), None
    except Exception as e:  # noqa: BLE001 - an unreachable history store must not stop the report
        return [], f"results history unavailable ({type(e).__name__}: {e})"


def scenario_of(manifest: Mapping[str, Any] | None) -> dict[str, Any]:
    return Manifest(manifest or {}).scenario


def scenario_name(manifest: Mapping[str, Any] | None) -> str | None:
    return Manifest(manifest or {}).scenario_name


def guarantee_of(manifest: Mapping[str, Any] | None) -> str | None:
    return Manifest(manifest or {}).guarantee


def expectation_of(manifest: Mapping[str, Any] | None) -> tuple[str, list[str], str]:
    """(outcome 'pass'|'detect', anomaly kinds a negative control must detect, why)."""
    m = Manifest(manifest or {})
    return m.expect_outcome, [str(k) for k in m.expect["detect"]], m.expect_why


def run_t0(manifest: Mapping[str, Any] | None, sends: pd.DataFrame | None) -> int:
    """The run's time origin (monotonic ns): manifest clock, else the first intended send."""
    origin = Manifest(manifest or {}).t0_ns
    if origin is not None:
        return origin
    if sends is not None and len(sends) and sends["intended_ns"].notna().any():
        return int(sends["intended_ns"].min())
    return 0


def phases(manifest: Mapping[str, Any] | None, t0: int) -> list[dict[str, Any]]:
    """Run phases in time order: name, start_s, end_s, seconds."""
    out = []
    for name, t in Manifest(manifest or {}).timings.items():
        if not isinstance(t, Mapping) or t.get("start_ns") is None:
            continue
        end = t.get("end_ns")
        out.append({"name": name, "start_s": (t["start_ns"] - t0) / NS_PER_S,
                    "end_s": None if end is None else (end - t0) / NS_PER_S, "seconds": t.get("seconds")})
    return sorted(out, key=lambda p: p["start_s"])


def run_started_wall(manifest: Mapping[str, Any] | None) -> str:
    return wall_time(Manifest(manifest or {}).wall_origin_ns)


def metric_value(metrics: Mapping[str, Any], *paths: Sequence[str]) -> float | None:
    """The first numeric value found along `paths` in a nested dict."""
    for path in paths:
        cur: Any = metrics
        for k in path:
            cur = cur.get(k) if isinstance(cur, Mapping) else None
        if isinstance(cur, (int, float)) and not isinstance(cur, bool):
            return float(cur)
    return None


def key_numbers(metrics: Mapping[str, Any] | None) -> dict[str, Any]:
    """recovery (s), publish p99 (ms) and anomaly counts from a history row's metrics or a metrics.json."""
    m = metrics or {}
    recovery = metric_value(m, ("recovery_s",), ("availability", "recovery_s_max"))
    if recovery is None:
        per_fault = [f.get("recovery_after_heal_ms") for f in m.get("faults") or [] if isinstance(f, Mapping)]
        per_fault = [max(v, 0.0) for v in per_fault if isinstance(v, (int, float))]
        recovery = max(per_fault) / 1000 if per_fault else None
    p99 = metric_value(m, ("publish_p99_ms",), ("latency_ms", "publish", "p99"), ("latency", "publish", "overall", "p99"))
    # History rows keep `anomalies`, metrics.json has `counts`; an empty `anomalies` is not "none found".
    counts = m.get("anomalies") or m.get("counts")
    counts = {str(k): int(v or 0) for k, v in counts.items()} if isinstance(counts, Mapping) else None
    return {"recovery_s": recovery, "p99_ms": p99, "counts": counts}


# Columns each report needs from the ledger (reads and audit can be large).
LEDGER_COLUMNS: dict[str, list[str] | None] = {
    "sends": ["value_id", "partition", "intended_ns", "send_ns", "complete_ns", "outcome", "error_name",
              "error_message"],
    "reads": ["value_id", "read_ns"],
    "audit": ["isolation", "value_id"],
    "faults": None,
    "cluster_snapshots": None,
    "consumer_events": ["consumer", "consumer_pid", "incarnation", "ts_ns", "event", "partitions", "error"],
}


RUN_STATUS = {"pass": "passed", "fail": "failed", "error": "error"}


def run_outcomes(run_dir: str | Path | None) -> dict[str, Any]:
    """One run's outcome as an audit shows it: `status` (passed | failed | error, the verdict `verdict.summary`
    judges), `counts` (per anomaly kind with any: its distinct values, not rows: a value lost at two offsets
    counts once; offset-level rows without a value count one each) and `first_wall` (per kind: the wall-clock
    time, epoch s, of its first occurrence, from the manifest's clock origins). Never raises on missing parts:
    no analysis leaves the counts of metrics.json, or none, and an error status."""
    from ..verdict.summary import judge_run
    if not run_dir:
        return {"status": "error", "counts": {}, "first_wall": {}}
    run_dir = Path(run_dir)
    problems: list[str] = []
    status = RUN_STATUS[judge_run(run_dir).verdict]
    rows = read_parquet(run_dir / "analysis" / "anomalies.parquet", problems, ["kind", "value_id", "t_start_ns"])
    if rows is None or "kind" not in rows:
        metrics = read_json(run_dir / "analysis" / "metrics.json", problems) or {}
        counts = {str(k): int(v) for k, v in (metrics.get("counts") or {}).items() if v}
        return {"status": status, "counts": counts, "first_wall": {}}
    manifest = Manifest(read_json(run_dir / MANIFEST, problems) or {})
    counts: dict[str, int] = {}
    first_wall: dict[str, float] = {}
    for kind, group in rows.groupby("kind", sort=False):
        ids = group["value_id"] if "value_id" in group else pd.Series([None] * len(group))
        counts[str(kind)] = int(ids.dropna().nunique() + ids.isna().sum())
        starts = group["t_start_ns"].dropna() if "t_start_ns" in group else pd.Series(dtype="float64")
        if len(starts) and manifest.t0_ns is not None and manifest.wall_origin_ns is not None:
            first_wall[str(kind)] = (manifest.wall_origin_ns + (int(starts.min()) - manifest.t0_ns)) / NS_PER_S
    ordered = [k for k in KINDS if k in counts] + sorted(k for k in counts if k not in KINDS)
    return {"status": status, "counts": {k: counts[k] for k in ordered if counts[k]},
            "first_wall": {k: first_wall[k] for k in ordered if k in first_wall}}
