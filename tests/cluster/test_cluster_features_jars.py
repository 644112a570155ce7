"""spec/cluster_features.py's table against the Kafka releases' own jars (issue 44.2): every listed feature
formats at its highest level, one level more is refused by `kafka-storage format`, and the defaults are the
release's `kafka-features version-mapping`. No broker starts; each check is one storage-tool JVM."""
from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from kafkaproof.cluster.install import ensure_kafka
from kafkaproof.faults.families.rolling import feature_levels
from kafkaproof.spec.cluster_features import RELEASE_FEATURES, format_args

pytestmark = [pytest.mark.cluster, pytest.mark.long]

VERSIONS = {"3.9": "3.9.2", "4.3": "4.3.1"}
QUICK = ("-XX:TieredStopAtLevel=1",)


def _format(version: str, workdir: Path, features: dict[str, int]) -> tuple[int, str]:
    workdir.mkdir(parents=True)
    (workdir / "s.properties").write_text(
        "process.roles=controller\nnode.id=1\ncontroller.quorum.voters=1@localhost:9093\n"
        f"listeners=CONTROLLER://:9093\ncontroller.listener.names=CONTROLLER\nlog.dirs={workdir}/data\n")
    cmd = ensure_kafka(version).java_command(
        "kafka.tools.StorageTool", "format", "-t", "q1w2e3r4t5y6u7i8o9p0aa", "-c", str(workdir / "s.properties"),
        *format_args(features, version), heap="128m", jvm_opts=QUICK)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    return proc.returncode, proc.stdout + proc.stderr


@pytest.mark.parametrize("release", sorted(RELEASE_FEATURES))
def test_the_table_is_what_the_release_formats(release, tmp_path):
    version = VERSIONS[release]
    known = RELEASE_FEATURES[release]
    cases = [("highest", dict(known.highest), 0)]
    cases += [(f"{name}+1", {name: top + 1}, 1) for name, top in known.highest.items()]
    cases += [("elr on", {"eligible.leader.replicas.version": 1}, 1)] if "eligible.leader.replicas.version" \
        not in known.highest else []
    with ThreadPoolExecutor(max_workers=3) as pool:
        results = list(pool.map(lambda c: _format(version, tmp_path / c[0], c[1]), cases))
    for (label, features, rc), (got, out) in zip(cases, results):
        assert (got == 0) == (rc == 0), f"{version} {label} {features}: rc {got}\n{out[-800:]}"


def test_the_defaults_are_the_releases_version_mapping():
    dist = ensure_kafka(VERSIONS["4.3"])
    for release, known in RELEASE_FEATURES.items():
        proc = subprocess.run(dist.java_command("org.apache.kafka.tools.FeatureCommand", "--bootstrap-server",
                                                "localhost:1", "version-mapping", "--release-version", release,
                                                heap="128m", jvm_opts=QUICK), capture_output=True, text=True,
                              timeout=120)
        levels = feature_levels(proc.stdout)
        assert {k: levels[k] for k in known.default} == dict(known.default), proc.stdout
