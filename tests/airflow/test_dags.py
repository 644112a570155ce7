"""The Airflow DAGs: structure, and end-to-end runs with `airflow dags test` on real clusters."""
from __future__ import annotations

import json
import os
import re
import runpy
import shutil
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path

import pytest
import yaml

from kafkaproof.analysis import application_path, job_py_files
from kafkaproof.verdict import history
from kafkaproof.cluster import state
from kafkaproof.spec import ledger
from kafkaproof.spec import scenario as scenario_mod

pytestmark = pytest.mark.airflow

from support import REPO, SparkStandalone, airflow_env, free_port, stop_group, wait_for  # noqa: E402


@pytest.fixture(scope="module")
def airflow_home(tmp_path_factory) -> Iterator[Path]:
    """A migrated Airflow home with the cluster pool, and the api-server its executor's tasks report to."""
    home = tmp_path_factory.mktemp("airflow")
    port = str(free_port())
    os.environ["AIRFLOW__API__PORT"] = port  # airflow_env() derives the Execution API's URL from it
    env = airflow_env(home)
    subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    subprocess.run(["airflow", "pools", "set", "kafka_cluster", "1", "one cluster per host"], env=env, check=True,
                   capture_output=True, timeout=120)
    with open(home / "api-server.log", "w") as api_log:
        api = subprocess.Popen(["airflow", "api-server", "--apps", "execution", "--port", port], env=env,
                               stdout=api_log, stderr=subprocess.STDOUT, start_new_session=True)
    health = env["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"].rstrip("/") + "/health"

    def answers() -> bool:
        assert api.poll() is None, (home / "api-server.log").read_text()[-3000:]
        try:
            urllib.request.urlopen(health, timeout=2).close()
            return True
        except OSError:
            return False

    try:
        wait_for(answers, 180, f"the api-server's Execution API at {health}")
        yield home
    finally:
        stop_group(api, grace_s=60)
        os.environ.pop("AIRFLOW__API__PORT", None)


def dagbag(home: Path, folder: Path = REPO / "dags"):
    """A DagBag of dags/ (or `folder`), read with the settings of a migrated Airflow home."""
    for key, value in airflow_env(home).items():
        if key.startswith(("AIRFLOW", "KAFKAPROOF")):
            os.environ[key] = value
    from airflow.dag_processing.dagbag import DagBag
    return DagBag(dag_folder=str(folder))


def test_dags_import_with_the_expected_structure(airflow_home, tmp_path):
    bag = dagbag(airflow_home)
    assert bag.import_errors == {}
    # Copied into another Airflow's dags folder, the DAG file still finds the Spark job (the library's).
    elsewhere = tmp_path / "dags"
    elsewhere.mkdir()
    shutil.copy(REPO / "dags" / "kafka_reliability.py", elsewhere)
    copied = dagbag(airflow_home, elsewhere)
    assert copied.import_errors == {}
    analyze = copied.get_dag("kafka_reliability_nightly").get_task("analyze")
    assert analyze.application == str(application_path()) and Path(analyze.application).is_file()
    assert analyze.py_files == str(job_py_files()) and Path(analyze.py_files).is_file()  # the job's package
    assert {"kafka_reliability_nightly", "kafka_reliability_manual", "kafka_upgrade_check"} <= set(bag.dag_ids)
    nightly = bag.get_dag("kafka_reliability_nightly")
    assert nightly.catchup is False and nightly.max_active_runs == 1
    # no night missed while Airflow was down runs when it starts (make airflow starts no pipeline)
    assert nightly.timetable.summary == "0 2 * * * (missed times skipped)"
    tasks = {t.task_id: t for t in nightly.tasks}
    for step in ("provision", "run_workload", "teardown_cluster"):
        assert f"baseline.{step}" in tasks
    assert tasks["baseline.provision"].is_setup and tasks["baseline.teardown_cluster"].is_teardown
    # each fault of a scenario's timeline is a task beside its workload, outside the one-slot cluster pool
    fault = tasks["e1_three_nodes_failover.stop_leader_0_at_8s_for_10s"]
    assert fault.upstream_task_ids == {"e1_three_nodes_failover.provision"} and fault.pool != "kafka_cluster"
    assert fault.task_id in tasks["e1_three_nodes_failover.teardown_cluster"].upstream_task_ids
    assert {t for t in tasks if t.startswith("baseline.")} == {f"baseline.{step}" for step in
                                                              ("provision", "run_workload", "teardown_cluster")}
    # groups run one after another (one cluster per host); the last one's teardown precedes the analysis
    assert "baseline.teardown_cluster" in tasks["consumer_crash_commit_before.provision"].upstream_task_ids
    last = [t for t in tasks if t.endswith(".teardown_cluster")][-1]
    assert last in tasks["collect_runs"].upstream_task_ids
    # scenarios asking for the same cluster run next to each other (and share it, checked, by default)
    assert nightly.params["reuse_clusters"] is True
    assert "e6_rf3_min_isr_2.teardown_cluster" in tasks["e1_two_nodes_no_failover.provision"].upstream_task_ids
    for dag_id in ("kafka_reliability_nightly", "kafka_reliability_manual", "kafka_upgrade_check",
                   "kafka_reliability_soak"):
        dag_tasks = {t.task_id: t for t in bag.get_dag(dag_id).tasks}
        # one spark-submit per DAG run, through the operator spark_default configures
        assert [t for t, op in dag_tasks.items() if type(op).__name__ == "SparkSubmitOperator"] == ["analyze"]
        assert dag_tasks["analyze"].pool == "default_pool"  # the analysis holds no cluster slot
        assert dag_tasks["analyze"].upstream_task_ids == {"collect_runs"}
        assert dag_tasks["collect_runs"].trigger_rule == dag_tasks["judge"].trigger_rule == "all_done"
        assert {"analyze", "collect_runs"} == dag_tasks["judge"].upstream_task_ids
    assert tasks["gate"].trigger_rule == "all_done" and tasks["gate"].upstream_task_ids == {"judge"}
    # the weekly soak: hours-long runs whose workload task outlives the run's own bound (timeout_s)
    soak = bag.get_dag("kafka_reliability_soak")
    assert soak.timetable.summary == "0 4 * * 6 (missed times skipped)" and soak.max_active_runs == 1
    assert soak.is_paused_upon_creation is True and not nightly.is_paused_upon_creation
    soak_tasks = {t.task_id: t for t in soak.tasks}
    assert soak_tasks["soak_random_faults.run_workload"].execution_timeout.total_seconds() == 8400 + 600
    assert tasks["baseline.run_workload"].execution_timeout.total_seconds() == 1800
    assert {"analyze", "judge", "gate"} <= set(soak_tasks)
    manual = bag.get_dag("kafka_reliability_manual")
    assert "baseline" in manual.params.get_param("scenarios").schema["items"]["enum"]
    assert {"kafka_version", "brokers", "messages", "bootstrap", "kafka_conn_id", "proxy_listen"} <= set(manual.params)
    assert manual.params["proxy_listen"] == nightly.params["proxy_listen"] == "127.0.0.1"  # loopback unless told
    upgrade = bag.get_dag("kafka_upgrade_check")
    assert {"current_version", "candidate_version", "rolling_scenarios", "client_version_current",
            "client_version_candidate"} <= set(upgrade.params)
    assert upgrade.params["client_version_current"] is None  # no client upgrade unless asked
    assert upgrade.params["rolling_scenarios"] == ["upgrade-39-to-43-idempotent"]
    # Airflow habits: assets other DAGs can wait for, a notifier on a failed gate, a retried provision
    assert [a.name for a in tasks["judge"].outlets] == ["kafkaproof_history"]
    assert [a.name for a in tasks["gate"].outlets] == ["kafkaproof_batch_report"]
    assert type(tasks["gate"].on_failure_callback[0]).__name__ == "WebhookNotifier"
    assert tasks["baseline.provision"].retries == 1


