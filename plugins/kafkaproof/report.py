"""HTML reports: one page per scenario run, an index page per batch (a night, a DAG run), an upgrade comparison.

Pages are self-contained: inline CSS and inline SVG, no scripts, no external files, so
they open from disk and survive being attached to a ticket. Everything taken from data
is HTML-escaped (`esc`). Data shaping (pure functions on manifests, data frames and
dicts) is kept apart from rendering (functions returning `Markup`).

A report always renders: whatever is missing (analysis, validation, ledger tables, the
manifest itself) is said on the page instead of failing. How to read one:
docs/reports.md.
"""
from __future__ import annotations

import hashlib
import html
import json
import math
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd
import pyarrow.parquet as pq

from . import anomalies
from .ledger import MANIFEST, TABLES, split_value_id

NS_PER_S = 1_000_000_000
NS_PER_MS = 1_000_000
REPORT_DIR = "report"
BATCHES_DIR = "batches"
DEFAULT_EXAMPLES = 10
TREND_RUNS = 20
MAX_PARTITION_LANES = 12
MAX_CONSUMER_LANES = 6

KINDS: tuple[str, ...] = anomalies.KINDS  # report order

FAULT_COLORS: dict[str, str] = {
    "kill": "#d62728", "stop": "#e377c2", "pause": "#9467bd", "restart": "#8c564b",
    "isolate": "#ff7f0e", "cut": "#e6550d", "partition": "#fd8d3c", "cut_clients": "#bcbd22",
    "packet_loss": "#17becf", "bandwidth": "#3182bd",
}
VERDICT_RANK = {"pass": 0, "fail": 1, "error": 2}

# ============================================================================ escaping


class Markup(str):
    """A string that already is HTML/SVG: `esc` passes it through unchanged.

    Concatenation escapes the other operand, so `Markup + data` stays safe.
    """

    def __add__(self, other: Any) -> Markup:
        return Markup(str.__add__(self, esc(other)))

    def __radd__(self, other: Any) -> Markup:
        return Markup(str.__add__(esc(other), self))


def esc(value: Any) -> Markup:
    """HTML-escape anything that is not already `Markup` (None renders empty)."""
    if isinstance(value, Markup):
        return value
    return Markup(html.escape("" if value is None else str(value), quote=True))


def join(parts: Iterable[Any], sep: str = "") -> Markup:
    """Escape and concatenate."""
    return Markup(sep.join(esc(p) for p in parts))


def tag(name: str, content: Any = "", **attrs: Any) -> Markup:
    """`<name attrs>content</name>`; `class_` → class, `text_anchor` → text-anchor; None attributes dropped."""
    body = join(content) if isinstance(content, (list, tuple)) else esc(content)
    return Markup(f"<{name}{attributes(attrs)}>{body}</{name}>")


def void(name: str, **attrs: Any) -> Markup:
    """A self-closing SVG element."""
    return Markup(f"<{name}{attributes(attrs)}/>")


def attributes(attrs: Mapping[str, Any]) -> str:
    return "".join(f' {k.rstrip("_").replace("_", "-")}="{esc(v)}"' for k, v in attrs.items() if v is not None)


# ============================================================================ formatting


def is_missing(v: Any) -> bool:
    """None, NaN, pandas NA."""
    if v is None:
        return True
    try:
        return bool(pd.isna(v))
    except (TypeError, ValueError):
        return False


def fmt_int(v: Any) -> str:
    """1,490 style; '–' when missing."""
    return "–" if is_missing(v) else f"{int(v):,}"


def fmt_num(v: Any, digits: int = 1, unit: str = "") -> str:
    """A number with `digits` decimals (fewer for big numbers) and an optional unit."""
    if is_missing(v):
        return "–"
    v = float(v)
    if abs(v) >= 1000:
        text = f"{v:,.0f}"
    else:
        text = f"{v:,.{digits}f}"
    return f"{text} {unit}".rstrip() if unit else text


def fmt_ms(v: Any) -> str:
    """Milliseconds, switching to seconds above 10 s."""
    if is_missing(v):
        return "–"
    v = float(v)
    if abs(v) >= 10_000:
        return f"{v / 1000:,.1f} s"
    return f"{v:,.1f} ms" if abs(v) >= 10 else f"{v:,.2f} ms"


def fmt_t(v: Any, digits: int = 1) -> str:
    """A time relative to the run start (more digits below a second)."""
    if is_missing(v):
        return "–"
    return f"{float(v):,.{max(digits, 2) if abs(float(v)) < 1 else digits}f} s"


def fmt_value_id(value_id: Any) -> str:
    """`value_id (p<producer>#<seq>)`."""
    if is_missing(value_id):
        return "–"
    vid = int(value_id)
    if vid < 0:
        return f"{vid} (foreign)"
    producer, seq = split_value_id(vid)
    return f"{vid} (p{producer} #{seq})"


def plural(n: int, one: str, many: str | None = None) -> str:
    return f"{n:,} {one if n == 1 else (many or one + 's')}"


def anomaly_sentence(kind: str, n: int) -> str:
    """One plain sentence saying what `n` anomalies of `kind` mean."""
    return anomalies.sentence(kind, n)


def wall_time(ns: Any) -> str:
    """ISO-ish UTC wall time of a wall-clock ns value."""
    if is_missing(ns):
        return "–"
    return datetime.fromtimestamp(int(ns) / NS_PER_S, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


# ============================================================================ loading (I/O)


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


# Columns each report needs from the ledger (reads and audit can be large).
LEDGER_COLUMNS: dict[str, list[str] | None] = {
    "sends": ["value_id", "partition", "intended_ns", "send_ns", "complete_ns", "outcome", "error_name"],
    "reads": ["value_id", "read_ns"],
    "audit": ["isolation", "value_id"],
    "faults": None,
    "cluster_snapshots": None,
    "consumer_events": ["consumer", "consumer_pid", "incarnation", "ts_ns", "event", "partitions", "error"],
}


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
        from . import history
        return history.runs(scenario=scenario, limit=limit, url=url), None
    except Exception as e:  # noqa: BLE001 - an unreachable history store must not stop the report
        return [], f"results history unavailable ({type(e).__name__}: {e})"


# ============================================================================ shaping: manifest


def scenario_of(manifest: Mapping[str, Any] | None) -> dict[str, Any]:
    return dict((manifest or {}).get("scenario") or {})


def scenario_name(manifest: Mapping[str, Any] | None) -> str | None:
    m = manifest or {}
    return m.get("scenario_name") or scenario_of(m).get("name")


def guarantee_of(manifest: Mapping[str, Any] | None) -> str | None:
    m = manifest or {}
    return m.get("guarantee") or scenario_of(m).get("guarantee")


def expectation_of(manifest: Mapping[str, Any] | None) -> tuple[str, list[str], str]:
    """(outcome 'pass'|'detect', anomaly kinds a negative control must detect, why)."""
    m = manifest or {}
    top = m.get("expect") if isinstance(m.get("expect"), Mapping) else {}
    scn = scenario_of(m).get("expect")
    scn = scn if isinstance(scn, Mapping) else {}
    detect = list(top.get("detect") or scn.get("detect") or [])
    outcome = top.get("outcome") or scn.get("outcome") or ("detect" if detect else "pass")
    return str(outcome), [str(k) for k in detect], str(scn.get("why") or top.get("why") or "")


def run_t0(manifest: Mapping[str, Any] | None, sends: pd.DataFrame | None) -> int:
    """The run's time origin (monotonic ns): manifest clock, else the first intended send."""
    origin = ((manifest or {}).get("clock") or {}).get("monotonic_origin_ns")
    if origin is not None:
        return int(origin)
    if sends is not None and len(sends) and sends["intended_ns"].notna().any():
        return int(sends["intended_ns"].min())
    return 0


def phases(manifest: Mapping[str, Any] | None, t0: int) -> list[dict[str, Any]]:
    """Run phases in time order: name, start_s, end_s, seconds."""
    out = []
    for name, t in ((manifest or {}).get("timings") or {}).items():
        if not isinstance(t, Mapping) or t.get("start_ns") is None:
            continue
        end = t.get("end_ns")
        out.append({"name": name, "start_s": (t["start_ns"] - t0) / NS_PER_S,
                    "end_s": None if end is None else (end - t0) / NS_PER_S, "seconds": t.get("seconds")})
    return sorted(out, key=lambda p: p["start_s"])


def run_started_wall(manifest: Mapping[str, Any] | None) -> str:
    return wall_time(((manifest or {}).get("clock") or {}).get("wall_origin_ns"))


# ============================================================================ shaping: verdict


@dataclass
class Verdict:
    """The verdict block: status (pass|fail|error), a headline, and sentences (css class, text)."""

    status: str
    headline: str
    lines: list[tuple[str, str]] = field(default_factory=list)


def anomaly_counts(metrics: Mapping[str, Any] | None, anomalies: pd.DataFrame | None) -> dict[str, int] | None:
    """Counts per anomaly kind from metrics.json (or anomalies.parquet); None without analysis."""
    if metrics and isinstance(metrics.get("counts"), Mapping):
        return {str(k): int(v or 0) for k, v in metrics["counts"].items()}
    if anomalies is not None and "kind" in anomalies:
        return {str(k): int(v) for k, v in anomalies["kind"].value_counts().items()}
    return None


def row_kind(row: Mapping[str, Any]) -> str | None:
    """The anomaly kind a validation row is about (`anomaly` in validation.py's rows)."""
    for key in ("anomaly", "kind"):
        v = row.get(key)
        if isinstance(v, str) and v:
            return v
    return None


def row_count(row: Mapping[str, Any], counts: Mapping[str, int] | None) -> int | None:
    v = row.get("count")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v)
    kind = row_kind(row)
    return None if kind is None or counts is None else counts.get(kind)


def row_violated(row: Mapping[str, Any]) -> bool:
    """Whether a validation row fails the run (`ok: false`; older results said `violated`)."""
    if "ok" in row:
        return not row["ok"]
    return bool(row.get("violated"))


def violation_sentence(row: Mapping[str, Any], counts: Mapping[str, int] | None) -> str:
    """A violated validation row in one plain sentence with its count."""
    kind, n = row_kind(row), row_count(row, counts)
    if kind and n is not None and n > 0:
        return anomaly_sentence(kind, n)
    if kind and row.get("expected_detected"):
        return f"The expected anomaly {kind} was not detected."
    return str(row.get("message") or row.get("summary") or kind or row)


def validation_errors(validation: Mapping[str, Any]) -> list[str]:
    errors = [str(e) for e in validation.get("errors") or []]
    return errors + ([str(validation["error"])] if validation.get("error") else [])


def control_lines(detect: Sequence[str], counts: Mapping[str, int] | None) -> list[tuple[str, str]]:
    """Whether each anomaly a negative control must produce was detected."""
    if counts is None:
        return [("warn", f"Negative control: whether {', '.join(detect)} was detected is unknown without analysis.")]
    lines = []
    for kind in detect:
        n = counts.get(kind, 0)
        if n:
            lines.append(("good", f"Expected anomaly detected ({kind}): {anomaly_sentence(kind, n)}"))
        else:
            lines.append(("bad", f"Expected anomaly NOT detected ({kind}): the negative control did not show "
                                 f"the problem it exists to show, so the test cannot be trusted to catch it."))
    return lines


def other_anomaly_lines(counts: Mapping[str, int] | None, skip: set, cls: str, prefix: str) -> list[tuple[str, str]]:
    if not counts:
        return []
    return [(cls, prefix + anomaly_sentence(k, counts[k])) for k in ordered_kinds(counts) if counts[k] and k not in skip]


def tolerated_lines(rows: Sequence[Mapping[str, Any]], counts: Mapping[str, int] | None, skip: set,
                    guarantee: str) -> list[tuple[str, str]]:
    """Non-zero kinds that did not fail the run: allowed by the guarantee, or informational."""
    cls_of = {row_kind(r): r.get("cls") for r in rows}
    out = []
    for k in ordered_kinds(counts or {}):
        if counts[k] and k not in skip:
            prefix = "For information: " if cls_of.get(k) == "info" else f"Allowed under {guarantee}: "
            out.append(("info", prefix + anomaly_sentence(k, counts[k])))
    return out


def ordered_kinds(counts: Mapping[str, int]) -> list[str]:
    """Kinds in report order, unknown ones last."""
    return [k for k in KINDS if k in counts] + sorted(k for k in counts if k not in anomalies.BY_NAME)


def build_verdict(manifest: Mapping[str, Any] | None, validation: Mapping[str, Any] | None,
                  counts: Mapping[str, int] | None) -> Verdict:
    """The verdict, violated expectations and negative-control outcome in plain sentences."""
    guarantee = guarantee_of(manifest) or "unknown guarantee"
    outcome, detect, _ = expectation_of(manifest)
    if manifest is None:
        return Verdict("error", "ERROR: no run manifest",
                       [("bad", "manifest.json is missing or unreadable: the run never started or is not a run directory.")])
    status = manifest.get("status")
    if status == "running":
        return Verdict("error", "NO VERDICT: the run has not finished",
                       [("warn", "The manifest still says running: the run is in progress, or its process died "
                                 "before recording how it ended. A run that did not finish is never a pass.")])
    if status != "complete":
        why = manifest.get("error") or "no reason recorded"
        lines = [("bad", f"The run is {status or 'of unknown status'}: {why}"),
                 ("info", "A run that could not collect all its data is never a pass.")]
        lines += [("bad", f"Fault error: {e}") for e in manifest.get("fault_errors") or []]
        lines += other_anomaly_lines(counts, set(), "info", "Found anyway: ")
        return Verdict("error", f"ERROR: run {status or 'unknown'}", lines)
    if validation is None:
        lines = [("warn", "No validation result: the analysis or the Great Expectations validation did not run "
                          "or failed, so the guarantee has not been judged.")]
        lines += control_lines(detect, counts) if outcome == "detect" else \
            other_anomaly_lines(counts, set(), "info", "Found by the analysis (not judged): ")
        return Verdict("error", f"NOT JUDGED: {guarantee}", lines)
    return judged_verdict(validation, guarantee, outcome, detect, counts)


