"""kafkaproof DAGs: the nightly suite, a manual pre-upgrade check, and an upgrade comparison.

Thin by design: every task calls `kafkaproof.pipeline`; the Spark analysis is a
SparkSubmitOperator on `spark/analyze.py`.
"""
from __future__ import annotations

import os
from datetime import datetime, timedelta
from pathlib import Path

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param, dag, get_current_context, setup, task, task_group, teardown
from airflow.sdk.exceptions import AirflowFailException

from kafkaproof import pipeline
from kafkaproof.analysis import spark_conf
from kafkaproof.errors import ScenarioError
from kafkaproof.spec.scenario import MAX_BROKERS, Scenario
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION, PRODUCTION_KAFKA_VERSION

REPO = Path(__file__).resolve().parent.parent
ANALYZE_APP = str(REPO / "spark" / "analyze.py")
POOL = "kafka_cluster"  # one slot: two clusters must not share this host
NIGHTLY_SUITE = os.environ.get("KAFKAPROOF_SUITE", "nightly")
NIGHTLY_SCHEDULE = os.environ.get("KAFKAPROOF_NIGHTLY_SCHEDULE", "0 2 * * *")
SPARK_CONN = os.environ.get("KAFKAPROOF_SPARK_CONN", "spark_default")
DEFAULT_ARGS = {"retries": 0, "execution_timeout": timedelta(minutes=30)}
KAFKA_CONN_PARAM = Param(None, type=["null", "string"],
                         description="an existing cluster by Airflow Kafka connection (e.g. kafka_default; Extra: "
                                     "bootstrap.servers); `bootstrap` wins when both are set")
BROKERS_PARAM = Param(None, type=["null", "integer"], minimum=1, maximum=MAX_BROKERS,
                      description="override cluster.brokers (empty: as each scenario says; local cluster only)")


def _batch_id() -> str:
    ctx = get_current_context()
    return f"{ctx['dag'].dag_id}/{ctx['run_id']}"


def existing_cluster(params) -> str | None:
    """Bootstrap servers of the existing cluster a run asks for, or None for the embedded local cluster.

    `bootstrap` names it directly; `kafka_conn_id` names an Airflow Kafka connection whose
    Extra holds the client config (`bootstrap.servers` is what kafkaproof uses; plaintext only).
    """
    if params.get("bootstrap"):
        return params["bootstrap"]
    conn_id = params.get("kafka_conn_id")
    if not conn_id:
        return None
    from airflow.sdk import Connection
    servers = Connection.get(conn_id).extra_dejson.get("bootstrap.servers")
    if not servers:
        raise AirflowFailException(f"Airflow connection {conn_id!r}: its Extra has no 'bootstrap.servers'; "
                                   f'set it, e.g. {{"bootstrap.servers": "kafka-1:9092,kafka-2:9092"}}')
    return str(servers)


def _group_id(name: str) -> str:
    return name.replace("-", "_")


def scenario_group(scenario_name: str):
    """provision (setup) → run → analyze → validate → compare with history → report, teardown always."""
    gid = _group_id(scenario_name)

    @task_group(group_id=gid)
    def group():
        @setup
        @task(pool=POOL)
        def provision() -> dict:
            """Resolve the scenario once (file, overrides, faults) and start its cluster; both travel on in XCom."""
            params = get_current_context()["params"]
            bootstrap = existing_cluster(params)
            (scn,) = pipeline.suite(names=[scenario_name])
            try:
                resolved = pipeline.resolve(scn, params.get("messages"), params.get("kafka_version"),
                                            params.get("brokers"), bootstrap)
            except ScenarioError as e:  # an error verdict that says why, and no cluster
                return {"cluster": None, "bootstrap": None, "error": str(e)}
            if bootstrap:
                return {"cluster": None, "bootstrap": bootstrap, "scenario": resolved.to_json()}
            name = pipeline.cluster_name_for(_batch_id(), gid)
            return {**pipeline.provision(resolved, name), "scenario": resolved.to_json()}

        @task(pool=POOL)
        def run_workload(cluster: dict) -> dict:
            if cluster.get("error"):
                get_current_context()["ti"].xcom_push(key="run", value={"run_dir": None, "error": cluster["error"]})
                raise AirflowFailException(cluster["error"])
            result = pipeline.run(Scenario.from_json(cluster["scenario"]), cluster_name=cluster["cluster"],
                                  bootstrap=None if cluster["cluster"] else cluster["bootstrap"])
            get_current_context()["ti"].xcom_push(key="run", value=result)  # also when the run failed
            if result["status"] != "complete":
                raise AirflowFailException(f"run {result['run_id']} {result['status']}: {result['error']} "
                                           f"({result['run_dir']})")
            return result

        @teardown  # runs whatever happened upstream
        @task(pool=POOL)
        def teardown_cluster(cluster: dict) -> None:
            if cluster and cluster.get("cluster"):
                pipeline.teardown(cluster["cluster"])

        @task
        def validate(run: dict) -> dict:
            from kafkaproof.verdict.validation import validate as gx_validate
            result = gx_validate(Path(run["run_dir"]))
            return {"status": result.status, "run_dir": run["run_dir"]}

        @task(trigger_rule="all_done")  # also after a failed run or analysis: that is an error verdict
        def compare_with_history() -> dict:
            ti = get_current_context()["ti"]
            run = ti.xcom_pull(task_ids=f"{gid}.run_workload", key="run") or {}
            return pipeline.summarize(run.get("run_dir"), scenario_name, _batch_id(), error=run.get("error"))

        @task(trigger_rule="all_done")
        def report(summary: dict) -> dict:
            if summary.get("run_dir"):
                summary["report"] = pipeline.report(summary["run_dir"])
            return summary

        cluster = provision()
        run = run_workload(cluster)
        analyze = SparkSubmitOperator(
            task_id="analyze", application=ANALYZE_APP, conn_id=SPARK_CONN, name=f"kafkaproof-{scenario_name}",
            application_args=[f"{{{{ ti.xcom_pull(task_ids='{gid}.run_workload')['run_dir'] }}}}"],
            conf=spark_conf())
        verdict = validate(run)
        compared = compare_with_history()
        summary = report(compared)
        run >> analyze >> verdict >> compared
        run >> teardown_cluster(cluster)
        return summary

    summary = group()
    return summary.operator.task_group, summary


