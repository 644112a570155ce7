"""kafkaproof DAGs: the nightly suite, a weekly soak, a manual pre-upgrade check, an upgrade comparison, and the
audit of an existing cluster (`kafka_cluster_audit`: discover → run_audit → gate, calling `kafkaproof.audit`).

Thin by design: each DAG maps a batch plan of the library (`kafkaproof.batch`: the ordered runs, their
cluster-reuse hints, the gate's outcome) onto tasks and wires them; every task calls `kafkaproof.batch`
or `kafkaproof.pipeline`. What crosses XCom to a run's tasks is its `ResolvedScenario` (resolved once).
Every DAG has one shape: the scenarios run one after another (provision → run → teardown, one cluster
at a time; in the nightly DAG each fault of a scenario is a task of its own beside the workload, and
scenarios asking for the same cluster run next to each other on one cluster, checked clean before each
reuse; with several worker hosts, `kafkaproof.hosts`, each host runs its share of the groups one after
another, every task of a group on its host's queue and pool), then one SparkSubmitOperator analyses
every complete run of the DAG run (`spark_default` decides where; it holds no cluster slot),
then each run is judged (validate → compare with history → report, mapped per scenario), then
the gate (or the version comparison).
"""
from __future__ import annotations

import os
from datetime import datetime, timedelta, timezone

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, Param, dag, get_current_context, setup, task, task_group, teardown
from airflow.sdk.exceptions import AirflowFailException, AirflowRescheduleException, AirflowSkipException

from kafkaproof import batch, hosts, pipeline
from kafkaproof.analysis import application_path, job_py_files, spark_conf
from kafkaproof.errors import KafkaproofError
from kafkaproof.notify import WebhookNotifier
from kafkaproof.schedule import NoMissedRunsTimetable
from kafkaproof.spec.audit_plan import FAULTS as AUDIT_FAULTS
from kafkaproof.spec.clients import CLIENTS
from kafkaproof.spec.client_settings import FORMATS as APP_FORMATS, ROLES as APP_ROLES
from kafkaproof.spec.cluster import CLUSTER_BACKENDS
from kafkaproof.run.resolved import Overrides, ResolvedScenario
from kafkaproof.spec.scenario import MAX_BROKERS
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION, PRODUCTION_KAFKA_VERSION

# The checkout's spark/analyze.py, or the installed package's copy: this file also works copied into
# another Airflow's dags folder next to a pip-installed kafkaproof. Its package goes along with --py-files.
ANALYZE_APP = str(application_path())
ANALYZE_PY_FILES = str(job_py_files())
# The worker hosts, their queues and cluster pools (KAFKAPROOF_HOSTS..., env or Airflow Variable); one host:
# the one-slot pool `kafka_cluster` on Airflow's default queue, as before.
HOSTS = hosts.layout_from(hosts.settings_lookup(os.environ))
NIGHTLY_SUITE = os.environ.get("KAFKAPROOF_SUITE", "nightly")
NIGHTLY_SCHEDULE = os.environ.get("KAFKAPROOF_NIGHTLY_SCHEDULE", "0 2 * * *")
# Soak runs (hours of load and random faults, scenarios tagged `soak`): weekly, Saturday morning.
SOAK_SUITE = os.environ.get("KAFKAPROOF_SOAK_SUITE", "soak")
SOAK_SCHEDULE = os.environ.get("KAFKAPROOF_SOAK_SCHEDULE", "0 4 * * 6")
# Starting Airflow starts no pipeline: a time missed while it was down is skipped (NoMissedRunsTimetable),
# unless KAFKAPROOF_RUN_MISSED=true (then the latest missed time runs at start-up, as Airflow's cron
# schedules do); the soak DAG is paused until someone unpauses it (KAFKAPROOF_SOAK_PAUSED=false: not).
RUN_MISSED = os.environ.get("KAFKAPROOF_RUN_MISSED", "false").lower() in ("1", "true", "yes")
SOAK_PAUSED = os.environ.get("KAFKAPROOF_SOAK_PAUSED", "true").lower() not in ("0", "false", "no")
BUSY_RETRY_S = 15  # a cluster task finding another pipeline's live cluster frees the pool and comes back
SPARK_CONN = os.environ.get("KAFKAPROOF_SPARK_CONN", "spark_default")
# Scenarios asking for the same cluster share one, checked clean before each reuse (`pipeline.provision`).
REUSE_CLUSTERS = os.environ.get("KAFKAPROOF_REUSE_CLUSTERS", "true").lower() not in ("0", "false", "no")
FAULT_START_TIMEOUT_S = 900  # a fault task waits this long for its workload to start
DEFAULT_ARGS = {"retries": 0, "execution_timeout": timedelta(minutes=30)}
# Other DAGs can be scheduled on these: a judged run updated the history; a night's summary page is written.
HISTORY_ASSET = Asset(name="kafkaproof_history", uri="kafkaproof://history")
BATCH_REPORT_ASSET = Asset(name="kafkaproof_batch_report", uri="kafkaproof://batch-report")
# A failed gate posts its problems to the webhook of the `kafkaproof_notify` connection (when defined).
NOTIFY_ON_FAILURE = WebhookNotifier()
KAFKA_CONN_PARAM = Param(None, type=["null", "string"],
                         description="an existing cluster by Airflow Kafka connection (e.g. kafka_default; Extra: the "
                                     "client config: bootstrap.servers and how to connect, e.g. security.protocol, "
                                     "sasl.*, ssl.*); `bootstrap` wins when both are set")
