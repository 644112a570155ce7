"""The application under test as containers of the compose backend (issue 39), for real: the example
application's image built locally from its Maven-built jars, the catalog's compose E6 pair run end to end,
analysed by the real Spark job and judged by the GX suites; the `app` faults on a container (kill, pause,
the heal's restart); and nothing of the run's containers left afterwards.

Run under the shared lock (it starts containers): `make test-compose`; the pair (~110 s) is marked `long`
(`make test-long`), a variant of tests/cluster/test_app_scenarios.py's pair on the other backend.
"""
from __future__ import annotations

import json
import logging
import time
import urllib.request

import pytest

from kafkaproof.cluster import attach, start_cluster, state
from kafkaproof.cluster import docker_engine as de
from kafkaproof.cluster.compose import compose_project
from kafkaproof.errors import ApplicationError
from kafkaproof.run import RunOptions, ScenarioRun
from kafkaproof.run.app_containers import RUN_LABEL, ContainerFleet, container_target, example_image
from kafkaproof.run.resolved import resolve
from kafkaproof.spec.application import parse_application
from kafkaproof.spec.cluster import ClusterConfig
from kafkaproof.spec.scenario import Scenario, validate_document
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION

from app_pair import run_e6_pair

pytestmark = [pytest.mark.compose, pytest.mark.timeout(1200)]

log = logging.getLogger(__name__)

PAIR = ("app-e6-answer-before-ack-compose", "app-e6-wait-for-ack-compose")


@pytest.fixture(scope="module")
def docker_ready() -> str:
    de.ensure_engine()
    de.ensure_compose_cli()
    de.ensure_image(DEFAULT_KAFKA_VERSION)
    started = time.monotonic()
    image = example_image()
    print(f"[app-compose] example image {image} in {time.monotonic() - started:.1f} s", flush=True)
    return image


def app_containers(label: str) -> list[str]:
    return de.docker("ps", "-a", "--filter", f"label={label}", "--format", "{{.Names}}").stdout.split()


@pytest.mark.long  # ~110 s (two runs of ~44 s and one analysis of ~20 s): past make test's 30-min budget
def test_the_compose_e6_pair_detects_accepted_but_lost_signups_and_leaves_no_container(docker_ready, tmp_path):
    results, _ = run_e6_pair(PAIR, tmp_path, "app-compose")
    for result in results.values():
        assert not app_containers(f"{RUN_LABEL}={result.run_id}")
    runs = {name: result.run_dir for name, result in results.items()}
    manifest = json.loads((runs[PAIR[0]] / "manifest.json").read_text())
    app = manifest["application"]
    assert app["containers"]["images"]["signup-service"]["id"].startswith("sha256:")
    assert app["containers"]["bootstrap"].endswith(":9092") and not app["containers"]["bootstrap"].startswith("127.")
    log_file = runs[PAIR[0]] / app["services"][0]["log"]
    assert "Started" in log_file.read_text()  # the container's output, kept in the run directory
    assert not app_containers(RUN_LABEL)


def test_app_faults_on_a_container_kill_pause_and_restart_it(docker_ready, tmp_path):
    name = "kp-t-app-containers"
    cluster = start_cluster(ClusterConfig(name=name, backend="compose", brokers=2))
    try:
        section = parse_application({
            "services": [{"name": "signup", "image": docker_ready, "port": 8080,
                          "command": ["java", "-Xmx256m", "-XX:TieredStopAtLevel=1", "-jar", "/app/signup-service.jar",
                                      "--server.port={port}", "--spring.kafka.bootstrap-servers={bootstrap}"],
                          "ready": {"log": "Started .* in"}, "ready_timeout_s": 120}],
            "drive": {"service": "signup", "request": {"url": "http://127.0.0.1:{port}/signups"}, "rate": 1,
                      "messages": 1},
            "identity": {"key": True}}, "t: application", None)
        target = container_target(cluster)
        with ContainerFleet(list(section.services), {"signup": docker_ready}, tmp_path, "t-run", target) as fleet:
            fleet.start({"bootstrap": "ignored", "topic": "t", "group": "g", "run_id": "t-run"})
            port = fleet.instances[("signup", 0)].port
            health = f"http://127.0.0.1:{port}/actuator/health"
            assert urllib.request.urlopen(health, timeout=5).status == 200  # through the published loopback port
            fleet.stop("signup", 0)
            assert fleet.state("signup", 0) == "paused"
            fleet.resume("signup", 0)
            first_pid = fleet.pid("signup", 0)
            fleet.kill("signup", 0)
            assert fleet.state("signup", 0) == "dead" and fleet.pid("signup", 0) is None
            with pytest.raises(ApplicationError, match="not running"):
                fleet.stop("signup", 0)
            started = time.monotonic()
            fleet.restart("signup", 0)  # the heal of a kill: started again and ready
            print(f"[app-compose] container restarted and ready in {time.monotonic() - started:.1f} s", flush=True)
            assert fleet.pid("signup", 0) not in (None, first_pid)
            assert urllib.request.urlopen(health, timeout=5).status == 200
        assert not app_containers(f"{RUN_LABEL}=t-run")
        assert (tmp_path / "services" / "signup-0.log").read_text().count("Started") >= 2
        # A crashed run's container (never stopped): the cluster's teardown (`cluster down --all`) removes it.
        crashed = parse_application({
            "services": [{"name": "left", "image": docker_ready, "port": 8080,
                          "command": ["sh", "-c", "echo up; exec sleep 600"], "ready": {"log": "^up$"}}],
            "drive": {"request": {"url": "http://127.0.0.1:9/e"}, "rate": 1, "messages": 1},
            "identity": {"key": True}}, "t: application", None)
        ContainerFleet(list(crashed.services), {"left": docker_ready}, tmp_path, "t-crash", target).start(
            {"bootstrap": "", "topic": "t", "group": "g", "run_id": "t-crash"})
        assert app_containers(f"{RUN_LABEL}=t-crash")
    finally:
        if name in state.list_clusters():
            attach(name).down(keep_logs=False)
    assert not any(de.labelled(compose_project(name)).values())
    assert not app_containers(f"{RUN_LABEL}=t-crash")


def test_a_missing_image_is_a_scenario_error_before_the_cluster_starts(tmp_path):
    de.ensure_engine()
    doc = {"name": "app-missing-image", "guarantee": "at-least-once", "cluster": {"backend": "compose", "brokers": 2},
           "topic": {"partitions": 1, "replication_factor": 1},
           "application": {
               "services": [{"name": "gone", "image": "kafkaproof/no-such-image-kp39:1", "port": 8080,
                             "ready": {"log": "up"}}],
               "drive": {"request": {"url": "http://127.0.0.1:9/e"}, "rate": 1, "messages": 1},
               "identity": {"key": True}}}
    scenario = Scenario(doc["name"], "app-missing-image.yaml", validate_document(doc, "app-missing-image.yaml"))
    clusters = set(state.list_clusters())
    result = ScenarioRun(resolve(scenario), RunOptions(out=tmp_path)).execute()
    assert result.status == "error"
    assert ("app-missing-image.yaml: application.services[0].image: no image kafkaproof/no-such-image-kp39:1 on the "
            "Docker engine") in result.error
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert "provision" not in manifest.get("timings", {}) and set(state.list_clusters()) == clusters