def judged_verdict(validation: Mapping[str, Any], guarantee: str, outcome: str, detect: Sequence[str],
                   counts: Mapping[str, int] | None) -> Verdict:
    status = str(validation.get("status") or "error")
    rows = [r for r in validation.get("rows") or [] if isinstance(r, Mapping)]
    if counts is None and rows:
        counts = {k: int(r.get("count") or 0) for r in rows if (k := row_kind(r))}
    violated = [r for r in rows if row_violated(r)]
    errors = validation_errors(validation)
    lines: list[tuple[str, str]] = [("bad" if status == "error" else "warn", f"Cannot be judged: {e}") for e in errors]
    if status == "error" and not errors:
        lines.append(("bad", "Validation ended in error (no reason recorded)."))
    if outcome == "detect":
        lines += control_lines(detect, counts)
        lines += [("bad", violation_sentence(r, counts)) for r in violated if row_kind(r) not in detect]
        skip = set(detect) | {row_kind(r) for r in violated}
        lines += other_anomaly_lines(counts, skip, "info", "Also found (not decisive in a negative control): ")
        what = {"pass": "negative control detected what it must", "fail": "negative control missed its anomaly"}
        return Verdict(status, f"{status.upper()}: {what.get(status, 'negative control')} ({guarantee})", lines)
    lines += [("bad", violation_sentence(r, counts)) for r in violated]
    lines += tolerated_lines(rows, counts, {row_kind(r) for r in violated}, guarantee)
    if status == "pass" and not violated and not any(cls == "info" for cls, _ in lines):
        lines.insert(0, ("good", f"Every {guarantee} expectation held: no anomaly the guarantee forbids."))
    elif status == "pass" and not violated:
        lines.insert(0, ("good", f"Every {guarantee} expectation held."))
    text = {"pass": f"{guarantee} held", "fail": f"{guarantee} violated"}.get(status, f"{guarantee} not judged")
    return Verdict(status, f"{status.upper()}: {text}", lines)


# ============================================================================ shaping: per second


def per_second(timeseries: pd.DataFrame | None, sends: pd.DataFrame | None, reads: pd.DataFrame | None,
               t0: int) -> tuple[pd.DataFrame, str]:
    """Per-second acks, errors, reads, p99 latency (ms) and unavailability; and where they came from.

    Acks and errors are counted when the delivery report arrived (cause and effect line up
    with the faults); p99 is over the values intended in that second, as in the analysis.
    """
    cols = ["second", "attempted", "acks", "errors", "reads", "p99_ms", "unavailable"]
    if timeseries is not None and len(timeseries) and "second" in timeseries:
        ts = timeseries.rename(columns={"acks_completed": "acks", "errors_completed": "errors",
                                        "publish_p99_ms": "p99_ms"})
        for c in cols:
            if c not in ts:
                ts[c] = 0 if c != "p99_ms" else float("nan")
        return ts[cols].sort_values("second").reset_index(drop=True), "analysis/timeseries.parquet"
    return per_second_from_ledger(sends, reads, t0), "sends.parquet and reads.parquet (no analysis)"


