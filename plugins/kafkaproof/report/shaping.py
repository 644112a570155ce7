"""Shaping a run's data for its report: pure functions from manifests, analysis outputs and ledger frames
to the rows, windows, lanes and points the pages draw (no HTML here, no analysis redone)."""
from __future__ import annotations

import json

from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any, Mapping, Sequence

import pandas as pd

from ..spec import anomalies
from .data import TREND_RUNS, key_numbers
from .kit import NS_PER_MS, NS_PER_S, fmt_int, fmt_num, is_missing
from .verdict_text import anomaly_sentence, ordered_kinds


def per_second(timeseries: pd.DataFrame | None) -> tuple[pd.DataFrame, str]:
    """Per-second acks, errors, reads, p99 latency (ms) and unavailability from the analysis; and where they came from.

    Acks and errors are counted when the delivery report arrived (cause and effect line up
    with the faults); p99 is over the values intended in that second. Without the analysis
    there is nothing to show: the report never redoes it.
    """
    cols = ["second", "attempted", "acks", "errors", "reads", "p99_ms", "unavailable"]
    if timeseries is None or not len(timeseries) or "second" not in timeseries:
        return pd.DataFrame(columns=cols), "nothing: the run was not analysed (no analysis/timeseries.parquet)"
    ts = timeseries.rename(columns={"acks_completed": "acks", "errors_completed": "errors",
                                    "publish_p99_ms": "p99_ms"})
    for c in cols:
        if c not in ts:
            ts[c] = 0 if c != "p99_ms" else float("nan")
    return ts[cols].sort_values("second").reset_index(drop=True), "analysis/timeseries.parquet"


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
    versions = [_versions(v) for v in snaps["node_versions"]] if "node_versions" in snaps else [{}] * len(times)
    ids = sorted(set(nodes) | set().union(*live)) if live else sorted(nodes)
    out: dict[int, list[Segment]] = {}
    for n in ids:
        segs: list[Segment] = []
        for i, t in enumerate(times):
            end = times[i + 1] if i + 1 < len(times) else t + 1.0
            state = "up" if n in live[i] else "down"
            version = versions[i].get(str(n)) if state == "up" else None
            label = (version or "live") if state == "up" else "down"
            if segs and segs[-1].state == state and segs[-1].label == label:
                segs[-1].end_s = end
            else:
                segs.append(Segment(t, end, label, state, f"node {n} " + (
                    f"live{f' on Kafka {version}' if version else ''}" if state == "up" else "dead or paused")))
        out[n] = segs
    return out


def _versions(v: Any) -> dict[str, str]:
    """A snapshot's node versions (JSON text, or missing in runs before they were recorded)."""
    if not isinstance(v, str) or not v:
        return {}
    return {k: str(x) for k, x in json.loads(v).items() if x}


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


def application_text(manifest: Mapping[str, Any] | None, metrics: Mapping[str, Any] | None,
                     lost: KindSummary | None, windows: Sequence[FaultWindow], end_s: float) -> str | None:
    """The application's view of the run, the report's lead (issue 39): the events it accepted, those its
    consumer side processed (with a processed source), those accepted that never reached Kafka, the first
    one's wall time and the faults active then. None for a run without an application."""
    app = (manifest or {}).get("application")
    if not isinstance(app, Mapping):
        return None
    requests = app.get("requests") or {}
    parts = [f"{fmt_int(int(requests.get('accepted') or 0))} events accepted"]
    refused = [f"{fmt_int(n)} {label}" for key, label in (("rejected", "rejected"), ("indefinite", "unanswered"))
               if (n := int(requests.get(key) or 0))]
    if refused:
        parts[0] += f" ({', '.join(refused)})"
    if app.get("processed"):
        parts.append(f"{fmt_int(((metrics or {}).get('outcomes') or {}).get('consumed'))} processed")
    if lost is None or not lost.count:
        return ", ".join(parts + ["every accepted event in Kafka"]) + "."
    text = f"{fmt_int(lost.count)} accepted but never in Kafka"
    wall0 = ((manifest or {}).get("clock") or {}).get("wall_origin_ns")
    if lost.first_s is not None and wall0 is not None:
        first = datetime.fromtimestamp((int(wall0) + lost.first_s * NS_PER_S) / NS_PER_S, tz=timezone.utc)
        text += f", first at {first.strftime('%H:%M:%S')} UTC"
        active = active_faults_at(lost.first_s, windows, end_s)
        if active:
            text += ", during " + ", ".join(f"{w.kind} {w.target}" for w in active)
    return ", ".join(parts + [text]) + "."


