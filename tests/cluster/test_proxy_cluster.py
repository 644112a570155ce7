"""The fault proxy on a real local cluster: every proxy fault kind against real brokers and librdkafka.

One 3-broker cluster with proxies serves the whole module. It is started by a
child process that is then SIGKILLed, so the last test can check that
`kafkaproof cluster down` cleans up after a crashed owner, proxies included.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from kafkaproof import analysis
from kafkaproof.spec import ledger
from kafkaproof.cluster import LocalCluster, attach, network, process, state
from kafkaproof.errors import ClusterError
from kafkaproof.faults import FaultInjector
from kafkaproof.spec.faults import FaultSpec
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.resolved import Overrides, resolve
from kafkaproof.spec.scenario import load

from exposure import Survey
from support import fault_events

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

NAME = f"px-t{uuid.uuid4().hex[:6]}"


@pytest.fixture(scope="module")
def cluster():
    """A 3-broker cluster with a proxy per broker, whose owner process crashed right after `up`."""
    code = ("import os, signal\n"
            "from kafkaproof import logs\n"
            "from kafkaproof.cluster import ClusterConfig, LocalCluster\n"
            "logs.setup(False)\n"
            f"LocalCluster.up(ClusterConfig(name={NAME!r}, brokers=3, proxy=True))\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    try:
        assert r.returncode == -signal.SIGKILL, r.stderr[-3000:]
        yield attach(NAME)
    finally:
        if NAME in state.list_clusters():
            attach(NAME).down(keep_logs=False, graceful=False)


def new_topic(cluster: LocalCluster, partitions: int = 1) -> str:
    topic = f"px-{uuid.uuid4().hex[:8]}"
    cluster.create_topic(topic, partitions, 3, {"min.insync.replicas": 2})
    cluster.wait_in_sync(topic)
    return topic


def produce(bootstrap: str, topic: str, records: list[tuple[int, bytes]], **config) -> tuple[list[dict], dict]:
    """Produce (partition, value) records through `bootstrap`; returns their delivery reports and Produce requests sent."""
    from confluent_kafka import Producer
    stats: list[dict] = []
    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0, "retry.backoff.ms": 100,
            "statistics.interval.ms": 100, "stats_cb": lambda s: stats.append(json.loads(s)), "log_level": 2}
    conf.update(config)
    p = Producer(conf)
    reports: list[dict] = []
    t0 = time.monotonic()
    for partition, value in records:
        p.produce(topic, value=value, partition=partition,
                  on_delivery=lambda e, m: reports.append({"error": e.name() if e else None, "partition": m.partition(),
                                                           "offset": m.offset(), "value": m.value(),
                                                           "latency_s": time.monotonic() - t0}))
    assert p.flush(60) == 0, "not every record was delivered within 60 s"
    end = time.monotonic() + 0.5
    while time.monotonic() < end:  # one more statistics report after the last retry
        p.poll(0.1)
    requests = {b["nodeid"]: b["req"].get("Produce", 0) for b in stats[-1]["brokers"].values() if b["nodeid"] >= 0}
    return reports, requests


def log_of(cluster: LocalCluster, topic: str, partition: int) -> dict[int, bytes]:
    """offset -> value of one partition, read directly (not through a proxy)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": cluster.direct_bootstrap(), "group.id": f"px-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False})
    try:
        _, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        c.assign([TopicPartition(topic, partition, OFFSET_BEGINNING)])
        out: dict[int, bytes] = {}
        deadline = time.monotonic() + 20
        while len(out) < high and time.monotonic() < deadline:
            for m in c.consume(100, timeout=0.5):
                if m.error() is None:
                    out[m.offset()] = m.value()
        return out
    finally:
        c.close()


def inject(cluster: LocalCluster, topic: str, kind: str, **params):
    injector = FaultInjector(cluster, topic=topic)
    return injector, injector.inject(FaultSpec(kind, "leader:0", {"topic": topic, "partitions": [0], **params}))


# --- the tests ------------------------------------------------------------------------------