def per_second_from_ledger(sends: pd.DataFrame | None, reads: pd.DataFrame | None, t0: int) -> pd.DataFrame:
    """The per-second series computed from the ledger alone."""
    frames = []
    if sends is not None and len(sends):
        s = sends
        ok = s["outcome"] == "ok"
        done = s[s["complete_ns"].notna()]
        sec_done = ((done["complete_ns"] - t0) // NS_PER_S).astype("int64")
        frames.append(pd.DataFrame({"second": sec_done, "acks": (done["outcome"] == "ok").astype(int),
                                    "errors": (done["outcome"] != "ok").astype(int)}))
        sec_int = ((s["intended_ns"] - t0) // NS_PER_S).astype("int64")
        frames.append(pd.DataFrame({"second": sec_int, "attempted": 1}))
        lat = s[ok & s["complete_ns"].notna()]
        if len(lat):
            p99 = ((lat["complete_ns"] - lat["send_ns"]) / NS_PER_MS).groupby(
                ((lat["intended_ns"] - t0) // NS_PER_S).astype("int64")).quantile(0.99, interpolation="higher")
            frames.append(pd.DataFrame({"second": p99.index, "p99_ms": p99.values}))
    if reads is not None and len(reads):
        frames.append(pd.DataFrame({"second": ((reads["read_ns"] - t0) // NS_PER_S).astype("int64"), "reads": 1}))
    if not frames:
        return pd.DataFrame(columns=["second", "attempted", "acks", "errors", "reads", "p99_ms", "unavailable"])
    allrows = pd.concat(frames, ignore_index=True).reindex(
        columns=["second", "attempted", "acks", "errors", "reads", "p99_ms"])
    counts = allrows.groupby("second")[["attempted", "acks", "errors", "reads"]].sum(min_count=0)
    p99 = allrows.groupby("second")["p99_ms"].max()
    full = pd.RangeIndex(int(counts.index.min()), int(counts.index.max()) + 1, name="second")
    out = counts.reindex(full, fill_value=0).fillna(0).astype("int64")
    out["p99_ms"] = p99.reindex(full)
    out["unavailable"] = (out["attempted"] > 0) & (out["acks"] == 0)
    return out.reset_index()


# ============================================================================ shaping: faults and cluster


@dataclass
class FaultWindow:
    fault_id: str
    kind: str
    target: str
    nodes: list[int]
    params: str
    start_s: float
    end_s: float | None  # None: never healed

    @property
    def label(self) -> str:
        nodes = f" → node {', '.join(map(str, self.nodes))}" if self.nodes else ""
        return f"{self.kind} {self.target}{nodes}"


def fault_windows(faults: pd.DataFrame | None, t0: int) -> list[FaultWindow]:
    """Fault windows relative to the run start, in injection order."""
    if faults is None or not len(faults):
        return []
    out = []
    for r in faults.sort_values("start_ns").to_dict("records"):
        nodes = r.get("nodes")
        out.append(FaultWindow(
            fault_id=str(r.get("fault_id")), kind=str(r.get("kind")), target=str(r.get("target")),
            nodes=[int(n) for n in (nodes if nodes is not None else [])],
            params="" if is_missing(r.get("params")) else str(r.get("params")),
            start_s=(int(r["start_ns"]) - t0) / NS_PER_S,
            end_s=None if is_missing(r.get("heal_ns")) else (int(r["heal_ns"]) - t0) / NS_PER_S))
    return out


def active_faults_at(t_s: float | None, windows: Sequence[FaultWindow], end_s: float) -> list[FaultWindow]:
    """Faults whose window contains `t_s`."""
    if t_s is None:
        return []
    return [w for w in windows if w.start_s <= t_s <= (w.end_s if w.end_s is not None else end_s)]


@dataclass
class Segment:
    """A span of time with one state (a partition's leader/ISR, a node's liveness, a phase)."""

    start_s: float
    end_s: float
    label: str
    state: str  # css-ish state: ok | shrunk | leaderless | down | up | phase names
    detail: str = ""


def as_ints(v: Any) -> list[int]:
    return [] if v is None or (not isinstance(v, (list, tuple)) and is_missing(v)) else [int(x) for x in v]


def partition_segments(snapshots: pd.DataFrame | None, t0: int) -> dict[int, list[Segment]]:
    """Per partition, consecutive snapshots with the same leader and ISR merged into segments."""
    if snapshots is None or not len(snapshots):
        return {}
    out: dict[int, list[Segment]] = {}
    for p, g in snapshots.sort_values("ts_ns").groupby("partition"):
        segs: list[Segment] = []
        rows = g.to_dict("records")
        for i, r in enumerate(rows):
            t = (int(r["ts_ns"]) - t0) / NS_PER_S
            nxt = (int(rows[i + 1]["ts_ns"]) - t0) / NS_PER_S if i + 1 < len(rows) else t + 1.0
            leader, isr, replicas = int(r["leader"]), as_ints(r["isr"]), as_ints(r["replicas"])
            state = "leaderless" if leader < 0 else ("shrunk" if len(isr) < len(replicas) else "ok")
            label = "no leader" if leader < 0 else f"L{leader} ISR {','.join(map(str, isr))}"
            if segs and segs[-1].label == label:
                segs[-1].end_s = nxt
            else:
                segs.append(Segment(t, nxt, label, state,
                                    f"partition {p}: leader {leader if leader >= 0 else 'none'}, "
                                    f"ISR [{', '.join(map(str, isr))}] of replicas [{', '.join(map(str, replicas))}]"))
        out[int(p)] = segs
    return out


@dataclass
class Change:
    t_s: float
    partition: int
    text: str
    leader_changed: bool


def cluster_changes(segments: Mapping[int, Sequence[Segment]]) -> list[Change]:
    """Leader and ISR changes: the boundaries between a partition's segments."""
    out = []
    for p, segs in segments.items():
        for a, b in zip(segs, segs[1:]):
            la, lb = a.label.split(" ")[0], b.label.split(" ")[0]
            out.append(Change(b.start_s, p, f"p{p}: {a.label} → {b.label}", la != lb))
    return sorted(out, key=lambda c: (c.t_s, c.partition))


def node_segments(snapshots: pd.DataFrame | None, t0: int, nodes: Sequence[int]) -> dict[int, list[Segment]]:
    """Per node, when it was live (alive and not paused) per the snapshots."""
    if snapshots is None or not len(snapshots):
        return {}
    snaps = snapshots.sort_values("ts_ns").drop_duplicates("ts_ns")
    times = [(int(t) - t0) / NS_PER_S for t in snaps["ts_ns"]]
    live = [set(as_ints(v)) for v in snaps["live_nodes"]]
    ids = sorted(set(nodes) | set().union(*live)) if live else sorted(nodes)
    out: dict[int, list[Segment]] = {}
    for n in ids:
        segs: list[Segment] = []
        for i, t in enumerate(times):
            end = times[i + 1] if i + 1 < len(times) else t + 1.0
            state = "up" if n in live[i] else "down"
            if segs and segs[-1].state == state:
                segs[-1].end_s = end
            else:
                segs.append(Segment(t, end, "live" if state == "up" else "down", state,
                                    f"node {n} {'live' if state == 'up' else 'dead or paused'}"))
        out[n] = segs
    return out


@dataclass
class ConsumerMark:
    t_s: float
    consumer: int
    event: str
    detail: str


def consumer_lanes(events: pd.DataFrame | None, t0: int) -> tuple[dict[int, list[Segment]], list[ConsumerMark]]:
    """Per consumer, one segment per process (incarnation), and its rebalance/crash events."""
    if events is None or not len(events):
        return {}, []
    ev = events.sort_values("ts_ns")
    lanes: dict[int, list[Segment]] = {}
    marks: list[ConsumerMark] = []
    for (c, pid), g in ev.groupby(["consumer", "consumer_pid"], sort=False):
        ts = [(int(t) - t0) / NS_PER_S for t in g["ts_ns"]]
        inc = int(g["incarnation"].iloc[0])
        lanes.setdefault(int(c), []).append(Segment(ts[0], ts[-1], f"#{inc}", "up",
                                                    f"consumer {c} incarnation {inc} (pid {pid})"))
        for r, t in zip(g.to_dict("records"), ts):
            if r["event"] in ("assign", "revoke", "lost", "crash"):
                parts = as_ints(r.get("partitions"))
                marks.append(ConsumerMark(t, int(c), str(r["event"]),
                                          f"consumer {c} (pid {pid}) {r['event']} "
                                          f"{','.join(map(str, parts))} {r.get('error') or ''}".strip()))
    for segs in lanes.values():
        segs.sort(key=lambda s: s.start_s)
    return lanes, marks


def anomaly_times(anomalies: pd.DataFrame | None, t0: int) -> pd.DataFrame:
    """Anomalies per second and kind (by when the value was sent or the offset read)."""
    if anomalies is None or not len(anomalies):
        return pd.DataFrame(columns=["second", "kind", "count"])
    t = anomaly_t_s(anomalies, t0)
    df = pd.DataFrame({"second": t.dropna().floordiv(1).astype("int64"), "kind": anomalies.loc[t.notna(), "kind"]})
    return df.groupby(["second", "kind"]).size().rename("count").reset_index()


def anomaly_t_s(anomalies: pd.DataFrame, t0: int) -> pd.Series:
    if "t_s" in anomalies:
        return anomalies["t_s"].astype("float64")
    if "t_start_ns" in anomalies:
        return (anomalies["t_start_ns"].astype("float64") - t0) / NS_PER_S
    return pd.Series([float("nan")] * len(anomalies), index=anomalies.index)


# ============================================================================ shaping: tables


def outcome_rows(metrics: Mapping[str, Any] | None, tables: Mapping[str, pd.DataFrame]) -> list[tuple[str, Any, str]]:
    """(label, count, meaning) for the outcomes table, from metrics.json or the ledger."""
    o = dict((metrics or {}).get("outcomes") or {}) or outcomes_from_ledger(tables)
    spec = [
        ("sent", "sent", "values the producers tried to send"),
        ("acked", "acked", "acknowledged by the broker (outcome ok)"),
        ("failed", "failed", "definitely not written (the client said so)"),
        ("indefinite", "indefinite", "no definite answer: may or may not have been written"),
        ("consumed", "consumed", "distinct values the consumers read"),
        ("in_log", "in log", "distinct values in the final log (read_committed drain)"),
        ("log_records", "log records", "records in the final log (read_uncommitted, incl. foreign)"),
        ("reads", "reads", "records returned by consumer polls, repeats included"),
    ]
    return [(label, o.get(key), meaning) for key, label, meaning in spec if key in o]


def outcomes_from_ledger(tables: Mapping[str, pd.DataFrame]) -> dict[str, int]:
    out: dict[str, int] = {}
    s = tables.get("sends")
    if s is not None:
        out.update(sent=len(s), acked=int((s["outcome"] == "ok").sum()), failed=int((s["outcome"] == "fail").sum()),
                   indefinite=int((s["outcome"] == "indefinite").sum()))
    r = tables.get("reads")
    if r is not None:
        out.update(consumed=int(r.loc[r["value_id"] >= 0, "value_id"].nunique()), reads=len(r))
    a = tables.get("audit")
    if a is not None:
        rc = a[(a["isolation"] == "read_committed") & (a["value_id"] >= 0)]
        out.update(in_log=int(rc["value_id"].nunique()), log_records=int((a["isolation"] == "read_uncommitted").sum()))
    return out


@dataclass
class KindSummary:
    kind: str
    count: int
    sentence: str
    first_s: float | None = None
    last_s: float | None = None
    during_faults: int | None = None  # how many happened while a fault was active
    examples: list[dict[str, Any]] = field(default_factory=list)


def kind_summaries(counts: Mapping[str, int] | None, anomalies: pd.DataFrame | None, metrics: Mapping[str, Any] | None,
                   windows: Sequence[FaultWindow], t0: int, end_s: float, examples: int) -> list[KindSummary]:
    """Per non-zero anomaly kind: count, sentence, time span, share during faults and examples."""
    if not counts:
        return []
    out = []
    for kind in ordered_kinds(counts):
        n = counts[kind]
        if not n:
            continue
        ks = KindSummary(kind, n, anomaly_sentence(kind, n))
        rows = anomalies[anomalies["kind"] == kind] if anomalies is not None and "kind" in anomalies else None
        if rows is not None and len(rows):
            t = anomaly_t_s(rows, t0)
            if t.notna().any():
                ks.first_s, ks.last_s = float(t.min()), float(t.max())
            ks.during_faults = during_faults(rows, t, windows, end_s)
            ks.examples = example_rows(rows, t, windows, end_s, examples)
        else:
            ids = ((metrics or {}).get("examples") or {}).get(kind) or []
            ks.examples = [{"value_id": v} for v in ids[:examples]]
        out.append(ks)
    return out


def during_faults(rows: pd.DataFrame, t: pd.Series, windows: Sequence[FaultWindow], end_s: float) -> int | None:
    """How many anomalies overlapped a fault window (the analysis' `fault_ids`, else by time)."""
    if "fault_ids" in rows:
        return int(sum(1 for ids in rows["fault_ids"] if ids is not None and len(ids)))
    if not t.notna().any():
        return None
    return int(sum(1 for v in t.dropna() if active_faults_at(float(v), windows, end_s)))


def example_rows(rows: pd.DataFrame, t: pd.Series, windows: Sequence[FaultWindow], end_s: float,
                 n: int) -> list[dict[str, Any]]:
    """Up to `n` examples (lowest value ids first, as metrics.json lists them) with the fault active then."""
    df = rows.assign(_t=t)
    sort = [c for c in ("value_id", "partition", "offset") if c in df]
    df = df.sort_values(sort, na_position="last").head(n) if sort else df.head(n)
    out = []
    for r in df.to_dict("records"):
        t_s = None if is_missing(r.get("_t")) else float(r["_t"])
        out.append({
            "value_id": r.get("value_id"), "partition": r.get("partition"),
            "offsets": offsets_text(r), "t_s": t_s,
            "fault": fault_text(r, t_s, windows, end_s), "detail": r.get("detail"),
        })
    return out


def attribution_text(metrics: Mapping[str, Any] | None, kind: str) -> str | None:
    """'Caused by …' for a kind the analysis ties to fault-proxy actions (metrics `attribution`), else None."""
    att = ((metrics or {}).get("attribution") or {})
    k = (att.get("kinds") or {}).get(kind)
    if not k or not att.get("unacknowledged_writes"):
        return None
    faults = ", ".join(f"{fmt_int(n)} by fault {f}" for f, n in sorted(k.get("by_fault", {}).items()))
    return (f"Caused by a write the client never heard of (the fault proxy dropped, replaced, held back or "
            f"lost in a reset its Produce response; {fmt_int(att['unacknowledged_writes'])} such writes, "
            f"{fmt_int(att.get('unacknowledged_records'))} records): {faults or 'none'}; "
            f"not explained by a proxy action: {fmt_int(k.get('unattributed', 0))}.")


def delivery_text(metrics: Mapping[str, Any] | None) -> str | None:
    """One sentence: how many attempted values never reached the application, and why (the delivery claim)."""
    claim = (((metrics or {}).get("claims") or {}).get("delivery"))
    if not claim or not claim.get("undelivered"):
        return None
    windows = claim.get("leaderless_windows") or []
    why = "; ".join(f"partition {w['partition']} had no live leader from t={w['start_s']:.1f}s to t={w['end_s']:.1f}s"
                    for w in windows[:4]) or "no partition was without a leader: see each value's send outcome"
    return (f"{anomalies.sentence('undelivered_attempts', int(claim['undelivered']))[:-1]}"
            f" within {fmt_num(claim.get('within_s'), 0)} s after the faults healed: {why}.")


def offsets_text(r: Mapping[str, Any]) -> str:
    offs = r.get("offsets")
    if offs is not None and not (not isinstance(offs, (list, tuple)) and is_missing(offs)) and len(offs):
        return ", ".join(fmt_int(o) for o in offs)
    return fmt_int(r.get("offset"))


def fault_text(r: Mapping[str, Any], t_s: float | None, windows: Sequence[FaultWindow], end_s: float) -> str:
    """The faults active when the anomaly happened: from the analysis, else from the fault windows."""
    kinds, targets = r.get("fault_kinds"), r.get("fault_targets")
    if kinds is not None and targets is not None and not isinstance(kinds, float):
        names = [f"{k} {t}" for k, t in zip(list(kinds), list(targets))]
        return ", ".join(names) or "none"
    active = active_faults_at(t_s, windows, end_s)
    return ", ".join(w.label for w in active) or "none"


LATENCY_NAMES = {"publish": "publish (send → ack)", "publish_delay": "send delay (intended → send)",
                 "end_to_end": "end to end (intended → first read)"}
PERCENTILE_KEYS = ("p50", "p95", "p99", "p999", "max")


def latency_rows(metrics: Mapping[str, Any] | None, sends: pd.DataFrame | None) -> list[dict[str, Any]]:
    """Latency percentiles per measure, from metrics.json or (publish only) the ledger."""
    lat = (metrics or {}).get("latency_ms")
    if isinstance(lat, Mapping) and lat:
        return [{"name": LATENCY_NAMES.get(k, k), **v} for k, v in lat.items() if isinstance(v, Mapping)]
    if sends is None or not len(sends):
        return []
    ok = sends[(sends["outcome"] == "ok") & sends["complete_ns"].notna()]
    ms = (ok["complete_ns"] - ok["send_ns"]) / NS_PER_MS
    if not len(ms):
        return []
    q = {name: float(ms.quantile(p, interpolation="higher")) for name, p in
         (("p50", .5), ("p95", .95), ("p99", .99), ("p999", .999))}
    return [{"name": LATENCY_NAMES["publish"], "count": len(ms), **q, "max": float(ms.max())}]


def latency_by_fault_rows(metrics: Mapping[str, Any] | None, windows: Sequence[FaultWindow]) -> list[dict[str, Any]]:
    """Publish latency per fault window ('(none)' = no fault active)."""
    by = (metrics or {}).get("latency_ms_by_fault")
    if not isinstance(by, Mapping):
        return []
    labels = {w.fault_id: w.label for w in windows}
    rows = []
    for fid, v in by.items():
        pub = (v or {}).get("publish") or {}
        rows.append({"name": "no fault active" if fid == "(none)" else labels.get(fid, fid), **pub})
    return sorted(rows, key=lambda r: r["name"] != "no fault active")


def recovery_rows(metrics: Mapping[str, Any] | None, windows: Sequence[FaultWindow], sends: pd.DataFrame | None,
                  t0: int) -> list[dict[str, Any]]:
    """Per fault: window, errors, time to first error, when acks resumed, recovery after heal, longest ack gap."""
    by_id = {f.get("fault_id"): f for f in (metrics or {}).get("faults") or [] if isinstance(f, Mapping)}
    out = []
    for i, w in enumerate(windows):
        nxt = windows[i + 1].start_s if i + 1 < len(windows) else None
        m = by_id.get(w.fault_id) or recovery_from_ledger(w, nxt, sends, t0)
        out.append({"fault": w.label, "start_s": w.start_s, "end_s": w.end_s,
                    "duration_s": None if w.end_s is None else w.end_s - w.start_s, **m})
    return out


def recovery_from_ledger(w: FaultWindow, next_start_s: float | None, sends: pd.DataFrame | None,
                         t0: int) -> dict[str, Any]:
    """The analysis' per-fault recovery figures, recomputed from sends.parquet when there is no analysis.

    As in spark/analyze.py, a completion belongs to the most recently injected fault;
    acks resume with the first ack after that fault's last error.
    """
    if sends is None or not len(sends):
        return {}
    start = t0 + round(w.start_s * NS_PER_S)
    stop = None if next_start_s is None else t0 + round(next_start_s * NS_PER_S)
    heal = None if w.end_s is None else t0 + round(w.end_s * NS_PER_S)
    done = sends[sends["complete_ns"].notna() & (sends["complete_ns"] >= start)]
    if stop is not None:
        done = done[done["complete_ns"] < stop]
    ok = done["outcome"] == "ok"
    errs, acks = done.loc[~ok, "complete_ns"], done.loc[ok, "complete_ns"].sort_values()
    last_err = int(errs.max()) if len(errs) else None
    resumed = acks[acks > last_err] if last_err is not None else acks.iloc[:0]
    recovered = int(resumed.iloc[0]) if len(resumed) else None
    after_heal = acks[acks > heal] if heal is not None else acks.iloc[:0]
    horizon = int(after_heal.iloc[0]) if len(after_heal) else int(done["complete_ns"].max()) if len(done) else start
    in_window = [start] + [int(a) for a in acks if a <= horizon] + [horizon]
    gap = max(b - a for a, b in zip(in_window, in_window[1:])) if len(in_window) > 1 else 0
    return {"errors": int(len(errs)), "acks": int(len(acks)),
            "time_to_first_error_ms": None if not len(errs) else (int(errs.min()) - start) / NS_PER_MS,
            "acks_resume_ms": None if recovered is None else (recovered - start) / NS_PER_MS,
            "recovery_after_heal_ms": None if recovered is None or heal is None else (recovered - heal) / NS_PER_MS,
            "max_ack_gap_ms": gap / NS_PER_MS}


def error_rows(sends: pd.DataFrame | None, t0: int) -> list[dict[str, Any]]:
    """Send errors by name and outcome, most frequent first, with first/last completion time."""
    if sends is None or not len(sends) or "error_name" not in sends:
        return []
    e = sends[sends["error_name"].notna()]
    if not len(e):
        return []
    t = (e["complete_ns"].astype("float64") - t0) / NS_PER_S
    g = e.assign(_t=t).groupby(["error_name", "outcome"], dropna=False)
    rows = [{"error": name, "outcome": outcome, "count": len(df), "first_s": df["_t"].min(), "last_s": df["_t"].max()}
            for (name, outcome), df in g]
    return sorted(rows, key=lambda r: (-r["count"], str(r["error"])))


# ============================================================================ shaping: trend


@dataclass
class TrendPoint:
    run_id: str
    when: str
    verdict: str
    kafka_version: str | None
    recovery_s: float | None
    p99_ms: float | None
    anomalies: int | None
    anomaly_kinds: str
    report: str | None
    current: bool = False


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


def trend_points(rows: Sequence[Mapping[str, Any]], run_id: str | None, current_metrics: Mapping[str, Any] | None,
                 current_verdict: str, kafka_version: str | None) -> list[TrendPoint]:
    """Oldest first: the history rows, with this run marked (appended when history does not hold it yet)."""
    points = [trend_point(r, r.get("run_id") == run_id) for r in reversed(list(rows))]
    if run_id and not any(p.current for p in points) and (current_metrics is not None or current_verdict):
        points.append(trend_point({"run_id": run_id, "verdict": current_verdict, "kafka_version": kafka_version,
                                   "metrics": current_metrics or {}, "finished_at": None}, True))
    return points[-TREND_RUNS:]


def trend_point(row: Mapping[str, Any], current: bool) -> TrendPoint:
    k = key_numbers(row.get("metrics"))
    counts = k["counts"]
    when = row.get("finished_at")
    return TrendPoint(
        run_id=str(row.get("run_id")), verdict=str(row.get("verdict") or "?"), kafka_version=row.get("kafka_version"),
        when=when.strftime("%Y-%m-%d %H:%M") if isinstance(when, datetime) else ("this run" if current else "?"),
        recovery_s=k["recovery_s"], p99_ms=k["p99_ms"],
        anomalies=None if counts is None else sum(counts.values()),
        anomaly_kinds=", ".join(f"{kk}={v:,}" for kk, v in counts.items() if v) if counts else "",
        report=row.get("report"), current=current)


# ============================================================================ SVG charts


@dataclass
class Linear:
    """A linear map from a domain to a pixel range."""

    d0: float
    d1: float
    r0: float
    r1: float

    def __call__(self, v: float) -> float:
        span = (self.d1 - self.d0) or 1.0
        return self.r0 + (v - self.d0) / span * (self.r1 - self.r0)


@dataclass
class Log10:
    """A log scale (values clamped to the domain)."""

    d0: float
    d1: float
    r0: float
    r1: float

    def __call__(self, v: float) -> float:
        lo, hi = math.log10(self.d0), math.log10(self.d1)
        x = math.log10(min(max(v, self.d0), self.d1))
        return self.r0 + (x - lo) / ((hi - lo) or 1.0) * (self.r1 - self.r0)


def nice_step(span: float, target: int) -> float:
    """A 1/2/5 × 10^k step giving about `target` intervals over `span`."""
    if span <= 0:
        return 1.0
    raw = span / max(target, 1)
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 5, 10) if m * mag >= raw)


def nice_ticks(lo: float, hi: float, target: int = 5) -> list[float]:
    step = nice_step(hi - lo, target)
    first = math.ceil(lo / step) * step
    n = int(math.floor((hi - first) / step + 1e-9)) + 1
    return [round(first + i * step, 10) for i in range(max(n, 0))]


def text_width(text: str, size: float = 11) -> float:
    """Rough width of sans-serif text (no font metrics without a browser)."""
    return len(text) * size * 0.58


def place_labels(spans: Sequence[tuple[float, float]]) -> list[int]:
    """Greedy row assignment so that no two labels (x-intervals) in a row overlap."""
    rows_end: list[float] = []
    out = []
    for a, b in spans:
        for i, end in enumerate(rows_end):
            if a > end + 4:
                rows_end[i] = b
                out.append(i)
                break
        else:
            rows_end.append(b)
            out.append(len(rows_end) - 1)
    return out


def svg_title(text: str) -> Markup:
    return tag("title", text)


def step_points(xs: Sequence[int], ys: Sequence[float], x: Linear, y: Linear | Log10) -> str:
    """Polyline points of a per-second step function (each second a flat segment)."""
    pts = []
    for s, v in zip(xs, ys):
        pts += [f"{x(s):.1f},{y(v):.1f}", f"{x(s + 1):.1f},{y(v):.1f}"]
    return " ".join(pts)


@dataclass
class Timeline:
    """What the run's timeline chart shows (all times in seconds since the run start)."""

    start_s: float
    end_s: float
    seconds: pd.DataFrame
    source: str
    faults: list[FaultWindow]
    partitions: dict[int, list[Segment]]
    changes: list[Change]
    nodes: dict[int, list[Segment]]
    consumers: dict[int, list[Segment]]
    consumer_marks: list[ConsumerMark]
    anomalies: pd.DataFrame
    phases: list[dict[str, Any]]


def time_domain(seconds: pd.DataFrame, faults: Sequence[FaultWindow], run_phases: Sequence[Mapping[str, Any]],
                segments: Mapping[int, Sequence[Segment]]) -> tuple[float, float]:
    """From just before the workload (or the first data) to the end of the drain (or the last data)."""
    starts, ends = [], []
    # The analysis pads its series with empty seconds from the run start: only activity counts.
    busy = seconds[seconds[["attempted", "acks", "errors", "reads"]].sum(axis=1) > 0] if len(seconds) else seconds
    if len(busy):
        starts.append(float(busy["second"].min()))
        ends.append(float(busy["second"].max()) + 1)
    for f in faults:
        starts.append(f.start_s)
        ends.append(f.end_s if f.end_s is not None else f.start_s)
    by = {p["name"]: p for p in run_phases}
    if "workload" in by:
        starts.append(by["workload"]["start_s"])
    for name in ("settle", "drain"):
        if by.get(name) and by[name]["end_s"] is not None:
            ends.append(by[name]["end_s"])
    if not starts:
        starts = [s.start_s for segs in segments.values() for s in segs[:1]]
        ends = [s.end_s for segs in segments.values() for s in segs[-1:]]
    if not starts:
        return 0.0, 10.0
    lo, hi = max(0.0, min(starts) - 1.0), max(ends + starts) + 1.0
    return lo, max(hi, lo + 5.0)


def build_timeline(data: RunData, t0: int, seconds: pd.DataFrame, source: str, windows: list[FaultWindow],
                   run_phases: list[dict[str, Any]]) -> Timeline:
    parts = partition_segments(data.tables.get("cluster_snapshots"), t0)
    node_ids = [int(n["id"]) for n in ((data.manifest or {}).get("cluster") or {}).get("nodes") or []
                if isinstance(n, Mapping) and "id" in n]
    lanes, marks = consumer_lanes(data.tables.get("consumer_events"), t0)
    lo, hi = time_domain(seconds, windows, run_phases, parts)
    return Timeline(lo, hi, seconds, source, windows, parts, cluster_changes(parts),
                    node_segments(data.tables.get("cluster_snapshots"), t0, node_ids), lanes, marks,
                    anomaly_times(data.anomalies, t0), run_phases)


CHART_W = 1160
LEFT, RIGHT = 104, 14
SEGMENT_FILL = {"ok": "#d9f0d3", "shrunk": "#fdd49e", "leaderless": "#f4a6a6", "up": "#cfe3f3", "down": "#f4a6a6"}


def svg_timeline(tl: Timeline) -> Markup:
    """The run's picture: faults as shaded bands over throughput, p99 latency and cluster lanes."""
    x = Linear(tl.start_s, tl.end_s, LEFT, CHART_W - RIGHT)
    parts: list[Markup] = []
    y = 4.0
    label_h, label_rows = fault_label_layout(tl.faults, x)
    y += label_h
    top = y
    blocks = [lambda yy: throughput_panel(tl, x, yy), lambda yy: latency_panel(tl, x, yy),
              lambda yy: anomaly_lane(tl, x, yy), lambda yy: partition_lanes(tl, x, yy),
              lambda yy: node_lanes(tl, x, yy), lambda yy: consumer_lanes_svg(tl, x, yy),
              lambda yy: phase_lane(tl, x, yy)]
    body: list[Markup] = []
    for block in blocks:
        markup, h = block(y)
        body.append(markup)
        y += h
    bottom = y
    parts.append(fault_bands(tl.faults, x, top, bottom, label_rows, tl.end_s))
    parts.append(change_lines(tl.changes, x, top, bottom))
    parts += body
    parts.append(x_axis(x, tl.start_s, tl.end_s, bottom))
    height = bottom + 34
    return Markup(f'<svg class="timeline" viewBox="0 0 {CHART_W} {height:.0f}" width="100%" role="img" '
                  f'xmlns="http://www.w3.org/2000/svg" aria-label="run timeline">{join(parts)}</svg>')


def fault_label_layout(faults: Sequence[FaultWindow], x: Linear) -> tuple[float, list[int]]:
    spans = [(x(f.start_s), x(f.start_s) + text_width(f.label) + 10) for f in faults]
    rows = place_labels(spans)
    return (max(rows) + 1) * 18 + 4 if rows else 0.0, rows


def fault_bands(faults: Sequence[FaultWindow], x: Linear, top: float, bottom: float, rows: Sequence[int],
                end_s: float) -> Markup:
    out = []
    for f, row in zip(faults, rows):
        color = FAULT_COLORS.get(f.kind, "#888888")
        x0, x1 = x(f.start_s), x(f.end_s if f.end_s is not None else end_s)
        tip = (f"{f.label} from {fmt_t(f.start_s)} to {fmt_t(f.end_s) if f.end_s is not None else 'never healed'}"
               f"{' ' + f.params if f.params and f.params != '{}' else ''} ({f.fault_id})")
        out.append(tag("rect", svg_title(tip), x=f"{x0:.1f}", y=f"{top:.1f}", width=f"{max(x1 - x0, 2):.1f}",
                       height=f"{bottom - top:.1f}", fill=color, fill_opacity="0.13", class_="fault-band"))
        out.append(void("line", x1=f"{x0:.1f}", x2=f"{x0:.1f}", y1=f"{4 + row * 18:.1f}", y2=f"{bottom:.1f}",
                        stroke=color, stroke_width="1.2"))
        ly = 4 + row * 18
        label = f.label + ("" if f.end_s is not None else " (never healed)")
        out.append(tag("rect", svg_title(tip), x=f"{x0:.1f}", y=f"{ly:.1f}", width=f"{text_width(label) + 8:.1f}",
                       height="16", rx="3", fill=color, class_="fault-label"))
        out.append(tag("text", label, x=f"{x0 + 4:.1f}", y=f"{ly + 12:.1f}", fill="#fff", font_size="11",
                       font_weight="600"))
    return join(out)


def change_lines(changes: Sequence[Change], x: Linear, top: float, bottom: float) -> Markup:
    """Faint vertical lines at leader changes across all panels."""
    out = []
    for c in changes:
        if c.leader_changed:
            out.append(tag("line", svg_title(f"{fmt_t(c.t_s)}: {c.text}"), x1=f"{x(c.t_s):.1f}",
                           x2=f"{x(c.t_s):.1f}", y1=f"{top:.1f}", y2=f"{bottom:.1f}", stroke="#555",
                           stroke_dasharray="3,3", stroke_width="1", class_="leader-change"))
    return join(out)


def panel_frame(y0: float, h: float, x: Linear) -> list[Markup]:
    return [void("rect", x=f"{x.r0:.1f}", y=f"{y0:.1f}", width=f"{x.r1 - x.r0:.1f}", height=f"{h:.1f}",
                 fill="none", stroke="#ccc")]


def panel_title(title: str, x: Linear, y0: float) -> Markup:
    """A title in the panel's top-left corner, on a light backing so that lines under it stay readable."""
    return join([void("rect", x=f"{x.r0 + 1:.1f}", y=f"{y0 + 1:.1f}", width=f"{text_width(title, 11) + 10:.1f}",
                      height="16", fill="#fff", fill_opacity="0.8"),
                 tag("text", title, x=f"{x.r0 + 6:.1f}", y=f"{y0 + 13:.1f}", font_size="11", font_weight="600",
                     fill="#333")])


def fmt_tick_ms(v: float) -> str:
    return f"{v / 1000:g} s" if v >= 1000 else f"{v:g} ms"


def in_domain(sec: pd.DataFrame, x: Linear) -> pd.DataFrame:
    return sec[(sec["second"] + 1 >= x.d0) & (sec["second"] <= x.d1)]


def throughput_panel(tl: Timeline, x: Linear, y0: float, h: float = 170) -> tuple[Markup, float]:
    sec = in_domain(tl.seconds, x)
    out = panel_frame(y0, h, x)
    out.append(tag("text", "per second", x="6", y=f"{y0 + 12:.1f}", font_size="10.5", fill="#333"))
    if not len(sec):
        out.append(tag("text", "no sends or reads recorded", x=f"{(x.r0 + x.r1) / 2:.0f}", y=f"{y0 + h / 2:.0f}",
                       text_anchor="middle", fill="#888", font_size="13"))
        return join(out), h + 8
    vmax = max(float(sec[["acks", "errors", "reads"]].max().max()), 1.0)
    ticks = nice_ticks(0, vmax, 4)
    vmax = max(vmax, ticks[-1])
    yv = Linear(0, vmax, y0 + h, y0 + 6)
    for t in ticks:
        out.append(void("line", x1=f"{x.r0:.1f}", x2=f"{x.r1:.1f}", y1=f"{yv(t):.1f}", y2=f"{yv(t):.1f}",
                        stroke="#eee"))
        out.append(tag("text", fmt_int(t), x=f"{x.r0 - 4:.1f}", y=f"{yv(t) + 4:.1f}", text_anchor="end",
                       font_size="10", fill="#666"))
    for s in sec.loc[sec["unavailable"].astype(bool), "second"]:
        out.append(tag("rect", svg_title(f"second {s}: sends attempted, none acknowledged"), x=f"{x(s):.1f}",
                       y=f"{y0 + h - 5:.1f}", width=f"{max(x(s + 1) - x(s), 1):.1f}", height="5", fill="#7f0000",
                       class_="unavailable"))
    xs = [int(s) for s in sec["second"]]
    acks = [float(v) for v in sec["acks"]]
    area = f"{x(xs[0]):.1f},{yv(0):.1f} " + step_points(xs, acks, x, yv) + f" {x(xs[-1] + 1):.1f},{yv(0):.1f}"
    out.append(void("polygon", points=area, fill="#2ca02c", fill_opacity="0.18", stroke="none"))
    series = [("acks", "#2ca02c", "2", None), ("errors", "#d62728", "2", None), ("reads", "#1f77b4", "1.3", "5,3")]
    for col, color, width, dash in series:
        vals = [float(v) for v in sec[col]]
        if any(vals):
            out.append(void("polyline", points=step_points(xs, vals, x, yv), fill="none", stroke=color,
                            stroke_width=width, stroke_dasharray=dash, class_=f"series-{col}"))
    out += second_tooltips(sec, x, y0, h)
    out.append(panel_title("acks/s, errors/s, reads/s", x, y0))
    return join(out), h + 8


def second_tooltips(sec: pd.DataFrame, x: Linear, y0: float, h: float) -> list[Markup]:
    """Invisible per-second columns whose native tooltip gives the exact numbers (no script needed)."""
    out = []
    for r in sec.to_dict("records"):
        s = int(r["second"])
        tip = (f"second {s}: {fmt_int(r['acks'])} acks, {fmt_int(r['errors'])} errors, {fmt_int(r['reads'])} reads, "
               f"{fmt_int(r['attempted'])} attempted, p99 {fmt_ms(r['p99_ms'])}")
        out.append(tag("rect", svg_title(tip), x=f"{x(s):.1f}", y=f"{y0:.1f}", width=f"{max(x(s + 1) - x(s), 1):.1f}",
                       height=f"{h:.1f}", fill="transparent"))
    return out


def latency_panel(tl: Timeline, x: Linear, y0: float, h: float = 100) -> tuple[Markup, float]:
    sec = in_domain(tl.seconds, x)
    lat = sec[sec["p99_ms"].notna() & (sec["p99_ms"] > 0)] if len(sec) else sec
    out = panel_frame(y0, h, x)
    out.append(tag("text", "latency", x="6", y=f"{y0 + 12:.1f}", font_size="10.5", fill="#333"))
    if not len(lat):
        out.append(tag("text", "no acknowledged sends", x=f"{(x.r0 + x.r1) / 2:.0f}", y=f"{y0 + h / 2:.0f}",
                       text_anchor="middle", fill="#888", font_size="12"))
        return join(out), h + 8
    lo = 10 ** math.floor(math.log10(max(float(lat["p99_ms"].min()), 0.01)))
    hi = 10 ** math.ceil(math.log10(max(float(lat["p99_ms"].max()), lo * 10)))
    yv = Log10(lo, hi, y0 + h - 4, y0 + 6)
    dec = lo
    while dec <= hi * 1.0001:
        out.append(void("line", x1=f"{x.r0:.1f}", x2=f"{x.r1:.1f}", y1=f"{yv(dec):.1f}", y2=f"{yv(dec):.1f}",
                        stroke="#eee"))
        out.append(tag("text", fmt_tick_ms(dec), x=f"{x.r0 - 4:.1f}", y=f"{yv(dec) + 4:.1f}",
                       text_anchor="end", font_size="10", fill="#666"))
        dec *= 10
    xs = [int(s) for s in lat["second"]]
    vals = [float(v) for v in lat["p99_ms"]]
    for s, v in zip(xs, vals):
        out.append(tag("circle", svg_title(f"second {s}: p99 {fmt_ms(v)}"), cx=f"{x(s + 0.5):.1f}",
                       cy=f"{yv(v):.1f}", r="2.2", fill="#6a3d9a"))
    for run in contiguous(list(zip(xs, vals))):
        pts = " ".join(f"{x(s + 0.5):.1f},{yv(v):.1f}" for s, v in run)
        out.append(void("polyline", points=pts, fill="none", stroke="#6a3d9a", stroke_width="1.4",
                        class_="series-p99"))
    out.append(panel_title("p99 publish latency per second (log scale)", x, y0))
    return join(out), h + 8


def contiguous(points: Sequence[tuple[int, float]]) -> list[list[tuple[int, float]]]:
    """Split per-second points into runs of consecutive seconds (no line across seconds without data)."""
    runs: list[list[tuple[int, float]]] = []
    for p in points:
        if runs and p[0] == runs[-1][-1][0] + 1:
            runs[-1].append(p)
        else:
            runs.append([p])
    return runs


def lane_label(text: str, y: float) -> Markup:
    return tag("text", text, x="6", y=f"{y + 11:.1f}", font_size="10.5", fill="#333")


def segment_rects(segs: Sequence[Segment], x: Linear, y: float, h: float, show_text: bool = True) -> list[Markup]:
    out = []
    for s in segs:
        a, b = max(x(s.start_s), x.r0), min(x(s.end_s), x.r1)
        if b <= a:
            continue
        out.append(tag("rect", svg_title(f"{fmt_t(s.start_s)}–{fmt_t(s.end_s)}: {s.detail or s.label}"),
                       x=f"{a:.1f}", y=f"{y:.1f}", width=f"{b - a:.1f}", height=f"{h:.1f}",
                       fill=SEGMENT_FILL.get(s.state, "#e0e0e0"), stroke="#fff", stroke_width="0.5",
                       class_=f"seg-{s.state}"))
        if show_text and b - a > text_width(s.label, 9.5) + 6:
            out.append(tag("text", s.label, x=f"{a + 3:.1f}", y=f"{y + h - 3.5:.1f}", font_size="9.5", fill="#333"))
    return out


def anomaly_lane(tl: Timeline, x: Linear, y0: float, h: float = 22) -> tuple[Markup, float]:
    if not len(tl.anomalies):
        return Markup(""), 0
    per = tl.anomalies.groupby("second")["count"].sum()
    top = max(int(per.max()), 1)
    out = [lane_label("anomalies", y0)]
    for s, n in per.items():
        if s + 1 < x.d0 or s > x.d1:
            continue
        kinds = tl.anomalies[tl.anomalies["second"] == s]
        tip = f"second {s}: " + ", ".join(f"{r['kind']} {int(r['count']):,}" for r in kinds.to_dict("records"))
        bh = max(2.0, (h - 2) * math.sqrt(n / top))
        out.append(tag("rect", svg_title(tip), x=f"{x(s):.1f}", y=f"{y0 + h - bh:.1f}",
                       width=f"{max(x(s + 1) - x(s) - 0.5, 1):.1f}", height=f"{bh:.1f}", fill="#b2182b",
                       class_="anomaly-bar"))
    return join(out), h + 6


def partition_lanes(tl: Timeline, x: Linear, y0: float, h: float = 15) -> tuple[Markup, float]:
    out: list[Markup] = []
    y = y0
    ps = sorted(tl.partitions)[:MAX_PARTITION_LANES]
    for p in ps:
        out.append(lane_label(f"p{p} leader/ISR", y))
        out += segment_rects(tl.partitions[p], x, y, h)
        y += h + 2
    for c in tl.changes:
        if c.partition in ps and x.d0 <= c.t_s <= x.d1:
            yy = y0 + ps.index(c.partition) * (h + 2)
            out.append(tag("path", svg_title(f"{fmt_t(c.t_s)}: {c.text}"),
                           d=f"M{x(c.t_s):.1f},{yy - 1:.1f} l-4,-5 h8 z", fill="#333" if c.leader_changed else "#e6550d",
                           class_="change-mark"))
    if len(tl.partitions) > len(ps):
        out.append(lane_label(f"(+{len(tl.partitions) - len(ps)} more partitions not shown)", y))
        y += h
    return join(out), (y - y0) + (4 if ps else 0)


def node_lanes(tl: Timeline, x: Linear, y0: float, h: float = 11) -> tuple[Markup, float]:
    out: list[Markup] = []
    y = y0
    for n, segs in sorted(tl.nodes.items()):
        out.append(lane_label(f"node {n}", y - 2))
        out += segment_rects(segs, x, y, h, show_text=False)
        y += h + 2
    return join(out), (y - y0) + (4 if tl.nodes else 0)


def consumer_lanes_svg(tl: Timeline, x: Linear, y0: float, h: float = 11) -> tuple[Markup, float]:
    out: list[Markup] = []
    ids = sorted(tl.consumers)[:MAX_CONSUMER_LANES]
    y = y0
    for c in ids:
        out.append(lane_label(f"consumer {c}", y - 2))
        out += segment_rects(tl.consumers[c], x, y, h, show_text=True)
        for m in (m for m in tl.consumer_marks if m.consumer == c and x.d0 <= m.t_s <= x.d1):
            color = {"assign": "#2ca02c", "crash": "#d62728"}.get(m.event, "#e6550d")
            out.append(tag("circle", svg_title(f"{fmt_t(m.t_s)}: {m.detail}"), cx=f"{x(m.t_s):.1f}",
                           cy=f"{y + h / 2:.1f}", r="3", fill=color, class_="consumer-event"))
        y += h + 2
    return join(out), (y - y0) + (4 if ids else 0)


def phase_lane(tl: Timeline, x: Linear, y0: float, h: float = 13) -> tuple[Markup, float]:
    segs = [Segment(p["start_s"], p["end_s"] if p["end_s"] is not None else tl.end_s, p["name"], "phase",
                    f"phase {p['name']} ({fmt_num(p.get('seconds'), 1, 's')})") for p in tl.phases]
    if not segs:
        return Markup(""), 0
    out = [lane_label("run phase", y0 - 2)] + segment_rects(segs, x, y0, h)
    return join(out), h + 4


def x_axis(x: Linear, lo: float, hi: float, y: float) -> Markup:
    out = [void("line", x1=f"{x.r0:.1f}", x2=f"{x.r1:.1f}", y1=f"{y:.1f}", y2=f"{y:.1f}", stroke="#999")]
    for t in nice_ticks(lo, hi, 14):
        out.append(void("line", x1=f"{x(t):.1f}", x2=f"{x(t):.1f}", y1=f"{y:.1f}", y2=f"{y + 4:.1f}", stroke="#999"))
        out.append(tag("text", f"{t:g}", x=f"{x(t):.1f}", y=f"{y + 15:.1f}", text_anchor="middle", font_size="10",
                       fill="#555"))
    out.append(tag("text", "seconds since the run started", x=f"{(x.r0 + x.r1) / 2:.0f}", y=f"{y + 29:.1f}",
                   text_anchor="middle", font_size="10.5", fill="#555"))
    return join(out)


VERDICT_COLORS = {"pass": "#2ca02c", "fail": "#d62728", "error": "#7f7f7f"}


def svg_trend(points: Sequence[TrendPoint], attr: str, title: str, unit: str) -> Markup:
    """A small chart of one key number over the scenario's recent runs (oldest left)."""
    w, h, l, r, t, b = 360, 120, 46, 10, 22, 18
    vals = [getattr(p, attr) for p in points]
    known = [v for v in vals if v is not None]
    out = [tag("text", title, x="4", y="13", font_size="12", font_weight="600", fill="#333")]
    if not known:
        out.append(tag("text", "no data", x=f"{w / 2:.0f}", y=f"{h / 2 + 8:.0f}", text_anchor="middle",
                       font_size="11", fill="#888"))
    else:
        vmax = max(max(known), 1e-9)
        ticks = nice_ticks(0, vmax, 2)
        vmax = max(vmax, ticks[-1])
        x = Linear(0, max(len(points) - 1, 1), l + 6, w - r - 6)
        y = Linear(0, vmax, h - b, t)
        for tk in ticks:
            out.append(void("line", x1=str(l), x2=str(w - r), y1=f"{y(tk):.1f}", y2=f"{y(tk):.1f}", stroke="#eee"))
            out.append(tag("text", f"{tk:g}", x=str(l - 4), y=f"{y(tk) + 4:.1f}", text_anchor="end", font_size="9.5",
                           fill="#666"))
        pts = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(vals) if v is not None)
        out.append(void("polyline", points=pts, fill="none", stroke="#888", stroke_width="1.3"))
        for i, (p, v) in enumerate(zip(points, vals)):
            if v is None:
                continue
            tip = f"{p.when} {p.run_id} ({p.verdict}, Kafka {p.kafka_version or '?'}): {fmt_num(v, 1, unit)}"
            if p.anomaly_kinds and attr == "anomalies":
                tip += f" — {p.anomaly_kinds}"
            out.append(tag("circle", svg_title(tip), cx=f"{x(i):.1f}", cy=f"{y(v):.1f}", r="5" if p.current else "3.5",
                           fill=VERDICT_COLORS.get(p.verdict, "#999"), stroke="#000" if p.current else "#fff",
                           stroke_width="1.5" if p.current else "0.8"))
    out.append(tag("text", unit, x=str(w - r), y="13", text_anchor="end", font_size="10", fill="#666"))
    return Markup(f'<svg class="trend" viewBox="0 0 {w} {h}" width="{w}" height="{h}" '
                  f'xmlns="http://www.w3.org/2000/svg" role="img" aria-label="{esc(title)}">{join(out)}</svg>')


# ============================================================================ HTML building blocks

CSS = """
*{box-sizing:border-box}
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,"Helvetica Neue",Arial,sans-serif;color:#222;
 margin:0;background:#f6f7f9}
main{max-width:1240px;margin:0 auto;padding:18px 24px 48px}
h1{font-size:22px;margin:0 0 4px}
h2{font-size:17px;margin:28px 0 8px;padding-bottom:4px;border-bottom:1px solid #ddd}
h3{font-size:14px;margin:16px 0 6px}
a{color:#1a5fb4}
.sub{color:#666;font-size:13px}
.verdict{border-radius:8px;padding:14px 18px;margin:14px 0;color:#fff}
.verdict h2{border:0;margin:0 0 6px;font-size:20px;padding:0;color:#fff}
.verdict.pass{background:#2b8a3e}.verdict.fail{background:#c92a2a}.verdict.error{background:#5c5f66}
.verdict ul{margin:6px 0 0;padding-left:20px}
.verdict li{margin:3px 0}
.verdict li.bad{font-weight:600}
.held{color:#2ca02c}.notmet{color:#d62728;font-weight:600}
.verdict li.good::marker{content:"✔ "}.verdict>div{opacity:.95}.verdict li.bad::marker{content:"✘ "}
.verdict li.warn::marker{content:"! "}.verdict li.info::marker{content:"• "}
.card{background:#fff;border:1px solid #e1e3e8;border-radius:8px;padding:12px 16px;margin:10px 0}
.explanation{background:#fffbe6;border-left:4px solid #f0b400;padding:10px 14px;margin:10px 0}
.explanation div{white-space:pre-line;margin-top:4px}
.problems{background:#fff4e5;border-left:4px solid #e8590c;padding:8px 14px;margin:10px 0}
.problems ul{margin:4px 0;padding-left:18px}
table{border-collapse:collapse;width:100%;background:#fff;margin:6px 0 10px;font-size:13px}
th,td{border:1px solid #e1e3e8;padding:4px 8px;text-align:left;vertical-align:top}
th{background:#f0f2f5;font-weight:600}
tbody tr:nth-child(even){background:#fafbfc}
td.num,th.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.badge{display:inline-block;border-radius:4px;padding:1px 8px;font-weight:700;color:#fff;font-size:12px;
 text-transform:uppercase;letter-spacing:.03em}
.badge.pass{background:#2b8a3e}.badge.fail{background:#c92a2a}.badge.error{background:#5c5f66}
.badge.unknown{background:#adb5bd}
.chg{font-weight:700}.chg.worse{color:#c92a2a}.chg.better{color:#2b8a3e}.chg.same{color:#666;font-weight:400}
.legend{display:flex;flex-wrap:wrap;gap:14px;font-size:12px;color:#444;margin:4px 0}
.legend span::before{content:"";display:inline-block;width:16px;height:10px;margin-right:5px;vertical-align:middle;
 background:var(--c);border-radius:2px}
.trends{display:flex;flex-wrap:wrap;gap:12px}
.trends svg{background:#fff;border:1px solid #e1e3e8;border-radius:6px}
svg.timeline{background:#fff;border:1px solid #e1e3e8;border-radius:6px;display:block}
svg text{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Arial,sans-serif}
.kv{display:grid;grid-template-columns:max-content 1fr;gap:2px 14px;font-size:13px}
.kv dt{color:#666}.kv dd{margin:0}
.grid2{display:grid;grid-template-columns:1fr 1fr;gap:14px}
pre{background:#f0f2f5;padding:8px;overflow:auto;font-size:12px;max-height:420px}
code{font-size:12.5px}
details summary{cursor:pointer;color:#1a5fb4}
.muted{color:#888}
.detail{color:#555;font-size:12px}
footer{margin-top:32px;color:#888;font-size:12px}
td ul{margin:0;padding-left:16px}
@media print{body{background:#fff}.card,table{break-inside:avoid}}
"""


def page(title: str, body: Sequence[Markup]) -> str:
    """A complete self-contained HTML document."""
    head = Markup("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                  "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
                  f"<title>{esc(title)}</title><style>{CSS}</style></head><body><main>")
    tail = Markup(f"<footer>kafkaproof report · generated {esc(now_utc())}</footer></main></body></html>\n")
    return str(join([head, *body, tail]))


def now_utc() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def table(headers: Sequence[str], rows: Iterable[Sequence[Any]], numeric: Iterable[int] = (),
          cls: str | None = None) -> Markup:
    """A table; `numeric` column indexes are right-aligned. Cells are escaped unless Markup."""
    num = set(numeric)
    head = join(tag("th", h, class_="num" if i in num else None) for i, h in enumerate(headers))
    body = join(tag("tr", [tag("td", c, class_="num" if i in num else None) for i, c in enumerate(r)]) for r in rows)
    return tag("table", [tag("thead", tag("tr", head)), tag("tbody", body)], class_=cls)


def kv(pairs: Iterable[tuple[str, Any]]) -> Markup:
    """A definition list of label → value (values escaped unless Markup)."""
    return tag("dl", [Markup(tag("dt", k) + tag("dd", v)) for k, v in pairs], class_="kv")


def badge(verdict: str | None) -> Markup:
    v = verdict or "unknown"
    return tag("span", v, class_=f"badge {v if v in VERDICT_COLORS else 'unknown'}")


def link(href: str | None, text: Any) -> Markup:
    return tag("a", text, href=href) if href else esc(text)


def rel_href(target: Path, from_dir: Path) -> str:
    """A relative URL from `from_dir` to `target` (both resolved), with / separators."""
    rel = os.path.relpath(Path(target).resolve(), Path(from_dir).resolve())
    return "/".join(rel.split(os.sep))


def bullets(items: Iterable[Any]) -> Markup:
    return tag("ul", [tag("li", i) for i in items])


def none_note(text: str) -> Markup:
    return tag("p", text, class_="muted")


# ============================================================================ run report: sections


@dataclass
class RunView:
    """Everything the run page shows, shaped."""

    data: RunData
    t0: int
    name: str
    verdict: Verdict
    counts: dict[str, int] | None
    windows: list[FaultWindow]
    timeline: Timeline
    kinds: list[KindSummary]
    history: list[dict]
    history_error: str | None
    trend: list[TrendPoint]
    report_dir: Path


def build_run_view(data: RunData, examples: int, history_url: str | None = None) -> RunView:
    """Shape a loaded run for rendering (reads the results history)."""
    m = data.manifest
    sends = data.tables.get("sends")
    t0 = run_t0(m, sends)
    counts = anomaly_counts(data.metrics, data.anomalies)
    verdict = build_verdict(m, data.validation, counts)
    windows = fault_windows(data.tables.get("faults"), t0)
    seconds, source = per_second(data.timeseries, sends, data.tables.get("reads"), t0)
    run_phases = phases(m, t0)
    tl = build_timeline(data, t0, seconds, source, windows, run_phases)
    name = scenario_name(m) or data.run_dir.name
    kinds = kind_summaries(counts, data.anomalies, data.metrics, windows, t0, tl.end_s, examples)
    rows, err = load_history(scenario_name(m), history_url)
    run_id = (m or {}).get("run_id") or data.run_dir.name
    trend = trend_points(rows, run_id, data.metrics, verdict.status, ((m or {}).get("versions") or {}).get("kafka"))
    return RunView(data, t0, name, verdict, counts, windows, tl, kinds, rows, err, trend, data.run_dir / REPORT_DIR)


def section_header(v: RunView) -> Markup:
    m = v.data.manifest or {}
    versions = m.get("versions") or {}
    sub = [f"run {m.get('run_id') or v.data.run_dir.name}", f"started {run_started_wall(m)}",
           f"Kafka {versions.get('kafka') or '?'}", f"librdkafka {versions.get('librdkafka') or '?'}",
           f"status {m.get('status') or '?'}"]
    return join([tag("h1", f"{v.name}"), tag("div", " · ".join(sub), class_="sub")])


def section_verdict(v: RunView) -> Markup:
    guarantee = guarantee_of(v.data.manifest) or "unknown"
    outcome, detect, why = expectation_of(v.data.manifest)
    claim = (f"Claims {guarantee}. Negative control: must detect {', '.join(detect)}." if outcome == "detect"
             else f"Claims {guarantee}; expected to pass.")
    items = [tag("li", text, class_=cls) for cls, text in v.verdict.lines]
    body = [tag("h2", v.verdict.headline), tag("div", claim + (f" Why: {why}" if why and outcome == "detect" else ""))]
    if items:
        body.append(tag("ul", items))
    return tag("section", body, class_=f"verdict {v.verdict.status}", id="verdict")


def section_problems(v: RunView) -> Markup:
    if not v.data.problems:
        return Markup("")
    return tag("div", [tag("strong", "Missing or unreadable data"), bullets(v.data.problems)], class_="problems")


def section_timeline(v: RunView) -> Markup:
    legend = tag("div", [
        tag("span", "acks/s (by ack time)", style="--c:#2ca02c"), tag("span", "errors/s", style="--c:#d62728"),
        tag("span", "reads/s (dashed)", style="--c:#1f77b4"), tag("span", "p99 publish latency", style="--c:#6a3d9a"),
        tag("span", "sending but no ack (strip at the bottom)", style="--c:#7f0000"),
        tag("span", "leader/ISR: full ISR", style="--c:#d9f0d3"), tag("span", "ISR shrunk", style="--c:#fdd49e"),
        tag("span", "no leader / node down", style="--c:#f4a6a6")], class_="legend")
    changes = v.timeline.changes
    change_list = Markup("")
    if changes:
        rows = [(fmt_t(c.t_s), f"p{c.partition}", c.text.split(": ", 1)[-1]) for c in changes[:200]]
        change_list = tag("details", [tag("summary", f"{plural(len(changes), 'leader/ISR change')} "
                                                     f"(from cluster snapshots, sampled every second)"),
                                      table(["time", "partition", "change"], rows, numeric=[0])])
    return join([tag("h2", "Timeline", id="timeline"),
                 tag("p", f"Shaded bands are fault windows, labelled with kind, target and resolved nodes; dashed "
                          f"lines are leader changes. Hover for exact numbers. Series from {v.timeline.source}; "
                          f"faults from faults.parquet; leader, ISR and node liveness from cluster_snapshots.parquet.",
                     class_="sub"),
                 legend, svg_timeline(v.timeline), change_list])


def section_outcomes(v: RunView) -> Markup:
    rows = outcome_rows(v.data.metrics, v.data.tables)
    body = table(["outcome", "values", "meaning"], [(l, fmt_int(n), mng) for l, n, mng in rows], numeric=[1]) \
        if rows else none_note("No outcome counts: neither analysis nor ledger tables are available.")
    return join([tag("h2", "Outcomes", id="outcomes"), body])


def section_anomalies(v: RunView, examples: int) -> Markup:
    out = [tag("h2", "Anomalies", id="anomalies")]
    if v.counts is None:
        out.append(none_note("Not analysed: run the Spark analysis (kafkaproof analyze) to classify anomalies."))
        return join(out)
    summary_rows = []
    for ks in v.kinds:
        when = "–" if ks.first_s is None else f"{fmt_t(ks.first_s)} – {fmt_t(ks.last_s)}"
        during = "–" if ks.during_faults is None else f"{ks.during_faults / ks.count:.0%}"
        summary_rows.append((Markup(tag("code", ks.kind)), fmt_int(ks.count), when, during, ks.sentence))
    if summary_rows:
        out.append(table(["kind", "count", "when (sent / read)", "during a fault", "meaning"], summary_rows,
                         numeric=[1, 3]))
    zero = [k for k in ordered_kinds(v.counts) if not v.counts[k]]
    if not summary_rows:
        out.append(tag("p", "No anomaly of any kind: every value is where it should be."))
    if zero:
        out.append(tag("p", "Checked and not found: " + ", ".join(zero) + ".", class_="sub"))
    for ks in v.kinds:
        out.append(tag("h3", f"{ks.kind}: {fmt_int(ks.count)} — examples (up to {examples})"))
        causes = attribution_text(v.data.metrics, ks.kind) or (
            delivery_text(v.data.metrics) if ks.kind == "undelivered_attempts" else None)
        if causes:
            out.append(tag("p", causes, class_="sub"))
        rows = [(fmt_value_id(e.get("value_id")), fmt_int(e.get("partition")), e.get("offsets", "–"),
                 fmt_t(e.get("t_s"), 2), e.get("fault", "–"), Markup(tag("span", e.get("detail") or "", class_="detail")))
                for e in ks.examples]
        out.append(table(["value id", "partition", "offset(s)", "time", "fault active then", "detail"], rows,
                         numeric=[1, 2, 3]) if rows else none_note("no examples recorded"))
    return join(out)


def section_exercised(v: RunView) -> Markup:
    """Which faults took effect and which of the scenario's conditions held: a verdict means nothing without them."""
    results = list(((v.data.metrics or {}).get("exercised")) or [])
    out = [tag("h2", "Was the check exercised?", id="exercised")]
    if not results:
        out.append(none_note("No faults and no conditions to check." if v.data.metrics is not None
                             else "Not analysed."))
        return join(out)
    rows = [(Markup(tag("span", "held" if r.get("held") else "NOT MET", class_="held" if r.get("held") else "notmet")),
             Markup(tag("code", r.get("check", "?"))), r.get("subject", ""), r.get("evidence", ""), r.get("why", ""))
            for r in results]
    out.append(table(["", "check", "of", "evidence", "why it matters"], rows))
    if any(not r.get("held") for r in results):
        out.append(tag("p", "A condition not met makes the run an error: the faults did not do what the scenario "
                            "needs, so its verdict would mean nothing.", class_="sub"))
    return join(out)


def section_latency(v: RunView) -> Markup:
    rows = latency_rows(v.data.metrics, v.data.tables.get("sends"))
    out = [tag("h2", "Latency", id="latency")]
    if not rows:
        out.append(none_note("No latency data (no acknowledged sends)."))
        return join(out)
    hdr = ["measure", "count", "p50", "p95", "p99", "p99.9", "max"]
    out.append(table(hdr, [(r["name"], fmt_int(r.get("count")), *[fmt_ms(r.get(k)) for k in PERCENTILE_KEYS])
                           for r in rows], numeric=range(1, 7)))
    by_fault = latency_by_fault_rows(v.data.metrics, v.windows)
    if by_fault:
        out.append(tag("h3", "Publish latency by fault window (by send time)"))
        out.append(table(["sent while", "acked", "p50", "p95", "p99", "p99.9", "max"],
                         [(r["name"], fmt_int(r.get("count")), *[fmt_ms(r.get(k)) for k in PERCENTILE_KEYS])
                          for r in by_fault], numeric=range(1, 7)))
    return join(out)


def section_recovery(v: RunView) -> Markup:
    out = [tag("h2", "Faults and recovery", id="recovery")]
    rows = recovery_rows(v.data.metrics, v.windows, v.data.tables.get("sends"), v.t0)
    if not rows:
        out.append(none_note("No faults were injected in this run."))
        return join(out)
    hdr = ["fault", "from", "healed", "lasted", "errors", "first error after", "acks resumed after",
           "recovered after heal", "longest ack gap", "max consumer lag"]
    out.append(table(hdr, [(r["fault"], fmt_t(r["start_s"]), fmt_t(r["end_s"]) if r["end_s"] is not None else "NEVER",
                            fmt_num(r["duration_s"], 1, "s"), fmt_int(r.get("errors")),
                            fmt_ms(r.get("time_to_first_error_ms")), fmt_ms(r.get("acks_resume_ms")),
                            fmt_recovery(r.get("recovery_after_heal_ms")), fmt_ms(r.get("max_ack_gap_ms")),
                            fmt_int(r.get("max_consumer_lag"))) for r in rows], numeric=range(1, 10)))
    avail = (v.data.metrics or {}).get("availability") or {}
    if avail:
        windows = ", ".join(f"{w.get('start_s')}–{w.get('end_s')} s" for w in avail.get("unavailability_windows") or [])
        out.append(tag("p", f"Seconds with sends but no ack: {fmt_int(avail.get('seconds_unavailable'))} of "
                            f"{fmt_int(avail.get('seconds_with_attempts'))}"
                            f"{' (' + windows + ')' if windows else ''}; acked "
                            f"{fmt_num((avail.get('ok_ratio') or 0) * 100, 1)}% of attempted sends.", class_="sub"))
    return join(out)


def fmt_recovery(ms: Any) -> str:
    """Recovery after the heal; negative when acks had already resumed while the fault was active."""
    if is_missing(ms) or float(ms) >= 0:
        return fmt_ms(ms)
    return f"before the heal ({fmt_ms(-float(ms))} earlier)"


def section_errors(v: RunView) -> Markup:
    rows = error_rows(v.data.tables.get("sends"), v.t0)
    body = table(["error", "outcome", "sends", "first", "last"],
                 [(Markup(tag("code", r["error"])), r["outcome"], fmt_int(r["count"]), fmt_t(r["first_s"]),
                   fmt_t(r["last_s"])) for r in rows], numeric=[2, 3, 4]) if rows else \
        none_note("No send errors." if v.data.tables.get("sends") is not None else "sends.parquet is missing.")
    return join([tag("h2", "Send errors by name", id="errors"), body])


def describe_faults_plan(scn: Mapping[str, Any]) -> list[str]:
    out = []
    for f in scn.get("faults") or []:
        if not isinstance(f, Mapping):
            continue
        dur = f" for {f['duration']} s" if f.get("duration") is not None else " until the producers finish"
        params = f" {json.dumps(f['params'], sort_keys=True)}" if f.get("params") else ""
        out.append(f"at {f.get('at')} s: {f.get('kind')} {f.get('target', '')}{params}{dur}")
    return out


def as_json(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str)


def mapping(v: Any) -> Mapping[str, Any]:
    return v if isinstance(v, Mapping) else {}


def producers_text(prod: Any) -> str:
    """One line about the producers (the resolved scenario has a mapping; anything else is shown as JSON)."""
    if not isinstance(prod, Mapping):
        return as_json(prod)
    amount = f"{prod['messages']:,} values each" if prod.get("messages") else f"{prod.get('duration_s', '?')} s"
    txn = f", transactions {as_json(prod['transactions'])}" if prod.get("transactions") else ""
    return (f"{prod.get('count', '?')} × {prod.get('rate', '?')}/s, {amount}, config "
            f"{as_json(prod.get('config') or {})}{txn}")


def consumers_text(cons: Any) -> str:
    if not isinstance(cons, Mapping):
        return as_json(cons)
    return (f"{cons.get('count', '?')} × {cons.get('mode', '?')}, commit {cons.get('commit', '?')}, "
            f"{cons.get('isolation_level', '?')}, processing {cons.get('processing_ms', 0)} ms"
            + (f", config {as_json(cons['config'])}" if cons.get("config") else ""))


def section_scenario(v: RunView) -> Markup:
    scn = scenario_of(v.data.manifest)
    out = [tag("h2", "The scenario as run", id="scenario")]
    if not scn:
        out.append(none_note("The manifest holds no scenario."))
        return join(out)
    topic, cluster = mapping(scn.get("topic")), mapping(scn.get("cluster"))
    outcome, detect, why = expectation_of(v.data.manifest)
    plan = describe_faults_plan(scn)
    pairs = [("guarantee", guarantee_of(v.data.manifest) or "–"),
             ("expect", "pass" if outcome == "pass" else f"detect {', '.join(detect)}: {why}"),
             ("cluster", f"{cluster.get('brokers', '?')} brokers, {cluster.get('controllers', 0)} dedicated "
                         f"controllers, Kafka {cluster.get('kafka_version', '?')}, config "
                         f"{as_json(cluster.get('config') or {})}"),
             ("topic", f"{topic.get('name', '?')}: {topic.get('partitions', '?')} partitions, RF "
                       f"{topic.get('replication_factor', '?')}, config {as_json(topic.get('config') or {})}"),
             ("producers", producers_text(scn.get("producers"))),
             ("consumers", consumers_text(scn.get("consumers"))),
             ("faults", bullets(plan) if plan else "none"),
             ("tags", ", ".join(map(str, scn.get("tags") or [])) or "–"),
             ("file", (v.data.manifest or {}).get("scenario_path") or "–"),
             ("hash", (v.data.manifest or {}).get("scenario_hash") or "–")]
    out.append(tag("div", kv(pairs), class_="card"))
    out.append(tag("details", [tag("summary", "resolved scenario (JSON)"),
                               tag("pre", json.dumps(scn, indent=2, sort_keys=True, default=str))]))
    return join(out)


def section_explanation(v: RunView) -> Markup:
    """What the scenario does and why, right under the verdict."""
    scn = scenario_of(v.data.manifest)
    parts = []
    if scn.get("description"):
        parts.append(tag("strong", scn["description"]))
    if scn.get("explanation"):
        parts.append(tag("div", str(scn["explanation"]).strip()))
    return tag("div", parts, class_="explanation") if parts else Markup("")


def section_environment(v: RunView) -> Markup:
    m = v.data.manifest or {}
    versions = m.get("versions") or {}
    cluster = m.get("cluster") or {}
    out = [tag("h2", "Versions and cluster", id="cluster")]
    left = kv([(k, versions[k]) for k in sorted(versions)] +
              [("host", f"{(m.get('host') or {}).get('hostname', '?')}, {(m.get('host') or {}).get('cpus', '?')} CPUs"),
               ("bootstrap", m.get("bootstrap") or cluster.get("bootstrap_servers") or "–"),
               ("cluster id", cluster.get("cluster_id") or "–"),
               ("network", cluster.get("network") or "–")])
    nodes = [n for n in cluster.get("nodes") or [] if isinstance(n, Mapping)]
    node_table = table(["node", "roles", "address", "namespace", "state at the end"],
                       [(n.get("id"), n.get("roles"), n.get("address"), n.get("namespace"), n.get("state"))
                        for n in nodes], numeric=[0]) if nodes else none_note("No cluster status in the manifest.")
    timing_rows = [(p["name"], fmt_t(p["start_s"]), fmt_num(p.get("seconds"), 2, "s")) for p in v.timeline.phases]
    timings = table(["phase", "start", "took"], timing_rows, numeric=[1, 2]) if timing_rows else Markup("")
    out.append(tag("div", [tag("div", [left, timings], class_="card"),
                           tag("div", [node_table, topic_table(m)], class_="card")], class_="grid2"))
    return join(out)


def topic_table(m: Mapping[str, Any]) -> Markup:
    desc = m.get("topic_description") or {}
    parts = desc.get("partitions") if isinstance(desc, Mapping) else None
    if not isinstance(parts, Mapping) or not parts:
        return Markup("")
    rows = [(p, i.get("leader"), ", ".join(map(str, i.get("replicas") or [])), ", ".join(map(str, i.get("isr") or [])))
            for p, i in sorted(parts.items(), key=lambda kvp: int(kvp[0])) if isinstance(i, Mapping)]
    return join([tag("h3", f"Topic {desc.get('topic', '')} when created"),
                 table(["partition", "leader", "replicas", "ISR"], rows, numeric=[0, 1])])


def section_links(v: RunView) -> Markup:
    rd, here = v.data.run_dir, v.report_dir
    counts = (v.data.manifest or {}).get("counts") or {}
    items = []
    for name in (MANIFEST, *[f"{t}.parquet" for t in TABLES]):
        p = rd / name
        extra = f" ({fmt_int(counts.get(name.split('.')[0]))} rows)" if counts.get(name.split(".")[0]) is not None else ""
        items.append(link(rel_href(p, here), name) + esc(extra) if p.exists() else esc(f"{name} (missing)"))
    groups = [("Ledger", items)]
    analysis = [link(rel_href(p, here), f"analysis/{p.name}") for p in sorted((rd / "analysis").glob("*"))] \
        if (rd / "analysis").is_dir() else [esc("not analysed")]
    groups.append(("Analysis", analysis))
    val = []
    if (rd / "validation" / "result.json").exists():
        val.append(link(rel_href(rd / "validation" / "result.json", here), "validation/result.json"))
    if v.data.data_docs:
        val.append(link(rel_href(v.data.data_docs, here), "Great Expectations Data Docs"))
    groups.append(("Validation", val or [esc("not validated")]))
    logs = [link(rel_href(p, here), f"logs/{p.name}") for p in sorted((rd / "logs").glob("*.log"))]
    work = [link(rel_href(p, here), f"work/{p.name}") for p in sorted((rd / "work").glob("*.log"))]
    groups.append(("Broker logs", logs or [esc("none copied")]))
    groups.append(("Client logs", work or [esc("none")]))
    cards = [tag("div", [tag("h3", title), bullets(entries)], class_="card") for title, entries in groups]
    return join([tag("h2", "Files", id="files"), tag("div", cards, class_="grid2")])


def section_trend(v: RunView) -> Markup:
    out = [tag("h2", "Trend: this scenario's recent runs", id="trend")]
    if v.history_error:
        out.append(none_note(f"No trend: {v.history_error}."))
    elif not v.history:
        out.append(none_note("The results history holds no run of this scenario yet (the history store is empty "
                             "for it); the trend starts with the next recorded run."))
    elif len(v.trend) < 2:
        out.append(none_note("Only this run of the scenario is in the results history so far."))
    if len(v.trend) < 2 or v.history_error:
        return join(out)
    out.append(tag("div", [svg_trend(v.trend, "recovery_s", "recovery after heal (max)", "s"),
                           svg_trend(v.trend, "p99_ms", "p99 publish latency", "ms"),
                           svg_trend(v.trend, "anomalies", "anomalies (all kinds)", "count")], class_="trends"))
    rows = []
    for p in reversed(v.trend):
        href = rel_href(Path(p.report), v.report_dir) if p.report and Path(p.report).exists() and not p.current else None
        rows.append((p.when, link(href, p.run_id) if href else (p.run_id + (" (this run)" if p.current else "")),
                     p.kafka_version or "–", badge(p.verdict if p.verdict in VERDICT_COLORS else None),
                     fmt_num(p.recovery_s, 1, "s"), fmt_ms(p.p99_ms), fmt_int(p.anomalies), p.anomaly_kinds or "–"))
    out.append(table(["finished", "run", "Kafka", "verdict", "recovery", "p99", "anomalies", "kinds"], rows,
                     numeric=[4, 5, 6]))
    return join(out)


def render_run(v: RunView, examples: int) -> str:
    """The run report page."""
    nav = tag("div", join([link(f"#{a}", t) for a, t in (
        ("timeline", "timeline"), ("anomalies", "anomalies"), ("exercised", "exercised"), ("outcomes", "outcomes"),
        ("errors", "errors"),
        ("recovery", "recovery"), ("latency", "latency"), ("scenario", "scenario"), ("cluster", "cluster"),
        ("files", "files"), ("trend", "trend"))], " · "), class_="sub")
    body = [section_header(v), nav, section_verdict(v), section_explanation(v), section_problems(v),
            section_timeline(v), section_anomalies(v, examples), section_exercised(v),
            tag("div", [tag("div", section_outcomes(v)), tag("div", section_errors(v))], class_="grid2"),
            section_recovery(v), section_latency(v), section_scenario(v), section_environment(v),
            section_trend(v), section_links(v)]
    return page(f"{v.verdict.status.upper()} {v.name} — kafkaproof", body)


def write_html(path: Path, text: str) -> Path:
    """Atomically write a page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
    return path


def write_run_report(run_dir: Path, examples: int = DEFAULT_EXAMPLES, history_url: str | None = None) -> Path:
    """Write `<run_dir>/report/index.html` and return its path.

    Renders whatever the run directory holds: a run that ended in error, or that was never
    analysed or validated, still gets a page saying what is missing. `history_url` overrides
    the results history store (default: `kafkaproof.history.history_url()`).
    """
    run_dir = Path(run_dir)
    data = load_run(run_dir)
    view = build_run_view(data, examples, history_url)
    return write_html(run_dir / REPORT_DIR / "index.html", render_run(view, examples))


# ============================================================================ batch pages


def safe_batch_id(batch_id: str) -> str:
    """A directory name for a batch id (`dag_id/run_id` has slashes, colons, plus signs)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", batch_id).strip("._") or "batch"
    if len(safe) > 120 or safe != batch_id:
        digest = hashlib.sha1(batch_id.encode()).hexdigest()[:8]
        safe = f"{safe[:110]}-{digest}"
    return safe


def batch_dir(batch_id: str, out: Path) -> Path:
    return Path(out) / BATCHES_DIR / safe_batch_id(batch_id)


def change_since(previous: str | None, now: str) -> tuple[str, str]:
    """(text, css class) describing a verdict change since the previous batch."""
    if previous is None:
        return "first run", "same"
    if previous == now:
        return ("unchanged", "same") if now == "pass" else (f"still {'failing' if now == 'fail' else 'in error'}", "worse")
    if VERDICT_RANK.get(now, 2) > VERDICT_RANK.get(previous, 2):
        if previous != "pass":
            return f"now {now} (was {previous})", "worse"
        return (f"NEW {'FAILURE' if now == 'fail' else 'ERROR'} (was {previous})", "worse")
    return (f"fixed (was {previous})" if now == "pass" else f"now {now} (was {previous})", "better")


def previous_rows(summaries: Sequence[Mapping[str, Any]], batch_id: str, url: str | None = None
                  ) -> tuple[dict[tuple[str, str | None], dict], str | None]:
    """Per (scenario, label): the most recent history row not in this batch (and older than this run)."""
    own_runs = {s.get("run_id") for s in summaries if s.get("run_id")}
    out: dict[tuple[str, str | None], dict] = {}
    try:
        from . import history
        for s in summaries:
            rows = history.runs(scenario=s["scenario"], limit=200, url=url)
            out[(s["scenario"], s.get("label"))] = pick_previous(rows, batch_id, own_runs, s.get("run_id"),
                                                                  s.get("kafka_version") if s.get("label") else None)
    except Exception as e:  # noqa: BLE001 - the page still renders without the comparison
        return out, f"results history unavailable ({type(e).__name__}: {e})"
    return out, None


def pick_previous(rows: Sequence[Mapping[str, Any]], batch_id: str, own_runs: set, run_id: str | None,
                  kafka_version: str | None = None) -> dict | None:
    """Pure: from history rows (newest first), the first one from another batch, older than `run_id` if listed."""
    ids = [r.get("run_id") for r in rows]
    start = ids.index(run_id) + 1 if run_id in ids else 0
    for r in rows[start:]:
        if r.get("batch_id") == batch_id or r.get("run_id") in own_runs:
            continue
        if kafka_version and r.get("kafka_version") != kafka_version:
            continue
        return dict(r)
    return None


def summary_problems(s: Mapping[str, Any]) -> list[str]:
    """What went wrong for one scenario, in plain lines (read from its run directory if the summary is silent)."""
    violations = list(s.get("violations") or [])
    error = s.get("error")
    if s.get("verdict") in ("fail", "error") and not violations and not error and s.get("run_dir"):
        on_disk = summary_from_run_dir(Path(s["run_dir"]))
        violations, error = on_disk["violations"], on_disk["error"]
    out = [f"error: {error}"] if error else []
    out += violations
    out += [f"regression: {r}" for r in s.get("regressions") or []]
    return out


def summary_notes(s: Mapping[str, Any]) -> list[str]:
    """What only warns (never fails the gate): drift on a thin baseline, unstable metrics, new allowed kinds."""
    notes = [f"warning: {w}" for w in s.get("warnings") or []]
    baseline = s.get("baseline") or ""
    if " of " in baseline:  # a thin baseline: no regression verdict yet
        notes.append(baseline)
    return notes


def summary_report(s: Mapping[str, Any]) -> Path | None:
    """The run report of a summary: its `report`, else `<run_dir>/report/index.html` if it exists."""
    if s.get("report"):
        return Path(s["report"])
    if s.get("run_dir"):
        p = Path(s["run_dir"]) / REPORT_DIR / "index.html"
        return p if p.exists() else None
    return None


def nonzero_anomalies(s: Mapping[str, Any]) -> str:
    k = key_numbers(s.get("metrics"))
    return ", ".join(f"{kind} {n:,}" for kind, n in (k["counts"] or {}).items() if n) or "–"


def verdict_counts(summaries: Sequence[Mapping[str, Any]]) -> str:
    n = {v: sum(1 for s in summaries if s.get("verdict") == v) for v in ("pass", "fail", "error")}
    return f"{plural(len(summaries), 'scenario run')}: {n['pass']} pass, {n['fail']} fail, {n['error']} error"


def batch_rows(summaries: Sequence[Mapping[str, Any]], previous: Mapping[tuple[str, str | None], dict | None],
               here: Path) -> list[tuple]:
    rows = []
    for s in sort_summaries(summaries):
        prev = previous.get((s["scenario"], s.get("label")))
        text, cls = change_since(prev.get("verdict") if prev else None, s.get("verdict") or "error")
        prev_link = Markup("")
        if prev and prev.get("report") and Path(prev["report"]).exists():
            prev_link = Markup(" " + link(rel_href(Path(prev["report"]), here), "previous"))
        report = summary_report(s)
        k = key_numbers(s.get("metrics"))
        expect = "pass" if (s.get("expect") or "pass") == "pass" else "negative control"
        name = link(rel_href(report, here), s["scenario"]) if report else esc(s["scenario"])
        rows.append((
            name + tag("div", s.get("run_id") or "no run", class_="detail"),
            s.get("kafka_version") or "–", f"{s.get('guarantee') or '–'} / {expect}", badge(s.get("verdict")),
            Markup(tag("span", text, class_=f"chg {cls}") + prev_link),
            problems_cell(summary_problems(s) + summary_notes(s)),
            nonzero_anomalies(s), fmt_num(k["recovery_s"], 1, "s"), fmt_ms(k["p99_ms"]),
            link(rel_href(report, here), "report") if report else "no report"))
    return rows


def problems_cell(problems: Sequence[str]) -> Markup:
    if not problems:
        return esc("–")
    return esc(problems[0]) if len(problems) == 1 else bullets(problems)


def sort_summaries(summaries: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """Worst first (error, fail, pass), then by scenario name."""
    return sorted(summaries, key=lambda s: (-VERDICT_RANK.get(s.get("verdict") or "error", 2), s["scenario"],
                                            s.get("label") or "", s.get("run_id") or ""))


def render_batch(summaries: Sequence[Mapping[str, Any]], batch_id: str, previous: Mapping, history_error: str | None,
                 here: Path) -> str:
    """The batch index page."""
    worst = max((VERDICT_RANK.get(s.get("verdict") or "error", 2) for s in summaries), default=2)
    status = {0: "pass", 1: "fail", 2: "error"}[worst]
    regressions = sum(len(s.get("regressions") or []) for s in summaries)
    warnings = sum(len(s.get("warnings") or []) for s in summaries)
    changes = [(s, change_since((previous.get((s["scenario"], s.get("label"))) or {}).get("verdict"),
                                s.get("verdict") or "error")) for s in sort_summaries(summaries)]
    moved = [f"{s['scenario']}: {text}" for s, (text, cls) in changes if cls in ("worse", "better")
             and not text.startswith("still")]
    head = [tag("h1", f"Batch {batch_id}"), tag("div", f"generated {now_utc()}", class_="sub"),
            tag("section", [tag("h2", f"{status.upper()}: {verdict_counts(summaries)}"
                                      + (f", {plural(regressions, 'regression')}" if regressions else "")
                                      + (f", {plural(warnings, 'warning')} (not failing)" if warnings else "")),
                            bullets(moved) if moved else tag("div", "No verdict changed since the previous batch."
                                                             if not history_error else history_error)],
                class_=f"verdict {status}")]
    if not summaries:
        head.append(none_note("This batch has no scenario results (every scenario failed before summarising)."))
    hdr = ["scenario", "Kafka", "guarantee / expect", "verdict", "since previous batch", "what went wrong",
           "anomalies", "recovery", "p99", ""]
    head.append(tag("h2", "Scenarios (worst first)"))
    head.append(table(hdr, batch_rows(summaries, previous, here), numeric=[7, 8]))
    return page(f"{status.upper()} batch {batch_id} — kafkaproof", head)


def write_batch_report(summaries: list[dict], batch_id: str, out: Path, history_url: str | None = None) -> Path:
    """Write `<out>/batches/<safe batch id>/index.html`: scenario × verdict with change since the previous batch.

    `summaries` are `pipeline.ScenarioSummary` dicts (None entries are skipped); the previous
    verdict of each scenario is the most recent results-history row of another batch.
    """
    summaries = [s for s in summaries if s]
    here = batch_dir(batch_id, out)
    previous, err = previous_rows(summaries, batch_id, history_url)
    return write_html(here / "index.html", render_batch(summaries, batch_id, previous, err, here))


def upgrade_pairs(summaries: Sequence[Mapping[str, Any]]) -> list[tuple[str, Mapping | None, Mapping | None]]:
    """Pure: (scenario, current summary, candidate summary) per scenario, sorted by name."""
    by: dict[str, dict[str, Mapping]] = {}
    for s in summaries:
        by.setdefault(s["scenario"], {})[s.get("label") or "current"] = s
    return [(name, d.get("current"), d.get("candidate")) for name, d in sorted(by.items())]


def version_of(pairs: Sequence[tuple[str, Mapping | None, Mapping | None]], index: int) -> str:
    versions = sorted({p[index].get("kafka_version") for p in pairs if p[index] and p[index].get("kafka_version")})
    return ", ".join(versions) or "?"


def upgrade_cell(s: Mapping | None, here: Path) -> Markup:
    if not s:
        return Markup(tag("span", "no result", class_="muted"))
    report = summary_report(s)
    k = key_numbers(s.get("metrics"))
    lines = [badge(s.get("verdict")), esc(" "), link(rel_href(report, here), "report") if report else esc("no report"),
             tag("div", f"recovery {fmt_num(k['recovery_s'], 1, 's')} · p99 {fmt_ms(k['p99_ms'])}", class_="detail"),
             tag("div", f"anomalies: {nonzero_anomalies(s)}", class_="detail")]
    problems = summary_problems(s)
    if problems:
        lines.append(tag("div", "; ".join(problems), class_="detail"))
    return join(lines)


def version_change(cur: Mapping | None, cand: Mapping | None) -> tuple[str, str]:
    """Pure: the candidate's verdict against the current version's, as (text, css class)."""
    if cand is None:
        return "no result on the candidate version", "worse"
    if cur is None:
        return "no result on the current version to compare with", "worse"
    text, cls = change_since(cur.get("verdict"), cand.get("verdict") or "error")
    return ("same verdict", cls) if text in ("unchanged", "still failing", "still in error") else \
        (text.replace("(was", "(current"), cls)


def metric_deltas(cur: Mapping | None, cand: Mapping | None) -> list[str]:
    """Pure: key numbers of the candidate next to the current version's, and anomaly kinds only one of them has."""
    if not cur or not cand:
        return []
    a, b = key_numbers(cur.get("metrics")), key_numbers(cand.get("metrics"))
    out = []
    for key, label, fmt in (("recovery_s", "recovery", lambda v: fmt_num(v, 1, "s")), ("p99_ms", "p99", fmt_ms)):
        if a[key] is not None and b[key] is not None and a[key] != b[key]:
            out.append(f"{label} {fmt(b[key])} vs {fmt(a[key])}")
    ca, cb = a["counts"] or {}, b["counts"] or {}
    out += [f"new on the candidate: {k} {cb[k]:,}" for k in ordered_kinds(cb) if cb[k] and not ca.get(k)]
    out += [f"gone on the candidate: {k} (was {ca[k]:,})" for k in ordered_kinds(ca) if ca[k] and not cb.get(k)]
    return out


def render_upgrade(summaries: Sequence[Mapping[str, Any]], worse: Sequence[str], batch_id: str, here: Path) -> str:
    """The upgrade comparison page: scenario × Kafka version, and why the candidate is worse."""
    pairs = upgrade_pairs(summaries)
    cur_v, cand_v = version_of(pairs, 1), version_of(pairs, 2)
    status = "fail" if worse else ("pass" if pairs else "error")
    headline = (f"CANDIDATE {cand_v} IS WORSE than {cur_v}" if worse else
                f"Candidate {cand_v} is no worse than {cur_v}" if pairs else "No results to compare")
    body = [tag("h1", f"Upgrade check {batch_id}"), tag("div", f"generated {now_utc()}", class_="sub"),
            tag("section", [tag("h2", headline),
                            bullets(worse) if worse else tag("div", f"{plural(len(pairs), 'scenario')} compared.")],
                class_=f"verdict {status}")]
    rows = []
    for name, cur, cand in pairs:
        text, cls = version_change(cur, cand)
        deltas = metric_deltas(cur, cand)
        rows.append((name, upgrade_cell(cur, here), upgrade_cell(cand, here),
                     join([tag("span", text, class_=f"chg {cls}"), *[tag("div", d, class_="detail") for d in deltas]])))
    body.append(tag("h2", "Scenario × Kafka version"))
    body.append(table(["scenario", f"current ({cur_v})", f"candidate ({cand_v})", "candidate vs current"], rows))
    return page(f"{'WORSE' if worse else 'OK'} upgrade check {batch_id} — kafkaproof", body)


def write_upgrade_report(summaries: list[dict], worse: list[str], batch_id: str, out: Path) -> Path:
    """Write `<out>/batches/<safe batch id>/index.html` comparing current vs candidate Kafka per scenario.

    `summaries` carry `label` 'current' or 'candidate'; `worse` lists why the candidate is
    worse (`pipeline.upgrade_differences`).
    """
    summaries = [s for s in summaries if s]
    here = batch_dir(batch_id, out)
    return write_html(here / "index.html", render_upgrade(summaries, list(worse), batch_id, here))


# ============================================================================ a directory of runs (--night)


def summary_from_run_dir(run_dir: Path) -> dict[str, Any]:
    """A `pipeline.ScenarioSummary`-shaped dict read from a run directory (nothing recorded, no regressions).

    Same rules as `pipeline.summarize`: anything but a complete, validated run is an error.
    """
    run_dir = Path(run_dir)
    problems: list[str] = []
    m = read_json(run_dir / MANIFEST, problems) or {}
    result = read_json(run_dir / "validation" / "result.json", problems)
    metrics = read_json(run_dir / "analysis" / "metrics.json", problems) or {}
    outcome, _, _ = expectation_of(m)
    s: dict[str, Any] = {
        "scenario": scenario_name(m) or run_dir.name, "run_id": m.get("run_id"), "run_dir": str(run_dir),
        "verdict": "error", "guarantee": guarantee_of(m), "expect": outcome,
        "kafka_version": (m.get("versions") or {}).get("kafka"), "violations": [], "regressions": [], "error": None,
        "report": str(run_dir / REPORT_DIR / "index.html") if (run_dir / REPORT_DIR / "index.html").exists() else None,
        "metrics": metrics_for_summary(metrics), "label": ""}
    if not m:
        s["error"] = "; ".join(problems) or f"no {MANIFEST}"
    elif m.get("status") != "complete":
        s["error"] = f"run {m.get('status')}: {m.get('error')}"
    elif result is None:
        s["error"] = "no validation result (analysis or validation failed)"
    else:
        s["verdict"] = str(result.get("status") or "error")
        s["violations"] = [violation_sentence(r, None) for r in result.get("rows") or []
                           if isinstance(r, Mapping) and row_violated(r)]
        if s["verdict"] == "error":
            s["error"] = "; ".join(validation_errors(result)) or "validation error"
    return s


def metrics_for_summary(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """History's key metrics of a metrics.json (`history.key_metrics`), with report-side fallbacks."""
    try:
        from .history import key_metrics
        out = dict(key_metrics(metrics))
    except Exception:  # noqa: BLE001 - key metrics are a nicety on this page
        out = {}
    k = key_numbers(metrics)
    out.setdefault("recovery_s", None)
    out.setdefault("publish_p99_ms", None)
    if out.get("recovery_s") is None:
        out["recovery_s"] = k["recovery_s"]
    if out.get("publish_p99_ms") is None:
        out["publish_p99_ms"] = k["p99_ms"]
    if not out.get("anomalies") and k["counts"]:
        out["anomalies"] = k["counts"]
    return out


def find_run_dirs(root: Path) -> list[Path]:
    """Run directories (holding manifest.json) directly under `root`, or `root` itself if it is one."""
    root = Path(root)
    if (root / MANIFEST).exists():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and (p / MANIFEST).exists()) if root.is_dir() else []


def find_batch_summaries(night_dir: Path, write_reports: bool = False, history_url: str | None = None) -> list[dict]:
    """Summaries of every run directory under `night_dir` (see `summary_from_run_dir`).

    With `write_reports`, each run's report is (re)written first so the index can link it.
    """
    out = []
    for rd in find_run_dirs(night_dir):
        if write_reports:
            write_run_report(rd, history_url=history_url)
        out.append(summary_from_run_dir(rd))
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
