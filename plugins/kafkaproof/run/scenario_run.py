"""Run a scenario: cluster, topic, consumers, producers, fault timeline, heal, drain, ledger.

`ScenarioRun` turns a resolved scenario (`ResolvedScenario`) into a run directory (see
docs/ledger-schema.md). Whatever happens (an exception, SIGINT/SIGTERM, a
timeout) it heals every fault, stops every process it started, tears the
cluster down and writes `manifest.json`; a run that could not collect its data
ends `incomplete` or `error`, never `complete`.
"""
from __future__ import annotations

import contextlib
import logging
import os
import platform
import shutil
import socket
import time
import uuid
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pyarrow as pa

from .. import __version__
from ..paths import state_dir
from ..cluster.attached import NOT_YET, AttachedCluster
from ..cluster.compose import refusal as compose_refusal
from ..cluster import ExternalCluster, LocalCluster, attach, backend_class, start_cluster, unsupported_faults
from ..cluster import docker_engine as de
from ..cluster.heal import now
from ..cluster.reuse import reuse_record
from ..errors import KafkaproofError
from ..faults import FaultInjector
from ..spec import coordinator_targets, ledger
from ..spec.clients import effective_clients, producer_settings
from ..spec.client_versions import to_manifest
from ..spec.connection import redacted
from ..spec.application import check_application_host
from ..spec.fault_families import family_of
from .app_containers import ContainerFleet, ContainerPlan, container_target, plan_containers
from .app_run import AppRun
from .copier_run import PipelineRun, copier_spec, reader_spec
from .share_run import ShareRun, share_clients
from .assemble import FAULT_LOG, PROXY_EVENTS, assemble_ledger, collect_proxy_events
from .control import RunControl
from .resolved import ResolvedScenario
from .elr import ElrSampler, features_record
from .drain import audit_summary, committed_offsets, describe_group, drain, high_watermarks
from .sampler import SnapshotSampler
from .stopping import DEFAULT_MIN_FREE_DISK_MB, early_stop_reason, free_disk_mb, stop_requested
from .timeline import Timeline
from .versions import client_versions, python_client_versions
from .workers import WorkerEvents, Workers

log = logging.getLogger(__name__)


# How long a run waits for its fault tasks to start (an executor starts a task within seconds).
FAULT_TASKS_START_S = 120.0


class RunInterrupted(KafkaproofError):
    """The run was interrupted (SIGINT/SIGTERM) or hit its time limit."""


@dataclass
class RunOptions:
    """Where and how a resolved scenario runs (what it runs is its `ResolvedScenario`, overrides included)."""

    out: Path = Path("runs")
    proxy_listen: str = "127.0.0.1"  # where the proxies in front of an existing cluster listen (cluster/external.py)
    client_config: dict | None = None  # how clients connect to it (security settings; spec.connection)
    cluster_name: str | None = None
    attach: bool = False  # use the already running local cluster `cluster_name` and leave it up
    progress_interval_s: float = 2.0
    control: str | None = None  # fault tasks of another process time the faults (run/control.py)


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    status: str  # complete | incomplete | error
    error: str | None = None


