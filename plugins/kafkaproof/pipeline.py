"""The steps of the reliability pipeline, as plain functions the Airflow DAGs, the CLI and tests call.

provision → run → teardown (always) per scenario; one spark-submit over every complete run of
the batch; then per run validate → compare with history → report (`judge`); a final gate over
every scenario's summary. A scenario is parsed and resolved once (`run.resolved.resolve`: the file, the
run's `Overrides`, its random schedule drawn, every fault and client property checked, the
environment applied) and passed on as a `ResolvedScenario`; across Airflow tasks it travels
through XCom as `ResolvedScenario.to_dict()`. What a batch runs, in what order, and how it is
gated is `batch.py`'s plan.
"""
from __future__ import annotations

import contextlib
import logging
import os
import socket
import statistics
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

from .cluster import attach, start_cluster, state
from .cluster import reuse as cluster_reuse
from .cluster.process import start_ticks
from .cluster.reuse import AIRFLOW_CLUSTER_PREFIX, cluster_name_for, release_kept_clusters
from .errors import AnalysisError, ClusterError, KafkaproofError, ScenarioError
from .paths import runs_dir, scenarios_dir, this_host
from .run.resolved import Overrides, ResolvedScenario, resolve
from .spec.scenario import Scenario, load, load_catalog
from .verdict.summary import client_differences, gate, summarize, upgrade_differences  # noqa: F401 (gate: re-exported)

log = logging.getLogger(__name__)


def suite(tag: str | None = None, names: list[str] | None = None) -> list[Scenario]:
    """Scenarios of a suite: by tag (the whole catalog read), or by name (only the named files read: the
    catalog's `<name>.yaml`, else the catalog searched; any name not in the catalog is an error; no names,
    no scenarios)."""
    directory = scenarios_dir()
    if names is not None:
        named = {}
        for name in names:
            path = directory / f"{name}.yaml"
            scn = load(path) if path.is_file() else None
            named[name] = scn if scn is not None and scn.name == name else None
        if all(named.values()):
            return [named[n] for n in names]
        by_name = {s.name: s for s in load_catalog(directory)}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise KafkaproofError(f"unknown scenarios {unknown}; the catalog has: {', '.join(sorted(by_name))}")
        return [by_name[n] for n in names]
    return [s for s in load_catalog(directory) if tag is None or tag in s.data["tags"]]


def refusal(scenario: Scenario, overrides: Overrides = Overrides()) -> str | None:
    """Why the scenario cannot take a run's overrides, or None; the caller turns a refusal into an error verdict."""
    try:
        resolve(scenario, overrides)
    except ScenarioError as e:
        return str(e)
    return None


def use_docker_engine(docker_url: str | None = None, docker_conn_id: str | None = None,
                      kafka_image: str | None = None) -> str | None:
    """The Docker engine and Kafka image the compose backend uses in this (Airflow task) process.

    Like the Docker provider's operators: `docker_url` is the engine (`unix://...`, `tcp://host:2376`;
    it becomes DOCKER_HOST, and the cluster's state file remembers it for the later tasks), and
    `docker_conn_id` an Airflow Docker connection holding registry credentials: `DockerHook` pings
    the engine, logs in, and pulls `kafka_image` when the engine lacks it. `kafka_image` (an image
    configured like apache/kafka) becomes `$KAFKAPROOF_KAFKA_IMAGE`. Returns the engine URL, or None
    when nothing is set (kafkaproof's own engine, or `$DOCKER_HOST`, and the locally built image).
    """
    from .cluster import docker_engine as de
    if not (docker_url or docker_conn_id or kafka_image):
        return None
    if docker_url:
        os.environ["DOCKER_HOST"] = docker_url
    url = docker_url or de.ensure_engine()
    if kafka_image:
        os.environ[de.KAFKA_IMAGE_ENV] = kafka_image
    from airflow.providers.docker.hooks.docker import DockerHook
    try:
        client = DockerHook(docker_conn_id=docker_conn_id or None, base_url=url).get_conn()
        if kafka_image and not client.images(name=kafka_image):
            log.info("pulling %s on %s", kafka_image, url)
            client.pull(kafka_image)
    except Exception as e:  # the hook raises AirflowException or the docker client's errors
        where = f" with the registry login of connection {docker_conn_id!r}" if docker_conn_id else ""
        raise ClusterError(f"Docker engine {url}{where}: {e}") from e
    log.info("compose backend: engine %s, image %s", url, kafka_image or "kafkaproof/kafka:<version> (built here)")
    return url


