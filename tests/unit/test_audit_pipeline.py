"""The audit DAG's steps below the runner (pipeline.audit_discovery, client_config_file, audit_out, audit_gate),
discovery stubbed at its function boundary."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kafkaproof import pipeline
from kafkaproof.errors import KafkaproofError
from kafkaproof.spec.inventory import ClusterInventory, NodeInfo, TopicInfo

pytestmark = pytest.mark.unit


def topic(name: str, rf: int = 1, min_isr: str = "1", overrides: tuple[str, ...] = (), internal: bool = False):
    return TopicInfo(name=name, internal=internal, partitions=1, replication_factor=rf,
                     config={"min.insync.replicas": min_isr, "cleanup.policy": "delete"}, overrides=overrides,
                     replicas=((1,) * rf,), under_replicated=0, offline=0)


INVENTORY = ClusterInventory(
    bootstrap="k1:9092", cluster_id="abc", kafka_release="3.9", metadata_version="3.9-IV0", controller_id=1,
    controller_quorum=None, nodes=tuple(NodeInfo(i, f"k{i}", 9092, None, ("broker",)) for i in (1, 2, 3)),
    broker_config={"auto.create.topics.enable": "true", "default.replication.factor": "1", "num.partitions": "1"},
    broker_config_differs={}, groups=(), discovered_wall=1.8e9,
    topics=(topic("events"), topic("orders", rf=3, min_isr="2", overrides=("min.insync.replicas",)),
            topic("__consumer_offsets", rf=3, internal=True)))


def test_discovery_reads_the_settings_then_the_cluster_and_returns_a_summary_without_credentials(tmp_path, monkeypatch):
    import kafkaproof.cluster.discovery as discovery
    app = tmp_path / "application.yml"
    app.write_text(yaml.safe_dump({"spring": {"kafka": {"bootstrap-servers": "k9:9092", "producer": {"acks": "1"}}}}))
    props = tmp_path / "client.properties"
    props.write_text("bootstrap.servers=k2:9093\nsecurity.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                     "sasl.username=u\nsasl.password=secret\n")
    seen = {}

    def fake_discover(bootstrap, connection, topics=()):
        seen.update(bootstrap=bootstrap, connection=dict(connection), topics=list(topics))
        return INVENTORY
    monkeypatch.setattr(discovery, "discover", fake_discover)
    found = pipeline.audit_discovery(None, None, str(props), str(app), topics=("e*", "orders"), max_classes=2)
    assert seen == {"bootstrap": "k2:9093", "topics": ["e*", "orders"], "connection": {
        "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "u",
        "sasl.password": "secret"}}
    assert found["bootstrap"] == "k2:9093" and list(found["classes"]) == ["rf1-isr1-auto", "rf3-isr2"]
    assert "__consumer_offsets" in found["excluded"] and "secret" not in str(found)
    assert any(f.startswith("high: producer: acks=1") for f in found["findings"])
    assert not any(f.startswith("low") for f in found["findings"])
    # the app config's servers when nothing else names the cluster; none at all: refused before discovery
    pipeline.audit_discovery(None, None, app_config=str(app))
    assert seen["bootstrap"] == "k9:9092"
    with pytest.raises(KafkaproofError, match="the audit needs a cluster"):
        pipeline.audit_discovery(None, None)
    with pytest.raises(KafkaproofError, match="give 1 or more"):
        pipeline.audit_discovery("k1:9092", None, max_classes=0)


def test_a_connection_reaches_the_runner_as_a_private_file_gone_afterwards():
    with pipeline.client_config_file(None) as none:
        assert none is None
    with pipeline.client_config_file({"security.protocol": "SSL", "ssl.ca.location": "/ca.pem"}) as path:
        assert Path(path).read_text() == "security.protocol=SSL\nssl.ca.location=/ca.pem\n"
        assert Path(path).stat().st_mode & 0o777 == 0o600 and Path(path).parent.stat().st_mode & 0o777 == 0o700
    assert not Path(path).exists() and not Path(path).parent.exists()


def test_where_an_audit_goes_and_its_gate(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_RUNS", str(tmp_path))
    out = pipeline.audit_out("manual__2026-11-28T07:00:00+00:00")
    assert out.parent == tmp_path / "audits" and "/" not in out.name and ":" not in out.name
    assert pipeline.audit_out("manual__2026-11-28T07:00:00+00:00") == out  # the task link finds it again
    assert pipeline.audit_gate({"verdict": "pass"}) is None
    failure = pipeline.audit_gate({"verdict": "fail", "html": "/r/audit.html", "lines": ["events: FAIL"]})
    assert failure == "audit fail; the report: /r/audit.html\nevents: FAIL"
    assert pipeline.audit_gate({}).startswith("audit without a verdict; the report: not written")