def test_clients_reach_the_brokers_only_through_their_proxies(cluster):
    status = cluster.status()
    assert status["proxy"] and all(n["proxy"]["state"] == "running" for n in status["nodes"])
    nodes = {n.id: n.to_json() for n in cluster.state().nodes}
    from confluent_kafka.admin import AdminClient
    md = AdminClient({"bootstrap.servers": cluster.bootstrap_servers()}).list_topics(timeout=10)
    assert {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()} == {i: n["proxy"]["listen"] for i, n in nodes.items()}
    direct = AdminClient({"bootstrap.servers": cluster.direct_bootstrap()}).list_topics(timeout=10)
    assert {f"{b.host}:{b.port}" for b in direct.brokers.values()} == {f"{n['host']}:{n['internal_port']}"
                                                                       for n in nodes.values()}
    topic = new_topic(cluster)
    reports, _ = produce(cluster.bootstrap_servers(), topic, [(0, b"hello")])
    assert reports[0]["error"] is None
    leader = cluster.leader_of(topic, 0)
    client = cluster.proxy_control(leader)
    try:
        (listener,) = client.stats()["listeners"]
    finally:
        client.close()
    assert listener["broker"] == leader and listener["requests"] > 0 and listener["connections_total"] > 0


@pytest.mark.parametrize("idempotence", [False, True], ids=["idempotence-off", "idempotence-on"])
def test_a_dropped_produce_response_is_retried_once(cluster, idempotence):
    topic = new_topic(cluster)
    injector, fault = inject(cluster, topic, "lost_ack", reset=True, count=1)
    value = f"lost-ack-{uuid.uuid4().hex}".encode()
    try:
        reports, requests = produce(cluster.bootstrap_servers(), topic, [(0, value)],
                                    **{"enable.idempotence": idempotence})
    finally:
        injector.heal(fault.fault_id)
    (report,) = reports
    assert report["error"] is None
    assert requests[fault.nodes[0]] == 2, f"one retry after the dropped response: {requests}"
    dropped = [e for e in fault_events(cluster, fault.fault_id) if e["phase"] == "response_dropped"]
    assert len(dropped) == 1 and dropped[0]["broker"] == fault.nodes[0]
    (result,) = dropped[0]["detail"]["results"]
    assert result["error"] == "NONE" and result["partition"] == 0
    written = result["base_offset"]
    log = log_of(cluster, topic, 0)
    copies = sorted(o for o, v in log.items() if v == value)
    if idempotence:
        # the broker recognises the retried batch and answers with the first write's offset
        assert copies == [written] and report["offset"] == written
    else:
        # the broker writes the retry again: one duplicate, the first copy where the proxy said
        assert copies == [written, report["offset"]] and written < report["offset"]


def test_an_error_answered_without_forwarding_is_retried_without_a_duplicate(cluster):
    topic = new_topic(cluster)
    injector, fault = inject(cluster, topic, "error", error="NOT_ENOUGH_REPLICAS", count=1)
    value = f"err-{uuid.uuid4().hex}".encode()
    try:
        reports, requests = produce(cluster.bootstrap_servers(), topic, [(0, value)],
                                    **{"enable.idempotence": False})
    finally:
        injector.heal(fault.fault_id)
    assert reports[0]["error"] is None and requests[fault.nodes[0]] == 2
    phases = [e["phase"] for e in fault_events(cluster, fault.fault_id)]
    assert phases == ["answered_without_forwarding"]
    assert [o for o, v in log_of(cluster, topic, 0).items() if v == value] == [reports[0]["offset"]]


