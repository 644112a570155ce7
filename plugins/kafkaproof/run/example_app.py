"""The example application (`examples/signup-app/`): build its services' jars and the command lines that run them.

The example is a user's application, not part of kafkaproof: a Spring Boot sign-up service
(`POST /signups` -> `KafkaTemplate.send`) and a processor service (`@KafkaListener`, `GET /processed`),
configured only through Spring properties (see its README). kafkaproof treats it as a black box:
this module builds it and starts nothing.

It is built once per source hash with Maven (`mvn package` in a copy of the project, so nothing is
written under `examples/`) into `$KAFKAPROOF_CACHE/example-app/<hash>/<service>.jar`; Maven's
output goes to `build.log` beside the jars.
"""
from __future__ import annotations

import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Mapping

from ..cluster import install
from ..errors import InstallError
from ..paths import cache_dir, file_lock, share_dir
from .maven import run_maven, tree_hash

log = logging.getLogger(__name__)

APP = "signup-app"
SERVICES = ("signup-service", "signup-processor")  # Maven modules; each builds target/<module>.jar
HEAP = "256m"
# A small host shared with the brokers: one GC thread, C1 only (Spring Boot starts in about half the time).
JVM_OPTS = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:+ExitOnOutOfMemoryError", "-XX:-UsePerfData",
            "-Djava.awt.headless=true")
_SKIPPED_DIRS = {"target"}


def app_dir() -> Path:
    """The example's Maven project: `examples/signup-app/` of the checkout or of the installed package (read only)."""
    path = share_dir("examples") / APP
    if not (path / "pom.xml").is_file():
        raise InstallError(f"{path}/pom.xml not found: the example application's Maven project is incomplete")
    return path


def _source_files(root: Path) -> list[Path]:
    """The project's files, without build outputs (`target/`) and dotfiles, sorted."""
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIPPED_DIRS and not d.startswith("."))
        files += [Path(dirpath) / f for f in filenames if not f.startswith(".")]
    return sorted(files)


def source_hash(root: Path | None = None) -> str:
    """Pure over the files: a hash of every file of the project but build outputs (names and contents)."""
    root = root or app_dir()
    return tree_hash(root, _source_files(root))


def app_cache_dir() -> Path:
    return cache_dir() / "example-app"


def _jars(home: Path) -> dict[str, Path]:
    return {service: home / f"{service}.jar" for service in SERVICES}


def build(force: bool = False) -> dict[str, Path]:
    """Build the example's jars unless this source hash is built; returns service name -> runnable jar.

    Idempotent and safe to call from several processes at once (a file lock). The first build on a
    machine downloads Spring Boot's dependencies (~100 MB) into `~/.m2`.
    """
    root = app_dir()
    digest = source_hash(root)
    home = app_cache_dir() / digest
    jars = _jars(home)
    if all(j.exists() for j in jars.values()) and not force:
        return jars
    with file_lock(app_cache_dir() / ".lock"):
        if all(j.exists() for j in jars.values()) and not force:
            return jars
        log.info("building the example application (sources %s) into %s", digest, home)
        home.mkdir(parents=True, exist_ok=True)
        build_dir = Path(tempfile.mkdtemp(prefix="build-", dir=home))
        try:
            project = build_dir / APP
            for f in _source_files(root):
                dest = project / f.relative_to(root)
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(f, dest)
            run_maven(["package"], project, "building the example application", log_path=home / "build.log")
            for service, jar in jars.items():
                built = project / service / "target" / f"{service}.jar"
                if not built.exists():
                    raise InstallError(f"Maven succeeded but wrote no {built} (see {home / 'build.log'})")
                tmp = jar.with_suffix(".jar.tmp")
                shutil.copyfile(built, tmp)
                os.replace(tmp, jar)
        finally:
            shutil.rmtree(build_dir, ignore_errors=True)
        log.info("example application built: %s", ", ".join(str(j) for j in jars.values()))
    return jars


def command(jar: Path, properties: Mapping[str, object] = (), heap: str = HEAP) -> list[str]:
    """The command line running one service's jar with Spring properties given as `--name=value` arguments."""
    props = dict(properties)
    return [install.java_binary(), f"-Xmx{heap}", "-Xms64m", *JVM_OPTS, "-jar", str(jar),
            *(f"--{name}={value}" for name, value in props.items())]
