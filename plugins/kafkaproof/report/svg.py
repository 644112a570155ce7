"""SVG charts of the reports: the fault-banded timeline of a run and the small trend charts."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import pandas as pd

from ..errors import FaultError
from ..spec.fault_families import NODE_FAMILIES, family_of
from .data import RunData
from .kit import VERDICT_COLORS, Markup, esc, fmt_int, fmt_ms, fmt_num, fmt_t, join, tag, void
from .shaping import (Change, ConsumerMark, FaultWindow, Segment, TrendPoint, anomaly_times, cluster_changes,
                      consumer_lanes, node_segments, partition_segments)


MAX_PARTITION_LANES = 12


MAX_CONSUMER_LANES = 6


# Each node fault kind's colour on the timeline, as its family says (spec/fault_families.py); others grey.
FAULT_COLORS: dict[str, str] = {kind: color for family in NODE_FAMILIES for kind, color in family.colors.items()}
GREY = "#888888"


def fault_color(kind: str, target: str) -> str:
    """A fault's colour on the timeline: its family's (found by kind and target, as families share kinds: `kill`
    of `app:web` is not `kill` of `node:1`), else the node kind's of that name, else grey."""
    try:
        own = family_of(kind, target).colors.get(kind)
    except FaultError:  # a step kind (roll_node) or a kind this kafkaproof does not know
        own = None
    return own or FAULT_COLORS.get(kind, GREY)


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
        color = fault_color(f.kind, f.target)
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


LEFT, RIGHT = 104, 14