BROKERS_PARAM = Param(None, type=["null", "integer"], minimum=1, maximum=MAX_BROKERS,
                      description="override cluster.brokers (empty: as each scenario says; local cluster only)")
PROXY_LISTEN_PARAM = Param("127.0.0.1", type="string",
                           description="with an existing cluster: the IPv4 address of the worker its fault proxies "
                                       "listen on (default 127.0.0.1: the worker only; whoever reaches another "
                                       "address reaches the cluster through them, faults included)")
BACKEND_PARAM = Param(None, type=["null", "string"], enum=[None, *CLUSTER_BACKENDS],
                      description="override cluster.backend (empty: as each scenario says): local (Kafka JVMs on "
                                  "the worker) or compose (containers of a Docker Compose project, compose/)")
# The compose backend's engine and image, as the Docker provider's operators take them.
ENGINE_PARAMS = {
    "docker_url": Param(None, type=["null", "string"],
                        description="compose backend: the Docker engine, e.g. unix:///var/run/docker.sock or "
                                    "tcp://docker-host:2376 (empty: $DOCKER_HOST, else kafkaproof's own engine)"),
    "docker_conn_id": Param(None, type=["null", "string"],
                            description="compose backend: an Airflow Docker connection (registry login) used to "
                                        "pull kafka_image"),
}
# A team's own running compose project, attached by every scenario of the run (faults hit its containers).
ATTACH_PARAMS = {
    "compose_project": Param(None, type=["null", "string"],
                             description="attach every scenario to this running compose project of yours "
                                         "(`docker compose ls`) instead of starting a cluster; process faults and "
                                         "plain rolling restarts hit its containers (docs/compose.md)"),
    "i_understand_faults_hit_this_cluster": Param(False, type="boolean",
                                                  description="required with compose_project: the faults stop, "
                                                              "kill, pause and restart your project's containers"),
}
IMAGE_PARAM = Param(None, type=["null", "string"],
                    description="compose backend: a Kafka image configured like apache/kafka, e.g. "
                                "apache/kafka:3.9.1 (empty: kafkaproof/kafka:<version>, built locally)")


def use_docker_engine(params) -> None:
    """The compose backend's engine and image for this task's process (`pipeline.use_docker_engine`)."""
    pipeline.use_docker_engine(params.get("docker_url"), params.get("docker_conn_id"), params.get("kafka_image"))


def _batch_id() -> str:
    ctx = get_current_context()
    return f"{ctx['dag'].dag_id}/{ctx['run_id']}"


