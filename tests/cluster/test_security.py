"""Secured clusters: runs on brokers whose client listeners need SASL and TLS, connected with a client config.

The module's local cluster stands in for a team's staging cluster: 3 brokers whose CLIENT
listeners take SASL_SSL with SCRAM-SHA-256 only, with a CA of the cluster's own, and the
client.properties kafkaproof writes for it. Runs reach it as an existing cluster
(`--bootstrap`/`--client-config`), so every client (producers, consumers, the admin client,
the drain) must connect with those settings, and no credential may end up in the run.
"""
from __future__ import annotations

import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from kafkaproof.cluster import ClusterConfig, LocalCluster, state
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.spec import ledger
from kafkaproof.spec.connection import read_client_config
from kafkaproof.spec.scenario import load

pytestmark = [pytest.mark.cluster, pytest.mark.java]


@pytest.fixture(scope="module")
def secured():
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


def test_a_run_on_a_sasl_ssl_cluster_connects_every_client_and_keeps_no_credential(secured, tmp_path):
    cluster, properties = secured
    bootstrap, connection, _ = read_client_config(properties)
    assert connection["security.protocol"] == "SASL_SSL" and bootstrap == cluster.bootstrap_servers()
    # the Java producer (kafka-clients: JAAS line, PEM trust store) and the librdkafka consumer
    path = scenario(tmp_path, producers={"rate": 500, "messages": 1000, "client": "java",
                                         "config": {"acks": "all", "enable.idempotence": True}})
    out = tmp_path / "runs"
    r = subprocess.run([sys.executable, "-m", "kafkaproof", "run", str(path), "--client-config", str(properties),
                        "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
    (run_dir,) = out.iterdir()
    manifest = ledger.read_manifest(run_dir)
    assert manifest["status"] == "complete" and manifest["cluster"]["backend"] == "external"
    assert manifest["client_connection"] == {**connection, "sasl.password": "***"}
    sends = ledger.read_table(run_dir, "sends").to_pandas()
    assert len(sends) == 1000 and (sends["outcome"] == "ok").all()
    reads = ledger.read_table(run_dir, "reads").to_pandas()
    assert set(reads["value_id"]) == set(sends["value_id"])
    audit = ledger.read_table(run_dir, "audit").to_pandas()
    assert set(audit["value_id"]) >= set(sends["value_id"]) and manifest["audit"]["partitions"]
    password = connection["sasl.password"].encode()
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and password in p.read_bytes()]
    assert not leaked, f"the password is in {leaked}"
    assert password.decode() not in r.stdout + r.stderr


def test_a_wrong_password_is_an_error_naming_the_refusal_before_any_client_starts(secured, tmp_path):
    cluster, properties = secured
    wrong = tmp_path / "wrong.properties"
    wrong.write_text("".join(f"{line}\n" if not line.startswith("sasl.password=") else "sasl.password=nope\n"
                             for line in properties.read_text().splitlines()))
    bootstrap, connection, _ = read_client_config(wrong)
    result = ScenarioRun(load(scenario(tmp_path)), RunOptions(out=tmp_path / "runs", bootstrap=bootstrap,
                                                              client_config=connection)).execute()
    assert result.status == "error"
    assert "refused kafkaproof's client" in result.error and "SCRAM-SHA-256" in result.error
    assert not list((result.run_dir / "work").glob("producer-*")), "no client may start"
    assert not [n for n in state.list_clusters() if n.startswith("ext-")]


def test_proxy_faults_on_a_tls_listener_are_refused_with_the_reason(secured, tmp_path):
    cluster, properties = secured
    bootstrap, connection, _ = read_client_config(properties)
    path = scenario(tmp_path, faults=[{"at": 1, "kind": "latency", "target": "all", "duration": 1,
                                       "params": {"ms": 50}}])
    result = ScenarioRun(load(path), RunOptions(out=tmp_path / "runs", bootstrap=bootstrap,
                                                client_config=connection)).execute()
    assert result.status == "error" and "fault proxies cannot front a SASL_SSL listener" in result.error


def test_proxy_faults_work_on_a_sasl_plaintext_listener(make_cluster, tmp_path):
    """SASL without TLS: the proxies pass the authentication through and still act on Produce."""
    cluster = make_cluster(brokers=1, client_security="SASL_PLAINTEXT", sasl_mechanism="PLAIN", proxy=True)
    path = scenario(tmp_path, topic={"partitions": 1, "replication_factor": 1},
                    producers={"rate": 300, "messages": 600, "start_after_s": 1,
                               "config": {"acks": "all", "enable.idempotence": False,
                                          "max.in.flight.requests.per.connection": 1}},
                    guarantee="at-least-once",
                    faults=[{"at": 1.5, "kind": "lost_ack", "target": "all", "params": {"reset": True, "count": 1},
                             "duration": 1.5}])
    result = ScenarioRun(load(path), RunOptions(out=tmp_path / "runs", cluster_name=cluster.name,
                                                attach=True)).execute()
    assert result.status == "complete", result.error
    manifest = ledger.read_manifest(result.run_dir)
    assert manifest["client_connection"]["security.protocol"] == "SASL_PLAINTEXT"
    (fault,) = ledger.read_table(result.run_dir, "faults").to_pylist()
    assert fault["proxy_fired"] >= 1
    sends = ledger.read_table(result.run_dir, "sends").to_pandas()
    assert (sends["outcome"] == "ok").sum() == 600