def new_run_id(scenario_name: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return f"{scenario_name}-{stamp}-{uuid.uuid4().hex[:4]}"


def versions(kafka_version: str | None) -> dict[str, str | None]:
    """The run's own environment (the runner's drain and admin client are confluent-kafka on librdkafka);
    what each producer and consumer ran on is `client_versions` (run/versions.py)."""
    confluent_kafka, librdkafka = python_client_versions()
    return {"kafka": kafka_version, "confluent_kafka": confluent_kafka.version,
            "librdkafka": librdkafka.version, "python": platform.python_version(),
            "pyarrow": pa.__version__, "kafkaproof": __version__}


def run_seed(run_id: str) -> int:
    """Pure: a run's seed for its workers' random draws (from its id)."""
    return int(uuid.uuid5(uuid.NAMESPACE_OID, run_id).hex[:8], 16)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except FileNotFoundError:
        return 0


# --- the run ---------------------------------------------------------------------

class ScenarioRun:
    """One execution of a scenario. Use `execute()`; it never leaves anything running."""

    def __init__(self, resolved: ResolvedScenario, options: RunOptions):
        # resolved once before (`run.resolved.resolve`): overrides, drawn schedule, checks, environment
        self.resolved = resolved
        self.scenario = resolved.scenario
        self.environment_overrides = resolved.environment_overrides
        self.scenario_hash = resolved.scenario_hash
        self.options = options
        self.run_id = new_run_id(self.scenario.name)
        self.run_dir = Path(options.out).resolve() / self.run_id
        self.work = self.run_dir / "work"
        self.fault_log = self.work / FAULT_LOG
        self.cluster: LocalCluster | None = None
        self.bootstrap: str | None = resolved.bootstrap
        self.direct_bootstrap: str | None = resolved.bootstrap  # never through a fault proxy (the drain)
        self.proxy_events_file = self.work / PROXY_EVENTS
        self.timings: dict[str, dict] = {}
        self.fault_errors: list[str] = []
        self.audit_marks: dict[str, dict] = {}
        self.audit_rows: list[dict] = []
        self.app_reads: pa.Table | None = None  # what the application's consumer side processed
        # fault tasks of another process time the faults through this (run/control.py)
        self.control = RunControl(options.control) if options.control else None
        self.sampler: SnapshotSampler | None = None
        self.node_log_start: dict[int, int] = {}  # where this run's lines begin in each node's server.log
        self.app_plan: ContainerPlan | None = None  # the container services and their images
        self.app: AppRun | None = None  # the application under test (issue 39), once its section is checked
        # an exactly-once pipeline's copiers (issue 43): they run in the consumers' places
        self.pipeline = (PipelineRun(self.scenario.data["pipeline"], self.scenario.topic, self.work)
                         if self.scenario.data.get("pipeline") else None)
        # a share group's consumers (issue 46): they too run in the consumers' places
        self.share = (ShareRun(self.scenario.data["share"], self.scenario.topic, self.work)
                      if self.scenario.data.get("share") else None)
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
        if self.share:  # judged on the share ledger (claim share_group), not as a consumer group's reads
            self.manifest["clients"] = share_clients(self.manifest["clients"], self.share.section)
        if self.scenario.random_faults:
            self.manifest["random_schedule"] = {"seed": self.scenario.random_faults["seed"],
                                                "faults": self.scenario.data["faults"]}
            log.info("[%s] random schedule, seed %d: %d faults (replay: kafkaproof run --replay %s)",
                     self.scenario.name, self.scenario.random_faults["seed"], len(self.scenario.data["faults"]),
                     self.run_dir)

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
            if self.control:  # fault tasks still waiting give up at once
                self.control.finish(status)
        log.info("[%s] run %s: %s%s -> %s", self.scenario.name, self.run_id, status,
                 f" ({error})" if error else "", self.run_dir)
        return RunResult(self.run_id, self.run_dir, status, error)

    def _provision(self, stack: contextlib.ExitStack) -> None:
        """Get the cluster the run uses, refusing faults its backend cannot inject before anything starts."""
        data = self.scenario.data
        if self.options.attach:
            with self.phase("provision"):
                self.cluster = attach(self.options.cluster_name)
                self._refuse_unsupported(self.cluster.supported_faults, self.cluster.backend)
                reuse = reuse_record(self.cluster.name)
                if reuse is not None:  # a pipeline's cluster: fresh, or kept from earlier scenarios and checked
                    self.manifest["cluster_reuse"] = reuse
                self.node_log_start = {nid: _size(self.cluster.node_log(nid))
                                       for nid in self.cluster.node_ids()}  # earlier runs' lines stay out
                self.cluster.wait_ready(60)
                pinned, has = data["cluster"].get("features") or {}, (self.cluster.state().config or {}).get("features")
                if pinned and pinned != (has or {}):
                    raise KafkaproofError(f"the scenario pins feature levels {pinned} but cluster "
                                          f"{self.options.cluster_name!r} was formatted with {has or 'its defaults'}")
                if data["cluster"].get("proxy") and not self.cluster.has_proxy:
                    raise KafkaproofError(f"the scenario needs the fault proxy but cluster "
                                          f"{self.options.cluster_name!r} runs without it (`cluster up --proxy`)")
            stack.callback(self._copy_node_logs)
        elif data["cluster"].get("attach"):
            self._refuse_unsupported(AttachedCluster.supported_for(), "attached")
            if not self.resolved.overrides.faults_hit_attached:
                raise KafkaproofError(f"the scenario's faults would hit your compose project {data['cluster']['attach']}"
                                      f": run it with --i-understand-faults-hit-this-cluster")
            with self.phase("provision"):
                self.cluster = AttachedCluster.up(data["cluster"]["attach"],
                                                  self.options.cluster_name or f"att-{uuid.uuid4().hex[:6]}",
                                                  proxy=bool(data["cluster"].get("proxy")),
                                                  proxy_host=self.options.proxy_listen)
            stack.callback(self._teardown)  # detach: healed, kafkaproof's topic and group deleted, brokers back
        elif self.resolved.bootstrap is None:
            cfg = self.resolved.cluster_config(self.options.cluster_name or f"run-{uuid.uuid4().hex[:6]}")
            self._refuse_unsupported(backend_class(cfg.backend).supported_for(), cfg.backend)
            self._check_images()
            with self.phase("provision"):
                self.cluster = start_cluster(cfg, self.scenario.upgrade_versions)
            stack.callback(self._teardown)
        else:
            self._refuse_unsupported(ExternalCluster.supported_faults, "external")
            with self.phase("provision"):
                self.cluster = ExternalCluster.up(self.resolved.bootstrap,
                                                  self.options.cluster_name or f"ext-{uuid.uuid4().hex[:6]}",
                                                  proxy=bool(data["cluster"].get("proxy")),
                                                  proxy_host=self.options.proxy_listen,
                                                  client_config=self.options.client_config)
            stack.callback(self._teardown)
        stack.callback(self._collect_proxy_events)  # before the logs are copied and the cluster goes
        self.bootstrap = self.cluster.bootstrap_servers()
        self.direct_bootstrap = self.cluster.direct_bootstrap()
        self.manifest["cluster"] = self.cluster.status()
        self.manifest["features"] = features_record(self.cluster, data["cluster"])
        self.manifest["client_connection"] = redacted(self.cluster.client_config())
        t = data["topic"]
        if t["create"]:
            with self.phase("create_topic"):
                self.cluster.create_topic(t["name"], t["partitions"], t["replication_factor"], t["config"])
                self.cluster.wait_in_sync(t["name"])
                self.manifest["topic_description"] = self.cluster.describe_topic(t["name"])
        if self.pipeline:
            with self.phase("create_output_topic"):
                self.pipeline.create_output_topic(self.cluster, t["replication_factor"], t["config"])
        if self.share:
            with self.phase("share_group"):
                self.share.configure_group(self.cluster.admin())

    def _check_images(self) -> None:
        """The application's container images, checked (the example's built) before the cluster starts."""
        section = self.scenario.application
        if section is not None and any(s.container for s in section.services):
            with self.phase("images"):
                if self.cluster is None:  # else the engine the cluster runs on is bound already
                    de.ensure_engine()
                self.app_plan = plan_containers(section, f"{self.scenario.path}: application")

    def _refuse_unsupported(self, supported: frozenset[str], backend: str) -> None:
        """The timeline's faults the backend cannot inject, refused before anything starts."""
        # consumer: and app: faults are the run's, on its own processes: any backend takes them
        kinds = {t.spec.kind for t in self.scenario.timeline()
                 if not family_of(t.spec.kind, t.spec.target).target_prefix}
        refused = unsupported_faults(kinds, supported)
        if not refused:
            return
        if backend == "attached":
            raise KafkaproofError(f"faults {', '.join(refused)}: {NOT_YET}")
        if backend == "external":
            raise KafkaproofError(f"faults {', '.join(refused)} need the local cluster backend; on an existing "
                                  f"cluster (--bootstrap) only proxy, consumer and app faults apply")
        if backend == "compose":
            reasons = [r for r in (compose_refusal(k) for k in refused) if r]
            if reasons:
                raise KafkaproofError(f"faults {', '.join(refused)} are not supported by the compose cluster backend "
                                      f"here: {'; '.join(reasons)}")
        raise KafkaproofError(f"faults {', '.join(refused)} are not supported by the {backend} cluster backend here "
                              f"(network faults need root: network namespaces and nftables)")

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
            src = self.cluster.node_log(nid)
            if src.exists():
                start = self.node_log_start.get(nid, 0)
                with open(src, "rb") as f, open(logs / f"node-{nid}.log", "wb") as out:
                    f.seek(start if start <= _size(src) else 0)  # a shorter log was started anew
                    shutil.copyfileobj(f, out)

    def _teardown(self) -> None:
        with self.phase("teardown"):
            self._copy_node_logs()
            self.cluster.down(keep_logs=False, graceful=False)  # data already drained

    def _producer_bootstrap(self) -> str:
        ids = self.scenario.data["producers"].get("bootstrap")
        if not ids or self.cluster is None:
            return self.bootstrap
        st = self.cluster.state()
        return ",".join(st.node(i).advertised for i in ids)

    def _experiment(self, stack: contextlib.ExitStack, deadline: float) -> None:
        data = self.scenario.data
        topic = data["topic"]["name"]
        injector = (stack.enter_context(FaultInjector(self.cluster, topic, self.fault_log,
                                                      coordinator_keys=coordinator_targets.run_keys(data)))
                    if self.cluster else None)
        events = WorkerEvents()
        stack.callback(events.close)
        workers = Workers(self.work, {"run_id": self.run_id, "out": str(self.work), "topic": topic,
                                      "bootstrap": self.bootstrap, "notify": events.address},
                          owner=self.run_id, cluster=self.cluster.name if self.cluster else None,
                          connection=self.cluster.client_config() if self.cluster else None)
        stack.callback(workers.kill_all)
        sampler = SnapshotSampler(self.cluster, topic).start()
        stack.callback(sampler.stop)
        self.sampler = sampler
        if self.cluster is not None and int(str(data["cluster"]["kafka_version"]).split(".")[0]) >= 4:
            elr = ElrSampler(self.cluster, topic).start()  # KIP-966's evidence: leader, ISR, ELR changes

            def keep_elr() -> None:
                elr.stop()
                self.manifest["elr"] = elr.summary()
            stack.callback(keep_elr)
        cons = data["consumers"]
        prod = data["producers"]
        consumer_spec = {k: cons[k] for k in ("mode", "isolation_level", "commit", "processing_ms", "config")}
        consumer_spec["group"] = cons.get("group", "")
        version = data["cluster"]["kafka_version"]
        consumer_spec.update(client=cons.get("client", "librdkafka"), client_version=cons.get("client_version", version))
        if cons["mode"] == "assign":
            consumer_spec["partitions"] = list(range(data["topic"]["partitions"]))
        if self.pipeline:
            consumer_spec = copier_spec(consumer_spec, self.pipeline.section)
        if self.share:
            consumer_spec = self.share.spec(cons.get("client_version", version), seed=run_seed(self.run_id))
        producer_spec = {k: prod[k] for k in ("rate", "value_size", "keys", "config") if k in prod}
        producer_spec.update({k: prod[k] for k in ("messages", "duration_s", "transactions") if k in prod})
        producer_spec["bootstrap"] = self._producer_bootstrap()
        producer_spec["offsets_from_broker"] = producer_settings(prod, 0)["offsets_from_broker"]
        producer_spec.update(client=prod.get("client", "librdkafka"), client_version=prod.get("client_version", version))
        # the jars and modules the workers are about to start on: what ran, not what was asked for
        self.manifest["client_versions"] = to_manifest(client_versions(data))
        app = self._start_application(stack)

        with self.phase("workload"):
            self._await_fault_tasks()
            if self.pipeline:
                workers.start_reader(0, reader_spec(self.pipeline.section, self.run_id))
            for i in range(0 if app else cons["count"]):
                workers.start_consumer(i, consumer_spec)
            t0 = time.monotonic()
            t0_wall_ns = time.time_ns()
            self._announce_start(t0)
            timeline = Timeline(self, injector, workers, t0, events, self.control,
                                services=app.fault_fleet if app else None)
            stack.callback(timeline.stop)
            timeline.start()
            producers_started = stopping = False
            last_progress = last_stop_check = 0.0
            while True:
                if time.monotonic() > deadline:
                    raise RunInterrupted(f"time limit of {data['timeout_s']}s reached")
                elapsed = time.monotonic() - t0
                if not producers_started and elapsed >= prod["start_after_s"]:
                    if app:
                        app.start_drive()
                    for i in range(prod["count"]):
                        workers.start_producer(i, producer_spec)
                    producers_started = True
                if not app and time.monotonic() - last_progress >= self.options.progress_interval_s:
                    self._show_progress(workers, elapsed, timeline)
                    last_progress = time.monotonic()
                if producers_started and not stopping and time.monotonic() - last_stop_check >= 1.0:
                    last_stop_check = time.monotonic()
                    stopping = self._stop_early(workers, timeline, elapsed)
                done = app.drive_done() if app else workers.producers_done()
                if producers_started and done and timeline.finished():
                    break
                time.sleep(0.2)
            if not app:  # the HTTP driver logs its own progress
                self._show_progress(workers, time.monotonic() - t0, timeline)
            self._check_producers(workers)
            if app:
                ats = [e.at for e in self.scenario.timeline()]
                app.check_requests(t0_wall_ns + int(min(ats) * 1e9) if ats else None)
        with self.phase("heal"):
            timeline.stop()
            timeline.heal_everything()
        with self.phase("settle"):
            if self.share:  # every record accepted, rejected or given up
                self.share.settle(workers, high_watermarks(self.direct_bootstrap, topic,
                                                           self.cluster.direct_client_config()),
                                  min(deadline, time.monotonic() + data["drain"]["timeout_s"]))
            else:
                self._wait_consumers_settle(workers, deadline)
                self._record_group(workers)
            workers.stop_consumers()
            if self.pipeline:  # the downstream reader catches up with the last transactions' outputs
                self.pipeline.wait_reader(self.direct_bootstrap, self.cluster.direct_client_config(),
                                          min(deadline, time.monotonic() + data["drain"]["timeout_s"]))
                workers.stop_readers()
            if app:
                app.settle(data["drain"]["settle_s"], min(deadline, time.monotonic() + data["drain"]["timeout_s"]))
        with self.phase("drain"):
            if app:
                self._stop_application()  # SIGTERM: the services flush what they still send before the drain
                app.index_events()
                rows, self.audit_marks = app.drain_audit(self.direct_bootstrap, topic, data["drain"]["timeout_s"],
                                                         self.cluster.direct_client_config())
                self.audit_rows += rows
                self.app_reads = app.reads(self.direct_bootstrap, data["drain"]["timeout_s"],
                                           self.cluster.direct_client_config())
                app.measure_deliveries(app.sends(), self.app_reads,
                                       {r["value_id"] for r in self.audit_rows if r["value_id"] >= 0})
            for iso in () if app else ("read_uncommitted", "read_committed"):
                rows, marks = drain(self.direct_bootstrap, topic, iso, data["drain"]["timeout_s"],
                                    self.cluster.direct_client_config())
                self.audit_rows += rows
                self.audit_marks[iso] = {str(p): m for p, m in marks.items()}
            if self.pipeline:
                self.pipeline.drain_output(self.direct_bootstrap, data["drain"]["timeout_s"],
                                           self.cluster.direct_client_config(), self.cluster.admin(), cons["group"])
        sampler.stop()

    def _start_application(self, stack: contextlib.ExitStack) -> AppRun | None:
        """With an application section: check its host again (the scenario may have travelled from another
        machine), start its services against the run's cluster and topic and wait until they are ready;
        they are stopped when the run ends, whatever happens. None without one."""
        section = self.scenario.application
        if section is None:
            return None
        where = f"{self.scenario.path}: application"
        check_application_host(section, where)
        clock = self.manifest["clock"]
        fleet = None
        if any(s.container for s in section.services):
            target = container_target(self.cluster)  # a compose cluster's network, or an error
            if self.app_plan is None:  # an attached cluster: checked now
                self._check_images()
            plan = self.app_plan
            fleet = ContainerFleet(list(plan.services), plan.images, self.run_dir, self.run_id, target,
                                   sources=plan.sources)
        app = AppRun(section, self.run_dir, self.run_id, where, cluster=self.cluster.name if self.cluster else None,
                     clock_offset_ns=clock["wall_origin_ns"] - clock["monotonic_origin_ns"], fleet=fleet)
        self.app = app
        stack.callback(self._stop_application)
        self.manifest["clients"] = app.clients()
        app.record_deliveries(self.cluster, self.scenario.topic,
                              (self.manifest.get("topic_description") or {}).get("topic_id"))
        with self.phase("services"):
            app.start({"bootstrap": self.bootstrap, "topic": self.scenario.topic,
                       "group": self.scenario.data["consumers"].get("group") or f"kp-{self.scenario.name}",
                       "run_id": self.run_id})
        return app

    def _stop_application(self) -> None:
        """Stop the services (before the drain, and again when the run ends: then only the manifest changes)."""
        if "stop_services" not in self.timings:
            with self.phase("stop_services"):
                self.app.stop()
        self.manifest["application"] = self.app.manifest()

    def _stop_early(self, workers: Workers, timeline: Timeline, elapsed: float) -> bool:
        """End the workload now if asked to (`kafkaproof stop`) or the disk runs out (run/stopping.py): the
        producers stop and flush, no further fault is injected; the run then heals, drains and assembles."""
        floor = float((self.scenario.data.get("limits") or {}).get("min_free_disk_mb", DEFAULT_MIN_FREE_DISK_MB))
        watched = [self.run_dir] + ([state_dir()] if isinstance(self.cluster, LocalCluster) else [])
        reason = early_stop_reason(stop_requested(self.run_dir), free_disk_mb(watched), floor)
        if reason is None:
            return False
        log.warning("[%s] ending the workload early at t=%.1fs: %s", self.scenario.name, elapsed, reason)
        self.manifest["stopped_early"] = {"reason": reason, "at_s": round(elapsed, 1)}
        workers.stop_producers()
        if self.app:
            self.app.stop_drive.set()
        timeline.stop()
        return True

    def _await_fault_tasks(self) -> None:
        """With fault tasks: start the workload once every one of them waits for it."""
        if self.control:
            self.control.wait_ready([e.index for e in self.scenario.timeline()], FAULT_TASKS_START_S)

    def _announce_start(self, t0: float) -> None:
        """With fault tasks: the start mark they time their faults from."""
        if self.control:
            faults = [{"index": e.index, "at": e.at, "duration": e.duration, "describe": e.describe(),
                       "trigger_timeout_s": e.trigger_timeout_s if e.after else 0.0}
                      for e in self.scenario.timeline()]
            self.control.announce_start(self.run_id, self.run_dir, int(t0 * 1e9), time.time(), faults)

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
        marks = high_watermarks(self.direct_bootstrap, self.scenario.topic, self.cluster.direct_client_config())
        behind = marks
        while time.monotonic() < limit:
            for i, proc in list(workers.consumers.items()):
                if proc.poll() is not None:  # a consumer left dead by a fault still gets to finish
                    workers.restart_consumer(i)
            positions = workers.consumer_positions()
            behind = {p: hw for p, hw in marks.items() if positions.get(p, -1) < hw}
            if not behind:
                self._wait_commits(marks, min(limit, time.monotonic() + self.scenario.data["drain"]["settle_s"]))
                return
            time.sleep(0.5)
        log.warning("[%s] consumers did not reach the end of partitions %s within %ss",
                    self.scenario.name, sorted(behind), self.scenario.data["drain"]["timeout_s"])

    def _record_group(self, workers: Workers) -> None:
        """Which group protocol each consumer incarnation was started with, and what the coordinator says of the
        group while they all still run (its type: the protocol it runs): the manifest's `consumer_protocols`
        and `consumer_group`."""
        if not workers.started:
            return
        self.manifest["consumer_protocols"] = list(workers.started)
        if self.scenario.data["consumers"]["mode"] == "subscribe":
            group = describe_group(self.cluster.admin(), self.scenario.data["consumers"]["group"])
            self.manifest["consumer_group"] = group
            log.info("[%s] group %s: %s", self.scenario.name, group["group"],
                     group.get("error") or f"type {group['type']}, {group['state']}, {len(group['members'])} members")

    def _wait_commits(self, marks: dict[int, int], until: float) -> None:
        """Let the last commits land: until the group's committed offsets reach the high watermarks, at
        most `drain.settle_s` (a commit strategy or a transaction marker that leaves them short waits it out)."""
        group = self.scenario.data["consumers"]["group"]
        while True:
            committed = committed_offsets(self.cluster.admin(), group, self.scenario.topic)
            if all(committed.get(p, -1) >= hw for p, hw in marks.items()):
                return
            if time.monotonic() >= until:
                log.info("[%s] committed offsets %s short of the high watermarks %s after settle_s",
                         self.scenario.name, committed, marks)
                return
            time.sleep(0.2)

    def _show_progress(self, workers: Workers, elapsed: float, timeline: "Timeline") -> None:
        p = workers.progress()
        errors = ", ".join(f"{k}={v}" for k, v in sorted(p["errors"].items())) or "none"
        active = ", ".join(timeline.active_descriptions()) or "none"
        log.info("[%s] t=%5.1fs sent=%d acked=%d failed=%d indefinite=%d read=%d errors: %s | faults: %s",
                 self.scenario.name, elapsed, p["sent"], p["ok"], p["fail"], p["indefinite"], p["read"], errors, active)

    def _assemble(self) -> None:
        app = self.app
        self.manifest["counts"] = assemble_ledger(self.run_dir, self.scenario.data, self.audit_rows,
                                                  self.sampler.rows if self.sampler else [],
                                                  (self.manifest.get("topic_description") or {}).get("topic_id"),
                                                  sends=app.sends() if app else None,
                                                  reads=self.app_reads if app else None)
        if self.pipeline:
            self.manifest["pipeline"] = {**self.pipeline.summary, "counts": self.pipeline.write_ledger(self.run_dir)}
        if self.share:
            self.manifest["share"] = {**self.share.summary,
                                      "counts": self.share.write_ledger(self.run_dir, self.fault_log)}


