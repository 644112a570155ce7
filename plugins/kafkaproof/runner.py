"""Run a scenario: cluster, topic, consumers, producers, fault timeline, heal, drain, ledger.

`run_scenario` turns a validated Scenario into a run directory (see
docs/ledger-schema.md). Whatever happens (an exception, SIGINT/SIGTERM, a
timeout) it heals every fault, stops every process it started, tears the
cluster down and writes `manifest.json`; a run that could not collect its data
ends `incomplete` or `error`, never `complete`.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from . import __version__, ledger, process, procs
from .clients import (ClientConfigError, apply_overrides, effective_clients, environment_overrides,
                      producer_settings)
from .cluster import ClusterConfig, LocalCluster
from .errors import ClusterError, FaultError, KafkaproofError
from .faults import FaultInjector, append_fault_log, now
from .scenario import Scenario, TimelineFault
from .workload import COMPLETION_STREAM, SEND_STREAM, TXN_STREAM, classify_delivery, read_stream

log = logging.getLogger(__name__)


class RunInterrupted(KafkaproofError):
    """The run was interrupted (SIGINT/SIGTERM) or hit its time limit."""


@dataclass
class RunOptions:
    out: Path = Path("runs")
    messages: int | None = None
    kafka_version: str | None = None
    brokers: int | None = None  # override cluster.brokers (local clusters only)
    bootstrap: str | None = None  # an existing cluster instead of a local one
    cluster_name: str | None = None
    attach: bool = False  # use the already running local cluster `cluster_name` and leave it up
    progress_interval_s: float = 2.0


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    status: str  # complete | incomplete | error
    error: str | None = None


def cluster_config(data: dict, name: str) -> ClusterConfig:
    """Pure: the local cluster a resolved scenario asks for."""
    c = data["cluster"]
    return ClusterConfig(name=name, brokers=c["brokers"], controllers=c["controllers"],
                         kafka_version=c["kafka_version"], broker_config=c["config"],
                         node_config={int(k): v for k, v in c["node_config"].items()},
                         proxy=bool(c.get("proxy", False)))


def new_run_id(scenario_name: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{scenario_name}-{stamp}-{uuid.uuid4().hex[:4]}"


def versions(kafka_version: str | None) -> dict[str, str | None]:
    import confluent_kafka
    return {"kafka": kafka_version, "confluent_kafka": confluent_kafka.version()[0],
            "librdkafka": confluent_kafka.libversion()[0], "python": platform.python_version(),
            "pyarrow": pa.__version__, "kafkaproof": __version__}


# --- worker processes ------------------------------------------------------------

class WorkerEvents:
    """Events the workers report as they happen (one UDP datagram each, on loopback): what triggers wait for.

    Consumers report each successful commit; a fault with `after: {event: consumer_commit}`
    is injected the moment the next one arrives, while that consumer processes its batch.
    """

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.counts: dict[tuple[str, int], int] = {}
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="worker-events", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._closed:
            try:
                data = self.sock.recv(4096)
            except (socket.timeout, OSError):
                continue
            try:
                event = json.loads(data)
                key = (str(event["event"]), int(event["consumer"]))
            except (ValueError, KeyError, TypeError):
                continue
            with self._cond:
                self.counts[key] = self.counts.get(key, 0) + 1
                self._cond.notify_all()

    def count(self, event: str, consumer: int) -> int:
        with self._cond:
            return self.counts.get((event, consumer), 0)

    def wait_next(self, event: str, consumer: int, seen: int, timeout_s: float, stop: threading.Event) -> bool:
        """Wait until more than `seen` such events arrived; False on timeout or stop."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while self.counts.get((event, consumer), 0) <= seen:
                left = deadline - time.monotonic()
                if left <= 0 or stop.is_set():
                    return False
                self._cond.wait(min(left, 0.1))
        return True

    def close(self) -> None:
        self._closed = True
        self._thread.join(timeout=2)
        self.sock.close()