def test_with_two_hosts_every_task_of_a_group_runs_on_its_hosts_queue_and_pool(airflow_home, monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_HOSTS", "w1,w2")
    monkeypatch.setenv("KAFKAPROOF_HOST_PINS", "baseline=w2")
    bag = dagbag(airflow_home)
    assert bag.import_errors == {}
    nightly = bag.get_dag("kafka_reliability_nightly")
    groups: dict[str, list] = {}
    for t in nightly.tasks:
        if "." in t.task_id:
            groups.setdefault(t.task_id.split(".")[0], []).append(t)
    hosts_used = set()
    for gid, tasks in groups.items():
        queues = {t.queue for t in tasks}
        assert len(queues) == 1, f"{gid}: tasks on queues {queues}"
        host = queues.pop().removeprefix("kafkaproof-")
        hosts_used.add(host)
        for t in tasks:  # the cluster tasks hold a slot of the host's pool; fault tasks run beside, no slot
            fault = not t.task_id.endswith((".provision", ".run_workload", ".teardown_cluster"))
            assert t.pool == ("default_pool" if fault else f"kafka_cluster_{host}"), t.task_id
    assert hosts_used == {"w1", "w2"} and groups["baseline"][0].queue == "kafkaproof-w2"  # round robin; the pin
    assert any(not t.task_id.endswith((".provision", ".run_workload", ".teardown_cluster"))
               for tasks in groups.values() for t in tasks)  # fault tasks were checked too
    tasks = {t.task_id: t for t in nightly.tasks}
    # each host runs its groups one after another; the analysis waits for both hosts' last teardown
    for host in ("w1", "w2"):
        teardowns = [t for t in tasks if t.endswith(".teardown_cluster") and tasks[t].queue == f"kafkaproof-{host}"]
        assert teardowns[-1] in tasks["collect_runs"].upstream_task_ids
    assert tasks["analyze"].pool == "default_pool" and tasks["analyze"].queue == tasks["collect_runs"].queue
    for dag_id in ("kafka_reliability_manual", "kafka_upgrade_check"):  # one task per run: the first host
        run_scenario = bag.get_dag(dag_id).get_task("run_scenario")
        assert (run_scenario.queue, run_scenario.pool) == ("kafkaproof-w1", "kafka_cluster_w1")


def test_an_existing_cluster_comes_from_bootstrap_or_a_kafka_connection(airflow_home, monkeypatch, tmp_path):
    dagbag(airflow_home)  # the Airflow settings, including the kafka_default connection
    module = runpy.run_path(str(REPO / "dags" / "kafka_reliability.py"))
    existing_cluster = module["existing_cluster"]
    assert existing_cluster({}) == (None, None)  # the embedded local cluster
    assert existing_cluster({"bootstrap": "k1:9092", "kafka_conn_id": "kafka_default"}) == ("k1:9092", None)
    assert existing_cluster({"kafka_conn_id": "kafka_default"}) == ("localhost:9092", {})
    # A secured cluster: the Extra is the client config; its security settings reach the run,
    # what a scenario field owns stays out.
    ca = tmp_path / "ca.pem"
    ca.write_text("-----BEGIN CERTIFICATE-----\n")
    secure = {"bootstrap.servers": "k1:9093", "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
              "sasl.username": "u", "sasl.password": "p", "ssl.ca.location": str(ca), "group.id": "my-group"}
    monkeypatch.setenv("AIRFLOW_CONN_KP_SECURE", json.dumps({"conn_type": "kafka", "extra": secure}))
    bootstrap, connection = existing_cluster({"kafka_conn_id": "kp_secure"})
    assert bootstrap == "k1:9093"
    assert connection == {k: v for k, v in secure.items() if k not in ("bootstrap.servers", "group.id")}
    from airflow.sdk.exceptions import AirflowFailException
    monkeypatch.setenv("AIRFLOW_CONN_KP_NO_MECHANISM", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "k1:9093", "security.protocol": "SASL_SSL"}}))
    with pytest.raises(AirflowFailException, match="'kp_no_mechanism' .Extra.: security.protocol=SASL_SSL needs "
                                                   "sasl.mechanism; allowed: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512"):
        existing_cluster({"kafka_conn_id": "kp_no_mechanism"})
    monkeypatch.setenv("AIRFLOW_CONN_KP_NO_SERVERS", '{"conn_type": "kafka", "extra": {"acks": "all"}}')
    with pytest.raises(AirflowFailException, match="'kp_no_servers' .Extra. has no bootstrap.servers"):
        existing_cluster({"kafka_conn_id": "kp_no_servers"})


def test_a_compose_project_param_attaches_every_scenario_only_with_the_acknowledgement(airflow_home):
    """The manual and nightly DAGs pass `compose_project` to the library (`pipeline.attach_overrides`); without
    `i_understand_faults_hit_this_cluster` the task fails at once, naming the param (no cluster touched)."""
    bag = dagbag(airflow_home)
    for dag_id in ("kafka_reliability_manual", "kafka_reliability_nightly"):
        params = bag.get_dag(dag_id).params
        assert params["compose_project"] is None and params["i_understand_faults_hit_this_cluster"] is False
    module = runpy.run_path(str(REPO / "dags" / "kafka_reliability.py"))
    batch_overrides = module["batch_overrides"]
    from airflow.sdk.exceptions import AirflowFailException
    from kafkaproof.run.resolved import Overrides
    assert batch_overrides({"messages": 5}, None) == Overrides(messages=5)
    assert batch_overrides({"compose_project": "shop", "i_understand_faults_hit_this_cluster": True}, None) == \
        Overrides(attach_project="shop", faults_hit_attached=True)
    with pytest.raises(AirflowFailException, match="compose_project 'shop': .*i_understand_faults_hit_this_cluster"):
        batch_overrides({"compose_project": "shop"}, None)
    with pytest.raises(AirflowFailException, match="leave out bootstrap"):
        batch_overrides({"compose_project": "shop", "i_understand_faults_hit_this_cluster": True}, "k1:9092")