class HostBusy(ClusterError):
    """Another pipeline's cluster runs on this host and its owner is alive: try again later (a DAG task
    reschedules itself, freeing the cluster pool's slot the other pipeline needs to go on)."""

    def __init__(self, others: list[str]):
        super().__init__(f"other pipeline clusters are running on this host: {', '.join(others)}")
        self.others = others


# The state of an owner's DAG run in Airflow's metadata database ("running", "failed", ...), None when
# unknown; the DAGs pass one that asks Airflow (`RuntimeTaskInstance.get_dagrun_state`).
DagRunState = Callable[[Mapping[str, Any]], "str | None"]
LIVE_DAGRUN_STATES = ("queued", "running")
FOREIGN_OWNER_STALE_S = 600.0  # another Airflow's cluster: gone when its last task died this long ago


def pipeline_owner(batch_id: str) -> dict[str, Any]:
    """Who owns a pipeline cluster: the DAG run (`dag_id/run_id`), the Airflow (its home, whose metadata
    database knows the run), and the task process that uses the cluster now."""
    dag_id, _, run_id = batch_id.partition("/")
    pid = os.getpid()
    return {"batch": batch_id, "dag_id": dag_id, "run_id": run_id, "airflow_home": os.environ.get("AIRFLOW_HOME"),
            "host": socket.gethostname(), "pid": pid, "pid_start": start_ticks(pid), "at": time.time()}


def owner_gone(name: str, dagrun_state: DagRunState | None = None, own_batch: str | None = None) -> str | None:
    """Why the owner of pipeline cluster `name` no longer uses it, or None while it may.

    A cluster of `own_batch` (the asking DAG run, whose scenarios run one after another) was left by
    an earlier scenario whose teardown did not run. The owner's DAG run, asked of Airflow's metadata
    database when it is this Airflow's: not queued or
    running (Airflow stopped mid-night and the run failed, or was marked failed), or unknown there. A
    cluster of another Airflow on this host (another home) is gone when the task process that used it
    last is dead and its state has not changed for `FOREIGN_OWNER_STALE_S`; so is one without an owner
    (an older kafkaproof's, or started by hand with the pipeline's name prefix).
    """
    try:
        st = state.load_state(name)
        mtime = state.state_path(name).stat().st_mtime
    except (ClusterError, OSError, ValueError):
        return None  # gone already, or being written: look again later
    owner = st.owner
    if not owner:
        idle = time.time() - mtime
        return (f"no owner recorded and nothing touched it for {idle / 60:.0f} min"
                if idle >= FOREIGN_OWNER_STALE_S else None)
    if own_batch and owner.get("batch") == own_batch:
        return "an earlier scenario of this DAG run left it"
    if dagrun_state is not None and owner.get("airflow_home") == os.environ.get("AIRFLOW_HOME"):
        run_state = dagrun_state(owner)
        if run_state in LIVE_DAGRUN_STATES:
            return None
        return (f"its DAG run {owner['batch']} is {run_state}" if run_state
                else f"its DAG run {owner['batch']} is not in this Airflow's metadata database")
    pid = owner.get("pid")
    if pid and start_ticks(pid) is not None and start_ticks(pid) == owner.get("pid_start"):
        return None
    if time.time() - mtime < FOREIGN_OWNER_STALE_S:
        return None
    return (f"the task process that used it last (pid {pid}, DAG run {owner.get('batch')}) is gone and nothing "
            f"touched it for {(time.time() - mtime) / 60:.0f} min")


def touch_owner(name: str) -> None:
    """Record this process as the task that uses pipeline cluster `name` now (its owner's `pid`)."""
    with contextlib.suppress(ClusterError, OSError, ValueError), state.update_state(name) as st:
        if st.owner:
            pid = os.getpid()
            st.owner = {**st.owner, "pid": pid, "pid_start": start_ticks(pid), "at": time.time()}


def reclaim(name: str, why: str) -> dict[str, Any]:
    """Tear down a pipeline cluster whose owner is gone (Airflow stopped or the host rebooted mid-night);
    returns what to tell the next run's report."""
    owner = {}
    with contextlib.suppress(ClusterError, OSError, ValueError):
        owner = state.load_state(name).owner or {}
    log.warning("reclaiming pipeline cluster %s: %s", name, why)
    attach(name).down(keep_logs=False, graceful=False)
    return {"cluster": name, "batch": owner.get("batch"), "why": why, "at": time.time()}