class Workers:
    """Producer and consumer OS processes of one run; kills them all on close.

    Each worker is recorded in the process registry (`procs.py`) before anything relies on it and
    watches this process: if the runner dies, its workers stop within a second, and
    `kafkaproof cluster down --all` (or the teardown of the cluster they ran against) stops
    whatever is left.
    """

    def __init__(self, work: Path, base_spec: dict, owner: str, cluster: str | None = None):
        self.work = work
        self.base = {**base_spec, "parent_pid": os.getpid()}
        self.owner, self.cluster = owner, cluster
        self.producers: dict[int, subprocess.Popen] = {}
        self.consumers: dict[int, subprocess.Popen] = {}
        self.incarnations: dict[int, int] = {}
        self.consumer_spec: dict = {}

    def _spawn(self, role: str, spec: dict, name: str) -> subprocess.Popen:
        path = self.work / f"{name}.spec.json"
        path.write_text(json.dumps(spec))
        errf = open(self.work / f"{name}.stderr.log", "ab")
        cmd = [sys.executable, "-m", "kafkaproof.workload", role, str(path)]
        proc = subprocess.Popen(cmd, stdout=errf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.work,
                                start_new_session=True)
        errf.close()
        try:
            procs.register(self.owner, name, process.ref_for(proc.pid), cluster=self.cluster, command=cmd)
        except FaultError:
            pass  # it died at once; its exit code tells
        return proc

    def start_producer(self, index: int, spec: dict) -> None:
        self.producers[index] = self._spawn("producer", {**self.base, **spec, "index": index}, f"producer-{index}")

    def start_consumer(self, index: int, spec: dict) -> None:
        inc = self.incarnations.get(index, -1) + 1
        self.incarnations[index] = inc
        self.consumers[index] = self._spawn("consumer", {**self.base, **spec, "index": index, "incarnation": inc},
                                            f"consumer-{index}-{inc}")
        self.consumer_spec = spec

    def signal_consumer(self, index: int, sig: int) -> int:
        proc = self.consumers[index]
        if proc.poll() is not None:
            raise FaultError(f"consumer {index} is not running (exit code {proc.returncode})")
        os.kill(proc.pid, sig)
        return proc.pid

    def restart_consumer(self, index: int) -> None:
        proc = self.consumers[index]
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
            return
        self.start_consumer(index, self.consumer_spec)

    def producers_done(self) -> bool:
        return all(p.poll() is not None for p in self.producers.values())

    def stop_consumers(self, timeout_s: float = 20.0) -> None:
        for proc in self.consumers.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.terminate()
        _wait_all(self.consumers.values(), timeout_s)

    def kill_all(self) -> None:
        procs_ = list(self.producers.values()) + list(self.consumers.values())
        for proc in procs_:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGCONT)
                    proc.terminate()
        _wait_all(procs_, 10.0)
        procs.unregister(self.owner)

    def consumer_positions(self) -> dict[int, int]:
        """Highest next-fetch position per partition over the current consumer processes."""
        best: dict[int, int] = {}
        for index, inc in self.incarnations.items():
            try:
                p = json.loads((self.work / f"consumer-{index}-{inc}.progress.json").read_text())
            except (OSError, json.JSONDecodeError):
                continue
            for part, pos in p.get("positions", {}).items():
                best[int(part)] = max(best.get(int(part), -1), pos)
        return best

    def progress(self) -> dict[str, Any]:
        total: dict[str, Any] = {"sent": 0, "ok": 0, "fail": 0, "indefinite": 0, "read": 0, "errors": {}}
        for f in self.work.glob("*.progress.json"):
            try:
                p = json.loads(f.read_text())
            except (json.JSONDecodeError, OSError):
                continue
            for k in ("sent", "ok", "fail", "indefinite", "read"):
                total[k] += p.get(k, 0)
            for name, n in p.get("errors", {}).items():
                total["errors"][name] = total["errors"].get(name, 0) + n
        return total


def _wait_all(procs, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    for proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


# --- cluster snapshots -----------------------------------------------------------

class SnapshotSampler:
    """Samples leader/replicas/ISR per partition, the controller and live nodes every second."""

    def __init__(self, cluster: LocalCluster | None, topic: str, interval_s: float = 1.0):
        self.cluster, self.topic, self.interval = cluster, topic, interval_s
        self.rows: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="snapshots", daemon=True)

    def start(self) -> "SnapshotSampler":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.sample()
            except Exception as e:  # a sample may fail under faults; the next one tries again
                log.debug("snapshot failed: %s", e)
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def sample(self) -> None:
        if self.cluster is None:
            return
        ts = time.monotonic_ns()
        live = [n for n in self.cluster.node_ids() if self.cluster.node_state(n) == "running"]
        controller = self.cluster.active_controller()
        try:
            parts = self.cluster.partitions(self.topic)
        except ClusterError:
            parts = {}
        for p, info in sorted(parts.items()):
            self.rows.append({"ts_ns": ts, "partition": p, "leader": info["leader"], "replicas": info["replicas"],
                              "isr": info["isr"], "controller": -1 if controller is None else controller,
                              "live_nodes": live})


# --- drain -----------------------------------------------------------------------

def drain(bootstrap: str, topic: str, isolation: str, timeout_s: float) -> tuple[list[dict], dict[int, dict]]:
    """Read every partition of `topic` from the beginning to its high watermark with a fresh reader."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kp-audit-{uuid.uuid4().hex[:8]}",
                         "enable.auto.commit": False, "isolation.level": isolation, "log_level": 3,
                         "enable.partition.eof": False})
    try:
        md = consumer.list_topics(topic, timeout=15)
        if topic not in md.topics or not md.topics[topic].partitions:
            raise ClusterError(f"drain: topic {topic!r} not found")
        partitions = sorted(md.topics[topic].partitions)
        marks: dict[int, dict] = {}
        for p in partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=15, cached=False)
            marks[p] = {"low": low, "high": high, "complete": high <= low, "read": 0}
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        rows: list[dict] = []
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline and not all(m["complete"] for m in marks.values()):
            for m in consumer.consume(num_messages=1000, timeout=0.5):
                if m.error() is not None:
                    continue
                key = m.key()
                rows.append({"isolation": isolation, "partition": m.partition(), "offset": m.offset(),
                             "key": key.decode(errors="replace") if key is not None else None,
                             "value_id": ledger.decode_value_id(m.value()), "timestamp_ms": m.timestamp()[1]})
                marks[m.partition()]["read"] += 1
            positions = consumer.position([TopicPartition(topic, p) for p in partitions])
            for tp in positions:
                if tp.offset >= 0 and tp.offset >= marks[tp.partition]["high"]:
                    marks[tp.partition]["complete"] = True
        return rows, marks
    finally:
        consumer.close()


def high_watermarks(bootstrap: str, topic: str, timeout_s: float = 15) -> dict[int, int]:
    """High watermark of every partition of a topic."""
    from confluent_kafka import Consumer, TopicPartition
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"kp-marks-{uuid.uuid4().hex[:8]}",
                         "log_level": 3})
    try:
        md = consumer.list_topics(topic, timeout=timeout_s)
        parts = sorted(md.topics[topic].partitions) if topic in md.topics else []
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)[1]
                for p in parts}
    finally:
        consumer.close()


def audit_summary(marks_by_isolation: dict[str, dict]) -> dict:
    """Pure: the manifest's `audit` section: per partition low/high watermark and whether both drains reached high."""
    partitions: dict[str, dict] = {}
    for iso, marks in marks_by_isolation.items():
        for p, m in marks.items():
            entry = partitions.setdefault(str(p), {"low": m["low"], "high": m["high"], "complete": True})
            entry["high"] = max(entry["high"], m["high"])
            entry["complete"] = entry["complete"] and m["complete"]
            entry[f"read_{iso}"] = m["read"]
    return {"partitions": partitions, "isolations": sorted(marks_by_isolation)}