def test_the_audit_dag_discovers_read_only_then_audits_then_gates(airflow_home):
    from kafkaproof.spec.audit_plan import FAULTS
    bag = dagbag(airflow_home)
    assert bag.import_errors == {}
    audit = bag.get_dag("kafka_cluster_audit")
    assert type(audit.timetable).__name__ == "NullTimetable" and audit.max_active_runs == 1  # manual only
    tasks = {t.task_id: t for t in audit.tasks}
    assert set(tasks) == {"discover", "run_audit", "gate"}
    assert tasks["run_audit"].upstream_task_ids == {"discover"} and tasks["gate"].upstream_task_ids == {"run_audit"}
    # discovery holds no cluster slot; the replicas do
    assert tasks["run_audit"].pool == "kafka_cluster" and tasks["discover"].pool != "kafka_cluster"
    assert type(tasks["gate"].on_failure_callback[0]).__name__ == "WebhookNotifier"
    assert {"bootstrap", "client_config", "kafka_conn_id", "app_config", "topics", "faults", "max_classes",
            "fixes"} <= set(audit.params)
    assert audit.params["fixes"] is True and audit.params["topics"] == [] and audit.params["faults"] == []
    assert audit.params.get_param("faults").schema["items"]["enum"] == list(FAULTS)


def test_the_audit_dag_runs_end_to_end_with_the_runner_faked(airflow_home, monkeypatch, tmp_path):
    """The wiring: the params reach discovery and the runner (a Kafka connection's settings as a private file
    that is gone afterwards), the audit goes under $KAFKAPROOF_RUNS/audits/<run>, the gate fails on a fail."""
    from kafkaproof import audit as audit_module, pipeline
    from kafkaproof.report.audit_page import write_audit_page
    bag = dagbag(airflow_home)
    runs = tmp_path / "runs"
    monkeypatch.setenv("KAFKAPROOF_RUNS", str(runs))
    monkeypatch.setenv("AIRFLOW_CONN_KP_AUDITED", json.dumps({"conn_type": "kafka", "extra": {
        "bootstrap.servers": "k1:9093", "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
        "sasl.username": "u", "sasl.password": "secret"}}))
    seen = {}

    def discovery(bootstrap, connection, client_config, app_config, app_format, app_role, topics, max_classes):
        seen["discovery"] = (bootstrap, dict(connection), topics, max_classes)
        return {"bootstrap": bootstrap, "classes": {}}

    def run_audit(request):
        seen["request"] = request
        written = Path(request.client_config)
        seen["file"] = (written.read_text(), oct(written.stat().st_mode & 0o777))
        doc = {"audit_id": "audit-x", "bootstrap": request.bootstrap, "verdict": verdict, "classes": []}
        request.out.mkdir(parents=True, exist_ok=True)
        (request.out / "audit.json").write_text(json.dumps(doc))
        return audit_module.AuditResult(doc, request.out / "audit.json", write_audit_page(doc, request.out), verdict,
                                        [f"verdict {verdict}"])

    monkeypatch.setattr(pipeline, "audit_discovery", discovery)
    monkeypatch.setattr(audit_module, "run_audit", run_audit)
    dag = bag.get_dag("kafka_cluster_audit")
    for verdict, expected in (("pass", "success"), ("fail", "failed")):
        seen.clear()
        started = time.monotonic()
        run = dag.test(run_conf={"kafka_conn_id": "kp_audited", "topics": ["orders*"], "max_classes": 2,
                                 "faults": ["leader-kill"]})
        print(f"dag.test ({verdict}) took {time.monotonic() - started:.1f}s")
        assert run.state == expected, verdict
        assert seen["discovery"] == ("k1:9093", {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                                                 "sasl.username": "u", "sasl.password": "secret"}, ("orders*",), 2)
        request = seen["request"]
        assert request.bootstrap == "k1:9093" and request.topics == ("orders*",) and request.faults == ("leader-kill",)
        assert request.max_classes == 2 and request.fixes is True and request.backend == "local"
        assert "sasl.password=secret" in seen["file"][0] and seen["file"][1] == "0o600"
        assert not Path(request.client_config).exists()  # the credentials' file is gone
        assert request.out.parent == runs / "audits" and (request.out / "audit.html").exists()
    # the task's extra link opens that audit.html, where the plugin serves it
    from types import SimpleNamespace
    module = runpy.run_path(str(REPO / "plugins" / "kafkaproof_reports.py"))
    key = SimpleNamespace(dag_id="kafka_cluster_audit", task_id="gate", run_id=run.run_id)
    assert module["BatchPageLink"]().get_link(None, ti_key=key) == \
        f"/kafkaproof/audits/{request.out.name}/audit.html"


def test_the_reports_index_lists_the_audits_for_who_may_read_the_audit_dag(airflow_home, tmp_path):
    from fastapi.testclient import TestClient
    from kafkaproof.report.audit_page import write_audit_page
    dagbag(airflow_home)  # the Airflow settings the plugin module reads
    runs = tmp_path / "runs"
    out = runs / "audits" / "manual__1"
    doc = {"audit_id": "audit-20261128T070000-ab12", "bootstrap": "k1:<9092>", "verdict": "fail",
           "finished_wall": 1.8e9, "classes": []}
    write_audit_page(doc, out)
    (out / "audit.json").write_text(json.dumps(doc))
    module = runpy.run_path(str(REPO / "plugins" / "kafkaproof_reports.py"))
    index = module["batch_index"](runs)
    assert "<h2>Audits</h2>" in index and 'href="audits/manual__1/audit.html"' in index
    assert ("audit-20261128T070000-ab12</a> · k1:&lt;9092&gt; · <strong>fail</strong> · "
            "finished 2027-01-15 08:00:00 UTC") in index
    assert "Audits" not in module["batch_index"](runs, {"kafka_reliability_nightly"})
    app = module["reports_app"](runs)
    for readable, status in (({"kafka_cluster_audit"}, 200), ({"kafka_reliability_nightly"}, 403)):
        app.dependency_overrides[module["readable_dags"]] = lambda readable=readable: frozenset(readable)
        with TestClient(app) as client:
            assert client.get("/audits/manual__1/audit.html").status_code == status
            assert client.get("/audits/manual__1/audit.json").status_code == status


