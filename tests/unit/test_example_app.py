"""The example application's build function (kafkaproof.run.example_app) without building the real example:
its source hash, the command line, and a failed Maven build's error (real Maven on a broken project)."""
from __future__ import annotations

from pathlib import Path

import pytest

from kafkaproof.errors import InstallError
from kafkaproof.paths import share_dir
from kafkaproof.run import example_app

pytestmark = pytest.mark.unit


def test_the_example_is_a_data_directory_with_one_module_per_service():
    root = example_app.app_dir()
    assert root == share_dir("examples") / "signup-app"
    pom = (root / "pom.xml").read_text()
    assert "<artifactId>spring-boot-starter-parent</artifactId>" in pom
    for service in example_app.SERVICES:
        assert f"<module>{service}</module>" in pom
        assert f"<finalName>{service}</finalName>" in (root / service / "pom.xml").read_text()
    sources = "".join(p.read_text() for p in root.rglob("*.java"))
    assert "kafkaproof" not in sources.lower(), "the example is a user's application: it knows nothing of kafkaproof"


def test_source_hash_covers_sources_but_not_build_outputs_or_dotfiles(tmp_path):
    (tmp_path / "svc" / "src").mkdir(parents=True)
    (tmp_path / "pom.xml").write_text("<project/>")
    (tmp_path / "svc" / "src" / "A.java").write_text("class A {}")
    before = example_app.source_hash(tmp_path)
    (tmp_path / "svc" / "target").mkdir()
    (tmp_path / "svc" / "target" / "svc.jar").write_bytes(b"jar")
    (tmp_path / ".gitignore").write_text("target/\n")
    assert example_app.source_hash(tmp_path) == before
    (tmp_path / "svc" / "src" / "A.java").write_text("class A { int x; }")
    assert example_app.source_hash(tmp_path) != before


def test_command_runs_the_jar_with_a_small_heap_and_spring_properties():
    cmd = example_app.command(Path("/x/signup-service.jar"), {"server.port": 8085, "signup.answer": "after-ack"})
    assert cmd[1:3] == ["-Xmx256m", "-Xms64m"] and "-XX:+UseSerialGC" in cmd
    assert cmd[-4:] == ["-jar", "/x/signup-service.jar", "--server.port=8085", "--signup.answer=after-ack"]


def test_a_failed_build_names_its_log_and_builds_nothing(tmp_path, monkeypatch):
    project = tmp_path / "signup-app"
    project.mkdir()
    (project / "pom.xml").write_text("<project><modelVersion>4.0.0</modelVersion>")  # not even XML
    monkeypatch.setattr(example_app, "app_dir", lambda: project)
    monkeypatch.setenv("KAFKAPROOF_CACHE", str(tmp_path / "cache"))
    with pytest.raises(InstallError, match="building the example application failed.*whole output is in .*build.log"):
        example_app.build()
    home = tmp_path / "cache" / "example-app" / example_app.source_hash(project)
    assert "pom.xml" in (home / "build.log").read_text()
    assert not list(home.glob("*.jar")) and not list(home.glob("build-*"))