def test_errors_on_the_group_protocol_make_a_rebalance_storm_and_fail_commits(cluster):
    """Heartbeat answered REBALANCE_IN_PROGRESS sends the member back to JoinGroup again and again;
    OffsetCommit answered with an error fails the commit with that error; healed, both work again."""
    from confluent_kafka import Consumer, KafkaException, TopicPartition
    topic = new_topic(cluster, partitions=2)
    produce(cluster.direct_bootstrap(), topic, [(p, b"v") for p in (0, 1) for _ in range(10)])
    assigned: list[float] = []
    c = Consumer({"bootstrap.servers": cluster.bootstrap_servers(), "group.id": f"px-{uuid.uuid4().hex[:6]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest", "heartbeat.interval.ms": 200,
                  "session.timeout.ms": 6000, "log_level": 2})
    with FaultInjector(cluster, topic=topic) as injector:
        try:
            c.subscribe([topic], on_assign=lambda _c, parts: assigned.append(time.monotonic()))
            read = 0
            deadline = time.monotonic() + 30
            while read < 20 and time.monotonic() < deadline:
                read += sum(1 for m in c.consume(50, timeout=0.5) if m.error() is None)
            assert read == 20 and len(assigned) == 1
            storm = injector.inject(FaultSpec("error", "all", {"api": "heartbeat", "error": "REBALANCE_IN_PROGRESS"}))
            end = time.monotonic() + 4
            while time.monotonic() < end:
                c.poll(0.2)
            injector.heal(storm.fault_id)
            assert len(assigned) >= 3, f"{len(assigned) - 1} rebalances in 4 s of REBALANCE_IN_PROGRESS heartbeats"
            heartbeats = fault_events(cluster, storm.fault_id)
            assert heartbeats and {e["api"] for e in heartbeats} == {"heartbeat"}
            assert {e["phase"] for e in heartbeats} == {"answered_without_forwarding"}

            refused = injector.inject(FaultSpec("error", "all", {"api": "offset_commit",
                                                                 "error": "GROUP_AUTHORIZATION_FAILED"}))
            offsets = [TopicPartition(topic, 0, 5), TopicPartition(topic, 1, 7)]
            try:  # a per-partition error comes back on the partitions; a request-wide one is raised
                errors = {tp.error.name() for tp in c.commit(offsets=offsets, asynchronous=False) if tp.error}
            except KafkaException as e:
                errors = {e.args[0].name()}
            assert errors == {"GROUP_AUTHORIZATION_FAILED"}, json.dumps(fault_events(cluster, refused.fault_id))
            injector.heal(refused.fault_id)
            assert [e["phase"] for e in fault_events(cluster, refused.fault_id)] == ["answered_without_forwarding"]
            c.commit(offsets=offsets, asynchronous=False)  # healed: the commit goes through
            assert [tp.offset for tp in c.committed(offsets, timeout=10)] == [5, 7]
        finally:
            c.close()


def test_an_error_after_forwarding_duplicates_without_idempotence(cluster):
    topic = new_topic(cluster)
    injector, fault = inject(cluster, topic, "error", error=20, forward=True, count=1)
    value = f"err20-{uuid.uuid4().hex}".encode()
    try:
        reports, requests = produce(cluster.bootstrap_servers(), topic, [(0, value)],
                                    **{"enable.idempotence": False})
    finally:
        injector.heal(fault.fault_id)
    assert reports[0]["error"] is None and requests[fault.nodes[0]] == 2
    events = fault_events(cluster, fault.fault_id)
    assert [e["phase"] for e in events] == ["request_forwarded", "response_replaced"]
    (result,) = events[1]["detail"]["results"]
    assert events[1]["detail"]["error_code"] == 20 and result["error"] == "NONE"
    copies = sorted(o for o, v in log_of(cluster, topic, 0).items() if v == value)
    assert copies == [result["base_offset"], reports[0]["offset"]]


def test_latency_delays_the_acks_of_the_targeted_partition_only(cluster):
    topic = new_topic(cluster, partitions=3)
    parts = cluster.partitions(topic)
    other = next(p for p, info in parts.items() if info["leader"] != parts[0]["leader"])
    injector, fault = inject(cluster, topic, "latency", api="produce", ms=1500)
    try:
        reports, _ = produce(cluster.bootstrap_servers(), topic, [(0, b"slow"), (other, b"fast")])
    finally:
        injector.heal(fault.fault_id)
    by_value = {r["value"]: r for r in reports}
    assert all(r["error"] is None for r in reports)
    # Held 1.5 s, not until a retry (request.timeout.ms, 30 s): a busy CI host added 1.6 s on top once.
    assert 1.45 <= by_value[b"slow"]["latency_s"] < 5.0, by_value
    assert by_value[b"fast"]["latency_s"] < 1.0, by_value
    (delayed,) = fault_events(cluster, fault.fault_id)
    assert delayed["phase"] == "delayed" and delayed["detail"]["delay_ms"] == 1500.0