class WebhookReceiver:
    """An HTTP server on loopback recording the JSON bodies POSTed to it: (path, body) in `received`."""

    def __init__(self):
        import http.server
        import threading
        received = self.received = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                received.append((self.path, json.loads(self.rfile.read(int(self.headers["Content-Length"])))))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "WebhookReceiver":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()


def dags_test(env: dict, dag_id: str, conf: dict | None = None, timeout: int = 1500) -> subprocess.CompletedProcess:
    """`airflow dags test`; the nightly DAG on LocalExecutor (its fault tasks run beside the workload),
    the others one task at a time (their mapped scenarios must not start two clusters at once there)."""
    cmd = ["airflow", "dags", "test", dag_id] + (["--use-executor"] if dag_id == "kafka_reliability_nightly" else [])
    if conf:
        cmd += ["--conf", json.dumps(conf)]
    return subprocess.run(cmd, env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout)


def catalog(tmp_path: Path, *docs: dict) -> Path:
    d = tmp_path / "scenarios"
    d.mkdir()
    for doc in docs:
        (d / f"{doc['name']}.yaml").write_text(yaml.safe_dump(doc))
    return d


def test_smoke_suite_passes_end_to_end(airflow_home, tmp_path):
    runs = tmp_path / "runs"
    env = airflow_env(airflow_home, KAFKAPROOF_SUITE="smoke", KAFKAPROOF_RUNS=str(runs),
                      KAFKAPROOF_HISTORY_URL=f"sqlite:///{tmp_path}/history.sqlite")
    r = dags_test(env, "kafka_reliability_nightly")
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-6000:]
    assert "reliability gate passed" in log
    # the control's two consumer kills were tasks of their own, each waiting for the commit it needs
    assert "fault tasks: 2 injected; 2 waited for their trigger" in log
    rows = history.runs(url=env["KAFKAPROOF_HISTORY_URL"])
    assert {row["scenario"] for row in rows} == {"baseline", "consumer-crash-commit-before"}
    assert {row["verdict"] for row in rows} == {"pass"}  # the negative control passes by being detected
    for row in rows:
        assert Path(row["report"]).exists()
    # both ask for the same cluster: the second ran on the first one's, checked clean, and says so
    manifests = [ledger.read_manifest(d) for d in runs.iterdir() if (d / "manifest.json").exists()]
    reuse = {m["scenario_name"]: m["cluster_reuse"] for m in manifests}
    assert reuse["baseline"] == {"reused": False, "runs_before": []}
    assert reuse["consumer-crash-commit-before"]["reused"] is True
    assert reuse["consumer-crash-commit-before"]["runs_before"] == ["baseline"]
    assert not [n for n in state.list_clusters() if n.startswith("af-")]


def test_regression_and_failed_workload_fail_the_gate_after_teardown(airflow_home, tmp_path):
    baseline = yaml.safe_load((REPO / "scenarios" / "baseline.yaml").read_text())
    baseline.update(tags=["t"], producers={**baseline["producers"], "messages": 2000})
    # A known property with a value librdkafka rejects when the producer starts (an unknown name is
    # refused before anything starts): the workload task fails mid-run
    broken = dict(baseline, name="broken-producer", producers={**baseline["producers"], "config": {"linger.ms": -5}})
    url = f"sqlite:///{tmp_path}/history.sqlite"
    scenarios = catalog(tmp_path, baseline, broken)
    same_config = scenario_mod.load(scenarios / "baseline.yaml").hash()
    for i in range(5):  # seeded history (a full baseline): baseline used to be impossibly fast
        history.record({"scenario": "baseline", "run_id": f"seed-{i}", "kafka_version": "4.3.1", "verdict": "pass",
                        "scenario_hash": same_config, "finished_at": datetime(2026, 11, 1 + i, tzinfo=timezone.utc),
                        "metrics": {"publish_p50_ms": 0.01, "anomalies": {}}}, url)
    # ... and a run of another configuration (another scale) that had no p50 at all: not a baseline
    history.record({"scenario": "baseline", "run_id": "other-scale", "kafka_version": "4.3.1", "verdict": "pass",
                    "scenario_hash": "0" * 16, "finished_at": datetime(2026, 11, 7, tzinfo=timezone.utc),
                    "metrics": {"publish_p50_ms": 0.0, "anomalies": {}}}, url)
    with WebhookReceiver() as hook:  # the failed gate's notification goes to a webhook of our own
        env = airflow_env(airflow_home, KAFKAPROOF_SUITE="t", KAFKAPROOF_SCENARIOS=str(scenarios),
                          KAFKAPROOF_RUNS=str(tmp_path / "runs"), KAFKAPROOF_HISTORY_URL=url,
                          KAFKAPROOF_REGRESSION_TOLERANCE="0",
                          KAFKAPROOF_REGRESSION_MIN_ABSOLUTE='{"publish_p50_ms": 0}',
                          AIRFLOW_CONN_KAFKAPROOF_NOTIFY=json.dumps({"conn_type": "http", "host": "127.0.0.1",
                                                                     "port": hook.port, "extra": {"endpoint": "night"}}))
        r = dags_test(env, "kafka_reliability_nightly")
    log = r.stdout + r.stderr
    assert r.returncode != 0, log[-6000:]
    assert "reliability gate failed" in log
    (path, note), = hook.received
    assert path == "/night" and (note["dag_id"], note["task_id"]) == ("kafka_reliability_nightly", "gate")
    assert "reliability gate failed" in note["message"] and "broken-producer" in note["message"]
    assert "baseline" in log and "regression: publish_p50_ms" in log and "of the last 5 passing runs" in log
    assert "broken-producer" in log and "error" in log
    # the failed workload's cluster was torn down
    assert not [n for n in state.list_clusters() if n.startswith("af-")]
    assert history.runs("broken-producer", url=url)[0]["verdict"] == "error"