def existing_cluster(params) -> tuple[str | None, dict | None]:
    """(bootstrap servers, connection config) of the existing cluster a run asks for; (None, None) for the
    embedded local cluster.

    `bootstrap` names a plaintext cluster directly; `kafka_conn_id` names an Airflow Kafka connection
    whose Extra is the client config (`pipeline.kafka_connection`: its security settings reach every
    client). Each task reads the connection itself, so credentials never travel in XCom.
    """
    if params.get("bootstrap"):
        return params["bootstrap"], None
    conn_id = params.get("kafka_conn_id")
    if not conn_id:
        return None, None
    from airflow.sdk import Connection
    try:
        return pipeline.kafka_connection(conn_id, Connection.get(conn_id).extra_dejson or {})
    except KafkaproofError as e:  # a connection to fix, not a run to retry
        raise AirflowFailException(str(e)) from None


def batch_overrides(params, bootstrap: str | None) -> Overrides:
    """What a DAG run's params change of every scenario it runs (a compose project refused without the
    acknowledgement: `pipeline.attach_overrides`)."""
    try:
        attached = pipeline.attach_overrides(params.get("compose_project"),
                                             params.get("i_understand_faults_hit_this_cluster"), bootstrap,
                                             params.get("cluster_backend"))
    except KafkaproofError as e:  # params to fix, not a run to retry
        raise AirflowFailException(str(e)) from None
    return Overrides(messages=params.get("messages"), kafka_version=params.get("kafka_version"),
                     brokers=params.get("brokers"), bootstrap=bootstrap, backend=params.get("cluster_backend"),
                     **attached)


def scheduled(cron: str):
    """A DAG's schedule: the cron expression, missed times skipped unless RUN_MISSED."""
    return cron if RUN_MISSED else NoMissedRunsTimetable(cron, timezone="UTC")


def dagrun_state(owner) -> str | None:
    """The state of a pipeline cluster owner's DAG run in Airflow's metadata database (through the task's
    Execution API), None when Airflow does not know it."""
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    try:
        return RuntimeTaskInstance.get_dagrun_state(owner["dag_id"], owner["run_id"])
    except Exception:  # an error response for a run this metadata database lacks
        return None


def host_busy(e: pipeline.HostBusy) -> AirflowRescheduleException:
    """Come back in BUSY_RETRY_S: another pipeline's cluster runs (its next task needs the pool's slot this
    task would hold while waiting)."""
    print(f"{e}; trying again in {BUSY_RETRY_S}s")
    return AirflowRescheduleException(datetime.now(timezone.utc) + timedelta(seconds=BUSY_RETRY_S))


def _group_id(name: str) -> str:
    return name.replace("-", "_")


