"""ELR evidence (issue 44.2): the kio DescribeTopicPartitions/ApiVersions calls against a socket answering with
kio-encoded responses, the sampler's change rows, and what spec/elr_evidence.py reads from them."""
from __future__ import annotations

import datetime
import socket
import threading

import pytest
from kio.schema.api_versions.v3.response import ApiVersionsResponse, FinalizedFeatureKey
from kio.schema.describe_topic_partitions.v0.response import (DescribeTopicPartitionsResponse,
                                                              DescribeTopicPartitionsResponsePartition,
                                                              DescribeTopicPartitionsResponseTopic)
from kio.schema.errors import ErrorCode
from kio.static.primitive import i16, i32, i32Timedelta, i64

from kafkaproof.cluster import kio_admin
from kafkaproof.errors import ClusterError
from kafkaproof.proxy.protocol import LENGTH, encode_response, parse_request_header
from kafkaproof.run.elr import ElrSampler
from kafkaproof.spec.elr_evidence import elections, ids_text, leaderless_windows

pytestmark = pytest.mark.unit


def _partition(leader: int, isr, elr, last=None) -> DescribeTopicPartitionsResponsePartition:
    return DescribeTopicPartitionsResponsePartition(
        error_code=ErrorCode.none, partition_index=i32(0), leader_id=i32(leader), leader_epoch=i32(3),
        replica_nodes=(i32(1), i32(2)), isr_nodes=tuple(i32(i) for i in isr),
        eligible_leader_replicas=None if elr is None else tuple(i32(i) for i in elr),
        last_known_elr=None if last is None else tuple(i32(i) for i in last), offline_replicas=())


class FakeBroker:
    """Answers each request on 127.0.0.1 with the next of `answers` (kio entities), one connection at a time."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while self.answers:
            conn, _ = self.sock.accept()
            with conn:
                (size,) = LENGTH.unpack(conn.recv(4))
                frame = b""
                while len(frame) < size:
                    frame += conn.recv(size - len(frame))
                conn.sendall(encode_response(self.answers.pop(0), parse_request_header(frame).correlation_id))


def _topic(*partitions) -> DescribeTopicPartitionsResponse:
    return DescribeTopicPartitionsResponse(throttle_time=i32Timedelta.parse(datetime.timedelta(0)), topics=(
        DescribeTopicPartitionsResponseTopic(error_code=ErrorCode.none, name="t", topic_id=None,
                                             partitions=tuple(partitions)),))


def test_describe_topic_partitions_and_finalized_features_over_kio():
    broker = FakeBroker([_topic(_partition(1, [1], [2])),
                         ApiVersionsResponse(error_code=ErrorCode.none, api_keys=(), throttle_time=i32Timedelta.parse(datetime.timedelta(0)),
                                             finalized_features_epoch=i64(5), finalized_features=(
                                                 FinalizedFeatureKey(name="eligible.leader.replicas.version",
                                                                     max_version_level=i16(1),
                                                                     min_version_level=i16(1)),))])
    [p] = kio_admin.describe_topic_partitions(broker.address, "t")
    assert (p.leader, p.isr, p.elr, p.last_known_elr) == (1, (1,), (2,), None)
    assert kio_admin.finalized_features(broker.address) == {"eligible.leader.replicas.version": 1}
    with pytest.raises(ClusterError, match="no broker answered: 127.0.0.1:1: "):
        kio_admin.first_answer(["127.0.0.1:1"], kio_admin.describe_topic_partitions, "t", 0.5)
    with pytest.raises(kio_admin.KioUnsupported, match="SASL_SSL"):
        kio_admin.check_plaintext({"security.protocol": "SASL_SSL"})


def test_the_sampler_keeps_changes_only():
    answers = [_topic(_partition(1, [1, 2], [])), _topic(_partition(1, [1, 2], [])), _topic(_partition(1, [1], [2]))]
    broker = FakeBroker(answers)

    class Cluster:
        def direct_bootstrap(self) -> str:
            return f"127.0.0.1:1,{broker.address}"

        def direct_client_config(self) -> dict:
            return {"security.protocol": "SSL"}
    assert ElrSampler(Cluster(), "t").start().summary()["last_error"].startswith("not sampled: ")
    sampler = ElrSampler(Cluster(), "t")
    for _ in range(3):
        sampler.sample()
    summary = sampler.summary()
    assert summary["samples"] == 3 and [c["isr"] for c in summary["changes"]] == [[1, 2], [1]]
    assert summary["changes"][1]["elr"] == [2] and summary["changes"][1]["from"] == broker.address


def _change(ts: int, leader: int, isr, elr):
    return {"ts_ns": ts, "partition": 0, "leader": leader, "leader_epoch": 1, "isr": isr, "elr": elr}


def test_elections_from_the_elr_and_leaderless_windows():
    on = {"changes": [_change(1, 1, [1, 2], []), _change(2, 1, [1], [2]), _change(5, 2, [2], [1])]}
    assert [(e["leader"], e["previous"], e["from_elr"]) for e in elections(on)] == [(2, 1, True)]
    off = {"changes": [_change(1, 1, [1, 2], []), _change(2, 1, [1], []), _change(3, -1, [1], []),
                       _change(9, 1, [1], [])]}
    assert [(e["leader"], e["from_elr"]) for e in elections(off)] == [(1, False)]
    assert leaderless_windows(off) == [{"partition": 0, "start_ns": 3, "end_ns": 9}]
    assert leaderless_windows({"changes": [_change(3, -1, [1], None)]}, end_ns=7)[0]["end_ns"] == 7
    assert ids_text(None) == "–" and ids_text([1, 2]) == "[1,2]"