def wait_for_exclusive_host(own: str, timeout_s: float = 1800, dagrun_state: DagRunState | None = None,
                            wait: bool = True, own_batch: str | None = None) -> list[dict[str, Any]]:
    """Make sure no other pipeline cluster runs on this host (two clusters would starve each other):
    reclaim those whose owner is gone (`owner_gone`), wait for the others — or with `wait=False` raise
    HostBusy at once. Returns the reclaimed clusters."""
    deadline = time.monotonic() + timeout_s
    reclaimed: list[dict[str, Any]] = []
    while True:
        others = [n for n in state.list_clusters() if n.startswith(AIRFLOW_CLUSTER_PREFIX) and n != own]
        for name in list(others):
            why = owner_gone(name, dagrun_state, own_batch)
            if why:
                reclaimed.append(reclaim(name, why))
                others.remove(name)
        if not others:
            return reclaimed
        if not wait:
            raise HostBusy(others)
        if time.monotonic() > deadline:
            raise ClusterError(f"other pipeline clusters still running after {timeout_s:.0f}s: {others}; "
                               f"`kafkaproof cluster down --name NAME` if they are leftovers")
        log.info("waiting for other pipeline clusters to finish: %s", others)
        time.sleep(5)


def release_airflow_clusters(airflow_home: str) -> list[str]:
    """Tear down every pipeline cluster the DAG runs of the Airflow at `airflow_home` own (`make airflow`
    stopping: its runs died with it)."""
    released = []
    for name in state.list_clusters():
        if not name.startswith(AIRFLOW_CLUSTER_PREFIX):
            continue
        with contextlib.suppress(ClusterError, OSError, ValueError):
            owner = state.load_state(name).owner or {}
            if owner.get("airflow_home") == airflow_home:
                log.warning("tearing down cluster %s of DAG run %s: its Airflow stopped", name, owner.get("batch"))
                attach(name).down(keep_logs=False, graceful=False)
                released.append(name)
    return released


def attach_overrides(project: str | None, acknowledged: bool | None, bootstrap: str | None = None,
                     backend: str | None = None) -> dict[str, Any]:
    """The overrides of a DAG run's `compose_project` param (a running compose project of the user's, attached
    by every scenario of the run): `{}` without one; KafkaproofError, before anything starts, when it comes
    without the acknowledgement that the faults hit it (`i_understand_faults_hit_this_cluster`) or with
    another cluster (`bootstrap`, `cluster_backend`)."""
    if not project:
        return {}
    if not acknowledged:
        raise KafkaproofError(f"compose_project {project!r}: the scenarios' faults stop, kill, pause and restart the "
                              f"containers of your compose project; set i_understand_faults_hit_this_cluster to true "
                              f"to run them there (the CLI's --i-understand-faults-hit-this-cluster)")
    if bootstrap or backend:
        raise KafkaproofError(f"compose_project {project!r} is the cluster of this run: leave out "
                              f"{'bootstrap / kafka_conn_id' if bootstrap else 'cluster_backend'}")
    return {"attach_project": project, "faults_hit_attached": True}


def attaches(resolved: ResolvedScenario) -> str | None:
    """The user's compose project a resolved scenario attaches to (None: a cluster of its own); KafkaproofError
    when the run lacks the acknowledgement that its faults hit it (`attach_overrides`)."""
    project = resolved.scenario.data["cluster"].get("attach")
    if project and not resolved.overrides.faults_hit_attached:
        raise KafkaproofError(f"{resolved.scenario.path}: its faults would hit your compose project {project}: "
                              f"set the DAG param i_understand_faults_hit_this_cluster (CLI: "
                              f"--i-understand-faults-hit-this-cluster)")
    return project