def scenario_group(run: batch.PlannedRun):
    """provision (setup) → run_workload beside one task per fault of its timeline → teardown (always).

    Returns the group, its run task's id and its fault tasks' ids. Every task runs on the queue of the
    run's host (`batch.place`); the cluster tasks hold a slot of its pool. The fault tasks time the
    scenario's faults from the workload's start (`pipeline.drive_fault`); they need an executor that
    runs tasks concurrently, and stay out of the cluster pool the workload holds. With the
    `reuse_clusters` param, provision reuses a cluster an earlier group kept, and the teardown keeps the
    cluster when the plan says the next group asks for the same (`batch.provision_run`).
    """
    scenario, gid = run.scenario, _group_id(run.name)
    fault_ids = pipeline.fault_task_ids(scenario)
    host = HOSTS.host(run.host)

    @task_group(group_id=gid)
    def group():
        @setup
        @task(**host.task_args(), retries=1, retry_delay=timedelta(seconds=30))  # a retry starts a fresh cluster
        def provision() -> dict:
            """Resolve the scenario once (overrides, schedule, checks) and start its cluster; both travel on in XCom."""
            params = get_current_context()["params"]
            bootstrap, _ = existing_cluster(params)
            use_docker_engine(params)
            try:
                return batch.provision_run(run, _batch_id(), gid, batch_overrides(params, bootstrap),
                                           reuse=bool(params.get("reuse_clusters")), fault_tasks=bool(fault_ids),
                                           dagrun_state=dagrun_state, wait=False)
            except pipeline.HostBusy as e:
                raise host_busy(e) from None

        # A run bounds itself (its timeout_s); the task outlives that bound a little, for heal, drain and assembly.
        @task(**host.task_args(), execution_timeout=max(DEFAULT_ARGS["execution_timeout"],
                                              timedelta(seconds=float(scenario.data["timeout_s"]) + 600)))
        def run_workload(cluster: dict) -> dict:
            if cluster.get("error"):
                _report_run(pipeline.unstarted_run(run.name, cluster["error"]))
            params = get_current_context()["params"]
            connection = None if cluster["cluster"] else existing_cluster(params)[1]
            result = pipeline.run(ResolvedScenario.from_dict(cluster["resolved"]), cluster_name=cluster["cluster"],
                                  control=cluster.get("control"), client_config=connection,
                                  proxy_listen=params.get("proxy_listen") or "127.0.0.1")
            return _report_run(result)

        def fault_task(task_id: str, index: int):
            @task(task_id=task_id, **host.queue_args())
            def fault(cluster: dict) -> dict:
                """Inject and heal one fault of the timeline on the workload's schedule (on the run's host)."""
                if cluster.get("error"):
                    raise AirflowSkipException(f"the scenario did not start: {cluster['error']}")
                return pipeline.drive_fault(cluster["control"], index, FAULT_START_TIMEOUT_S,
                                            run_host=cluster.get("host"), queue=get_current_context()["ti"].queue)
            return fault

        @teardown  # runs whatever happened upstream
        @task(**host.task_args())
        def teardown_cluster(cluster: dict) -> None:
            if cluster:
                pipeline.teardown(cluster.get("cluster"), cluster.get("control"), keep=bool(cluster.get("keep")))

        cluster = provision()
        faults = [fault_task(task_id, entry.index)(cluster)
                  for task_id, entry in zip(fault_ids, scenario.timeline())]
        [run_workload(cluster), *faults] >> teardown_cluster(cluster)

    return group(), f"{gid}.run_workload", [f"{gid}.{task_id}" for task_id in fault_ids]


def _report_run(run: dict) -> dict:
    """Push the run for `collect_runs` (also a failed one: it gets an error verdict), fail the task if it failed."""
    get_current_context()["ti"].xcom_push(key="run", value=run)
    if not run.get("run_id"):  # refused before anything started: the error says which file and field
        raise AirflowFailException(run.get("error") or "the run did not start")
    if run.get("status") != "complete":
        raise AirflowFailException(f"run {run['run_id']} {run.get('status')}: {run.get('error')} ({run.get('run_dir')})")
    return run


@task(trigger_rule="all_done")
def collect_runs(expected: list[dict], mapped_task: str | None = None) -> list[dict]:
    """Every scenario's run as its run task reported it; the run directories to analyse go to XCom `run_dirs`.

    `expected` names where each run reports: `{"scenario", "task_id"}`, or with `mapped_task` the
    items the task was mapped over (item i reports from map index i). A task that died before it
    could report is an error run that says so.
    """
    ti = get_current_context()["ti"]
    runs = []
    for i, where in enumerate(expected):
        task_id = mapped_task or where["task_id"]
        got = ti.xcom_pull(task_ids=task_id, key="run", map_indexes=i if mapped_task else None)
        label = where.get("label", "")
        runs.append({**got, "scenario": where["scenario"], "label": label} if got else pipeline.unstarted_run(
            where["scenario"], f"task {task_id} failed before it reported a run (see its log)", label))
    ti.xcom_push(key="run_dirs", value=pipeline.analyzable(runs))
    return runs


def runs_visible(context) -> None:
    """Before the spark-submit: every complete run's directory is visible here (shared storage), else fail
    naming the path and the host that wrote it (`pipeline.check_runs_visible`)."""
    try:
        pipeline.check_runs_visible(context["ti"].xcom_pull(task_ids="collect_runs") or [])
    except KafkaproofError as e:
        raise AirflowFailException(str(e)) from None


