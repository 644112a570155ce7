"""Helpers shared by tests (imported as `support`)."""
from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from kafkaproof.cluster import network

REPO = Path(__file__).resolve().parent.parent  # the checkout
DATA = REPO / "tests" / "data"

needs_root = pytest.mark.skipif(not network.namespaces_supported(),
                                reason="network faults need root (network namespaces, nftables)")


def airflow_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment `scripts/airflow-env.sh` sets, with a private AIRFLOW_HOME."""
    # Exported, not `AIRFLOW_HOME=... source`: bash restores a variable assigned for one builtin once it
    # returns, so the tests' Airflow ran with the default home (~/airflow), where the api-server's auth
    # manager writes its password file: it failed on a machine without ~/airflow.
    out = subprocess.run(["bash", "-c", f"export AIRFLOW_HOME={home} && source scripts/airflow-env.sh && env -0"],
                         cwd=REPO, capture_output=True, text=True, check=True).stdout
    env = dict(line.split("=", 1) for line in out.split("\0") if "=" in line)
    assert env.get("AIRFLOW_HOME") == str(home), "Airflow would run with another home than the test's"
    env.update(extra)
    return env


def wait_for(predicate, timeout_s: float, what: str, interval: float = 0.5):
    """Poll `predicate` until it returns something true; fail the test after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        last = predicate()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout_s}s waiting for {what} (last: {last!r})")


def produce(bootstrap: str, topic: str, n: int, **config) -> tuple[int, list[str]]:
    """Produce `n` small records and wait for every delivery report: (acked, error names)."""
    from confluent_kafka import Producer
    errors: list[str] = []
    acked = 0

    def on_delivery(err, msg):
        nonlocal acked
        if err is None:
            acked += 1
        else:
            errors.append(err.name())

    conf = {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "log_level": 2}
    conf.update(config)
    p = Producer(conf)
    for i in range(n):
        p.produce(topic, key=str(i % 7), value=f"v{i}", on_delivery=on_delivery)
        p.poll(0)
    deadline = time.monotonic() + 120
    while len(p) and time.monotonic() < deadline:
        p.flush(1)
    assert not len(p), "producer did not finish within 120 s"
    return acked, errors


def fault_events(cluster, fault_id: str) -> list[dict]:
    """What the cluster's fault proxies did under one rule (their `fault` events), in time order."""
    from kafkaproof.proxy import read_events
    events = []
    for nid in cluster.proxy_ids():
        events += [e for e in read_events(cluster.proxy_events_path(nid))
                   if e["event"] == "fault" and e.get("rule_id") == fault_id]
    return sorted(events, key=lambda e: e["ts_ns"])


def leftovers() -> dict[str, str]:
    """kafkaproof things still present on this host: namespaces, JVMs, nft tables in the root namespace."""
    ns = " ".join(network.list_kafkaproof_namespaces()) if network.namespaces_supported() else ""
    jvm = subprocess.run(["pgrep", "-f", "kafka\\.Kafka"], capture_output=True, text=True).stdout.strip()
    veth = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    veths = " ".join(sorted(set(re.findall(r"kp\d+n\d+h", veth))))
    nft = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout.strip() \
        if network.namespaces_supported() else ""
    return {k: v for k, v in {"namespaces": ns, "kafka_processes": jvm, "veths": veths, "nft": nft}.items() if v}


def load_analysis_job():
    """The Spark job's package (spark/kafkaproof_analysis: it runs under spark-submit without kafkaproof, its
    pure parts are tested here) as one namespace: every module's public names, as `job.X` (`job.KINDS`,
    `job.fault_effect`, ...)."""
    import importlib
    import pkgutil
    import sys
    import types
    spark_dir = str(REPO / "spark")
    if spark_dir not in sys.path:
        sys.path.append(spark_dir)
    package = importlib.import_module("kafkaproof_analysis")
    job = types.SimpleNamespace()
    for info in pkgutil.iter_modules(package.__path__):
        module = importlib.import_module(f"kafkaproof_analysis.{info.name}")
        vars(job).update({k: v for k, v in vars(module).items() if not k.startswith("_")})
    return job