def provision(resolved: ResolvedScenario, cluster_name: str, reuse: bool = False, owner: dict[str, Any] | None = None,
              dagrun_state: DagRunState | None = None, wait: bool = True) -> dict:
    """Start the cluster (local or compose) a resolved scenario asks for — or attach the user's compose project
    it names (`attaches`: never reused, never kept; its teardown detaches) — ; returns its name, bootstrap
    servers and whether it was reused.

    `owner` (`pipeline_owner`) is recorded with the cluster: another pipeline's provision reclaims it
    once its DAG run is gone (`owner_gone`, asking `dagrun_state`) instead of waiting for it, and the
    run's manifest and report name what was reclaimed. While another pipeline's cluster is alive the
    provision waits for it, or with `wait=False` raises HostBusy (an Airflow task reschedules itself).

    With `reuse`, the cluster of that name an earlier scenario kept (`teardown(keep=True)`) runs this
    one too when `isolation_problems` finds nothing of the earlier runs on it (waiting up to
    `cluster.reuse.REUSE_SETTLE_S` for partitions to get back in sync); otherwise, or when it is not a kept cluster
    (a retry of this task), it goes and a fresh one starts. The cluster's state records which
    scenarios ran on it and what was checked; the run puts that in its manifest and report.
    """
    project = attaches(resolved)
    release_kept_clusters(but=cluster_name if reuse and not project else None, batch=owner["batch"] if owner else None)
    scenario = resolved.scenario
    if project:
        from .cluster.attached import AttachedCluster
        reclaimed = wait_for_exclusive_host(cluster_name, dagrun_state=dagrun_state, wait=wait,
                                            own_batch=owner["batch"] if owner else None)
        cluster = AttachedCluster.up(project, cluster_name)
        cluster_reuse.record_use(cluster_name, cluster_reuse.fresh_record(reclaimed), scenario.name, owner)
        return {"cluster": cluster_name, "bootstrap": cluster.bootstrap_servers(), "kafka_version": None,
                "reused": False, "attached": project}
    config = resolved.cluster_config(cluster_name)
    reused = cluster_reuse.take_kept(cluster_name, reuse, scenario.topic, scenario.data["consumers"].get("group"))
    if reused is None:
        reclaimed = wait_for_exclusive_host(cluster_name, dagrun_state=dagrun_state, wait=wait,
                                            own_batch=owner["batch"] if owner else None)
        cluster = start_cluster(config, scenario.upgrade_versions)
        reused = cluster_reuse.fresh_record(reclaimed)
    else:
        cluster = attach(cluster_name)
    cluster_reuse.record_use(cluster_name, reused, scenario.name, owner)
    return {"cluster": cluster_name, "bootstrap": cluster.bootstrap_servers(),
            "kafka_version": scenario.data["cluster"]["kafka_version"], "reused": reused["reused"]}


