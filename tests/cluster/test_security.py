"""Secured clusters: runs on brokers whose client listeners need SASL and TLS, connected with a client config.

The module's local cluster stands in for a team's staging cluster: 3 brokers whose CLIENT
listeners take SASL_SSL with SCRAM-SHA-256 only, with a CA of the cluster's own, and the
client.properties kafkaproof writes for it. Runs reach it as an existing cluster
(`--bootstrap`/`--client-config`), so every client (producers, consumers, the admin client,
the drain) must connect with those settings, and no credential may end up in the run: a thread
samples every process's argument list (/proc/*/cmdline) while the clusters start and the runs go.
"""
from __future__ import annotations

import json
import os
import sqlite3
import stat
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import confluent_kafka
import pytest
import yaml

from kafkaproof import pipeline
from kafkaproof.cluster import ClusterConfig, LocalCluster, state
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.run.versions import python_client_versions
from kafkaproof.spec import ledger
from kafkaproof.spec.connection import read_client_config
from kafkaproof.spec.scenario import load

pytestmark = [pytest.mark.cluster, pytest.mark.java]


class CmdlineSampler:
    """Every distinct argument list of this host's processes, read from /proc every 0.2 s in a thread."""

    def __init__(self, interval_s: float = 0.2):
        self.seen: set[bytes] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, args=(interval_s,), daemon=True)
        self._thread.start()

    def _loop(self, interval_s: float) -> None:
        while not self._stop.is_set():
            for pid in os.listdir("/proc"):
                if pid.isdigit():
                    try:
                        with open(f"/proc/{pid}/cmdline", "rb") as f:
                            self.seen.add(f.read())
                    except OSError:
                        continue
            self.samples += 1
            self._stop.wait(interval_s)

    def holding(self, secret: str) -> list[str]:
        """The argument lists that held `secret` (shortened)."""
        return [c.replace(b"\0", b" ").decode(errors="replace")[:300] for c in set(self.seen)
                if secret.encode() in c]

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def cmdlines():
    """A sampler of argument lists, running from before the module's clusters start until its end."""
    sampler = CmdlineSampler()
    try:
        yield sampler
    finally:
        sampler.close()


# Files of a secured cluster's directory that must hold its password, owner-only: what the brokers and
# kafkaproof's own processes need to connect (a PLAIN listener's JAAS line is in server.properties).
SECRET_FILES = {"state.json", "client.properties", "server.properties"}


def files_holding(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and not p.is_symlink() and secret.encode() in p.read_bytes()]


def check_cluster_files(cluster_dir: Path, secret: str) -> None:
    """Only the files that must hold the password hold it, readable by their owner only."""
    holding = files_holding(cluster_dir, secret)
    assert {p.name for p in holding} <= SECRET_FILES, f"the password is in {holding}"
    loose = [p for p in holding if stat.S_IMODE(p.stat().st_mode) & 0o077]
    assert not loose, f"others can read the password in {loose}"


@pytest.fixture(scope="module")
def secured(cmdlines):
    """(cluster, client.properties) of a SASL_SSL/SCRAM cluster."""
    cluster = LocalCluster.up(ClusterConfig(name=f"t-sec-{uuid.uuid4().hex[:4]}", brokers=3,
                                            client_security="SASL_SSL", sasl_mechanism="SCRAM-SHA-256"))
    try:
        yield cluster, state.cluster_dir(cluster.name) / "client.properties"
    finally:
        cluster.down(keep_logs=False, graceful=False)