@pytest.mark.long
def test_upgrade_check_rolls_then_runs_both_versions_and_analyses_them_in_one_spark_submit(airflow_home, tmp_path):
    runs = tmp_path / "runs"
    env = airflow_env(airflow_home, KAFKAPROOF_RUNS=str(runs), KAFKAPROOF_HISTORY_URL=f"sqlite:///{tmp_path}/h.sqlite")
    # The scenario's own scale (5,000): the candidate is compared on publish p50, which a run of 2,000
    # lets the first second (client start, metadata) move by hundreds of ms on a busy host.
    r = dags_test(env, "kafka_upgrade_check", {"scenarios": ["baseline"]})
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-6000:]
    assert "upgrade report:" in log
    rows = history.runs("baseline", url=env["KAFKAPROOF_HISTORY_URL"])
    assert sorted(row["kafka_version"] for row in rows) == ["3.9.2", "4.3.1"]
    assert {row["verdict"] for row in rows} == {"pass"}
    # first, the default rolling scenario rolled a cluster from the current to the candidate version
    (roll,) = history.runs("upgrade-39-to-43-idempotent", url=env["KAFKAPROOF_HISTORY_URL"])
    assert (roll["kafka_version"], roll["verdict"]) == ("3.9.2", "pass")
    (page,) = [line.split("upgrade report:", 1)[1].strip() for line in log.splitlines() if "upgrade report:" in line]
    html = Path(page).read_text()
    assert "The rolling upgrade, under load" in html and "features finalised for release 4.3" in html
    assert html.count("3.9.2 → 4.3.1") == 3  # a row per node
    # every run was analysed by the one `analyze` task: one Spark application for the DAG run
    (cmd,) = [line for line in log.splitlines() if "Spark-Submit cmd:" in line]
    assert cmd.count("/runs/baseline-") == 2 and "--name kafkaproof-analyze" in cmd
    assert cmd.count("/runs/upgrade-39-to-43-idempotent-") == 1
    assert not [n for n in state.list_clusters() if n.startswith("af-")]


@pytest.mark.long
def test_manual_dag_runs_a_client_matrix_analysed_on_the_spark_master_spark_default_names(airflow_home, tmp_path):
    with SparkStandalone(tmp_path / "spark") as spark:
        env = airflow_env(airflow_home, KAFKAPROOF_RUNS=str(tmp_path / "runs"),
                          KAFKAPROOF_HISTORY_URL=f"sqlite:///{tmp_path}/h.sqlite",
                          AIRFLOW_CONN_SPARK_DEFAULT=json.dumps({"conn_type": "spark", "host": "spark://127.0.0.1",
                                                                 "port": spark.port}))
        r = dags_test(env, "kafka_reliability_manual",
                      {"scenarios": ["baseline"], "messages": 2000, "clients": ["librdkafka", "java"]})
        log = r.stdout + r.stderr
        assert r.returncode == 0, log[-6000:]
        (cmd,) = [line for line in log.splitlines() if "Spark-Submit cmd:" in line]
        assert f"--master {spark.url}" in cmd and cmd.count("/runs/baseline-") == 2  # both clients' runs
        assert spark.apps() == [("kafkaproof-analyze", "FINISHED")]  # it ran on the cluster, not in local mode
    rows = history.runs("baseline", url=env["KAFKAPROOF_HISTORY_URL"])
    assert sorted((row["label"], row["verdict"]) for row in rows) == [("java", "pass"), ("librdkafka", "pass")]
    # the `clients` param made the summary a client matrix: one page, the clients side by side
    assert "clients do not differ" in log or "clients differ:" in log
    (page,) = [line.split("summary report:", 1)[1].strip() for line in log.splitlines() if "summary report:" in line]
    html = Path(page).read_text()
    assert "Client matrix" in html and "librdkafka" in html and "java" in html


@pytest.mark.long
def test_manual_dag_runs_the_application_e6_pair_and_its_batch_page_leads_with_the_applications_view(
        airflow_home, tmp_path):
    """The manual DAG runs application scenarios like any other: the run starts the example service (built
    into the cache by the run, not by Airflow), the batch page shows both verdicts and the application's view."""
    pair = ["app-e6-answer-before-ack", "app-e6-wait-for-ack"]
    env = airflow_env(airflow_home, KAFKAPROOF_RUNS=str(tmp_path / "runs"),
                      KAFKAPROOF_HISTORY_URL=f"sqlite:///{tmp_path}/h.sqlite")
    r = dags_test(env, "kafka_reliability_manual", {"scenarios": pair})
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-6000:]
    assert "reliability gate passed" in log  # the negative control detected its loss, its twin lost nothing
    rows = history.runs(url=env["KAFKAPROOF_HISTORY_URL"])
    assert sorted((row["scenario"], row["verdict"]) for row in rows) == [(name, "pass") for name in pair]
    (page,) = [line.split("summary report:", 1)[1].strip() for line in log.splitlines() if "summary report:" in line]
    html = Path(page).read_text()
    table = html[html.index("Scenarios (worst first)"):]
    for name in pair:
        assert f">{name}</a>" in table
    # each row leads with the application's view, as its run page does
    leads = re.findall(r'<div class="app">([^<]*)</div>', table)
    assert len(leads) == 2 and all(" events accepted, " in lead for lead in leads), leads
    assert any("accepted but never in Kafka, first at " in lead and "during stop leader:0" in lead
               for lead in leads), leads
    assert any(lead.endswith("every accepted event in Kafka.") for lead in leads), leads
    assert table.count('<span class="badge pass">pass</span>') == 2
    assert not [n for n in state.list_clusters() if n.startswith("af-")]


@pytest.mark.long
def test_upgrade_check_runs_an_application_scenario_on_either_version(airflow_home, tmp_path):
    """What the upgrade check varies (the Kafka version) works with an application section: the same
    service on either version, each row of the page with the application's view."""
    env = airflow_env(airflow_home, KAFKAPROOF_RUNS=str(tmp_path / "runs"),
                      KAFKAPROOF_HISTORY_URL=f"sqlite:///{tmp_path}/h.sqlite")
    r = dags_test(env, "kafka_upgrade_check", {"rolling_scenarios": [], "scenarios": ["app-e6-wait-for-ack"]})
    log = r.stdout + r.stderr
    assert r.returncode == 0, log[-6000:]
    rows = history.runs("app-e6-wait-for-ack", url=env["KAFKAPROOF_HISTORY_URL"])
    assert sorted((row["kafka_version"], row["label"], row["verdict"]) for row in rows) == [
        ("3.9.2", "current", "pass"), ("4.3.1", "candidate", "pass")]
    (page,) = [line.split("upgrade report:", 1)[1].strip() for line in log.splitlines() if "upgrade report:" in line]
    html = Path(page).read_text()
    assert "Candidate 4.3.1 is no worse than 3.9.2" in html
    leads = re.findall(r'<div class="app">([^<]*)</div>', html)
    assert len(leads) == 2 and all(lead.endswith("every accepted event in Kafka.") for lead in leads), leads
    assert not [n for n in state.list_clusters() if n.startswith("af-")]


