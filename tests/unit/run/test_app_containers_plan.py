"""The compose backend's container services without an engine (issue 39): a compose service's build hash, and
the `docker run` a compose definition turns into (entrypoint, working directory, user, environment)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kafkaproof.run import app_containers
from kafkaproof.run.app_containers import ContainerFleet, ContainerTarget, build_hash
from kafkaproof.spec.application import parse_application
from kafkaproof.spec.compose_service import ComposeBuild, ComposeRef, apply_compose, read_service

pytestmark = pytest.mark.unit


def _context(root: Path) -> ComposeBuild:
    (root / "app" / "target").mkdir(parents=True)
    (root / "Dockerfile").write_text("FROM kafkaproof/base:bookworm\nCOPY app/target/app.jar /app/\n")
    (root / "app" / "target" / "app.jar").write_bytes(b"jar v1")
    return ComposeBuild(str(root), str(root / "Dockerfile"), {"SERVICE": "app"})


def test_the_build_hash_follows_the_context_dockerfile_and_args_but_not_git(tmp_path):
    build = _context(tmp_path)
    first = build_hash(build)
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert build_hash(build) == first
    (tmp_path / "app" / "target" / "app.jar").write_bytes(b"jar v2")
    second = build_hash(build)
    assert second != first
    assert build_hash(ComposeBuild(build.context, build.dockerfile, {"SERVICE": "other"})) != second
    assert build_hash(ComposeBuild(build.context, build.dockerfile, build.args, target="runtime")) != second


def test_a_compose_definition_becomes_the_containers_docker_run(tmp_path, monkeypatch):
    section = parse_application({
        "services": [{"name": "signup", "compose_service": {"file": "c.yml", "service": "signup"},
                      "env": {"BOOTSTRAP": "{bootstrap}"}, "ready": {"log": "Started"}}],
        "drive": {"request": {"url": "http://127.0.0.1:9/e"}, "rate": 1, "messages": 1},
        "identity": {"key": True}}, "s: application", tmp_path)
    definition = read_service({"services": {"signup": {
        "image": "team/signup:1", "entrypoint": ["tini", "--", "java"], "command": "-jar app.jar --p={port}",
        "working_dir": "/srv", "user": "app", "environment": {"LEVEL": "info"}, "ports": ["8080"]}}},
        ComposeRef(str(tmp_path / "c.yml"), "signup"), {}, str, "s")
    spec = apply_compose(section.services[0], definition, "s")
    calls = []
    monkeypatch.setattr(app_containers.de, "docker", lambda *args, **kw: calls.append(args))
    fleet = ContainerFleet([spec], {"signup": "team/signup:1"}, tmp_path, "r1",
                           ContainerTarget("kp-x", "kp-x_net", "10.0.0.2:9092"), sources={"signup": definition.source()})
    inst = fleet._new_instance(spec, 0, 40001, {"bootstrap": "10.0.0.2:9092", "port": "8080"}, tmp_path / "s.log")
    fleet._launch(inst)
    run = calls[-1]
    assert run[run.index("--entrypoint") + 1] == "tini" and run[run.index("--workdir") + 1] == "/srv"
    assert run[run.index("--user") + 1] == "app" and "127.0.0.1:40001:8080" in run
    assert {"LEVEL=info", "BOOTSTRAP=10.0.0.2:9092"} <= set(run)
    assert run[run.index("team/signup:1"):] == ("team/signup:1", "--", "java", "-jar", "app.jar", "--p=8080")
    assert fleet.manifest()["images"]["signup"]["compose"]["service"] == "signup"
