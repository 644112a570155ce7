"""A consumer restarted with changed settings (run.workers) and the group's description (run.drain.describe_group)."""
from __future__ import annotations

import concurrent.futures
from types import SimpleNamespace as NS

import pytest

from kafkaproof.run.drain import describe_group
from kafkaproof.run.workers import Workers

pytestmark = pytest.mark.unit


def test_reconfigure_changes_only_that_consumers_next_start_and_null_removes(tmp_path):
    workers = Workers(tmp_path, {}, owner="t")
    spec = {"group": "g", "config": {"group.protocol": "classic", "session.timeout.ms": 6000}}
    workers.consumer_specs = {0: spec, 1: spec}
    workers.reconfigure_consumer(0, {"group.protocol": "consumer", "session.timeout.ms": None})
    assert workers.consumer_specs[0] == {"group": "g", "config": {"group.protocol": "consumer"}}
    assert workers.consumer_specs[1] is spec


class FakeAdmin:
    def __init__(self, desc=None, error=None):
        self.desc, self.error = desc, error

    def describe_consumer_groups(self, groups, request_timeout):
        future = concurrent.futures.Future()
        if self.error:
            future.set_exception(self.error)
        else:
            future.set_result(self.desc)
        return {groups[0]: future}


def member(client_id, *partitions):
    return NS(client_id=client_id, host="/127.0.0.1", group_instance_id=None,
              assignment=NS(topic_partitions=[NS(topic="t", partition=p) for p in partitions]))


def test_describe_group_names_the_type_and_which_consumer_each_member_is():
    desc = NS(group_id="g", type=NS(name="CONSUMER"), state=NS(name="STABLE"), partition_assignor="uniform",
              is_simple_consumer_group=False,
              members=[member("kp-consumer-1-2", 3, 1), member("kp-consumer-0-0", 0), member("other", 2)])
    group = describe_group(FakeAdmin(desc), "g")
    assert (group["type"], group["state"], group["assignor"]) == ("consumer", "stable", "uniform")
    assert [(m["consumer"], m["incarnation"], m["partitions"]) for m in group["members"]] == \
        [(0, 0, [0]), (1, 2, [1, 3]), (None, None, [2])]
    from confluent_kafka import KafkaError, KafkaException
    failed = describe_group(FakeAdmin(error=KafkaException(KafkaError(KafkaError._TIMED_OUT))), "g")
    assert failed["group"] == "g" and failed["error"]


def test_a_consumer_fault_with_config_restarts_its_consumer_with_it(tmp_path):
    import signal
    from kafkaproof.faults.families import ConsumerHandler
    from kafkaproof.spec.faults import FaultSpec

    class FakeWorkers:
        def __init__(self):
            self.consumers = {0: NS(wait=lambda timeout: 0, poll=lambda: -9)}
            self.incarnations, self.calls = {0: 0}, []

        def signal_consumer(self, index, sig):
            self.calls.append(("signal", index, sig))
            return 4242

        def reconfigure_consumer(self, index, config):
            self.calls.append(("reconfigure", index, config))

        def restart_consumer(self, index):
            self.calls.append(("restart", index))
            self.incarnations[index] += 1

    workers = FakeWorkers()
    handler = ConsumerHandler(workers)
    fid = handler.inject(FaultSpec("stop", "consumer:0", {"config": {"group.protocol": "consumer"}}),
                         tmp_path / "faults.jsonl")
    handler.heal(fid, tmp_path / "faults.jsonl")
    assert workers.calls == [("signal", 0, signal.SIGTERM), ("reconfigure", 0, {"group.protocol": "consumer"}),
                             ("restart", 0)]
