"""Proxy faults without Kafka: validation, rules, the cluster plan, scenario checks, ledger rows.

The injector test drives a real proxy subprocess (in front of nothing: rules do not
need a broker) through a stub cluster, so the add/remove/heal path is exercised
end to end in a second.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from kafkaproof.spec import ledger
from kafkaproof.cluster import state
from kafkaproof.cluster.state import ClusterState, NodeState
from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.spec.cluster import LOOPBACK_PROXY_HOST, plan_nodes, node_properties
from kafkaproof.cluster import ClusterConfig
from kafkaproof.errors import FaultError, ScenarioError
from kafkaproof.spec.faults import FAULT_KINDS, PROXY_KINDS, FaultSpec, proxy_rule
from kafkaproof.cluster.base import StatefulCluster
from kafkaproof.faults import FaultInjector, check_fault, check_scenario_faults, heal_all
from kafkaproof.proxy import ControlClient, ProxyProcess, parse_rule
from kafkaproof.run.assemble import fault_rows, proxy_event_rows

pytestmark = pytest.mark.unit

from support import REPO  # noqa: E402


# --- fault specs and rules -------------------------------------------------------------

def test_proxy_kinds_are_fault_kinds_and_map_to_valid_rules():
    assert set(PROXY_KINDS) <= set(FAULT_KINDS)
    examples = {
        "lost_ack": {"reset": True, "count": 1, "topic": "t", "partitions": [0]},
        "error": {"error": "NOT_ENOUGH_REPLICAS_AFTER_APPEND", "forward": True, "probability": 0.1},
        "latency": {"api": ["fetch"], "direction": "both", "mean_ms": 200, "stddev_ms": 50},
        "proxy_bandwidth": {"bytes_per_s": 100000, "direction": "request"},
        "reset": {"api": "produce", "after_bytes": 1000},
        "blackhole": {},
        "metadata": {"mode": "stale", "topic": "t", "partitions": [0], "count": 3},
        "fetch_corrupt": {"every": 10, "count": 5},
        "fetch_duplicate": {"topic": "t", "probability": 0.5},
        "hold": {"ms": 12000, "count": 1, "topic": "t-out", "partitions": [0]},
    }
    for kind in PROXY_KINDS:
        spec = FaultSpec(kind, "leader:0", examples[kind]).validate()
        rule = proxy_rule(spec, f"{kind}-0123abcd")
        assert rule["id"] == f"{kind}-0123abcd"
        parse_rule(rule)  # the proxy accepts it
    assert proxy_rule(FaultSpec("proxy_bandwidth", "all", {"bytes_per_s": 10}))["action"] == "bandwidth"
    # lost acks and injected errors default to Produce; the others to every API
    assert proxy_rule(FaultSpec("lost_ack", "all"))["api"] == "produce"
    assert proxy_rule(FaultSpec("error", "all", {"error": 19}))["api"] == "produce"
    assert "api" not in proxy_rule(FaultSpec("latency", "all", {"ms": 5}))
    assert proxy_rule(FaultSpec("error", "all", {"error": 3, "api": "fetch"}))["api"] == "fetch"


def test_fault_kinds_map_to_rules_and_name_the_bad_param() -> None:
    for kind, action in (("metadata", "metadata"), ("fetch_corrupt", "corrupt"), ("fetch_duplicate", "duplicate")):
        params = {"mode": "missing"} if kind == "metadata" else {"every": 2}
        rule = proxy_rule(check_fault(FaultSpec(kind, "all", {**params, "topic": "t", "partitions": [0]})), "x")
        assert rule["action"] == action and parse_rule(rule).topic == "t"
    with pytest.raises(FaultError, match=r"fault.params.mode: required for metadata"):
        check_fault(FaultSpec("metadata", "all", {}))
    with pytest.raises(FaultError, match=r"fault.params.mode: .*missing, stale"):
        check_fault(FaultSpec("metadata", "all", {"mode": "old"}))
    with pytest.raises(FaultError, match=r"fault.params.api: .*fetch answers only"):
        check_fault(FaultSpec("fetch_corrupt", "all", {"api": "produce"}))


@pytest.mark.parametrize("spec, message", [
    (FaultSpec("lost_ack", "all", {"probability": 1.5}), r"fault.params.probability: .*\[0.0, 1.0\]"),
    (FaultSpec("lost_ack", "all", {"ack": True}), "fault.params.ack: not a parameter of lost_ack; allowed: api, topic"),
    (FaultSpec("error", "all"), "fault.params.error: required for error"),
    (FaultSpec("error", "all", {"error": "BANANA"}), "fault.params.error: .*unknown Kafka error name 'BANANA'"),
    (FaultSpec("error", "all", {"error": 1, "api": "metadata"}), "fault.params.api: .*limited to APIs whose answers it can build: .*heartbeat"),
    (FaultSpec("latency", "all", {"min_ms": 5}), "fault.params.max_ms: .*required"),
    (FaultSpec("latency", "all", {"ms": 5, "direction": "sideways"}), "fault.params.direction: .*request, response, both"),
    (FaultSpec("proxy_bandwidth", "all"), "fault.params.bytes_per_s: required"),
    (FaultSpec("proxy_bandwidth", "all", {"bytes_per_s": 10, "count": 2}), "params.count: not a parameter"),
    (FaultSpec("reset", "all", {"after_bytes": "many"}), "params.after_bytes: expected int"),
    (FaultSpec("blackhole", "everything"), "is not a target"),
    (FaultSpec("lost_ack", "all", {"topic": "t"}), None),  # api defaults to produce: topic allowed
])
def test_proxy_fault_errors_name_the_field(spec, message):
    # The complete check: the spec's own, then the proxy's rule parser (what `fault inject` and runs use).
    if message is None:
        check_fault(spec)
        return
    with pytest.raises(FaultError, match=message):
        check_fault(spec)


def test_broker_target_alias():
    FaultSpec("kill", "broker:2").validate()
    FaultSpec("lost_ack", "broker:2").validate()


# --- the cluster plan ---------------------------------------------------------------------

def test_proxy_plan_advertises_the_proxy_on_the_client_listener_only(tmp_path):
    cfg = ClusterConfig(brokers=3, controllers=1, proxy=True)
    nodes = plan_nodes(cfg, 2, use_netns=True)
    b1, ctl = nodes[0], nodes[3]
    assert b1["proxy"] == {"listen": "10.77.2.1:9092", "upstream": "10.77.2.2:9092", "process": None, "control": None}
    assert (b1["advertised_host"], b1["advertised_port"]) == ("10.77.2.1", 9092)
    assert "proxy" not in ctl, "controllers serve no clients"
    props = node_properties(cfg, b1, nodes, tmp_path, kafka_major=4)
    assert props["listeners"] == "CLIENT://10.77.2.2:9092,INTERNAL://10.77.2.2:9094"
    assert props["advertised.listeners"] == "CLIENT://10.77.2.1:9092,INTERNAL://10.77.2.2:9094"
    assert props["controller.quorum.voters"] == "101@10.77.2.14:9093"

    loop = plan_nodes(ClusterConfig(brokers=2, proxy=True), 3, use_netns=False)
    assert loop[1]["proxy"]["listen"] == f"{LOOPBACK_PROXY_HOST}:{loop[1]['client_port']}"
    assert loop[1]["proxy"]["upstream"] == f"127.0.0.1:{loop[1]['client_port']}"
    plain = plan_nodes(ClusterConfig(brokers=2), 3, use_netns=True)
    assert "proxy" not in plain[0] and plain[0]["advertised_host"] == plain[0]["host"]


# --- scenarios ----------------------------------------------------------------------------

MINIMAL = {"name": "t", "guarantee": "at-least-once", "producers": {"messages": 10}}


def load(tmp_path: Path, doc: dict):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(doc))
    return scenario_mod.load(path), path


def test_proxy_is_implied_by_a_proxy_fault_and_absent_otherwise(tmp_path):
    s, _ = load(tmp_path, {**MINIMAL, "faults": [{"at": 1, "kind": "lost_ack", "target": "all",
                                                  "params": {"reset": True}}]})
    assert s.data["cluster"]["proxy"] is True
    plain, _ = load(tmp_path, MINIMAL)
    assert "proxy" not in plain.data["cluster"], "scenarios without the proxy keep their hash"
    explicit, _ = load(tmp_path, {**MINIMAL, "cluster": {"proxy": True}})
    assert explicit.data["cluster"]["proxy"] is True


@pytest.mark.parametrize("patch, message", [
    ({"cluster": {"proxy": False}, "faults": [{"at": 1, "kind": "latency", "target": "all", "params": {"ms": 5}}]},
     "cluster.proxy: false, but faults[0] (latency) needs the fault proxy"),
    ({"faults": [{"at": 1, "kind": "error", "target": "all", "params": {"error": "NOPE"}}]},
     "faults[0].params.error: rule field 'error': unknown Kafka error name 'NOPE'"),
    ({"faults": [{"at": 1, "kind": "latency", "target": "all"}]}, "faults[0].params.ms: rule field 'ms' is required"),
    ({"faults": [{"at": 1, "kind": "lost_ack", "target": "broker:4"}]}, "faults[0].target: broker 4 does not exist"),
    ({"cluster": {"controllers": 1}, "faults": [{"at": 1, "kind": "lost_ack", "target": "node:101"}]},
     "faults[0].target: 'node:101' is a dedicated controller; proxy faults target brokers"),
    ({"faults": [{"at": 1, "kind": "blackhole", "target": "consumer:0"}]}, "'blackhole' cannot target a consumer"),
    ({"faults": [{"at": 1, "kind": "lost_ack", "target": "all", "params": {"retries": 1}}]},
     "faults[0].params.retries: not a parameter of lost_ack"),
])
def test_proxy_fault_scenario_errors(tmp_path, patch, message):
    # What `scenario validate` and every run do before anything starts: load, then check every fault completely.
    with pytest.raises(ScenarioError) as e:
        check_scenario_faults(load(tmp_path, {**MINIMAL, **patch})[0])
    assert message in str(e.value) and "s.yaml" in str(e.value)


def test_catalog_has_the_proxy_scenarios():
    catalog = {s.name: s for s in scenario_mod.load_catalog(REPO / "scenarios", tag="proxy")}
    assert set(catalog) >= {
        "lost-acks-idempotence-off", "lost-acks-idempotence-off-claims-exactly-once", "lost-acks-idempotence-on",
        "e2-slow-broker-request-timeout-1500", "e2-slow-broker-request-timeout-60000",
        "retriable-errors-inflight-5-idempotence-off", "retriable-errors-inflight-5-idempotence-on", "fetch-latency"}
    for s in catalog.values():
        suite = "compose" if s.data["cluster"].get("backend") == "compose" else "full"  # compose needs Docker
        assert s.data["cluster"]["proxy"] is True and suite in s.data["tags"] and s.data["explanation"]
        assert any(f["kind"] in PROXY_KINDS for f in s.data["faults"])
    assert catalog["lost-acks-idempotence-off-claims-exactly-once"].expect["detect"] == ["duplicates"]
    assert catalog["retriable-errors-inflight-5-idempotence-off"].expect["detect"] == ["reordering"]
    assert {n for n, s in catalog.items() if "seed" in s.data["tags"]} >= {
        "lost-acks-idempotence-off", "lost-acks-idempotence-on", "e2-slow-broker-request-timeout-1500",
        "e2-slow-broker-request-timeout-60000"}


# --- ledger rows --------------------------------------------------------------------------

def _event(phase, **kw):
    base = {"event": "fault", "ts_ns": 10, "proxy": "10.77.1.1:9092", "broker": 1, "conn": 3, "client_id": "rdkafka",
            "api_key": 0, "api": "produce", "api_version": 10, "correlation_id": 7,
            "topics": [{"topic": "t", "partitions": [0, 2], "record_counts": [5, 3]}], "rule_id": "lost_ack-0123abcd", "action": "lost_ack",
            "phase": phase}
    base.update(kw)
    return base


def test_proxy_event_rows_carry_what_the_broker_wrote():
    results = [{"topic": "t", "partition": 0, "error_code": 0, "error": "NONE", "base_offset": 41},
               {"topic": "t", "partition": 2, "error_code": 6, "error": "NOT_LEADER_OR_FOLLOWER", "base_offset": -1}]
    events = [_event("request_forwarded", detail={"reset": True}),
              _event("response_dropped", ts_ns=20, detail={"results": results, "reset": True}),
              _event("delayed", rule_id="r9", action="latency", api="fetch", api_key=1,
                     detail={"direction": "response", "delay_ms": 30000.0}),
              {"event": "conn_close", "ts_ns": 30, "detail": {}}]
    rows = proxy_event_rows(events, {"lost_ack-0123abcd"})
    assert [r["phase"] for r in rows] == ["request_forwarded", "response_dropped", "delayed"]
    assert rows[0]["base_offsets"] is None and rows[0]["fault_id"] == "lost_ack-0123abcd"
    assert rows[1]["partitions"] == [0, 2] and rows[1]["base_offsets"] == [41, -1]
    assert rows[1]["record_counts"] == [5, 3], "offsets 41..45 of partition 0 are the unacknowledged write"
    assert rows[2]["fault_id"] is None and rows[2]["rule_id"] == "r9" and rows[2]["delay_ms"] == 30000.0
    assert json.loads(rows[1]["detail"])["results"][0]["base_offset"] == 41


def test_discarded_answers_land_in_the_same_columns_as_dropped_ones(tmp_path):
    results = [{"topic": "t", "partition": 2, "error_code": 0, "error": "NONE", "base_offset": 17},
               {"topic": "t", "partition": 0, "error_code": 0, "error": "NONE", "base_offset": 40}]
    arrived = {"caused_by": "response_dropped", "response_received": True, "results": results}
    events = [_event("response_discarded", correlation_id=8, detail=arrived),
              _event("response_discarded", correlation_id=9,
                     detail={"caused_by": "response_dropped", "response_received": False}),
              _event("response_discarded", correlation_id=10, topics=None, detail=arrived)]
    rows = proxy_event_rows(events, {"lost_ack-0123abcd"})
    assert rows[0]["phase"] == "response_discarded" and rows[0]["fault_id"] == "lost_ack-0123abcd"
    assert rows[0]["partitions"] == [0, 2] and rows[0]["base_offsets"] == [40, 17]
    assert rows[0]["record_counts"] == [5, 3]
    assert rows[1]["base_offsets"] is None, "no answer yet: the broker may or may not have written it"
    # Without the request's topics (its frame was gone) the answer still names the write.
    assert (rows[2]["topic"], rows[2]["partitions"], rows[2]["base_offsets"]) == ("t", [2, 0], [17, 40])
    assert rows[2]["record_counts"] is None
    assert ledger.write_table(tmp_path, "proxy_events", rows) == 3
    written = ledger.read_table(tmp_path, "proxy_events").to_pylist()
    assert [r["base_offsets"] for r in written] == [[40, 17], None, [17, 40]]


def test_topics_a_proxy_knew_only_by_id_are_named(tmp_path):
    """Produce v13 names topics by id; a proxy that carried no Metadata answer naming the topic reports
    the id alone (seen with the Java client: a third of the lost acks left unattributed)."""
    tid, other = "5ba9eefd-c376-402c-850f-52d3b5a1dedf", "0c1d2e3f-0000-4000-8000-000000000001"

    def by_id(topic_id, base, topic=None, **kw):
        named = {"topic": topic or topic_id, "topic_id": topic_id}
        return _event("response_dropped", topics=[{**named, "partitions": [0], "record_counts": [3]}],
                      detail={"results": [{**named, "partition": 0, "error_code": 0, "error": "NONE",
                                           "base_offset": base}]}, **kw)

    events = [by_id(tid, 651, broker=2), by_id(other, 7)]
    rows = proxy_event_rows(events, {"lost_ack-0123abcd"})
    assert [(r["topic"], r["base_offsets"]) for r in rows] == [(tid, [651]), (other, [7])]  # nothing names them
    # The run topic's id (from the topic's description), or another proxy's event naming both.
    assert [r["topic"] for r in proxy_event_rows(events, {"lost_ack-0123abcd"}, {tid: "t"})] == ["t", other]
    rows = proxy_event_rows([*events, by_id(tid, 815, topic="t", broker=1)], {"lost_ack-0123abcd"})
    assert [(r["topic"], r["base_offsets"]) for r in rows] == [("t", [651]), (other, [7]), ("t", [815])]


def test_ledger_tables_stay_compatible(tmp_path):
    assert ledger.write_table(tmp_path, "proxy_events", []) == 0
    assert ledger.read_table(tmp_path, "proxy_events").schema == ledger.PROXY_EVENTS
    older = tmp_path / "older"
    older.mkdir()
    assert ledger.read_table(older, "proxy_events").num_rows == 0, "runs from before the proxy read as empty"
    before_counts = pa.schema([f for f in ledger.PROXY_EVENTS if f.name != "record_counts"])
    pq.write_table(pa.table({"ts_ns": [1], "partitions": [[0]]}, schema=pa.schema(
        [before_counts.field("ts_ns"), before_counts.field("partitions")])), older / "proxy_events.parquet")
    assert ledger.read_table(older, "proxy_events").column("record_counts").to_pylist() == [None]
    assert [f.name for f in ledger.FAULTS][-3:] == ["proxy_rule", "proxy_fired", "effect"], "new columns go last"


def test_fault_rows_keep_the_rule_and_how_often_it_fired(tmp_path):
    rule = {"action": "lost_ack", "api": "produce", "id": "lost_ack-0123abcd", "reset": True}
    log = tmp_path / "faults.jsonl"
    common = {"fault_id": "lost_ack-0123abcd", "kind": "lost_ack", "target": "all", "nodes": [1, 2], "params": {},
              "rule": rule}
    log.write_text(json.dumps({"event": "inject", "mono_ns": 5, "wall": "w1", **common}) + "\n" +
                   json.dumps({"event": "heal", "mono_ns": 9, "wall": "w2", "proxy_fired": 4, **common}) + "\n")
    (row,) = fault_rows(log)
    assert json.loads(row["proxy_rule"]) == rule and row["proxy_fired"] == 4 and row["heal_ns"] == 9
    assert ledger.write_table(tmp_path, "faults", [row]) == 1


# --- the injector against a real proxy process ---------------------------------------------

class StubCluster(StatefulCluster):
    """A cluster backend with real proxy processes and no brokers (state file, fault bookkeeping: the real ones)."""

    backend = "stub"
    supported_faults = frozenset(PROXY_KINDS)
    has_proxy = True

    def __init__(self, name: str, proxies: dict[int, ProxyProcess]):
        super().__init__(name)
        self.proxy_procs = proxies

    def node_ids(self):
        return [1, 2, 3]

    def node(self, nid):
        return NodeState(id=nid, roles=["broker"])

    def proxy_ids(self):
        return sorted(self.proxy_procs)

    def proxy_state(self, nid):
        return "running" if self.proxy_procs[nid].proc.poll() is None else "dead"

    def proxy_control(self, nid):
        if nid not in self.proxy_procs:
            raise FaultError(f"node {nid} has no fault proxy")
        return ControlClient(self.proxy_procs[nid].ready["control"])

    def leader_of(self, topic, partition):
        return 2


def test_injector_installs_rules_in_the_targeted_proxies_and_heals_them(tmp_path, monkeypatch):
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path / "state"))
    state.save_state("px-unit", ClusterState.from_json({"name": "px-unit", "proxy": True, "network": "loopback",
                                                        "nodes": [], "faults": []}))
    with ProxyProcess(["1@127.0.0.1:0=127.0.0.1:9"]) as p1, ProxyProcess(["2@127.0.0.1:0=127.0.0.1:9"]) as p2:
        cluster = StubCluster("px-unit", {1: p1, 2: p2})
        injector = FaultInjector(cluster, topic="t", log_path=tmp_path / "faults.jsonl")
        fault = injector.inject(FaultSpec("lost_ack", "leader:0", {"reset": True, "count": 1}))
        assert fault.nodes == [2] and fault.rule["id"] == fault.fault_id
        assert [r["id"] for r in p2.rules()] == [fault.fault_id] and p1.rules() == []
        everywhere = injector.inject(FaultSpec("latency", "all", {"ms": 5}))
        assert everywhere.nodes == [1, 2]
        with pytest.raises(FaultError, match="node 3 has no fault proxy"):
            injector.inject(FaultSpec("blackhole", "node:3"))
        injector.heal(fault.fault_id)
        assert [r["id"] for r in p2.rules()] == [everywhere.fault_id]
        heal_all(cluster)  # what `cluster down` does after a crash
        assert p1.rules() == [] and p2.rules() == [] and state.load_state("px-unit").faults == []
        # a rule left by a crash between installing it and recording the fault
        p1.add_rule({"action": "blackhole", "id": "blackhole-0123abcd"})
        p1.add_rule({"action": "blackhole", "id": "by-hand"})
        heal_all(cluster)
        assert [r["id"] for r in p1.rules()] == ["by-hand"]
    # the cluster's own fault log has every event, also those of `heal_all`
    events = [json.loads(line) for line in (state.cluster_dir("px-unit") / "faults.jsonl").read_text().splitlines()]
    heals = [e for e in events if e["event"] == "heal"]
    assert {e["fault_id"] for e in heals} == {fault.fault_id, everywhere.fault_id}
    assert all(e["rule"]["id"] == e["fault_id"] and e["proxy_fired"] == 0 for e in heals)


# --- an existing cluster behind kafkaproof's proxies ----------------------------------------

def test_existing_cluster_plan_gives_each_broker_a_rewriting_proxy_that_knows_its_peers():
    from kafkaproof.cluster.external import plan_proxied_nodes
    nodes = plan_proxied_nodes({3: ("kafka-c", 9092), 1: ("kafka-a", 9092), 2: ("kafka-b", 9093)},
                               "127.0.0.1", [41001, 41002, 41003])
    assert [n["id"] for n in nodes] == [1, 2, 3]
    one = nodes[0]
    assert one["proxy"]["upstream"] == "kafka-a:9092" and one["proxy"]["listen"] == "127.0.0.1:41001"
    assert one["proxy"]["rewrite"] is True
    assert one["proxy"]["peers"] == {"2": "127.0.0.1:41002", "3": "127.0.0.1:41003"}
    assert (one["advertised_host"], one["advertised_port"]) == ("127.0.0.1", 41001)
    assert nodes[1]["proxy"]["upstream"] == "kafka-b:9093"
    plain = plan_proxied_nodes({1: ("kafka-a", 9092)}, None)
    assert "proxy" not in plain[0] and (plain[0]["advertised_host"], plain[0]["advertised_port"]) == ("kafka-a", 9092)


def test_proxy_peer_option_is_checked():
    from kafkaproof.proxy.__main__ import _peers
    from kafkaproof.proxy.errors import ProxyError
    assert _peers(["2=127.0.0.1:9093", "3=[::1]:9094"]) == {2: ("127.0.0.1", 9093), 3: ("::1", 9094)}
    with pytest.raises(ProxyError, match="NODE_ID=HOST:PORT"):
        _peers(["two=127.0.0.1:9093"])


def test_existing_cluster_refuses_process_faults_with_a_clear_error(tmp_path, monkeypatch):
    from kafkaproof.cluster.external import NOT_OWNED, ExternalCluster, plan_proxied_nodes
    monkeypatch.setenv("KAFKAPROOF_STATE", str(tmp_path))
    state.save_state("ext-u", ClusterState.from_json({
        "name": "ext-u", "backend": "external", "network": "external", "proxy": True, "bootstrap": "kafka-a:9092",
        "nodes": plan_proxied_nodes({1: ("kafka-a", 9092)}, "127.0.0.1", [41001]), "faults": []}))
    from kafkaproof.cluster import attach
    ext = attach("ext-u")
    assert isinstance(ext, ExternalCluster) and ext.direct_bootstrap() == "kafka-a:9092"
    assert ext.bootstrap_servers() == "127.0.0.1:41001" and ext.node_state(1) == "running"
    with pytest.raises(FaultError, match="only proxy faults"):
        FaultInjector(ext).inject(FaultSpec("kill", "broker:1"))
    assert "consumer faults" in NOT_OWNED


def test_an_answer_naming_the_topic_the_request_named_by_id_carries_its_offsets():
    """A proxy that learned the topic's name between a Produce v13 request and its answer names the
    request's topic by id and the answer's by name (seen with the Java client: a lost ack's write of
    25 records reported at base offset -1, its 25 duplicates unattributed)."""
    tid = "e4900d45-3da3-4b03-90cd-ea1722831fd5"
    event = _event("response_dropped",
                   topics=[{"topic": tid, "topic_id": tid, "partitions": [2], "record_counts": [25]}],
                   detail={"reset": True, "results": [{"topic": "t", "topic_id": tid, "partition": 2,
                                                       "error_code": 0, "error": "NONE", "base_offset": 331}]})
    (row,) = proxy_event_rows([event], {"lost_ack-0123abcd"})
    assert (row["topic"], row["partitions"], row["base_offsets"], row["record_counts"]) == ("t", [2], [331], [25])
