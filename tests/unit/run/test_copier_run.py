"""The pure parts of the copier workload (run/copier.py, run/copier_run.py): transaction numbers, output keys,
the output audit's markers, the pipeline ledger from the copiers' streams."""
from __future__ import annotations

import json

import pytest

from kafkaproof.run import copier, copier_run
from kafkaproof.run.workload import StreamWriter
from kafkaproof.spec import ledger
from kafkaproof.spec.pipeline_ledger import PIPELINE_PARTITIONS, TRANSACTIONS, TRANSACTION_RECORDS

pytestmark = pytest.mark.unit


def test_txn_numbers_are_unique_per_copier_incarnation_and_seq():
    seen = {copier.txn_number(c, i, s) for c in range(3) for i in range(3) for s in range(1, 50)}
    assert len(seen) == 3 * 3 * 49


def test_output_key_carries_the_transaction():
    assert copier.txn_of_key(copier.output_key(b"k7", 42)) == 42
    assert copier.txn_of_key(copier.output_key(None, 5).decode()) == 5
    assert copier.txn_of_key("k7") is None and copier.txn_of_key(None) is None


def test_eos_state_reads_librdkafka_statistics():
    st = copier.EosState()
    st.on_stats(json.dumps({"eos": {"producer_id": -1, "producer_epoch": -1}}))
    assert st.producer_id is None
    st.on_stats(json.dumps({"eos": {"producer_id": 1001, "producer_epoch": 2}}))
    st.on_stats("not json")
    assert (st.producer_id, st.epoch) == (1001, 2)


def test_audit_markers():
    unc = [{"partition": 0, "offset": o, "value_id": 10 + o, "key": f"k|{7 if o < 2 else 8}"} for o in range(4)]
    com = [unc[0], unc[1]]
    rows = copier_run.audit_rows(unc, com, {0: True})
    assert [(r["txn"], r["committed"]) for r in rows] == [(7, True), (7, True), (8, False), (8, False)]
    # read_committed stopped short (an open transaction holds the last stable offset): unknown
    assert [r["committed"] for r in copier_run.audit_rows(unc, com, {0: False})] == [True, True, None, None]


def test_specs():
    spec = copier_run.copier_spec({"group": "g", "client": "librdkafka"}, {"copiers": 2})
    assert spec["role"] == "copier" and spec["pipeline"] == {"copiers": 2} and spec["group"] == "g"
    assert spec["client"] == "librdkafka"
    assert copier_run.copier_spec({"group": "g", "client": "java"}, {"copiers": 2})["client"] == "java"
    assert copier_run.copier_spec({"group": "g"}, {"copiers": 2})["client"] == "librdkafka"
    r = copier_run.reader_spec({"output_topic": "o", "downstream_isolation": "read_uncommitted"}, "run1")
    assert r == {"topic": "o", "isolation": "read_uncommitted", "group": "kp-reader-run1"}


def test_pipeline_ledger_from_streams(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    txns = StreamWriter(work / "copier-0-0.txns.arrow", TRANSACTIONS)
    txns.append(1, "t-0", 0, None, None, 1, "indefinite", 10, None, None)
    txns.append(1, "t-0", 0, 1000, 0, 1, "committed", 10, 20, 30)
    txns.append(2, "t-0", 0, 1000, 0, 2, "indefinite", 40, None, None)  # killed: never ended
    txns.close()
    recs = StreamWriter(work / "copier-0-0.records.arrow", TRANSACTION_RECORDS)
    recs.append(1, "input", 0, 5, 99)
    recs.append(1, "output", 0, 0, 99)
    recs.close()
    offs = StreamWriter(work / "copier-0-0.offsets.arrow", PIPELINE_PARTITIONS)
    offs.append(0, 1, 6)
    offs.close()
    run = copier_run.PipelineRun({"output_topic": "o"}, "in", work)
    run.audit = [{"partition": 0, "offset": 0, "value_id": 99, "txn": 1, "committed": True}]
    run.final_offsets = {0: 6}
    counts = run.write_ledger(tmp_path)
    assert counts == {"transactions": 2, "transaction_records": 2, "output_reads": 0, "output_audit": 1,
                      "pipeline_partitions": 2}
    t = ledger.read_table(tmp_path, "transactions").to_pylist()
    assert [(r["txn"], r["outcome"], r["end_ns"]) for r in t] == [(1, "committed", 30), (2, "indefinite", None)]
    p = ledger.read_table(tmp_path, "pipeline_partitions").to_pylist()
    assert p == [{"partition": 0, "txn": 1, "committed_offset": 6}, {"partition": 0, "txn": None, "committed_offset": 6}]


def test_the_java_copiers_tab_separated_streams_join_the_ledger(tmp_path):
    """CopierWorker.java writes the same columns as tab-separated text (java_driver.read_tsv): both copiers'
    streams of one run (a java copier 1 beside a librdkafka copier 0) make one ledger."""
    work = tmp_path / "work"
    work.mkdir()
    txns = StreamWriter(work / "copier-0-0.txns.arrow", TRANSACTIONS)
    txns.append(1, "t-0", 0, 1000, 0, 1, "committed", 10, 20, 30)
    txns.close()
    j = copier.txn_number(1, 0, 1)
    (work / "copier-1-0.txns.tsv").write_text(f"{j}\tt-1\t1\t1001\t0\t1\tindefinite\t40\t\\N\t\\N\n"
                                              f"{j}\tt-1\t1\t1001\t0\t1\taborted\t40\t\\N\t55\n"
                                              f"{j + 1}\tt-1\t1\t\\N\t\\N\t2\tindef")  # cut by a kill
    (work / "copier-1-0.records.tsv").write_text(f"{j}\tinput\t1\t3\t77\n{j}\toutput\t1\t\\N\t77\n")
    (work / "copier-1-0.offsets.tsv").write_text("1\t" + str(j) + "\t4\n")
    run = copier_run.PipelineRun({"output_topic": "o"}, "in", work)
    counts = run.write_ledger(tmp_path)
    assert counts["transactions"] == 2 and counts["transaction_records"] == 2 and counts["pipeline_partitions"] == 1
    t = ledger.read_table(tmp_path, "transactions").to_pylist()
    assert [(r["txn"], r["copier"], r["outcome"], r["commit_ns"], r["end_ns"]) for r in t] == \
        [(1, 0, "committed", 20, 30), (j, 1, "aborted", None, 55)]
    r = ledger.read_table(tmp_path, "transaction_records").to_pylist()
    assert [(x["role"], x["offset"], x["value_id"]) for x in r] == [("input", 3, 77), ("output", None, 77)]


def test_pipeline_producer_config_names_are_the_copiers_clients(monkeypatch):
    from kafkaproof.run import client_config
    data = {"cluster": {"kafka_version": "3.9.2"}, "consumers": {"client": "librdkafka"},
            "pipeline": {"producer_config": {"linger.ms": 5, "max.block.ms": 100}}}
    assert client_config.pipeline_config_problems(data) == [
        "pipeline.producer_config.max.block.ms: librdkafka has no such property"]
    monkeypatch.setattr(client_config.java_driver, "config_names", lambda role, v: frozenset({"linger.ms", "max.block.ms"}))
    data["consumers"]["client"] = "java"
    data["pipeline"]["producer_config"]["queue.buffering.max.ms"] = 1
    assert client_config.pipeline_config_problems(data) == [
        "pipeline.producer_config.queue.buffering.max.ms: not a kafka-clients 3.9.2 producer property"]
    assert client_config.pipeline_config_problems({"consumers": {}}) == []