class SparkStandalone:
    """A real Spark standalone cluster from pyspark's own jars: a master and one worker, as separate JVMs
    on loopback, stopped (with their process groups) on exit. `apps()` lists what ran there."""

    def __init__(self, workdir: Path, cores: int = 1, memory: str = "2g"):
        import pyspark
        self.workdir, self.cores, self.memory = workdir, cores, memory
        self.spark_home = Path(pyspark.__file__).parent
        self.port, self.webui = free_port(), free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []

    def _start(self, name: str, *args: str) -> None:
        env = {**os.environ, "SPARK_HOME": str(self.spark_home), "SPARK_LOG_DIR": str(self.workdir),
               "SPARK_WORKER_DIR": str(self.workdir / "work"), "SPARK_LOCAL_IP": "127.0.0.1"}
        with open(self.workdir / f"{name}.log", "w") as out:
            self.procs.append(subprocess.Popen([str(Path(sys.executable).parent / "spark-class"), *args], env=env,
                                               stdout=out, stderr=subprocess.STDOUT, start_new_session=True))

    def status(self) -> dict:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.webui}/json/", timeout=2) as r:
                return json.load(r)
        except OSError:
            return {}

    def apps(self) -> list[tuple[str, str]]:
        """(name, state) of every application the master ran."""
        return [(a["name"], a["state"]) for a in self.status().get("completedapps", [])]

    def __enter__(self) -> "SparkStandalone":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                    "--port", str(self.port), "--webui-port", str(self.webui))
        self._start("worker", "org.apache.spark.deploy.worker.Worker", self.url, "--host", "127.0.0.1",
                    "--cores", str(self.cores), "--memory", self.memory, "--webui-port", str(free_port()))
        try:
            wait_for(lambda: self.status().get("aliveworkers") == 1, 120, f"a Spark worker registered at {self.url}")
        except AssertionError:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        for proc in reversed(self.procs):
            stop_group(proc)


def stop_group(proc: subprocess.Popen, grace_s: float = 30) -> None:
    """Stop a process started with `start_new_session=True` and everything it started: SIGTERM to its
    process group, SIGKILL after `grace_s`."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(grace_s)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def free_port() -> int:
    """A TCP port nothing listens on now (on loopback)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PostgresServer:
    """A real PostgreSQL server (Debian's package) with a database `kafkaproof`, in a directory of its own
    and listening only on a Unix socket there; run as the `postgres` user when we are root (the server
    refuses root). `url` is its SQLAlchemy URL."""

    def __init__(self) -> None:
        import glob
        import tempfile
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"))
        if not bins:
            pytest.fail("PostgreSQL is not installed (Debian package postgresql; `make setup` installs it)")
        self.bin = Path(bins[-1])
        self.base = Path(tempfile.mkdtemp(prefix="kp-pg-"))  # short: a socket path has ~100 characters
        self.port = free_port()
        self.url = f"postgresql+psycopg2://kafkaproof@/kafkaproof?host={self.base}&port={self.port}"

    def _run(self, *cmd: str) -> subprocess.CompletedProcess:
        prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        proc = subprocess.run([*prefix, *cmd], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{' '.join(cmd)}: {proc.stdout}{proc.stderr}"
        return proc

    def __enter__(self) -> "PostgresServer":
        if os.geteuid() == 0:
            subprocess.run(["chown", "postgres", str(self.base)], check=True)
        self._run(str(self.bin / "initdb"), "-D", str(self.base / "data"), "-U", "kafkaproof", "--auth=trust",
                  "-E", "UTF8")
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.base / "data"), "-l", str(self.base / "server.log"), "-w",
                  "-o", f"-k {self.base} -c listen_addresses='' -p {self.port}", "start")
        self._run(str(self.bin / "createdb"), "-h", str(self.base), "-p", str(self.port), "-U", "kafkaproof",
                  "kafkaproof")
        return self

    def database(self, name: str) -> str:
        """A new, empty database on the server; returns its URL."""
        self._run(str(self.bin / "createdb"), "-h", str(self.base), "-p", str(self.port), "-U", "kafkaproof", name)
        return self.url.replace("/kafkaproof?", f"/{name}?")

    def __exit__(self, *exc) -> None:
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.base / "data"), "-m", "fast", "-w", "stop")
        subprocess.run(["rm", "-rf", str(self.base)], check=False)


