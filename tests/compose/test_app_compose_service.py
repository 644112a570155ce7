"""A service of the user's own compose file as the application under test (issue 39), for real: the example's
docker-compose.yml (examples/signup-app/) with its Maven-built jars where `mvn package` puts them, the sign-up
service given as `compose_service:` in the catalog's app-e6-answer-before-ack-compose scenario: kafkaproof
builds its image from the service's `build:` (no registry), runs it as the run's own container with the
compose file's command, env_file and environment, and the run detects the sign-ups it accepted but lost,
as the `image:` variant does. The user's compose project is never started.

Run under the shared lock (it starts containers): `make test-compose`.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import pytest
import yaml

from kafkaproof import analysis
from kafkaproof.cluster import docker_engine as de
from kafkaproof.run import RunOptions, ScenarioRun, example_app
from kafkaproof.run.app_containers import RUN_LABEL, build_image
from kafkaproof.run.resolved import resolve
from kafkaproof.spec import scenario as scenario_mod
from kafkaproof.spec.compose_service import ComposeRef, load_compose_service
from kafkaproof.spec.versions import DEFAULT_KAFKA_VERSION
from kafkaproof.verdict.validation import format_result, validate

pytestmark = [pytest.mark.compose, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "signup-app"
SCENARIO = REPO / "scenarios" / "app-e6-answer-before-ack-compose.yaml"


def team_checkout(root: Path) -> Path:
    """The example as a team's checkout after `mvn -q package`: its compose file, Dockerfile, env file and
    each service's jar in <service>/target/ (copied from kafkaproof's cached Maven build)."""
    for name in ("docker-compose.yml", "Dockerfile", ".dockerignore", "signup-service.env"):
        shutil.copy(EXAMPLE / name, root / name)
    for service, jar in example_app.build().items():
        (root / service / "target").mkdir(parents=True)
        shutil.copy(jar, root / service / "target" / f"{service}.jar")
    return root / "docker-compose.yml"


@pytest.mark.long  # 86 s on 2 cores (run 51 s, analysis 33 s, the image build a few s): past make test's budget
def test_e6_with_the_signup_service_from_the_example_compose_file_detects_accepted_but_lost_signups(tmp_path):
    de.ensure_engine()
    de.ensure_compose_cli()
    de.ensure_image(DEFAULT_KAFKA_VERSION)  # and the base image the example's Dockerfile starts FROM
    checkout = tmp_path / "team"
    checkout.mkdir()
    compose_file = team_checkout(checkout)
    # A real compose file: Docker Compose itself accepts it (and only reads it).
    de.docker("compose", "-f", str(compose_file), "config", "--quiet")

    doc = yaml.safe_load(SCENARIO.read_text())
    doc["name"] = "app-e6-answer-before-ack-compose-service"
    doc["application"]["services"][0] = {
        "name": "signup-service",
        "compose_service": {"file": "team/docker-compose.yml", "service": "signup-service"},
        # The compose file's command, env_file (the producer's 6 s timeouts) and port 8080 stay; the run's
        # cluster and topic replace the team's development broker.
        "env": {"SPRING_KAFKA_BOOTSTRAP_SERVERS": "{bootstrap}", "SIGNUP_TOPIC": "{topic}"},
        "ready": {"http": "http://127.0.0.1:{port}/actuator/health"}, "ready_timeout_s": 120}
    path = tmp_path / "app-e6-compose-service.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    scenario = scenario_mod.load(path)

    started = time.monotonic()
    result = ScenarioRun(resolve(scenario), RunOptions(out=tmp_path / "runs")).execute()
    print(f"[app-compose-service] run {result.status} in {time.monotonic() - started:.1f} s", flush=True)
    assert result.status == "complete", result.error
    started = time.monotonic()
    analysis.analyze_many([result.run_dir], quiet=True)
    verdict = validate(result.run_dir, data_docs=False)
    print(f"[app-compose-service] analysis in {time.monotonic() - started:.1f} s\n[app-compose-service] "
          f"{format_result(verdict)}", flush=True)
    assert verdict.status == "pass", format_result(verdict)  # the negative control found the loss
    lost = next(r for r in verdict.rows if r.anomaly == "lost")
    assert lost.count > 0 and lost.expected_detected

    app = json.loads((result.run_dir / "manifest.json").read_text())["application"]
    image = app["containers"]["images"]["signup-service"]
    assert image["image"].startswith("kafkaproof/app-signup-service:") and image["id"].startswith("sha256:")
    assert image["compose"]["file"] == str(compose_file) and image["compose"]["service"] == "signup-service"
    assert image["compose"]["build"]["args"] == {"SERVICE": "signup-service"}
    assert any(note.startswith("healthcheck ignored") for note in image["compose"]["notes"])
    assert app["services"][0]["argv"][-2:] == ["-jar", "/app/signup-service.jar"]  # the compose file's command
    assert "signup-service started" in (result.run_dir / app["services"][0]["log"]).read_text()
    assert not de.docker("ps", "-a", "--filter", f"label={RUN_LABEL}={result.run_id}", "-q").stdout.strip()
    # The team's compose project was never started.
    assert not de.docker("ps", "-a", "--filter", "label=com.docker.compose.project=signup-app", "-q").stdout.strip()

    # Built by content: the same context is not built again.
    definition = load_compose_service(ComposeRef(str(compose_file), "signup-service"), "t")
    started = time.monotonic()
    assert build_image(definition.build, "signup-service", "t") == image["image"]
    assert time.monotonic() - started < 10