# --- assembling the ledger -------------------------------------------------------

def assemble_sends(work: Path, producers: int, audit_value_ids: set[int], offsets_from_broker: bool = True) -> pa.Table:
    """Join each producer's send and completion streams into ledger `sends` rows.

    Without `offsets_from_broker` (acks=0: no broker assigned the offsets in the delivery
    reports) every offset is null: the ledger never records an offset no broker confirmed.
    """
    import pandas as pd
    frames = []
    for i in range(producers):
        s = read_stream(work / f"producer-{i}.sends.arrow", SEND_STREAM).to_pandas()
        c = read_stream(work / f"producer-{i}.completions.arrow", COMPLETION_STREAM).to_pandas()
        t = read_stream(work / f"producer-{i}.txns.arrow", TXN_STREAM).to_pandas()
        c = c.drop_duplicates("value_id", keep="first")
        df = s.merge(c, on="value_id", how="outer")
        df["producer"] = i
        df["seq"] = df["value_id"] - (i << ledger.VALUE_ID_PRODUCER_SHIFT)
        # Values in the log that this producer never got to record (it died): in flight, so indefinite.
        known = set(df["value_id"].tolist())
        orphans = sorted(v for v in audit_value_ids if v >> ledger.VALUE_ID_PRODUCER_SHIFT == i and v not in known)
        if orphans:
            df = pd.concat([df, pd.DataFrame({"value_id": orphans, "producer": i,
                                              "seq": [v - (i << ledger.VALUE_ID_PRODUCER_SHIFT) for v in orphans]})],
                           ignore_index=True)
        df["partition"] = df["partition"].fillna(-1)
        df["outcome"] = [classify_delivery(None if pd.isna(n) else n, int(p)) if not pd.isna(ts) else "indefinite"
                         for n, p, ts in zip(df["error_name"], df["partition"], df["complete_ns"])]
        df.loc[df["outcome"] != "ok", "offset"] = None
        if not offsets_from_broker:
            df["offset"] = None
        if len(t):
            df = df.merge(t[["txn_id", "txn_outcome"]], on="txn_id", how="left")
        else:
            df["txn_outcome"] = None
        frames.append(df)
    if not frames:
        return ledger.SENDS.empty_table()
    df = pd.concat(frames, ignore_index=True).sort_values("value_id")
    df["producer_pid"] = df["producer_pid"].fillna(-1)
    df["intended_ns"] = df["intended_ns"].fillna(-1)
    df["send_ns"] = df["send_ns"].fillna(-1)
    cols = {f.name: df[f.name] for f in ledger.SENDS}
    return pa.Table.from_pandas(pd.DataFrame(cols), schema=ledger.SENDS, preserve_index=False)


def assemble_consumer_tables(work: Path) -> tuple[pa.Table, pa.Table]:
    reads = [read_stream(p, ledger.READS) for p in sorted(work.glob("consumer-*.reads.arrow"))]
    events = [read_stream(p, ledger.CONSUMER_EVENTS) for p in sorted(work.glob("consumer-*.events.arrow"))]
    return (pa.concat_tables(reads) if reads else ledger.READS.empty_table(),
            pa.concat_tables(events) if events else ledger.CONSUMER_EVENTS.empty_table())


def fault_rows(fault_log: Path) -> list[dict]:
    """Pair inject and heal events of the fault log into ledger `faults` rows."""
    if not fault_log.exists():
        return []
    rows: dict[str, dict] = {}
    effects: dict[str, dict] = {}
    for line in fault_log.read_text().splitlines():
        e = json.loads(line)
        if e["event"] == "inject":
            rows[e["fault_id"]] = {"fault_id": e["fault_id"], "kind": e["kind"], "target": e["target"],
                                   "nodes": e["nodes"], "params": json.dumps(e["params"], sort_keys=True),
                                   "start_ns": e["mono_ns"], "start_wall": e["wall"], "heal_ns": None, "heal_wall": None,
                                   "proxy_rule": json.dumps(e["rule"], sort_keys=True) if e.get("rule") else None,
                                   "proxy_fired": None}
            effects[e["fault_id"]] = {**(e.get("effect") or {}), **(e.get("annotations") or {})}
        elif e["event"] == "heal" and e["fault_id"] in rows:
            rows[e["fault_id"]].update(heal_ns=e["mono_ns"], heal_wall=e["wall"])
            if e.get("proxy_fired") is not None:
                rows[e["fault_id"]]["proxy_fired"] = e["proxy_fired"]
            effects[e["fault_id"]].update({k: e[k] for k in HEAL_EFFECTS if e.get(k) is not None})
    for fid, row in rows.items():
        row["effect"] = json.dumps(effects[fid], sort_keys=True)
    return sorted(rows.values(), key=lambda r: r["start_ns"])