def analyze_all(run_dirs) -> SparkSubmitOperator:
    """One spark-submit for every complete run of the DAG run (`spark/analyze.py` takes many run directories),
    once every group finished; on any worker (the Spark master of `spark_default` runs it), in no cluster pool."""
    return SparkSubmitOperator(task_id="analyze", application=ANALYZE_APP, py_files=ANALYZE_PY_FILES,
                               conn_id=SPARK_CONN, name="kafkaproof-analyze", application_args=run_dirs,
                               conf=spark_conf(), pre_execute=runs_visible)


@task(trigger_rule="all_done", map_index_template="{{ scenario_label }}",  # also when the analysis failed
      outlets=[HISTORY_ASSET])
def judge(run: dict) -> dict:
    """validate → compare with history → report, for one run; a run without analysis is an error verdict."""
    get_current_context()["scenario_label"] = run["scenario"] + (f" ({run['label']})" if run.get("label") else "")
    return pipeline.judge(run, _batch_id())


def judged(runs_by_task, mapped_task: str | None = None):
    """collect_runs → analyze → judge (mapped): the summaries of every scenario of the DAG run."""
    collected = collect_runs(runs_by_task, mapped_task)
    analyze = analyze_all(collected["run_dirs"])
    summaries = judge.expand(run=collected)
    analyze >> summaries
    return collected, summaries


@task(trigger_rule="all_done", outlets=[BATCH_REPORT_ASSET], on_failure_callback=NOTIFY_ON_FAILURE)
def gate(summaries: list[dict] | None = None, fault_tasks: list[str] | None = None, page: str | None = None) -> None:
    """Fail the DAG run, after every report is written, on any violation, undetected control or regression
    (`page` upgrade: when the candidate version is worse)."""
    ctx = get_current_context()
    outcome = batch.judge_batch(summaries, _batch_id(), page or batch.matrix_page(ctx["params"].get("clients")),
                                ctx["ti"].xcom_pull(task_ids=fault_tasks) or [] if fault_tasks else None)
    print("\n".join(outcome.lines))
    if not outcome.ok:
        raise AirflowFailException(outcome.failure())


def chain_groups(groups: list) -> None:
    """Scenarios of one host run one after another: the host has room for one cluster at a time.

    A group's teardown is not one of its leaves for `>>`, so it is chained to the next provision explicitly.
    """
    for a, b in zip(groups, groups[1:]):
        a >> b
        a.children[f"{a.group_id}.teardown_cluster"] >> b.children[f"{b.group_id}.provision"]


SUITE_PARAMS = {"messages": Param(None, type=["null", "integer"], minimum=1, description="override producers.messages"),
                "kafka_version": Param(None, type=["null", "string"], description="override cluster.kafka_version"),
                "brokers": BROKERS_PARAM,
                "kafka_conn_id": KAFKA_CONN_PARAM}


@dag(dag_id="kafka_reliability_nightly", schedule=scheduled(NIGHTLY_SCHEDULE), start_date=datetime(2026, 1, 1),
     catchup=False, max_active_runs=1, default_args=DEFAULT_ARGS, tags=["kafkaproof"],
     doc_md=f"Runs the `{NIGHTLY_SUITE}` suite of `scenarios/` every night and fails on any violated guarantee, "
            "undetected negative control or regression against history.",
     params={**SUITE_PARAMS,
             "bootstrap": Param(None, type=["null", "string"], description="existing cluster (proxy and consumer faults only)"),
             "proxy_listen": PROXY_LISTEN_PARAM,
             "cluster_backend": BACKEND_PARAM, **ENGINE_PARAMS, "kafka_image": IMAGE_PARAM, **ATTACH_PARAMS,
             "reuse_clusters": Param(REUSE_CLUSTERS, type="boolean",
                                     description="run scenarios that ask for the same cluster on one cluster, "
                                                 "each checked clean before it is reused (reports say so)")})
def kafka_reliability_nightly():
    suite_tasks(NIGHTLY_SUITE, shared_clusters=REUSE_CLUSTERS)