def test_an_answer_held_back_past_the_client_timeout_is_reported_and_its_write_duplicated(cluster):
    topic = new_topic(cluster)
    injector, fault = inject(cluster, topic, "latency", api="produce", ms=5000, count=1)
    value = f"held-{uuid.uuid4().hex}".encode()
    try:  # librdkafka's client-side request timeout is socket.timeout.ms: it gives up after 1 s and reconnects
        reports, requests = produce(cluster.bootstrap_servers(), topic, [(0, value)],
                                    **{"enable.idempotence": False, "socket.timeout.ms": 1000})
    finally:
        injector.heal(fault.fault_id)
    (report,) = reports
    assert report["error"] is None and requests[fault.nodes[0]] == 2
    events = fault_events(cluster, fault.fault_id)
    assert [e["phase"] for e in events] == ["delayed", "response_discarded"]
    assert events[1]["detail"]["caused_by"] == "delayed" and events[1]["detail"]["response_received"] is True
    (result,) = events[1]["detail"]["results"]
    # the broker wrote the held-back request; the retry wrote it again: the first copy is where the proxy said
    copies = sorted(o for o, v in log_of(cluster, topic, 0).items() if v == value)
    assert copies == [result["base_offset"], report["offset"]]


def test_bandwidth_paces_the_produce_requests(cluster):
    topic = new_topic(cluster)
    injector, fault = inject(cluster, topic, "proxy_bandwidth", api="produce", bytes_per_s=50_000,
                             direction="request")
    values = [bytes([65 + i]) * 40_000 for i in range(5)]
    try:
        # one record per batch, so one per Produce request
        reports, _ = produce(cluster.bootstrap_servers(), topic, [(0, v) for v in values], **{"batch.size": 50_000})
    finally:
        injector.heal(fault.fault_id)
    assert all(r["error"] is None for r in reports)
    # ~200 KB at 50 KB/s: the first request goes at once, the others wait for the budget
    assert max(r["latency_s"] for r in reports) >= 2.5, reports
    throttled = fault_events(cluster, fault.fault_id)
    assert throttled and {e["phase"] for e in throttled} == {"throttled"}
    assert sorted(log_of(cluster, topic, 0).values()) == sorted(values)


def test_a_reset_after_n_bytes_tears_the_request_and_the_retry_lands_once(cluster):
    topic = new_topic(cluster)
    injector, fault = inject(cluster, topic, "reset", api="produce", after_bytes=1000, direction="request",
                             count=1)
    value = b"r" * 5000
    try:
        reports, requests = produce(cluster.bootstrap_servers(), topic, [(0, value)],
                                    **{"enable.idempotence": False})
    finally:
        injector.heal(fault.fault_id)
    assert reports[0]["error"] is None and requests[fault.nodes[0]] == 2
    (reset,) = fault_events(cluster, fault.fault_id)
    assert reset["phase"] == "connection_reset" and reset["detail"]["bytes_written"] == 1000
    assert list(log_of(cluster, topic, 0).values()) == [value], "a torn request is never written"


def test_a_blackholed_connection_times_out_and_the_retry_lands_once(cluster):
    topic = new_topic(cluster)
    injector, fault = inject(cluster, topic, "blackhole", api="produce", count=1)
    value = f"bh-{uuid.uuid4().hex}".encode()
    try:
        reports, requests = produce(cluster.bootstrap_servers(), topic, [(0, value)],
                                    **{"enable.idempotence": False, "socket.timeout.ms": 2000})
    finally:
        injector.heal(fault.fault_id)
    assert reports[0]["error"] is None and 2.0 <= reports[0]["latency_s"] < 10, reports
    assert requests[fault.nodes[0]] == 2
    assert [e["phase"] for e in fault_events(cluster, fault.fault_id)] == ["request_discarded"]
    assert list(log_of(cluster, topic, 0).values()) == [value]