# What a heal record says the fault did while active (faults.py `_apply_heal`).
HEAL_EFFECTS = ("proxy_fired", "proxy_matched", "dropped_packets", "dropped_bytes", "tbf_overlimits", "tbf_dropped",
                "consumer_restarted")


def collect_proxy_events(cluster: LocalCluster, since_ns: int, dest: Path) -> int:
    """Copy the events the cluster's fault proxies logged since `since_ns` into `dest` (JSON lines, by time)."""
    from .proxy import read_events
    events = []
    for nid in cluster.proxy_ids():
        path = cluster.proxy_events_path(nid)
        if path.exists():
            events += [e for e in read_events(path) if e.get("ts_ns", 0) >= since_ns]
    events.sort(key=lambda e: e.get("ts_ns", 0))
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest, "w") as f:
        for e in events:
            f.write(json.dumps(e, sort_keys=True) + "\n")
    return len(events)


def proxy_event_rows(events: list[dict], fault_ids: set[str]) -> list[dict]:
    """Ledger `proxy_events` rows: one per action a proxy took on a request (its `fault` events)."""
    rows = []
    for e in events:
        if e.get("event") != "fault":
            continue
        detail = e.get("detail") or {}
        topics = e.get("topics") or []
        topic = topics[0]["topic"] if topics else None
        partitions = list(topics[0]["partitions"]) if topics else []
        base_offsets = None
        counts = topics[0].get("record_counts") if topics else None
        results = detail.get("results")
        if results and not topics:
            # The request's topics are unknown (the proxy no longer had its frame): its answer names them.
            topic = results[0].get("topic")
            partitions = [r["partition"] for r in results if r.get("topic") == topic]
        if results is not None:
            # What the broker wrote for the request whose answer was dropped, replaced or
            # discarded: its base offset per partition, -1 where it wrote nothing (it answered an error).
            by_part = {r["partition"]: (r["base_offset"] if r.get("error_code") == 0 else -1)
                       for r in results if r.get("topic") in (topic, topics[0].get("topic_id") if topics else None)}
            base_offsets = [by_part.get(p, -1) for p in partitions]
        rule_id = e.get("rule_id")
        rows.append({
            "ts_ns": e["ts_ns"], "fault_id": rule_id if rule_id in fault_ids else None, "rule_id": rule_id,
            "broker": e.get("broker"), "proxy": e.get("proxy"), "conn": e.get("conn"),
            "client_id": e.get("client_id"), "api": e.get("api"), "api_key": e.get("api_key"),
            "api_version": e.get("api_version"), "correlation_id": e.get("correlation_id"),
            "action": e.get("action"), "phase": e.get("phase"), "topic": topic, "partitions": partitions,
            "base_offsets": base_offsets,
            "error_code": detail.get("error_code"), "delay_ms": detail.get("delay_ms"),
            "detail": json.dumps(detail, sort_keys=True) if detail else None,
            "record_counts": list(counts) if counts and len(counts) == len(partitions) else None,
        })
    return rows


# --- the run ---------------------------------------------------------------------