@task(trigger_rule="all_done")
def gate(summaries: list[dict] | None = None) -> None:
    """Fail the DAG run, after every report is written, on any violation, undetected control or regression."""
    summaries = list(summaries or [])
    night = pipeline.write_batch_report(summaries, _batch_id())
    print(f"summary report: {night}")
    ok, problems = pipeline.gate(summaries)
    for s in summaries:
        if s:
            print(f"  {s['scenario']:<36} {s['verdict']:<6} {s.get('report') or ''}")
            for w in s.get("warnings") or []:  # shown, never failing: see expectations/regression.yaml
                print(f"      warning: {w} ({s.get('baseline') or 'no baseline'})")
    if not ok:
        raise AirflowFailException("reliability gate failed:\n  " + "\n  ".join(problems) + f"\nsummary: {night}")
    print("reliability gate passed")


def chain_groups(groups: list) -> None:
    """Scenarios run one after another: the host has room for one cluster at a time.

    A group's teardown is not one of its leaves for `>>`, so it is chained to the next provision explicitly.
    """
    for a, b in zip(groups, groups[1:]):
        a >> b
        a.children[f"{a.group_id}.teardown_cluster"] >> b.children[f"{b.group_id}.provision"]


@dag(dag_id="kafka_reliability_nightly", schedule=NIGHTLY_SCHEDULE, start_date=datetime(2026, 1, 1), catchup=False,
     max_active_runs=1, default_args=DEFAULT_ARGS, tags=["kafkaproof"],
     doc_md=f"Runs the `{NIGHTLY_SUITE}` suite of `scenarios/` every night and fails on any violated guarantee, "
            "undetected negative control or regression against history.",
     params={"messages": Param(None, type=["null", "integer"], minimum=1, description="override producers.messages"),
             "kafka_version": Param(None, type=["null", "string"], description="override cluster.kafka_version"),
             "brokers": BROKERS_PARAM,
             "bootstrap": Param(None, type=["null", "string"], description="existing cluster (proxy and consumer faults only)"),
             "kafka_conn_id": KAFKA_CONN_PARAM})
def kafka_reliability_nightly():
    built = [scenario_group(s.name) for s in pipeline.suite(NIGHTLY_SUITE)]
    chain_groups([group for group, _ in built])
    gate([summary for _, summary in built])


def _catalog_names() -> list[str]:
    try:
        return [s.name for s in pipeline.suite()]
    except Exception:  # a broken catalog must not hide the DAG; a run reports the error
        return []


@task(pool=POOL, max_active_tis_per_dag=1, execution_timeout=timedelta(minutes=30))
def scenario_pipeline(scenario: str, kafka_version: str | None = None, label: str = "") -> dict:
    """One scenario end to end in one task (provision, run, analyze, validate, summarize, report, teardown)."""
    params = get_current_context()["params"]
    return pipeline.run_pipeline(scenario, _batch_id(), kafka_version=kafka_version or params.get("kafka_version"),
                                 messages=params.get("messages"), bootstrap=existing_cluster(params), label=label,
                                 brokers=params.get("brokers"))


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
             "kafka_conn_id": KAFKA_CONN_PARAM})
def kafka_reliability_manual():
    @task
    def chosen() -> list[str]:
        return list(get_current_context()["params"]["scenarios"])

    gate(scenario_pipeline.expand(scenario=chosen()))


@dag(dag_id="kafka_upgrade_check", schedule=None, start_date=datetime(2026, 1, 1), catchup=False,
     max_active_runs=1, default_args=DEFAULT_ARGS, tags=["kafkaproof"],
     doc_md="Runs the same scenarios on the current and the candidate Kafka version; fails when the candidate is worse.",
     params={"scenarios": Param(["baseline"], type="array", items={"type": "string", "enum": _catalog_names()}),
             "current_version": Param(PRODUCTION_KAFKA_VERSION, type="string"),
             "candidate_version": Param(DEFAULT_KAFKA_VERSION, type="string"),
             "brokers": BROKERS_PARAM,
             "messages": Param(None, type=["null", "integer"], minimum=1)})
def kafka_upgrade_check():
    @task
    def matrix() -> list[dict]:
        p = get_current_context()["params"]
        return [{"scenario": s, "kafka_version": v, "label": label} for label, v in
                (("current", p["current_version"]), ("candidate", p["candidate_version"])) for s in p["scenarios"]]

    @task(trigger_rule="all_done")
    def compare_versions(summaries: list[dict] | None = None) -> None:
        summaries = [s for s in (summaries or []) if s]
        path, worse = pipeline.write_upgrade_report(summaries, _batch_id())
        print(f"upgrade report: {path}")
        if worse:
            raise AirflowFailException("the candidate is worse:\n  " + "\n  ".join(worse) + f"\nreport: {path}")

    compare_versions(scenario_pipeline.expand_kwargs(matrix()))


kafka_reliability_nightly()
kafka_reliability_manual()
kafka_upgrade_check()