class Chromium:
    """Headless Chromium (Debian's, `make setup` installs it) driven over the DevTools protocol: go to a page,
    type into it, click, read its DOM, as a user would (cookies, redirects and scripts included)."""

    def __init__(self, profile: Path):
        port = free_port()
        self.proc = subprocess.Popen(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                                      f"--remote-debugging-port={port}", f"--user-data-dir={profile}", "about:blank"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)

        def page() -> str | None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=2) as r:
                    return next((t["webSocketDebuggerUrl"] for t in json.load(r) if t["type"] == "page"), None)
            except OSError:
                return None

        from websockets.sync.client import connect
        self.ws = connect(wait_for(page, 60, "Chromium's DevTools endpoint"), max_size=None).__enter__()
        self.calls = 0

    def call(self, method: str, **params) -> dict:
        self.calls += 1
        self.ws.send(json.dumps({"id": self.calls, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv(timeout=60))
            if message.get("id") == self.calls:
                assert "error" not in message, message
                return message.get("result", {})

    def evaluate(self, expression: str):
        """The expression's value in the page, None while the page is between documents."""
        try:
            result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        except AssertionError:
            return None
        return None if "exceptionDetails" in result else result["result"].get("value")

    def goto(self, url: str, until: str, timeout_s: float = 90):
        """Open `url`; wait until the expression `until` is true in the page (returns its value)."""
        self.call("Page.navigate", url=url)
        return wait_for(lambda: self.evaluate(until), timeout_s, f"{until} at {url}")

    def type_into(self, selector: str, text: str) -> None:
        assert self.evaluate(f"(e => (e.focus(), !!e))(document.querySelector({json.dumps(selector)}))")
        self.call("Input.insertText", text=text)

    def __enter__(self) -> "Chromium":
        return self

    def __exit__(self, *exc) -> None:
        self.ws.close()
        stop_group(self.proc, grace_s=10)


def forged_token(**claims) -> str:
    """A JWT like the auth manager's, signed with a key that is not Airflow's."""
    import jwt
    now = int(datetime.now(timezone.utc).timestamp())
    return jwt.encode({"sub": "admin", "role": "admin", "iat": now, "nbf": now, "exp": now + 3600, **claims},
                      "not-the-api-secret-" * 4, algorithm="HS512")


def http_status(url: str, token: str | None = None, cookie: str | None = None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    if cookie:
        headers["Cookie"] = f"_token={cookie}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=10) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_the_plugin_serves_reports_only_to_users_who_may_read_the_dags_and_trips_no_plugin_import(airflow_home,
                                                                                                     tmp_path):
    from report_runs import make_run
    from kafkaproof import pipeline
    from kafkaproof.report import write_run_report
    runs = tmp_path / "runs"
    run_dir = make_run(runs)
    write_run_report(run_dir)
    batch_id = "kafka_reliability_nightly/scheduled__2026-11-24T02:00:00+00:00"
    batch_page = Path(pipeline.write_batch_report([], batch_id, runs)).relative_to(runs).as_posix()
    port = str(free_port())
    # Airflow's own auth manager (simple) with three users: an admin, a viewer (may read every DAG) and a
    # user without a role (may read none)
    env = airflow_env(airflow_home, KAFKAPROOF_RUNS=str(runs), AIRFLOW__API__PORT=port,
                      AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin,viewer:viewer,outsider:")
    log_path = tmp_path / "api-server.log"
    with open(log_path, "w") as out:  # every app: the UI, the REST API and the plugins' apps
        api = subprocess.Popen(["airflow", "api-server", "--port", port], env=env, stdout=out,
                               stderr=subprocess.STDOUT, start_new_session=True)
    root = f"http://127.0.0.1:{port}"
    base = f"{root}/kafkaproof/"

    def up() -> bool:
        assert api.poll() is None, log_path.read_text()[-3000:]
        try:
            return http_status(base) == 401
        except OSError:
            return False

    def login(user: str) -> str:
        passwords = json.loads((airflow_home / "simple_auth_manager_passwords.json.generated").read_text())
        body = json.dumps({"username": user, "password": passwords[user]}).encode()
        request = urllib.request.Request(f"{root}/auth/token", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as r:
            return json.load(r)["access_token"]

    files = ["", f"{run_dir.name}/report/index.html", f"{run_dir.name}/manifest.json",
             f"{run_dir.name}/sends.parquet", batch_page, "no-such-file", "../airflow.cfg"]
    try:
        wait_for(up, 180, f"the kafkaproof plugin at {base}")
        admin, viewer, outsider = login("admin"), login("viewer"), login("outsider")
        got = {who: {f: http_status(base + f, **how) for f in files} for who, how in {
            "anonymous": {}, "forged": {"token": forged_token()}, "forged cookie": {"cookie": forged_token()},
            "unsigned": {"token": forged_token().rsplit(".", 1)[0] + "."}, "outsider": {"token": outsider},
            "admin": {"token": admin}, "viewer": {"token": viewer}, "admin cookie": {"cookie": admin}}.items()}
        print(json.dumps(got, indent=1))
        assert set(got["anonymous"].values()) == {401}  # every file under the runs directory too
        for who in ("forged", "forged cookie", "unsigned", "outsider"):
            assert set(got[who].values()) == {403}, who
        for who in ("admin", "viewer", "admin cookie"):
            assert got[who] == {**dict.fromkeys(files[:5], 200), "no-such-file": 404, "../airflow.cfg": 404}, who
        with urllib.request.urlopen(urllib.request.Request(base, headers={"Authorization": f"Bearer {viewer}"}),
                                    timeout=10) as r:
            page = r.read().decode()
        assert f'href="{run_dir.name}/report/index.html"' in page and f'href="{batch_page}"' in page
        # In a browser: log in on Airflow's login page, land on the reports, follow a link, open the
        # UI's "kafkaproof reports" entry (the page in an iframe) and a task's extra link
        with Chromium(tmp_path / "chromium") as browser:
            assert "Not authenticated" in browser.goto(base, "document.body && document.body.innerText")
            browser.goto(f"{root}/auth/login?next=/kafkaproof/", "!!document.querySelector('input[name=password]')")
            browser.type_into("input[name=username]", "viewer")
            passwords = json.loads((airflow_home / "simple_auth_manager_passwords.json.generated").read_text())
            browser.type_into("input[name=password]", passwords["viewer"])
            browser.evaluate("document.querySelector('button[type=submit]').click()")
            wait_for(lambda: browser.evaluate("location.pathname == '/kafkaproof/' && "
                                              "document.body.innerText.includes('Latest runs')"), 60,
                     "the reports' index after logging in")
            browser.evaluate(f"document.querySelector('a[href=\"{run_dir.name}/report/index.html\"]').click()")
            wait_for(lambda: browser.evaluate("!!document.querySelector('svg') && location.pathname"), 60,
                     "the run report after following its link")
            frame = ("(f => f && f.contentDocument && f.contentDocument.body && "
                     "f.contentDocument.body.innerText)(document.querySelector('iframe[src*=\"/kafkaproof/\"]'))")
            assert "Latest runs" in browser.goto(f"{root}/plugin/kafkaproof", frame, 120)
            assert f"Batch {batch_id}" in browser.goto(f"{root}/kafkaproof/{batch_page}",
                                                       "document.body && document.body.innerText")
    finally:
        stop_group(api, grace_s=30)
    log = log_path.read_text()
    assert "Failed to import plugin" not in log, log[-3000:]
    # the UI's entry for it (the nav's external view)
    listed = subprocess.run(["airflow", "plugins", "-o", "json"], env=env, capture_output=True, text=True, timeout=120)
    (plugin,) = [p for p in json.loads(listed.stdout) if p["name"] == "kafkaproof"]
    assert plugin["external_views"][0]["href"] == "/kafkaproof/" and plugin["fastapi_apps"]
    assert plugin["global_operator_extra_links"]
    # the task instances' extra link: the DAG run's summary page, where `write_batch_report` puts it
    from types import SimpleNamespace
    module = runpy.run_path(str(REPO / "plugins" / "kafkaproof_reports.py"))
    key = SimpleNamespace(dag_id="kafka_reliability_nightly", task_id="gate", run_id=batch_id.split("/", 1)[1])
    assert module["BatchPageLink"]().get_link(None, ti_key=key) == "/kafkaproof/" + batch_page
    assert module["BatchPageLink"]().get_link(None, ti_key=SimpleNamespace(dag_id="other", run_id="r")) == ""
    # a user who may read only some of kafkaproof's DAGs sees only their batches (an auth manager with
    # per-DAG permissions, e.g. FAB's, says which)
    manual = Path(pipeline.write_batch_report([], "kafka_reliability_manual/manual__1", runs)).parent.name
    index = module["batch_index"](runs, {"kafka_reliability_manual"})
    assert f"batches/{manual}/" in index and batch_page not in index


class AirflowApi:
    """Airflow's REST API as its admin (the simple auth manager's generated password)."""

    def __init__(self, home: Path, port: str):
        self.home, self.root = home, f"http://127.0.0.1:{port}"
        self.token: str | None = None

    def call(self, method: str, path: str, body: dict) -> dict:
        """POST/PATCH /api/v2/<path> with a JSON body; its JSON answer."""
        assert self.get("version"), "the api-server does not answer"
        request = urllib.request.Request(f"{self.root}/api/v2/{path}", json.dumps(body).encode(), method=method,
                                         headers={"Authorization": f"Bearer {self.token}",
                                                  "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            return json.load(r)

    def get(self, path: str):
        """The JSON of GET /api/v2/<path>; None while the api-server does not answer (or not yet its admin)."""
        try:
            if not self.token:
                password = json.loads((self.home / "simple_auth_manager_passwords.json.generated").read_text())["admin"]
                request = urllib.request.Request(f"{self.root}/auth/token", json.dumps(
                    {"username": "admin", "password": password}).encode(), {"Content-Type": "application/json"})
                with urllib.request.urlopen(request, timeout=10) as r:
                    self.token = json.load(r)["access_token"]
            request = urllib.request.Request(f"{self.root}/api/v2/{path}",
                                             headers={"Authorization": f"Bearer {self.token}"})
            with urllib.request.urlopen(request, timeout=10) as r:
                return json.load(r)
        except (OSError, ValueError, KeyError):
            return None


def fresh_airflow_env(home: Path, port: str, **extra: str) -> dict[str, str]:
    """airflow_env for an Airflow home of its own, with its own database and logs: `dagbag()` left the module's
    home's settings in os.environ, which scripts/airflow-env.sh keeps when they are set."""
    return airflow_env(home, AIRFLOW__API__PORT=port,
                       AIRFLOW__DATABASE__SQL_ALCHEMY_CONN=f"sqlite:///{home}/airflow.db",
                       AIRFLOW__LOGGING__BASE_LOG_FOLDER=str(home / "logs"),
                       AIRFLOW__CORE__EXECUTION_API_SERVER_URL=f"http://127.0.0.1:{port}/execution/", **extra)


def processes_of(home: Path) -> list[int]:
    """Processes running with AIRFLOW_HOME=`home`."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if f"AIRFLOW_HOME={home}".encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found


def test_make_airflow_starts_no_pipeline_and_stopping_it_tears_down_its_runs_clusters(tmp_path):
    """`make airflow` (scripts/airflow-standalone.sh) on a fresh Airflow home: the DAGs are there, none runs
    (the nightly's missed 02:00 is skipped, the soak DAG paused); stopped, it tears down its runs' clusters."""
    home, port = tmp_path / "airflow", str(free_port())
    env = fresh_airflow_env(home, port, KAFKAPROOF_RUNS=str(tmp_path / "runs"))
    log_path = tmp_path / "standalone.log"
    with open(log_path, "w") as out:
        standalone = subprocess.Popen(["bash", "scripts/airflow-standalone.sh"], env=env, cwd=REPO, stdout=out,
                                      stderr=subprocess.STDOUT, start_new_session=True)
    api = AirflowApi(home, port)
    leftover = "af-test-standalone"
    ours = {"kafka_reliability_nightly", "kafka_reliability_manual", "kafka_upgrade_check", "kafka_reliability_soak"}
    try:
        def parsed():
            assert standalone.poll() is None, log_path.read_text()[-3000:]
            dags = {d["dag_id"]: d for d in (api.get("dags?limit=100") or {}).get("dags", [])}
            return dags if ours <= set(dags) and dags["kafka_reliability_nightly"]["next_dagrun_run_after"] else None
        dags = wait_for(parsed, 300, "the DAGs in the api-server of make airflow")
        # the scheduler's loops (a second each) had their chance to start something
        wait_for(lambda: ((api.get("monitor/health") or {}).get("scheduler") or {}).get("status") == "healthy",
                 120, "a healthy scheduler")
        time.sleep(20)
        runs = api.get("dags/~/dagRuns?limit=100")
        assert runs["total_entries"] == 0, runs
        assert dags["kafka_reliability_soak"]["is_paused"] is True
        assert dags["kafka_reliability_nightly"]["is_paused"] is False
        next_night = datetime.fromisoformat(dags["kafka_reliability_nightly"]["next_dagrun_run_after"])
        assert next_night > datetime.now(timezone.utc) and (next_night.hour, next_night.minute) == (2, 0)
        # a cluster one of its DAG runs started (the run's tasks die with Airflow)
        up = subprocess.run(["kafkaproof", "cluster", "up", "--name", leftover, "--brokers", "1"], env=env,
                            capture_output=True, text=True, timeout=180)
        assert up.returncode == 0, up.stderr[-3000:]
        with state.update_state(leftover) as st:
            st.owner = {"batch": "kafka_reliability_nightly/manual__1", "dag_id": "kafka_reliability_nightly",
                           "run_id": "manual__1", "airflow_home": str(home), "pid": None}
        standalone.send_signal(15)  # SIGTERM to the script, as a service manager stops it
        standalone.wait(120)
        log = log_path.read_text()
        assert leftover not in state.list_clusters(), log[-3000:]
        assert f"tore down the clusters of its DAG runs: {leftover}" in log
        # and every component of it is gone (SIGTERM to `airflow standalone` itself left its scheduler running)
        assert wait_for(lambda: not processes_of(home), 60, "Airflow's components to stop")
    finally:
        if standalone.poll() is None:
            stop_group(standalone, grace_s=60)
        if leftover in state.list_clusters():
            subprocess.run(["kafkaproof", "cluster", "down", "--name", leftover], env=env, timeout=120)


@pytest.mark.long
def test_two_pipelines_at_once_and_a_scheduler_stopped_mid_run_need_no_human(tmp_path):
    """A scheduler, dag-processor and api-server of a fresh Airflow home: a manual DAG run triggered while the
    nightly's cluster is up waits for it outside the pool and both pass, each with its own runs; then the
    scheduler is stopped (SIGTERM) mid-run and started again: the next night passes, the leftover reclaimed."""
    home, port = tmp_path / "airflow", str(free_port())
    baseline = yaml.safe_load((REPO / "scenarios" / "baseline.yaml").read_text())
    baseline.update(tags=["t"], producers={**baseline["producers"], "messages": 1500})
    history_url = f"sqlite:///{tmp_path}/history.sqlite"
    env = fresh_airflow_env(home, port, KAFKAPROOF_RUNS=str(tmp_path / "runs"), KAFKAPROOF_SUITE="t",
                            KAFKAPROOF_SCENARIOS=str(catalog(tmp_path, baseline)), KAFKAPROOF_HISTORY_URL=history_url,
                            AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT="30")
    subprocess.run(["airflow", "db", "migrate"], env=env, check=True, capture_output=True, timeout=300)
    subprocess.run(["airflow", "pools", "set", "kafka_cluster", "1", "one cluster per host"], env=env, check=True,
                   capture_output=True, timeout=120)
    procs: dict[str, subprocess.Popen] = {}

    def start(name: str, *args: str) -> None:
        with open(tmp_path / f"{name}.log", "a") as out:
            procs[name] = subprocess.Popen(["airflow", name, *args], env=env, stdout=out, stderr=subprocess.STDOUT,
                                           start_new_session=True)

    api = AirflowApi(home, port)
    nightly, manual = "kafka_reliability_nightly", "kafka_reliability_manual"

    def trigger(dag_id: str, conf: dict | None = None) -> str:
        return api.call("POST", f"dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}})["dag_run_id"]

    def finished(dag_id: str, run_id: str, timeout_s: float) -> str:
        return wait_for(lambda: (api.get(f"dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}") or {}).get("state")
                        in ("success", "failed") and api.get(f"dags/{dag_id}/dagRuns/{urllib.parse.quote(run_id)}")[
                            "state"], timeout_s, f"{dag_id} {run_id} to finish")

    def cluster_of(run_id: str) -> str | None:
        for name in state.list_clusters():
            try:
                if (state.load_state(name).owner or {}).get("run_id") == run_id:
                    return name
            except Exception:
                continue
        return None

    try:
        start("api-server", "--port", port)
        start("dag-processor")
        start("scheduler")
        wait_for(lambda: {nightly, manual} <= {d["dag_id"] for d in (api.get("dags") or {}).get("dags", [])}, 300,
                 "the DAGs parsed")
        for dag_id in (nightly, manual):
            api.call("PATCH", f"dags/{dag_id}", {"is_paused": False})
        # 1. the nightly's cluster is up when the manual run is triggered: both finish, each its own
        started = time.monotonic()
        night = trigger(nightly)
        wait_for(lambda: cluster_of(night), 300, "the nightly's cluster")
        check = trigger(manual, {"scenarios": ["baseline"], "messages": 1500})
        assert finished(nightly, night, 900) == "success"
        assert finished(manual, check, 900) == "success"
        print(f"two DAG runs at once: {time.monotonic() - started:.0f} s")
        waited = subprocess.run(["grep", "-rl", "other pipeline clusters are running", str(home / "logs")],
                                capture_output=True, text=True).stdout
        print("tasks that found the other pipeline's cluster up and came back later:", waited or "none")
        rows = history.runs("baseline", url=history_url)
        assert sorted(row["batch_id"] for row in rows) == sorted([f"{nightly}/{night}", f"{manual}/{check}"])
        assert {row["verdict"] for row in rows} == {"pass"}
        assert not [n for n in state.list_clusters() if n.startswith("af-")]
        # 2. the scheduler stopped mid-run (its task processes with it), then started again
        interrupted = trigger(nightly)
        leftover = wait_for(lambda: cluster_of(interrupted), 300, "the interrupted night's cluster")
        wait_for(lambda: next((t["state"] for t in (api.get(
            f"dags/{nightly}/dagRuns/{urllib.parse.quote(interrupted)}/taskInstances") or {}).get(
            "task_instances", []) if t["task_id"] == "baseline.run_workload"), None) == "running", 300,
            "the interrupted night's workload")
        stop_group(procs.pop("scheduler"), grace_s=60)
        start("scheduler")
        left = leftover in state.list_clusters()
        print("interrupted night:", finished(nightly, interrupted, 600),
              "its cluster", "left" if left else "torn down by its own teardown")
        left = leftover in state.list_clusters()
        after = trigger(nightly)
        assert finished(nightly, after, 900) == "success"
        assert leftover not in state.list_clusters()
        (row,) = [r for r in history.runs("baseline", url=history_url) if r["batch_id"] == f"{nightly}/{after}"]
        assert row["verdict"] == "pass"
        if left:  # reclaimed by the next night's provision, which says so in its report
            assert f"first reclaimed the leftover pipeline cluster {leftover}" in Path(row["report"]).read_text()
        assert not [n for n in state.list_clusters() if n.startswith("af-")]
    finally:
        for proc in procs.values():
            stop_group(proc, grace_s=60)
        for name in [n for n in state.list_clusters() if (state.load_state(n).owner or {}).get(
                "airflow_home") == str(home)]:
            subprocess.run(["kafkaproof", "cluster", "down", "--name", name], env=env, timeout=120)