def scenario(tmp_path: Path, **fields) -> Path:
    doc = {"name": f"t-sec-{uuid.uuid4().hex[:4]}", "guarantee": "exactly-once",
           "topic": {"partitions": 2, "replication_factor": 3, "config": {"min.insync.replicas": 2}},
           "producers": {"rate": 500, "messages": 1000, "config": {"acks": "all", "enable.idempotence": True}},
           "consumers": {"count": 1}, "drain": {"settle_s": 1}, **fields}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_a_run_on_a_sasl_ssl_cluster_connects_every_client_and_keeps_no_credential(secured, cmdlines, tmp_path,
                                                                                   monkeypatch, caplog):
    """The password is in no file of the run (its report among them), no log line (at DEBUG), no XCom value
    (what the DAG's run and judge tasks return), no history row, no process's argument list."""
    cluster, properties = secured
    bootstrap, connection, _ = read_client_config(properties)
    assert connection["security.protocol"] == "SASL_SSL" and bootstrap == cluster.bootstrap_servers()
    # the Java producer (kafka-clients: JAAS line, PEM trust store) and the librdkafka consumer
    path = scenario(tmp_path, producers={"rate": 500, "messages": 1000, "client": "java",
                                         "config": {"acks": "all", "enable.idempotence": True}})
    out = tmp_path / "runs"
    r = subprocess.run([sys.executable, "-m", "kafkaproof", "run", str(path), "--client-config", str(properties),
                        "--out", str(out)], capture_output=True, text=True, timeout=300,
                       env={**os.environ, "KAFKAPROOF_LOG_LEVEL": "DEBUG"})
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (run_dir,) = out.iterdir()
    manifest = ledger.read_manifest(run_dir)
    assert manifest["status"] == "complete" and manifest["cluster"]["backend"] == "external"
    assert manifest["client_connection"] == {**connection, "sasl.password": "***"}
    # what ran, per process (issue 38.5): the producer's kafka-clients jar, the consumer's confluent-kafka/librdkafka
    java_version = manifest["scenario"]["cluster"]["kafka_version"]
    assert manifest["client_versions"] == {
        "producers": [{"index": 0, "client": "java", "libraries": [{"name": "kafka-clients", "version": java_version}]}],
        "consumers": [{"index": 0, "client": "librdkafka",
                       "libraries": [v.to_json() for v in python_client_versions()]}]}
    assert manifest["versions"]["confluent_kafka"] == confluent_kafka.__version__  # whole, not '2'
    sends = ledger.read_table(run_dir, "sends").to_pandas()
    assert len(sends) == 1000 and (sends["outcome"] == "ok").all()
    reads = ledger.read_table(run_dir, "reads").to_pandas()
    assert set(reads["value_id"]) == set(sends["value_id"])
    audit = ledger.read_table(run_dir, "audit").to_pandas()
    assert set(audit["value_id"]) >= set(sends["value_id"]) and manifest["audit"]["partitions"]
    # judged as the DAG's judge task does: a history row and the run's report (no analysis: an error verdict)
    history = tmp_path / "history.sqlite"
    monkeypatch.setenv("KAFKAPROOF_HISTORY_URL", f"sqlite:///{history}")
    caplog.set_level("DEBUG")
    xcom = {"run": {"run_id": run_dir.name, "run_dir": str(run_dir), "status": "complete", "error": None,
                    "scenario": yaml.safe_load(path.read_text())["name"]}}
    xcom["judge"] = pipeline.judge(xcom["run"], "t-sec")
    night = Path(pipeline.write_batch_report([xcom["judge"]], "t-sec", out=tmp_path / "night"))
    assert (run_dir / "report" / "index.html").exists() and night.exists()
    assert f"producer 0: kafka-clients {java_version}" in (run_dir / "report" / "index.html").read_text()
    password = connection["sasl.password"]
    assert not files_holding(run_dir, password), "the run directory (its report among them) holds the password"
    assert not files_holding(night.parent, password), "the batch report holds the password"
    assert password not in r.stdout + r.stderr + caplog.text, "a log line holds the password"
    assert password not in json.dumps(xcom, default=str), "an XCom value holds the password"
    rows = sqlite3.connect(history).execute("SELECT * FROM scenario_runs").fetchall()
    assert rows and password not in repr(rows) and password.encode() not in history.read_bytes()
    check_cluster_files(state.cluster_dir(cluster.name), password)
    assert cmdlines.samples > 10 and not cmdlines.holding(password), "a process's argument list held it"


def test_a_wrong_password_is_an_error_naming_the_refusal_before_any_client_starts(secured, tmp_path):
    cluster, properties = secured
    wrong = tmp_path / "wrong.properties"
    wrong.write_text("".join(f"{line}\n" if not line.startswith("sasl.password=") else "sasl.password=nope\n"
                             for line in properties.read_text().splitlines()))
    bootstrap, connection, _ = read_client_config(wrong)
    result = ScenarioRun(resolve(load(scenario(tmp_path)), Overrides(bootstrap=bootstrap)),
                         RunOptions(out=tmp_path / "runs", client_config=connection)).execute()
    assert result.status == "error"
    assert "refused kafkaproof's client" in result.error and "SCRAM-SHA-256" in result.error
    assert not list((result.run_dir / "work").glob("producer-*")), "no client may start"
    assert not [n for n in state.list_clusters() if n.startswith("ext-")]


def test_proxy_faults_on_a_tls_listener_are_refused_with_the_reason(secured, tmp_path):
    cluster, properties = secured
    bootstrap, connection, _ = read_client_config(properties)
    path = scenario(tmp_path, faults=[{"at": 1, "kind": "latency", "target": "all", "duration": 1,
                                       "params": {"ms": 50}}])
    result = ScenarioRun(resolve(load(path), Overrides(bootstrap=bootstrap)),
                         RunOptions(out=tmp_path / "runs", client_config=connection)).execute()
    assert result.status == "error" and "fault proxies cannot front a SASL_SSL listener" in result.error


def test_proxy_faults_work_on_a_sasl_plaintext_listener(make_cluster, cmdlines, tmp_path):
    """SASL without TLS: the proxies pass the authentication through and still act on Produce. The PLAIN
    users' JAAS line is in the brokers' server.properties, which only their owner can read."""
    cluster = make_cluster(brokers=1, client_security="SASL_PLAINTEXT", sasl_mechanism="PLAIN", proxy=True)
    path = scenario(tmp_path, topic={"partitions": 1, "replication_factor": 1},
                    producers={"rate": 300, "messages": 600, "start_after_s": 1,
                               "config": {"acks": "all", "enable.idempotence": False,
                                          "max.in.flight.requests.per.connection": 1}},
                    guarantee="at-least-once",
                    faults=[{"at": 1.5, "kind": "lost_ack", "target": "all", "params": {"reset": True, "count": 1},
                             "duration": 1.5}])
    result = ScenarioRun(resolve(load(path)), RunOptions(out=tmp_path / "runs", cluster_name=cluster.name,
                                                attach=True)).execute()
    assert result.status == "complete", result.error
    manifest = ledger.read_manifest(result.run_dir)
    assert manifest["client_connection"]["security.protocol"] == "SASL_PLAINTEXT"
    (fault,) = ledger.read_table(result.run_dir, "faults").to_pylist()
    assert fault["proxy_fired"] >= 1
    sends = ledger.read_table(result.run_dir, "sends").to_pandas()
    assert (sends["outcome"] == "ok").sum() == 600
    password = cluster.client_config()["sasl.password"]
    check_cluster_files(state.cluster_dir(cluster.name), password)
    assert not files_holding(result.run_dir, password) and not cmdlines.holding(password)