def describe_everything(admin) -> bytes:
    """What an audit must not change (`admin`: a confluent_kafka AdminClient), as JSON bytes: topics and
    partitions, every topic's and broker's config (value, source), every group (state, members, assignor) and
    its committed offsets."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka.admin import ConfigResource, ResourceType
    md = admin.list_topics(timeout=15)
    topics = {t: {p: (m.replicas, sorted(m.isrs)) for p, m in sorted(md.topics[t].partitions.items())}
              for t in sorted(md.topics)}
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in sorted(md.topics)]
    configs = {r.name: {k: (e.value, str(e.source)) for k, e in sorted(f.result(30).items())}
               for r, f in admin.describe_configs(resources).items()}
    for b in sorted(md.brokers):
        for r, f in admin.describe_configs([ConfigResource(ResourceType.BROKER, str(b))]).items():
            configs[f"broker:{b}"] = {k: (e.value, str(e.source)) for k, e in sorted(f.result(30).items())}
    ids = sorted(g.group_id for g in admin.list_consumer_groups().result(30).valid)
    groups = {}
    for g, f in (admin.describe_consumer_groups(ids).items() if ids else []):
        d = f.result(30)
        offsets = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(g)])
        committed = sorted((tp.topic, tp.partition, tp.offset) for tp in offsets[g].result(30).topic_partitions)
        groups[g] = {"state": str(d.state), "assignor": d.partition_assignor, "committed": committed,
                     "members": sorted((m.member_id, m.client_id) for m in d.members)}
    return json.dumps({"topics": topics, "configs": configs, "groups": groups}, sort_keys=True, default=str).encode()


def audit_topics(cluster, auto: str, safe: str, compacted: str) -> None:
    """The issue-40 cluster's topics on `cluster`: `safe` RF 3 / min ISR 2, `compacted` RF 3 compacted, and
    `auto` created by a producer's first sends with the broker defaults, as in the E6 incident (20 values
    each to `auto` and, keyed, to `safe`)."""
    from confluent_kafka import Producer
    cluster.create_topic(safe, 3, 3, {"min.insync.replicas": 2})
    cluster.create_topic(compacted, 1, 3, {"cleanup.policy": "compact"})
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers(), "acks": "1"})
    for i in range(20):
        producer.produce(auto, value=b"x")
        producer.produce(safe, key=str(i).encode(), value=b"y")
    assert producer.flush(60) == 0, "the values that create the topics were not delivered"


def leader_kill_run(tmp_path: Path, name: str, cluster: dict, messages: int, overrides=None, **options) -> dict:
    """Run a small at-least-once scenario (acks=all, idempotent, RF 3, min ISR 2, the leader of partition 0
    killed for 3 s) on `cluster` (the scenario's cluster section); check every send was acknowledged and
    read back (exact counts) and the kill recorded. Returns the run's manifest."""
    import pyarrow.parquet as pq
    import yaml
    from kafkaproof.run import RunOptions, ScenarioRun
    from kafkaproof.run.resolved import Overrides, resolve
    from kafkaproof.spec import ledger
    from kafkaproof.spec.scenario import load
    doc = {"name": name, "guarantee": "at-least-once", "cluster": cluster,
           "topic": {"partitions": 2, "replication_factor": 3, "config": {"min.insync.replicas": 2}},
           "producers": {"rate": 400, "messages": messages, "start_after_s": 1,
                         "config": {"acks": "all", "enable.idempotence": True}},
           "consumers": {"count": 1, "commit": "sync"},
           "faults": [{"at": 3, "kind": "kill", "target": "leader:0", "duration": 3}]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    result = ScenarioRun(resolve(load(path), overrides or Overrides()),
                         RunOptions(out=tmp_path / "runs", **options)).execute()
    assert result.status == "complete", result.error
    sends = pq.read_table(ledger.table_path(result.run_dir, "sends")).to_pandas()
    audit = pq.read_table(ledger.table_path(result.run_dir, "audit")).to_pandas()
    assert len(sends) == messages and set(sends["outcome"]) == {"ok"}
    logged = audit[audit["isolation"] == "read_committed"]
    assert set(logged["value_id"]) == set(sends["value_id"])  # acks=all, idempotent: nothing lost
    faults = pq.read_table(ledger.table_path(result.run_dir, "faults")).to_pandas()
    assert set(faults["kind"]) == {"kill"}
    return {**ledger.read_manifest(result.run_dir), "run_dir": str(result.run_dir)}