def kafka_connection(conn_id: str, extra: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(bootstrap servers, connection config) of an existing cluster from an Airflow Kafka connection's Extra.

    The Extra is a client config, as the Kafka provider's hooks take it: `bootstrap.servers` names
    the cluster, the security settings (`security.protocol`, `sasl.*`, `ssl.*`) reach every client of
    the run. Client behaviour a scenario field owns (`group.id`, ...) is left out, with a log line.
    """
    from .spec.connection import client_connection
    source = f"Airflow connection {conn_id!r} (Extra)"
    bootstrap, connection, left_out = client_connection(extra, source)
    if not bootstrap:
        raise ClusterError(f'{source} has no bootstrap.servers; set it, e.g. {{"bootstrap.servers": '
                           f'"kafka-1:9092,kafka-2:9092"}}')
    if left_out:
        log.info("%s: %s left out (scenario fields own them)", source, ", ".join(left_out))
    return bootstrap, connection


def run(resolved: ResolvedScenario, out: str | None = None, cluster_name: str | None = None,
        control: str | None = None, client_config: dict | None = None, proxy_listen: str = "127.0.0.1") -> dict:
    """Run a resolved scenario on a provisioned cluster, the existing one it names (`bootstrap`, connecting
    with `client_config`, see `kafka_connection`; its fault proxies listen on `proxy_listen`, loopback by
    default), or a cluster of its own.

    With `control` (a name from `fault_control`), fault tasks of other processes time the
    scenario's faults (`drive_fault`) instead of the run's own timeline.
    """
    from .run import RunOptions, ScenarioRun
    bootstrap = resolved.bootstrap
    if cluster_name and not bootstrap:
        touch_owner(cluster_name)
    options = RunOptions(out=Path(out) if out else runs_dir(), cluster_name=cluster_name,
                         attach=bool(cluster_name and not bootstrap), control=control, client_config=client_config,
                         proxy_listen=proxy_listen)
    result = ScenarioRun(resolved, options).execute()
    return {"run_id": result.run_id, "run_dir": str(result.run_dir), "status": result.status, "error": result.error,
            "scenario": resolved.name, "host": this_host()}


def teardown(cluster_name: str | None, control: str | None = None, keep: bool = False) -> None:
    """Tear a pipeline cluster down — or with `keep`, stop what the run left and keep the cluster for the
    next scenario (`provision(reuse=True)` checks it) — and forget the fault tasks' control directory."""
    if cluster_name and cluster_name in state.list_clusters():
        cluster = attach(cluster_name)
        if keep:
            cluster.release_run()
            touch_owner(cluster_name)
            cluster_reuse.keep(cluster_name)
        else:
            cluster.down(keep_logs=False, graceful=False)
    if control:
        from .run.control import RunControl
        RunControl(control).remove()


def fault_control(batch_id: str, scenario: str) -> str:
    """A fresh control directory for one scenario run of a batch whose faults are tasks; returns its name."""
    from .run.control import RunControl
    control = RunControl(cluster_name_for(batch_id, scenario))
    control.reset()
    return control.name


def _seconds_id(seconds: float) -> str:
    return f"{seconds:g}s" if float(seconds).is_integer() else f"{round(seconds * 1000)}ms"


def fault_task_ids(scenario: Scenario) -> list[str]:
    """Task ids for the entries of a scenario's fault timeline, in order, e.g. `kill_leader_0_at_5s`,
    `isolate_follower_0_at_3s_for_9s`, `kill_consumer_0_at_7s_after_consumer_commit_for_1s`."""
    ids: list[str] = []
    seen: dict[str, int] = {}
    for entry in scenario.timeline():
        target = entry.spec.target or "groups"
        name = f"{entry.spec.kind}_{target}_at_{_seconds_id(entry.at)}"
        if entry.after:
            name += f"_after_{entry.after['event']}"
        if entry.duration is not None:
            name += f"_for_{_seconds_id(entry.duration)}"
        name = "".join(c if c.isalnum() else "_" for c in name)
        seen[name] = seen.get(name, 0) + 1
        ids.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return ids


def drive_fault(control: str, index: int, start_timeout_s: float = 1800.0, run_host: str | None = None,
                queue: str | None = None) -> dict:
    """A fault task: inject and heal `faults[index]` of the run behind `control` on that run's schedule;
    returns when it landed and how late against the schedule (FaultError if it could not, or if this task runs
    on another host than `run_host`, the run's, scheduled on `queue`)."""
    from .run.control import drive_fault as drive
    return drive(control, index, start_timeout_s, log=lambda line: log.info("%s", line), run_host=run_host,
                 queue=queue)


def fault_timing(results: list[dict | None]) -> str | None:
    """One line on the fault tasks of a batch: how many injected, and how late against their schedule
    the injections of the ones at a fixed time began (a triggered fault waits for a state on purpose);
    None without any."""
    injected = [r for r in results if r]
    if not injected:
        return None
    late = [r["late_ms"] for r in injected if not r.get("triggered")]
    line = f"fault tasks: {len(injected)} injected"
    if late:
        line += (f"; the {len(late)} at a fixed time began {statistics.median(late):.0f} ms late (median), "
                 f"{max(late):.0f} ms at most")
    if len(late) < len(injected):
        line += f"; {len(injected) - len(late)} waited for their trigger"
    return line


def validate(run_dir: str) -> str:
    """Run the Great Expectations suites; returns the status (pass | fail | error)."""
    from .verdict.validation import validate as gx_validate
    return gx_validate(Path(run_dir)).status


def report(run_dir: str) -> str:
    """Write the run's HTML report; returns its path."""
    from .report import write_run_report
    return str(write_run_report(Path(run_dir)))


def application_lead(run_dir: str) -> str | None:
    """The application's view of a run of an application (its report's lead), None for any other run."""
    from .report import application_lead as lead
    return lead(Path(run_dir))


def write_batch_report(summaries: list[dict], batch_id: str, out: Path | None = None) -> str:
    """Write the index page of a batch (a DAG run): scenario × verdict with change since the last batch."""
    from .report import write_batch_report as write
    return str(write([s for s in summaries if s], batch_id, out or runs_dir()))


def write_client_report(summaries: list[dict], batch_id: str, out: Path | None = None) -> tuple[str, list[str]]:
    """Write the client matrix page of a batch (each scenario under each client side by side); returns
    (report path, where the clients differ)."""
    from .report import write_client_report as write
    differences = client_differences(summaries)
    return str(write([s for s in summaries if s], differences, batch_id, out or runs_dir())), differences


def write_upgrade_report(summaries: list[dict], batch_id: str, out: Path | None = None) -> tuple[str, list[str]]:
    """Compare current vs candidate version per scenario; returns (report path, reasons the candidate is worse)."""
    from .report import write_upgrade_report as write
    from .run.client_upgrade import client_upgrade_facts
    worse = upgrade_differences(summaries)
    clients = client_upgrade_facts(summaries)  # the libraries each side ran on; a client upgrade's defaults
    return str(write(summaries, worse, batch_id, out or runs_dir(), clients)), worse


def unstarted_run(scenario: str, error: str, label: str = "") -> dict:
    """The run dict of a scenario that never produced a run directory (refused, or its task died): an error."""
    return {"scenario": scenario, "label": label, "run_id": None, "run_dir": None, "status": "error", "error": error}


def run_scenario(resolved: ResolvedScenario, batch_id: str, label: str = "", client_config: dict | None = None,
                 dagrun_state: DagRunState | None = None, wait: bool = True,
                 proxy_listen: str = "127.0.0.1") -> dict:
    """Provision, run and tear down (always) one resolved scenario: the run dict `judge` takes (on an existing
    cluster, its fault proxies listen on `proxy_listen`).

    Analysis is not part of it: a batch analyses all its runs with one spark-submit. The cluster is
    the batch's (`pipeline_owner`); another pipeline's live cluster is waited for, or with `wait=False`
    HostBusy is raised before anything starts (`provision`).
    """
    cluster = None if resolved.bootstrap else cluster_name_for(batch_id, f"{resolved.name}/{label}")
    try:
        if cluster:
            provision(resolved, cluster, owner=pipeline_owner(batch_id), dagrun_state=dagrun_state, wait=wait)
        result = run(resolved, cluster_name=cluster, client_config=client_config, proxy_listen=proxy_listen)
    finally:
        if cluster:
            teardown(cluster)
    return {**result, "scenario": resolved.name, "label": label}


def analyzable(runs: list[dict | None]) -> list[str]:
    """Run directories of the complete runs: what the batch's one spark-submit analyses."""
    return [r["run_dir"] for r in runs if r and r.get("status") == "complete" and r.get("run_dir")]


def check_runs_visible(runs: list[dict | None]) -> None:
    """The analysis reads the run directories from shared storage: AnalysisError naming each complete run's
    directory this host cannot see and the host that wrote it (`host` of the run dict), never a silent skip."""
    here = this_host()
    unseen = [f"{d} (written on host {r.get('host') or 'unknown'})" for r in runs
              if r and (d := r.get("run_dir")) and r.get("status") == "complete" and not Path(d).is_dir()]
    if unseen:
        raise AnalysisError(f"run directories not visible on host {here}, where the analysis runs: "
                            f"{'; '.join(unseen)}. KAFKAPROOF_RUNS must be a filesystem shared by every worker "
                            f"host and mounted at the same path everywhere (README, Scale-out on Celery)")


def judge(run: dict, batch_id: str) -> dict:
    """Validate one run (when its analysis wrote results), compare it with history, write its report.

    A run that failed, or whose analysis did, is an error summary that says why, never a lost
    scenario; `run` is what `run_scenario`/`run` returned (or `{"scenario", "error"}` for a
    task that died before it could say).
    """
    run_dir = run.get("run_dir")
    if run_dir and run.get("status") == "complete" and (Path(run_dir) / "analysis" / "metrics.json").exists():
        try:
            validate(run_dir)
        except KafkaproofError as e:  # the summary below is then an error verdict saying so
            log.error("%s: %s", run["scenario"], e)
    summary = summarize(run_dir, run["scenario"], batch_id, error=run.get("error"), label=run.get("label", ""))
    if run_dir:
        summary["report"] = report(run_dir)
        summary["application"] = application_lead(run_dir)
    summary["label"] = run.get("label", "")
    return summary


def analyze_batch(runs: list[dict | None], batch_id: str) -> None:
    """One spark-submit over every complete run of a batch; a failed analysis leaves error verdicts."""
    from .analysis import analyze_many
    complete = [Path(d) for d in analyzable(runs)]
    if not complete:
        return
    try:
        analyze_many(complete, quiet=True)
    except KafkaproofError as e:  # runs whose analysis is missing become error verdicts in `judge`
        log.error("analysis of batch %s: %s", batch_id, e)


# --- the audit DAG (kafka_cluster_audit): its steps below the runner (kafkaproof.audit) --------------------

def audit_out(run_id: str) -> Path:
    """Where a DAG run's audit goes: `$KAFKAPROOF_RUNS/audits/<the run id as a safe name>` (its suite, runs,
    audit.json and audit.html; the reports index lists it, the task's extra link opens its audit.html)."""
    from .report.audit_page import AUDITS_DIR, audit_dir_name
    return runs_dir() / AUDITS_DIR / audit_dir_name(run_id)


def audit_discovery(bootstrap: str | None, connection: Mapping[str, Any] | None, client_config: str | None = None,
                    app_config: str | None = None, app_format: str | None = None, app_role: str | None = None,
                    topics: tuple[str, ...] = (), max_classes: int | None = None) -> dict[str, Any]:
    """The audit DAG's first step, read-only: read the team's client settings (`app_config`), discover the
    cluster (`bootstrap`, connecting with `connection` and the `client_config` file's settings) and plan the
    classes, so that bad input (an unreadable or unknown client property, an unreachable cluster, refused
    credentials, a missing describe ACL, a bad --max-classes) fails here, before any replica starts.

    Logs the inventory, the settings and the findings; returns a summary for XCom (no credentials)."""
    from .cluster.discovery import discover
    from .run.client_config import audit_inputs
    from .spec.audit_findings import audit_findings
    from .spec.audit_plan import plan_audit, plan_text
    from .spec.client_settings import settings_text
    from .spec.inventory import inventory_text
    bootstrap, connection, settings = audit_inputs(
        bootstrap, connection, client_config, app_config, app_format, app_role,
        "the audit needs a cluster: set the bootstrap param, a kafka_conn_id, bootstrap.servers in the "
        "client_config file, or the bootstrap servers of the app_config file")
    inventory = discover(bootstrap, connection, topics=list(topics))
    plan = plan_audit(inventory, settings, max_classes)
    findings = audit_findings(inventory, settings, plan)
    log.info("%s", inventory_text(inventory))
    if settings:
        log.info("%s", settings_text(settings))
    log.info("%s", plan_text(plan))
    for f in findings:
        log.info("finding (%s, %s) %s %s: %s", f.severity, f.scope, f.subject, f.setting, f.text)
    return {"bootstrap": bootstrap, "cluster_id": inventory.cluster_id, "kafka_release": inventory.kafka_release,
            "nodes": len(inventory.nodes), "topics": [t.name for t in inventory.topics],
            "classes": {c.label: list(c.topics) for c in plan.classes}, "excluded": dict(plan.excluded),
            "findings": [f"{f.severity}: {f.subject}: {f.text}" for f in findings if f.severity != "low"]}


@contextlib.contextmanager
def client_config_file(connection: Mapping[str, Any] | None, bootstrap: str | None = None) -> Iterator[str | None]:
    """A client properties file holding `connection` (an Airflow connection's, for the audit runner, which takes
    a file): private (0600) in a private temporary directory, removed afterwards; None for no connection."""
    if not connection:
        yield None
        return
    import shutil
    import tempfile
    from .paths import write_text_atomic
    from .spec.connection import client_properties_text
    where = Path(tempfile.mkdtemp(prefix="kafkaproof-audit-"))
    try:
        yield str(write_text_atomic(where / "client.properties", client_properties_text(connection, bootstrap),
                                    private=True))
    finally:
        shutil.rmtree(where, ignore_errors=True)


def audit_gate(outcome: Mapping[str, Any]) -> str | None:
    """Pure: why an audit fails its DAG run (verdict fail or error, with what the runner printed), None on a pass."""
    verdict = outcome.get("verdict")
    if verdict == "pass":
        return None
    lines = "\n".join(outcome.get("lines") or [])
    return (f"audit {verdict or 'without a verdict'}; the report: {outcome.get('html') or 'not written'}"
            + (f"\n{lines}" if lines else ""))