@dag(dag_id="kafka_reliability_soak", schedule=scheduled(SOAK_SCHEDULE), start_date=datetime(2026, 1, 1),
     catchup=False, max_active_runs=1, default_args=DEFAULT_ARGS, tags=["kafkaproof"],
     is_paused_upon_creation=SOAK_PAUSED,
     doc_md=f"Runs the `{SOAK_SUITE}` suite of `scenarios/` weekly: hours of load under a random fault rotation, "
            "bounded in time and disk (`kafkaproof stop RUN_DIR` ends a run early and judges what was sent); "
            "fails like the nightly DAG.",
     params={**SUITE_PARAMS, "reuse_clusters": Param(False, type="boolean")})
def kafka_reliability_soak():
    suite_tasks(SOAK_SUITE, shared_clusters=False)


def suite_tasks(suite: str, shared_clusters: bool) -> None:
    """One group per run of the suite's plan, each host's one after another (`batch.place`, `batch.lanes`), then
    collect → analyze → judge → gate once every group finished. `shared_clusters`: the default of the DAG's
    `reuse_clusters` param (placement is fixed at parse time; without reuse, runs that could share a cluster
    spread over the hosts)."""
    plan = batch.place(batch.suite_plan(pipeline.suite(suite)), HOSTS, shared_clusters=shared_clusters)
    built = [scenario_group(run) for run in plan.runs]
    groups = [group for group, _, _ in built]
    collected, summaries = judged([{"scenario": run.name, "task_id": run_task}
                                   for run, (_, run_task, _) in zip(plan.runs, built)])
    for lane in batch.lanes(plan).values():
        chain_groups([groups[i] for i in lane])
        last = groups[lane[-1]]
        last >> collected.operator
        last.children[f"{last.group_id}.teardown_cluster"] >> collected.operator
    gate(summaries, fault_tasks=[task_id for _, _, fault_tasks in built for task_id in fault_tasks], page=plan.page)


def _catalog_names() -> list[str]:
    try:
        return [s.name for s in pipeline.suite()]
    except Exception:  # a broken catalog must not hide the DAG; a run reports the error
        return []


@task(**HOSTS.home.task_args(), max_active_tis_per_dag=1, execution_timeout=timedelta(minutes=30),
      map_index_template="{{ scenario_label }}")
def run_scenario(run: dict) -> dict:
    """provision → run → teardown (always) for one resolved run of a mapped plan (`batch.resolved_items`), on the
    first worker host that is up; the analysis comes after all of them."""
    ctx = get_current_context()
    ctx["scenario_label"] = run["scenario"] + (f" ({run['label']})" if run.get("label") else "")
    params = ctx["params"]
    use_docker_engine(params)
    _, connection = existing_cluster(params)
    try:
        result = batch.run_resolved(run, _batch_id(), client_config=connection, dagrun_state=dagrun_state,
                                    wait=False, proxy_listen=params.get("proxy_listen") or "127.0.0.1")
    except pipeline.HostBusy as e:
        raise host_busy(e) from None
    return _report_run(result)


@dag(dag_id="kafka_reliability_manual", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
     max_active_runs=1, default_args=DEFAULT_ARGS, tags=["kafkaproof"],
     doc_md="Checks before an upgrade: choose scenarios, Kafka version, scale and where the cluster comes from.",
     params={"scenarios": Param(["baseline"], type="array", items={"type": "string", "enum": _catalog_names()},
                                description="scenarios from the catalog"),
             "kafka_version": Param(DEFAULT_KAFKA_VERSION, type="string"),
             "brokers": BROKERS_PARAM,
             "messages": Param(None, type=["null", "integer"], minimum=1, description="message scale (per producer)"),
             "bootstrap": Param(None, type=["null", "string"],
                                description="empty: embedded local cluster; else bootstrap servers of an existing cluster"),
             "kafka_conn_id": KAFKA_CONN_PARAM, "proxy_listen": PROXY_LISTEN_PARAM,
             "cluster_backend": BACKEND_PARAM, **ENGINE_PARAMS, "kafka_image": IMAGE_PARAM, **ATTACH_PARAMS,
             "clients": Param([], type="array", items={"type": "string", "enum": list(CLIENTS)}, uniqueItems=True,
                              description="a client matrix: every chosen scenario once per client (e.g. librdkafka "
                                          "and java), on the same faults; the summary compares them side by side")})
