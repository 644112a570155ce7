"""The audit's discovery: what it makes of admin answers, refused requests, and the CLI entry."""
from __future__ import annotations

from types import SimpleNamespace

import pytest

from kafkaproof import cli
from kafkaproof.cluster.discovery import group_info, topic_info
from kafkaproof.spec.inventory import GroupInfo, GroupMember

pytestmark = pytest.mark.unit


def test_topic_and_group_from_admin_answers():
    from confluent_kafka.admin import ConfigSource
    part = lambda leader, replicas, isrs: SimpleNamespace(leader=leader, replicas=replicas, isrs=isrs)
    md = SimpleNamespace(partitions={1: part(-1, [2, 3], [2]), 0: part(1, [1, 2], [1, 2])})
    entry = lambda value, source: SimpleNamespace(value=value, source=source)
    t = topic_info("t", md, {"min.insync.replicas": entry("2", ConfigSource.DYNAMIC_TOPIC_CONFIG),
                             "retention.ms": entry("1000", ConfigSource.DEFAULT_CONFIG)}, internal=False)
    assert (t.partitions, t.replication_factor, t.replicas, t.under_replicated, t.offline) == (2, 2, ((1, 2), (2, 3)), 1, 1)
    assert t.overrides == ("min.insync.replicas",) and t.config["retention.ms"] == "1000"
    assert t.config["cleanup.policy"] is None
    tp = SimpleNamespace(topic="t", partition=0)
    member = SimpleNamespace(client_id="c1", host="/h", group_instance_id=None,
                             assignment=SimpleNamespace(topic_partitions=[tp]))
    desc = SimpleNamespace(group_id="g", members=[member], type=SimpleNamespace(name="CONSUMER"),
                           state=SimpleNamespace(name="STABLE"), partition_assignor="uniform",
                           is_simple_consumer_group=False)
    assert group_info(desc) == GroupInfo("g", "consumer", "STABLE", "uniform", False,
                                         (GroupMember("c1", "/h", None, ("t",)),))


def test_the_whole_audit_needs_out(capsys):
    assert cli.main(["audit", "--bootstrap", "127.0.0.1:9"]) == 2
    assert "with --out DIR" in capsys.readouterr().err


def test_a_refused_describe_names_the_call_and_the_acl():
    from confluent_kafka import KafkaError, KafkaException
    from kafkaproof.cluster.discovery import _result
    from kafkaproof.errors import ClusterError

    class Refused:
        def result(self, timeout=None):
            raise KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    with pytest.raises(ClusterError) as e:
        _result(Refused(), "DescribeConfigs (topics)", "DescribeConfigs on each TOPIC", "the cluster at k:1")
    assert str(e.value) == ("DescribeConfigs (topics) on the cluster at k:1 was refused (TOPIC_AUTHORIZATION_FAILED): "
                            "the audit needs DescribeConfigs on each TOPIC")