class ScenarioRun:
    """One execution of a scenario. Use `execute()`; it never leaves anything running."""

    def __init__(self, scenario: Scenario, options: RunOptions):
        configured = scenario.with_overrides(options.messages, options.kafka_version, options.brokers,
                                             options.bootstrap)
        try:
            self.environment_overrides = environment_overrides(os.environ)
        except ClientConfigError as e:
            raise KafkaproofError(f"environment: {e}") from None
        # What runs includes the environment's extra settings; the hash (history's "same configuration")
        # does not: they are the system under test changing, which is what history is there to catch.
        self.scenario = Scenario(configured.name, configured.path,
                                 apply_overrides(configured.data, self.environment_overrides))
        self.scenario_hash = configured.hash()
        self.options = options
        self.run_id = new_run_id(scenario.name)
        self.run_dir = Path(options.out).resolve() / self.run_id
        self.work = self.run_dir / "work"
        self.fault_log = self.work / "faults.jsonl"
        self.cluster: LocalCluster | None = None
        self.bootstrap: str | None = options.bootstrap
        self.direct_bootstrap: str | None = options.bootstrap  # never through a fault proxy (the drain)
        self.proxy_events_file = self.work / "proxy-events.jsonl"
        self.timings: dict[str, dict] = {}
        self.fault_errors: list[str] = []
        self.audit_marks: dict[str, dict] = {}
        self.audit_rows: list[dict] = []
        self.sampler: SnapshotSampler | None = None
        mono, wall = time.monotonic_ns(), time.time_ns()
        self.manifest: dict[str, Any] = {
            "run_id": self.run_id, "scenario": self.scenario.data, "scenario_name": self.scenario.name,
            "scenario_path": self.scenario.path, "scenario_hash": self.scenario_hash,
            "environment_overrides": self.environment_overrides,
            "guarantee": self.scenario.guarantee, "expect": self.scenario.expect,
            "versions": versions(self.scenario.data["cluster"]["kafka_version"]),
            "host": {"hostname": socket.gethostname(), "cpus": os.cpu_count(), "platform": platform.platform()},
            "clock": {"monotonic_origin_ns": mono, "wall_origin_ns": wall, "unit": "ns", "source": "CLOCK_MONOTONIC"},
            "topic": self.scenario.topic, "clients": effective_clients(self.scenario.data),
            "status": "running", "error": None}

    # phases ---------------------------------------------------------------------
    @contextlib.contextmanager
    def phase(self, name: str):
        start_ns, start_wall = now()
        log.info("[%s] %s", self.scenario.name, name)
        try:
            yield
        finally:
            end_ns, end_wall = now()
            self.timings[name] = {"start_ns": start_ns, "end_ns": end_ns, "start_wall": start_wall,
                                  "end_wall": end_wall, "seconds": round((end_ns - start_ns) / 1e9, 3)}

    def execute(self) -> RunResult:
        self.work.mkdir(parents=True, exist_ok=True)
        ledger.write_manifest(self.run_dir, self.manifest)
        status, error = "complete", None
        deadline = time.monotonic() + self.scenario.data["timeout_s"]
        try:
            with contextlib.ExitStack() as stack:
                self._provision(stack)
                self._experiment(stack, deadline)
            with self.phase("assemble"):
                self._assemble()
            if self.fault_errors:
                status, error = "error", "faults could not be injected: " + "; ".join(self.fault_errors)
            incomplete = [p for iso in self.audit_marks.values() for p, m in iso.items() if not m["complete"]]
            if incomplete and status == "complete":
                status, error = "incomplete", f"the drain did not reach the high watermark of partitions {sorted(set(incomplete))}"
        except (KeyboardInterrupt, RunInterrupted) as e:
            status, error = "incomplete", f"interrupted: {e or 'signal'}"
        except KafkaproofError as e:
            status, error = "error", str(e)
        except Exception as e:  # an unexpected failure must still end as a recorded error
            log.exception("run failed")
            status, error = "error", f"{type(e).__name__}: {e}"
        finally:
            self.manifest.update(status=status, error=error, timings=self.timings,
                                 bootstrap=self.bootstrap, direct_bootstrap=self.direct_bootstrap,
                                 audit=audit_summary(self.audit_marks),
                                 fault_errors=self.fault_errors)
            ledger.write_manifest(self.run_dir, self.manifest)
        log.info("[%s] run %s: %s%s -> %s", self.scenario.name, self.run_id, status,
                 f" ({error})" if error else "", self.run_dir)
        return RunResult(self.run_id, self.run_dir, status, error)

    def _provision(self, stack: contextlib.ExitStack) -> None:
        data = self.scenario.data
        if self.options.attach:
            with self.phase("provision"):
                self.cluster = LocalCluster.attach(self.options.cluster_name)
                self.cluster.wait_ready(60)
                if data["cluster"].get("proxy") and not self.cluster.has_proxy:
                    raise KafkaproofError(f"the scenario needs the fault proxy but cluster "
                                          f"{self.options.cluster_name!r} runs without it (`cluster up --proxy`)")
            stack.callback(self._copy_node_logs)
            stack.callback(self._collect_proxy_events)  # before the logs are copied and the cluster goes
            self.bootstrap = self.cluster.bootstrap_servers()
            self.direct_bootstrap = self.cluster.direct_bootstrap()
            self.manifest["cluster"] = self.cluster.status()
        elif self.options.bootstrap is None:
            cfg = cluster_config(data, self.options.cluster_name or f"run-{uuid.uuid4().hex[:6]}")
            with self.phase("provision"):
                self.cluster = LocalCluster.up(cfg)
            stack.callback(self._teardown)
            stack.callback(self._collect_proxy_events)
            self.bootstrap = self.cluster.bootstrap_servers()
            self.direct_bootstrap = self.cluster.direct_bootstrap()
            self.manifest["cluster"] = self.cluster.status()
        else:
            not_applicable = sorted({t.spec.kind for t in self.scenario.timeline()
                                     if not t.on_consumer and not t.spec.is_proxy})
            if not_applicable:
                raise KafkaproofError(f"faults {', '.join(not_applicable)} need the local cluster backend; on an "
                                      f"existing cluster (--bootstrap) only proxy faults and consumer faults apply")
            from .external import ExternalCluster
            with self.phase("provision"):
                self.cluster = ExternalCluster.up(self.options.bootstrap,
                                                  self.options.cluster_name or f"ext-{uuid.uuid4().hex[:6]}",
                                                  proxy=bool(data["cluster"].get("proxy")))
            stack.callback(self._teardown)
            stack.callback(self._collect_proxy_events)
            self.bootstrap = self.cluster.bootstrap_servers()
            self.manifest["cluster"] = self.cluster.status()
        t = data["topic"]
        if t["create"]:
            with self.phase("create_topic"):
                self.cluster.create_topic(t["name"], t["partitions"], t["replication_factor"], t["config"])
                self.cluster.wait_in_sync(t["name"])
                self.manifest["topic_description"] = self.cluster.describe_topic(t["name"])

    def _collect_proxy_events(self) -> None:
        """Keep what the fault proxies logged during this run (`work/proxy-events.jsonl`)."""
        if self.cluster is None or not self.cluster.has_proxy:
            return
        try:
            n = collect_proxy_events(self.cluster, self.manifest["clock"]["monotonic_origin_ns"], self.proxy_events_file)
            log.info("[%s] %d proxy events kept", self.scenario.name, n)
            (self.run_dir / "logs").mkdir(exist_ok=True)
            for nid in self.cluster.proxy_ids():
                src = self.cluster.node_dir(nid) / "proxy.log"
                if src.exists():
                    shutil.copy(src, self.run_dir / "logs" / f"proxy-{nid}.log")
        except Exception as e:  # never block the teardown; the run then lacks proxy events
            log.error("could not collect the proxy events: %s", e)
            self.fault_errors.append(f"proxy events not collected: {e}")

    def _copy_node_logs(self) -> None:
        logs = self.run_dir / "logs"
        logs.mkdir(exist_ok=True)
        for nid in self.cluster.node_ids():
            src = self.cluster.node_dir(nid) / "server.log"
            if src.exists():
                shutil.copy(src, logs / f"node-{nid}.log")

    def _teardown(self) -> None:
        with self.phase("teardown"):
            self._copy_node_logs()
            self.cluster.down(keep_logs=False, graceful=False)  # data already drained

    def _producer_bootstrap(self) -> str:
        ids = self.scenario.data["producers"].get("bootstrap")
        if not ids or self.cluster is None:
            return self.bootstrap
        nodes = {n["id"]: n for n in self.cluster.state()["nodes"]}
        return ",".join(f"{nodes[i]['advertised_host']}:{nodes[i]['advertised_port']}" for i in ids)

    def _experiment(self, stack: contextlib.ExitStack, deadline: float) -> None:
        data = self.scenario.data
        topic = data["topic"]["name"]
        injector = stack.enter_context(FaultInjector(self.cluster, topic, self.fault_log)) if self.cluster else None
        events = WorkerEvents()
        stack.callback(events.close)
        workers = Workers(self.work, {"run_id": self.run_id, "out": str(self.work), "topic": topic,
                                      "bootstrap": self.bootstrap, "notify": events.address},
                          owner=self.run_id, cluster=self.cluster.name if self.cluster else None)
        stack.callback(workers.kill_all)
        sampler = SnapshotSampler(self.cluster, topic).start()
        stack.callback(sampler.stop)
        self.sampler = sampler
        cons = data["consumers"]
        prod = data["producers"]
        consumer_spec = {k: cons[k] for k in ("mode", "isolation_level", "commit", "processing_ms", "config")}
        consumer_spec["group"] = cons.get("group", "")
        if cons["mode"] == "assign":
            consumer_spec["partitions"] = list(range(data["topic"]["partitions"]))
        producer_spec = {k: prod[k] for k in ("rate", "value_size", "keys", "config") if k in prod}
        producer_spec.update({k: prod[k] for k in ("messages", "duration_s", "transactions") if k in prod})
        producer_spec["bootstrap"] = self._producer_bootstrap()
        producer_spec["offsets_from_broker"] = producer_settings(prod, 0)["offsets_from_broker"]

        with self.phase("workload"):
            for i in range(cons["count"]):
                workers.start_consumer(i, consumer_spec)
            t0 = time.monotonic()
            timeline = Timeline(self, injector, workers, t0, events)
            stack.callback(timeline.stop)
            timeline.start()
            producers_started = False
            last_progress = 0.0
            while True:
                if time.monotonic() > deadline:
                    raise RunInterrupted(f"time limit of {data['timeout_s']}s reached")
                elapsed = time.monotonic() - t0
                if not producers_started and elapsed >= prod["start_after_s"]:
                    for i in range(prod["count"]):
                        workers.start_producer(i, producer_spec)
                    producers_started = True
                if time.monotonic() - last_progress >= self.options.progress_interval_s:
                    self._show_progress(workers, elapsed, timeline)
                    last_progress = time.monotonic()
                if producers_started and workers.producers_done() and timeline.finished():
                    break
                time.sleep(0.2)
            self._show_progress(workers, time.monotonic() - t0, timeline)
            self._check_producers(workers)
        with self.phase("heal"):
            timeline.stop()
            timeline.heal_everything()
        with self.phase("settle"):
            self._wait_consumers_settle(workers, deadline)
            workers.stop_consumers()
        with self.phase("drain"):
            for iso in ("read_uncommitted", "read_committed"):
                rows, marks = drain(self.direct_bootstrap, topic, iso, data["drain"]["timeout_s"])
                self.audit_rows += rows
                self.audit_marks[iso] = {str(p): m for p, m in marks.items()}
        sampler.stop()

    def _check_producers(self, workers: Workers) -> None:
        """A producer that crashed did not send what the scenario says: the run cannot pass."""
        for i, proc in workers.producers.items():
            if proc.returncode != 0:
                log_path = self.work / f"producer-{i}.stderr.log"
                tail = log_path.read_text(errors="replace").strip().splitlines()[-3:] if log_path.exists() else []
                raise KafkaproofError(f"producer {i} exited with code {proc.returncode}: {' | '.join(tail)} "
                                      f"(full log: {log_path})")

    def _wait_consumers_settle(self, workers: Workers, deadline: float) -> None:
        """Let the consumers catch up: until, for every partition, some live consumer's fetch position
        reaches the high watermark (bounded by drain.timeout_s; what they miss shows as not delivered)."""
        if not workers.consumers:
            return
        limit = min(deadline, time.monotonic() + self.scenario.data["drain"]["timeout_s"])
        marks = high_watermarks(self.direct_bootstrap, self.scenario.topic)
        behind = marks
        while time.monotonic() < limit:
            for i, proc in list(workers.consumers.items()):
                if proc.poll() is not None:  # a consumer left dead by a fault still gets to finish
                    workers.restart_consumer(i)
            positions = workers.consumer_positions()
            behind = {p: hw for p, hw in marks.items() if positions.get(p, -1) < hw}
            if not behind:
                time.sleep(self.scenario.data["drain"]["settle_s"])  # let the last commits land
                return
            time.sleep(0.5)
        log.warning("[%s] consumers did not reach the end of partitions %s within %ss",
                    self.scenario.name, sorted(behind), self.scenario.data["drain"]["timeout_s"])

    def _show_progress(self, workers: Workers, elapsed: float, timeline: "Timeline") -> None:
        p = workers.progress()
        errors = ", ".join(f"{k}={v}" for k, v in sorted(p["errors"].items())) or "none"
        active = ", ".join(timeline.active_descriptions()) or "none"
        log.info("[%s] t=%5.1fs sent=%d acked=%d failed=%d indefinite=%d read=%d errors: %s | faults: %s",
                 self.scenario.name, elapsed, p["sent"], p["ok"], p["fail"], p["indefinite"], p["read"], errors, active)

    def _assemble(self) -> None:
        data = self.scenario.data
        audit_rows = self.audit_rows
        audit_ids = {r["value_id"] for r in audit_rows if r["value_id"] >= 0}
        counts = {}
        sends = assemble_sends(self.work, data["producers"]["count"], audit_ids,
                               producer_settings(data["producers"], 0)["offsets_from_broker"])
        ledger.write_arrow(self.run_dir, "sends", sends)
        reads, events = assemble_consumer_tables(self.work)
        ledger.write_arrow(self.run_dir, "reads", reads)
        ledger.write_arrow(self.run_dir, "consumer_events", events)
        counts["sends"], counts["reads"], counts["consumer_events"] = sends.num_rows, reads.num_rows, events.num_rows
        counts["audit"] = ledger.write_table(self.run_dir, "audit", audit_rows)
        faults = fault_rows(self.fault_log)
        counts["faults"] = ledger.write_table(self.run_dir, "faults", faults)
        proxy_events = []
        if self.proxy_events_file.exists():
            from .proxy import read_events
            proxy_events = proxy_event_rows(read_events(self.proxy_events_file), {f["fault_id"] for f in faults})
        counts["proxy_events"] = ledger.write_table(self.run_dir, "proxy_events", proxy_events)
        counts["cluster_snapshots"] = ledger.write_table(self.run_dir, "cluster_snapshots",
                                                         self.sampler.rows if self.sampler else [])
        outcomes = sends.column("outcome").to_pylist()
        counts.update({f"sends_{o}": outcomes.count(o) for o in ledger.SEND_OUTCOMES})
        self.manifest["counts"] = counts