@pytest.mark.spark
def test_a_scenario_run_records_proxy_events_and_ties_duplicates_to_them(cluster, tmp_path):
    doc = {"name": f"t-proxy-{uuid.uuid4().hex[:4]}", "guarantee": "at-least-once",
           "topic": {"partitions": 3, "replication_factor": 3, "config": {"min.insync.replicas": 2}},
           "producers": {"rate": 400, "messages": 1600, "start_after_s": 1,
                         "config": {"acks": "all", "enable.idempotence": False,
                                    "max.in.flight.requests.per.connection": 1}},
           "consumers": {"count": 1}, "drain": {"settle_s": 2},
           "faults": [{"at": 2, "kind": "lost_ack", "target": "all", "params": {"reset": True, "count": 1},
                       "duration": 2}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    scn = load(path)
    assert scn.data["cluster"]["proxy"] is True
    result = ScenarioRun(resolve(scn), RunOptions(out=tmp_path / "runs", attach=True, cluster_name=NAME)).execute()
    assert result.status == "complete", result.error
    faults = ledger.read_table(result.run_dir, "faults").to_pylist()
    (fault,) = faults
    assert fault["kind"] == "lost_ack" and sorted(fault["nodes"]) == [1, 2, 3] and fault["heal_ns"]
    assert json.loads(fault["proxy_rule"])["id"] == fault["fault_id"] and fault["proxy_fired"] >= 1
    events = ledger.read_table(result.run_dir, "proxy_events").to_pandas()
    assert set(events["fault_id"]) == {fault["fault_id"]}
    assert set(events["phase"]) == {"request_forwarded", "response_dropped"}
    dropped = events[events["phase"] == "response_dropped"]
    assert len(dropped) == fault["proxy_fired"]
    assert (events["ts_ns"] >= fault["start_ns"]).all() and (events["ts_ns"] <= fault["heal_ns"]).all()
    audit = ledger.read_table(result.run_dir, "audit").to_pandas()
    log = audit[audit["isolation"] == "read_committed"]
    counts = log.groupby("value_id").size()
    at = log.set_index(["partition", "offset"])["value_id"]
    lost_write_values = set()
    for _, row in dropped.iterrows():
        for partition, base, n in zip(row["partitions"], row["base_offsets"], row["record_counts"]):
            assert base >= 0 and n >= 1
            for offset in range(base, base + n):
                assert counts[at[(partition, offset)]] == 2, "every record of the dropped write is one of two copies"
                lost_write_values.add(int(at[(partition, offset)]))
    assert set(counts[counts > 1].index) == lost_write_values, "exactly the unacknowledged writes are duplicated"
    # The Spark analysis ties every duplicate to this fault.
    metrics = analysis.analyze(result.run_dir, extra_conf={"spark.sql.shuffle.partitions": "2"}, quiet=True)
    assert metrics["counts"]["duplicates"] == len(lost_write_values)
    assert metrics["attribution"]["kinds"]["duplicates"] == {
        "attributed": len(lost_write_values), "unattributed": 0, "by_fault": {fault["fault_id"]: len(lost_write_values)}}
    anomalies = pq.read_table(result.run_dir / "analysis" / "anomalies.parquet").to_pandas()
    assert set(anomalies[anomalies["kind"] == "duplicates"]["cause_fault_id"]) == {fault["fault_id"]}
    assert (result.run_dir / "work" / "proxy-events.jsonl").exists()
    manifest = ledger.read_manifest(result.run_dir)
    assert manifest["counts"]["proxy_events"] == len(events) and manifest["direct_bootstrap"] != manifest["bootstrap"]


# --- an existing cluster (run --bootstrap / cluster up --bootstrap) -------------------------
# The module's cluster stands in for one kafkaproof did not start: its INTERNAL listeners
# (direct_bootstrap) are the "existing cluster"; the ExternalCluster's own proxies front them.

def test_a_scenario_on_an_existing_cluster_runs_its_proxy_faults_through_proxies_it_starts(cluster, tmp_path):
    doc = {"name": f"t-ext-{uuid.uuid4().hex[:4]}", "guarantee": "at-least-once",
           "topic": {"partitions": 2, "replication_factor": 3, "config": {"min.insync.replicas": 2}},
           "producers": {"rate": 300, "messages": 900, "start_after_s": 1,
                         "config": {"acks": "all", "enable.idempotence": False,
                                    "max.in.flight.requests.per.connection": 1}},
           "consumers": {"count": 1}, "drain": {"settle_s": 2},
           "faults": [{"at": 1.5, "kind": "lost_ack", "target": "all", "params": {"reset": True, "count": 1},
                       "duration": 1.5}]}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    existing = cluster.direct_bootstrap()
    name = f"ext-t{uuid.uuid4().hex[:4]}"
    with Survey() as survey:  # every listening socket of the run's processes, twice a second
        result = ScenarioRun(resolve(load(path), Overrides(bootstrap=existing)),
                             RunOptions(out=tmp_path / "runs", cluster_name=name)).execute()
    assert result.status == "complete", result.error
    assert not survey.exposed(), survey.report()  # loopback and kafkaproof's subnets only
    manifest = ledger.read_manifest(result.run_dir)
    assert manifest["direct_bootstrap"] == existing and manifest["bootstrap"].startswith("127.0.0.1:")
    proxies = {n["proxy"]["address"] for n in manifest["cluster"]["nodes"]}
    assert proxies <= {f"{l.address}:{l.port}" for l in survey.seen}, survey.report()
    assert manifest["cluster"]["backend"] == "external" and len(manifest["cluster"]["nodes"]) == 3
    (fault,) = ledger.read_table(result.run_dir, "faults").to_pylist()
    assert fault["kind"] == "lost_ack" and fault["proxy_fired"] >= 1
    events = ledger.read_table(result.run_dir, "proxy_events").to_pandas()
    dropped = events[events["phase"] == "response_dropped"]
    assert len(dropped) == fault["proxy_fired"] and set(dropped["fault_id"]) == {fault["fault_id"]}
    log = ledger.read_table(result.run_dir, "audit").to_pandas()
    copies = log[log["isolation"] == "read_committed"].groupby("value_id").size()
    assert (copies == 2).sum() == sum(sum(c) for c in dropped["record_counts"]), "each lost write landed twice"
    # nothing is left: the proxies stopped, the state file is gone, the brokers untouched
    assert name not in state.list_clusters()
    assert not proxies_listening_on([n["proxy"]["address"] for n in manifest["cluster"]["nodes"]])
    assert all(cluster.node_state(n) == "running" for n in cluster.node_ids())


def proxies_listening_on(addresses: list[str]) -> list[int]:
    """Pids of live `kafkaproof.proxy` processes whose command line names one of `addresses`."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "kafkaproof.proxy" in cmd and any(f"@{a}=" in cmd for a in addresses):
            pids.append(int(entry.name))
    return pids


def test_a_scenario_without_proxy_faults_on_an_existing_cluster_creates_its_topic_and_samples_it(cluster, tmp_path):
    doc = {"name": f"t-ext-plain-{uuid.uuid4().hex[:4]}", "guarantee": "exactly-once",
           "topic": {"partitions": 2, "replication_factor": 3},
           "producers": {"rate": 300, "messages": 300}, "consumers": {"count": 1}, "drain": {"settle_s": 1}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = ScenarioRun(resolve(load(path), Overrides(bootstrap=cluster.direct_bootstrap())),
                         RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "complete", result.error
    manifest = ledger.read_manifest(result.run_dir)
    assert manifest["bootstrap"] == manifest["direct_bootstrap"] == cluster.direct_bootstrap()
    assert manifest["cluster"]["proxy"] is False and manifest["topic_description"]["partitions"]
    assert ledger.read_table(result.run_dir, "cluster_snapshots").num_rows > 0
    assert ledger.read_table(result.run_dir, "proxy_events").num_rows == 0
    assert not [n for n in state.list_clusters() if n.startswith("ext-")]
    # A second run of the same scenario would mix the first run's records into its audit.
    from kafkaproof.cluster.external import ExternalCluster
    with ExternalCluster.up(cluster.direct_bootstrap(), f"ext-t{uuid.uuid4().hex[:4]}", proxy=False) as ext:
        with pytest.raises(ClusterError, match="already exists.*another topic.name"):
            ext.create_topic(manifest["topic"], 2, 3)


def test_existing_cluster_refuses_broker_faults_before_starting_anything(cluster, tmp_path):
    doc = {"name": "t-ext-kill", "guarantee": "at-least-once", "faults": [{"at": 1, "kind": "kill", "target": "leader:0"}],
           "producers": {"messages": 10}}
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = ScenarioRun(resolve(load(path), Overrides(bootstrap=cluster.direct_bootstrap())),
                         RunOptions(out=tmp_path / "runs")).execute()
    assert result.status == "error" and "kill" in result.error and "only proxy, consumer and app faults apply" in result.error


def test_cluster_down_heals_an_existing_clusters_proxies_after_its_owner_crashed(cluster, tmp_path):
    name = f"ext-c{uuid.uuid4().hex[:4]}"
    code = ("import os, signal\n"
            "from kafkaproof import logs\n"
            "from kafkaproof.cluster import ExternalCluster\n"
            "from kafkaproof.faults import FaultInjector; from kafkaproof.spec.faults import FaultSpec\n"
            "logs.setup(False)\n"
            f"c = ExternalCluster.up({cluster.direct_bootstrap()!r}, {name!r})\n"
            "FaultInjector(c).inject(FaultSpec('error', 'all', {'error': 'NOT_ENOUGH_REPLICAS'}))\n"
            "os.kill(os.getpid(), signal.SIGKILL)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr[-3000:]
    ext = attach(name)  # the state file says which backend it is
    assert type(ext).__name__ == "ExternalCluster" and len(ext.state().faults) == 1
    topic = new_topic(cluster)
    reports, _ = produce(ext.bootstrap_servers(), topic, [(0, b"x")], **{"message.timeout.ms": 3000})
    assert reports[0]["error"] is not None, "the leftover error rule still answers every Produce"
    listens = [n.proxy.listen for n in ext.state().nodes]
    assert len(proxies_listening_on(listens)) == 3, "the proxies outlive their crashed owner"
    ext.down()
    assert name not in state.list_clusters() and not proxies_listening_on(listens)
    reports, _ = produce(cluster.bootstrap_servers(), topic, [(0, b"y")])
    assert reports[0]["error"] is None


def test_cluster_down_after_a_crash_stops_the_proxies(cluster):
    st = cluster.state()
    proxies = [n.proxy.process for n in st.nodes if n.proxy]
    assert len(proxies) == 3 and all(process.state_of(p) == "running" for p in proxies), \
        "the proxies outlive the crashed process that started the cluster"
    r = subprocess.run([sys.executable, "-m", "kafkaproof", "cluster", "down", "--name", NAME],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert all(process.state_of(p) == "dead" for p in proxies)
    assert all(process.state_of(n.process) == "dead" for n in st.nodes)
    assert NAME not in state.list_clusters()
    if network.namespaces_supported():
        assert not {n.link.namespace for n in st.nodes} & set(network.list_kafkaproof_namespaces())


def test_loopback_cluster_with_a_proxy(make_cluster):
    """Without network namespaces (no root), the proxy listens on a second loopback address."""
    c = make_cluster(name=f"px-lo{uuid.uuid4().hex[:4]}", brokers=1, network="loopback", proxy=True)
    (node,) = c.state().nodes
    assert c.bootstrap_servers() == node.proxy.listen and node.proxy.listen.startswith("127.0.0.2:")
    c.create_topic("t", 1, 1)
    injector = FaultInjector(c, topic="t")
    fault = injector.inject(FaultSpec("error", "broker:1", {"error": "NOT_ENOUGH_REPLICAS", "count": 1}))
    try:
        reports, requests = produce(c.bootstrap_servers(), "t", [(0, b"x")])
    finally:
        injector.heal(fault.fault_id)
    assert reports[0]["error"] is None and requests[1] == 2
    assert [e["phase"] for e in fault_events(c, fault.fault_id)] == ["answered_without_forwarding"]