def kafka_reliability_manual():
    @task
    def chosen() -> list[dict]:
        """The plan of the chosen scenarios × clients, each run resolved once."""
        params = get_current_context()["params"]
        bootstrap, _ = existing_cluster(params)
        return batch.matrix_plan(pipeline.suite(names=params["scenarios"]), params.get("clients"),
                                 batch_overrides(params, bootstrap)).resolved_items()

    runs = chosen()
    ran = run_scenario.expand(run=runs)
    collected, summaries = judged(runs, mapped_task="run_scenario")
    ran >> collected.operator
    gate(summaries)


@dag(dag_id="kafka_upgrade_check", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
     max_active_runs=1, default_args=DEFAULT_ARGS, tags=["kafkaproof"],
     doc_md="Rolls a cluster from the current to the candidate Kafka version under load (the rolling scenarios), "
            "then runs the same scenarios on either version (with client_version_current/candidate: the Java "
            "clients on either kafka-clients version too, and the page lists the client defaults that differ); "
            "fails when the roll does not pass or the candidate is worse.",
     params={"rolling_scenarios": Param(["upgrade-39-to-43-idempotent"], type="array",
                                        items={"type": "string", "enum": _catalog_names()},
                                        description="scenarios with a rolling_upgrade, run first: from "
                                                    "current_version to candidate_version under load"),
             "scenarios": Param(["baseline"], type="array", items={"type": "string", "enum": _catalog_names()}),
             "current_version": Param(PRODUCTION_KAFKA_VERSION, type="string"),
             "candidate_version": Param(DEFAULT_KAFKA_VERSION, type="string"),
             "client_version_current": Param(None, type=["null", "string"],
                                             description="a client upgrade too: the Java producers and consumers "
                                                         "run this kafka-clients version on the current side "
                                                         "(set both client versions)"),
             "client_version_candidate": Param(None, type=["null", "string"],
                                               description="... and this one on the candidate side; the page lists "
                                                           "every client default that differs, read from the jars"),
             "brokers": BROKERS_PARAM,
             "messages": Param(None, type=["null", "integer"], minimum=1),
             "cluster_backend": BACKEND_PARAM, **ENGINE_PARAMS})
def kafka_upgrade_check():
    @task
    def matrix() -> list[dict]:
        """The upgrade check's plan, each run resolved once."""
        p = get_current_context()["params"]
        clients = (p.get("client_version_current"), p.get("client_version_candidate"))
        try:
            plan = batch.upgrade_plan(pipeline.suite(names=p.get("rolling_scenarios") or []),
                                      pipeline.suite(names=p["scenarios"]), p["current_version"],
                                      p["candidate_version"], batch_overrides(p, None),
                                      clients=clients if any(clients) else None)
        except KafkaproofError as e:  # input to fix, not a task to retry
            raise AirflowFailException(str(e)) from None
        return plan.resolved_items()

    runs = matrix()
    ran = run_scenario.expand(run=runs)
    collected, summaries = judged(runs, mapped_task="run_scenario")
    ran >> collected.operator
    gate.override(task_id="compare_versions")(summaries, page="upgrade")  # fails when the candidate is worse


AUDIT_TIMEOUT = timedelta(hours=int(os.environ.get("KAFKAPROOF_AUDIT_TIMEOUT_H", "8")))