class Timeline:
    """Runs a scenario's fault timeline, each fault in a thread of its own.

    A fault waits until its `at`, then (with `after`) for the state it needs — the next commit of
    a consumer, a partition's ISR shrinking — and `delay_s`; it is injected, and healed `duration`
    seconds after the injection (without a duration: when the workload is over). One fault
    taking seconds to inject or heal (a node slow to stop or to listen again) never delays
    another. A trigger that never happens is an error of the run, not a silent skip.
    """

    def __init__(self, run: ScenarioRun, injector: FaultInjector | None, workers: Workers, t0: float,
                 events: WorkerEvents | None = None):
        self.run, self.injector, self.workers, self.t0, self.events = run, injector, workers, t0, events
        self.entries = run.scenario.timeline()
        self.fault_ids: dict[int, str] = {}  # entry position -> fault id, once injected
        self.active: dict[str, str] = {}
        self.consumer_faults: dict[str, tuple[TimelineFault, int]] = {}
        self.healed: set[int] = set()
        self._threads: list[threading.Thread] = []
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        for pos, entry in enumerate(self.entries):
            thread = threading.Thread(target=self._lifecycle, args=(pos, entry), name=f"fault-{entry.index}",
                                      daemon=True)
            self._threads.append(thread)
            thread.start()

    def stop(self) -> None:
        """Stop waiting: faults not yet injected never will be; faults waiting out their duration heal now."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=120)

    def finished(self) -> bool:
        """Every fault injected, and every fault with a duration healed."""
        return not any(t.is_alive() for t in self._threads)

    def active_descriptions(self) -> list[str]:
        with self._lock:
            return list(self.active.values())

    def _sleep_until(self, t: float) -> bool:
        """Sleep until `t` seconds after t0; False when stopped first."""
        return not self._stop.wait(max(0.0, self.t0 + t - time.monotonic()))

    def _lifecycle(self, pos: int, entry: TimelineFault) -> None:
        if not self._sleep_until(entry.at):
            return
        annotations: dict[str, Any] = {"scenario_index": entry.index}
        if entry.after:
            trigger = self._await_trigger(entry)
            if trigger is None:
                return
            annotations.update(trigger)
        if not self._inject(pos, entry, annotations):
            return
        if entry.duration is not None or entry.on_consumer:
            # A consumer fault without a duration restarts the consumer at once.
            self._stop.wait(entry.duration or 0.0)
            self._heal_position(pos)

    def _await_trigger(self, entry: TimelineFault) -> dict | None:
        """Wait for the fault's trigger; what was awaited and how long, or None (stopped or timed out)."""
        after, started = entry.after, time.monotonic()
        if after["event"] == "consumer_commit":
            held = self._await_commit(after["consumer"], entry.trigger_timeout_s)
        else:
            held = self._await_isr_shrunk(after["partition"], entry.trigger_timeout_s)
        if self._stop.is_set():
            return None
        if not held:
            msg = (f"faults[{entry.index}] ({entry.describe()}): its trigger {after['event']} did not happen within "
                   f"{entry.trigger_timeout_s:g}s, so the fault was never injected")
            log.error("%s", msg)
            self.run.fault_errors.append(msg)
            return None
        waited = time.monotonic() - started
        if after.get("delay_s") and self._stop.wait(after["delay_s"]):
            return None
        log.info("faults[%d]: trigger %s held after %.3fs", entry.index, after["event"], waited)
        return {"trigger": {**after, "waited_s": round(waited, 3), "at_s": round(time.monotonic() - self.t0, 3)}}

    def _await_commit(self, consumer: int, timeout_s: float) -> bool:
        if self.events is None:
            return False
        seen = self.events.count("commit", consumer)
        return self.events.wait_next("commit", consumer, seen, timeout_s, self._stop)

    def _await_isr_shrunk(self, partition: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        cluster, topic = self.run.cluster, self.run.scenario.topic
        while not self._stop.is_set() and time.monotonic() < deadline:
            try:
                p = cluster.partitions(topic).get(partition)
                if p and len(p["isr"]) < len(p["replicas"]):
                    return True
            except (KafkaproofError, OSError):
                pass  # a metadata read may fail under faults; ask again
            self._stop.wait(0.2)
        return False

    def _inject(self, pos: int, entry: TimelineFault, annotations: dict | None) -> bool:
        try:
            if entry.on_consumer:
                fid = self._inject_consumer(entry, annotations)
            else:
                fid = self.injector.inject(entry.spec, annotations).fault_id
        except (KafkaproofError, OSError) as e:
            msg = f"faults[{entry.index}] ({entry.describe()}): {e}"
            log.error("fault not injected: %s", msg)
            self.run.fault_errors.append(msg)
            return False
        with self._lock:
            self.fault_ids[pos] = fid
            self.active[fid] = f"{entry.spec.kind} {entry.spec.target or entry.spec.params.get('groups')}"
        return True

    def _heal_position(self, pos: int) -> None:
        with self._lock:
            if pos in self.healed or pos not in self.fault_ids:
                return
            self.healed.add(pos)
            fid = self.fault_ids[pos]
        self._heal(fid)

    def _inject_consumer(self, entry: TimelineFault, annotations: dict | None = None) -> str:
        index = int(entry.spec.target.split(":")[1])
        sig = {"kill": signal.SIGKILL, "stop": signal.SIGTERM, "pause": signal.SIGSTOP}[entry.spec.kind]
        pid = self.workers.signal_consumer(index, sig)
        if sig != signal.SIGSTOP:
            self.workers.consumers[index].wait(30)
            state_after = "dead" if self.workers.consumers[index].poll() is not None else "running"
        else:
            state_after = process.state_of(process.ref_for(pid)) if process.start_ticks(pid) else "dead"
        fid = f"{entry.spec.kind}-consumer{index}-{uuid.uuid4().hex[:6]}"
        mono, wall = now()
        append_fault_log(self.run.fault_log, {"event": "inject", "fault_id": fid, "kind": entry.spec.kind,
                                              "target": entry.spec.target, "nodes": [],
                                              "params": {"pid": pid, **entry.spec.params}, "mono_ns": mono,
                                              "wall": wall, "effect": {"consumer_state": state_after},
                                              **({"annotations": annotations} if annotations else {})})
        self.consumer_faults[fid] = (entry, index)
        log.info("fault %s: %s consumer %d (pid %d)", fid, entry.spec.kind, index, pid)
        return fid

    def _heal(self, fid: str) -> None:
        try:
            if fid in self.consumer_faults:
                entry, index = self.consumer_faults.pop(fid)
                before = self.workers.incarnations.get(index, 0)
                self.workers.restart_consumer(index)
                mono, wall = now()
                append_fault_log(self.run.fault_log, {
                    "event": "heal", "fault_id": fid, "kind": entry.spec.kind, "target": entry.spec.target,
                    "nodes": [], "params": {}, "mono_ns": mono, "wall": wall,
                    "consumer_restarted": self.workers.incarnations.get(index, 0) > before})
            else:
                self.injector.heal(fid)
        except (KafkaproofError, OSError) as e:
            self.run.fault_errors.append(f"heal {fid}: {e}")
            log.error("heal of %s failed: %s", fid, e)
        with self._lock:
            self.active.pop(fid, None)

    def heal_everything(self) -> None:
        """Heal what is still active: faults without a duration, at the end of the workload."""
        self.stop()
        for pos in list(self.fault_ids):
            self._heal_position(pos)
        for fid in list(self.consumer_faults):
            self._heal(fid)
        if self.injector is not None:
            for fid in list(self.injector.injected):
                self._heal(fid)