def delivered_text(manifest: Mapping[str, Any] | None) -> str | None:
    """The run page's sentence, under the application's view, on what the consumer group was handed (the
    manifest's `application.delivered`, from the fault proxies' Fetch answers): it says it is "delivered",
    not "processed", or why it was not measured. None without an application or for a run recorded
    before the measure existed."""
    delivered = ((manifest or {}).get("application") or {}).get("delivered")
    if not isinstance(delivered, Mapping):
        return None
    if not delivered.get("measured"):
        return f"Delivered to the consumer group: {delivered.get('reason') or 'not measured'}."
    text = (f"Delivered to the consumer group (what the fault proxies handed it in Fetch answers, not what it "
            f"processed): {fmt_int(delivered.get('delivered'))} of {fmt_int(delivered.get('accepted'))} accepted events")
    missed = delivered.get("delivered_not_processed")
    if isinstance(missed, Mapping):
        text += f", {fmt_int(missed.get('count'))} delivered but never processed"
        if missed.get("count") and missed.get("examples"):
            text += f" (e.g. {', '.join(map(str, missed['examples'][:3]))})"
    never = (delivered.get("never_delivered") or {}).get("count")
    if never:
        text += f", {fmt_int(never)} never delivered"
    notes = []
    if delivered.get("truncated"):
        notes.append("the delivery log reached its bound (truncated)")
    if delivered.get("unread_batches"):
        notes.append(f"{fmt_int(delivered['unread_batches'])} compressed batches handed over unread")
    if delivered.get("problems"):
        notes.append("incomplete: " + "; ".join(f"{k}: {v}" for k, v in delivered["problems"].items()))
    return text + (f" ({'; '.join(notes)})" if notes else "") + "."


def outcome_rows(metrics: Mapping[str, Any] | None) -> list[tuple[str, Any, str]]:
    """(label, count, meaning) for the outcomes table, from metrics.json (empty without the analysis)."""
    o = dict((metrics or {}).get("outcomes") or {})
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


def recovery_rows(metrics: Mapping[str, Any] | None, windows: Sequence[FaultWindow]) -> list[dict[str, Any]]:
    """Per fault: window, errors, time to first error, when acks resumed, recovery after heal, longest ack gap
    (the analysis' `faults`; only the window without it)."""
    by_id = {f.get("fault_id"): f for f in (metrics or {}).get("faults") or [] if isinstance(f, Mapping)}
    return [{"fault": w.label, "start_s": w.start_s, "end_s": w.end_s,
             "duration_s": None if w.end_s is None else w.end_s - w.start_s, **by_id.get(w.fault_id, {})}
            for w in windows]


def error_rows(sends: pd.DataFrame | None, t0: int) -> list[dict[str, Any]]:
    """Send errors by name and outcome, most frequent first, with first/last completion time and the
    client's most frequent message for them (numbers in it, like "after 1500 ms", kept)."""
    if sends is None or not len(sends) or "error_name" not in sends:
        return []
    e = sends[sends["error_name"].notna()]
    if not len(e):
        return []
    t = (e["complete_ns"].astype("float64") - t0) / NS_PER_S
    g = e.assign(_t=t).groupby(["error_name", "outcome"], dropna=False)
    rows = [{"error": name, "outcome": outcome, "count": len(df), "first_s": df["_t"].min(), "last_s": df["_t"].max(),
             "message": _most_frequent(df["error_message"]) if "error_message" in df else None}
            for (name, outcome), df in g]
    return sorted(rows, key=lambda r: (-r["count"], str(r["error"])))


def _most_frequent(messages: pd.Series) -> str | None:
    messages = messages.dropna()
    return str(messages.value_counts().index[0]) if len(messages) else None


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