@dag(dag_id="kafka_cluster_audit", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
     max_active_runs=1, default_args=DEFAULT_ARGS, tags=["kafkaproof"],
     doc_md="Audits an existing cluster (docs/audit.md): discovers its topics and settings read-only, runs each "
            "reliability class under the fault matrix on a replica with the team's client settings, tries the "
            "fixes, writes audit.html; fails when a class fails or an audit run errs. Nothing is written to the "
            "audited cluster.",
     params={"bootstrap": Param(None, type=["null", "string"],
                                description="the cluster's bootstrap servers (plaintext, or with client_config)"),
             "client_config": Param(None, type=["null", "string"],
                                    description="a client properties file on the worker saying how to connect "
                                                "(security.protocol, sasl.*, ssl.*; librdkafka names)"),
             "kafka_conn_id": KAFKA_CONN_PARAM,
             "app_config": Param(None, type=["null", "string"],
                                 description="the team's client settings on the worker: a Java or librdkafka "
                                             "properties file, or Spring Boot's application.yml / .properties"),
             "app_format": Param(None, type=["null", "string"], enum=[None, *APP_FORMATS],
                                 description="app_config's format (empty: detected; a properties file is Java's)"),
             "app_role": Param(None, type=["null", "string"], enum=[None, *APP_ROLES],
                               description="whose properties a Java or librdkafka app_config holds (empty: both)"),
             "topics": Param([], type="array", items={"type": "string"},
                             description="topic names or shell globs (empty: every topic)"),
             "faults": Param([], type="array", items={"type": "string", "enum": list(AUDIT_FAULTS)}, uniqueItems=True,
                             description="the faults of the matrix to run (empty: all)"),
             "max_classes": Param(None, type=["null", "integer"], minimum=1,
                                  description="at most this many reliability classes (the rest grouped into the "
                                              "closest; the report says which and how)"),
             "fixes": Param(True, type="boolean", description="for a failing class, try the fix list until one "
                                                              "passes the whole matrix"),
             "cluster_backend": BACKEND_PARAM})
def kafka_cluster_audit():
    @task
    def discover() -> dict:
        """Read-only: the client settings, the cluster's inventory, the classes and findings (logged); bad input
        fails here, before any replica starts."""
        p = get_current_context()["params"]
        bootstrap, connection = existing_cluster(p)
        try:
            return pipeline.audit_discovery(bootstrap, connection, p.get("client_config"), p.get("app_config"),
                                            p.get("app_format"), p.get("app_role"), tuple(p.get("topics") or ()),
                                            p.get("max_classes"))
        except KafkaproofError as e:  # input to fix, not a task to retry
            raise AirflowFailException(str(e)) from None

    @task(**HOSTS.home.task_args(), execution_timeout=AUDIT_TIMEOUT)  # replicas: a cluster slot of the first host up
    def run_audit(found: dict) -> dict:
        """The audit (`kafkaproof.audit.run_audit`) into $KAFKAPROOF_RUNS/audits/<run id>: replicas, fixes, pages."""
        from kafkaproof.audit import AuditRequest, run_audit as audit
        ctx = get_current_context()
        p = ctx["params"]
        bootstrap, connection = existing_cluster(p)
        with pipeline.client_config_file(None if p.get("client_config") else connection) as connection_file:
            try:
                result = audit(AuditRequest(
                    out=pipeline.audit_out(ctx["run_id"]), bootstrap=bootstrap or found["bootstrap"],
                    client_config=p.get("client_config") or connection_file, app_config=p.get("app_config"),
                    app_format=p.get("app_format"), app_role=p.get("app_role"), topics=tuple(p.get("topics") or ()),
                    faults=tuple(p.get("faults") or ()), max_classes=p.get("max_classes"),
                    fixes=bool(p.get("fixes")), backend=p.get("cluster_backend") or "local"))
            except KafkaproofError as e:  # refused before any replica started: input to fix
                raise AirflowFailException(str(e)) from None
        print("\n".join(result.lines))
        return {"verdict": result.verdict, "exit_code": result.exit_code, "json": str(result.json_path),
                "html": str(result.html_path), "lines": list(result.lines)}

    @task(on_failure_callback=NOTIFY_ON_FAILURE)
    def gate(outcome: dict) -> None:
        """Fail the DAG run when the audit's verdict is fail or error."""
        failure = pipeline.audit_gate(outcome)
        if failure:
            raise AirflowFailException(failure)

    gate(run_audit(discover()))


kafka_reliability_nightly()
kafka_reliability_manual()
kafka_upgrade_check()
kafka_reliability_soak()
kafka_cluster_audit()
