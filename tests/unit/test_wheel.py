"""A wheel of this checkout, installed (not editable) into a fresh virtualenv, is a working kafkaproof.

The wheel is built offline from a copy of the checkout's source files (setuptools writes `build/`
and `*.egg-info` next to the sources, and a stale `build/` would leak into the wheel). The new
virtualenv sees the dependencies through a `.pth` file naming this interpreter's site-packages, so
nothing is downloaded; kafkaproof itself comes only from the wheel. Everything runs from a directory
outside the checkout. A few seconds.
"""
from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from support import REPO

pytestmark = pytest.mark.unit

MAX_WHEEL_BYTES = 1_500_000  # ~0.45 MB today: more means build outputs or caches slipped in
# Made by builds, runs and tools in a checkout; never sources (the fallback when git is missing).
NOT_SOURCES = {".git", ".venv", ".cache", ".state", "runs", "build", "dist", "airflow_home", ".airflow",
               "__pycache__", ".pytest_cache", "spark-warehouse", "metastore_db"}


def copy_sources(dest: Path) -> Path:
    """The checkout's source files (tracked, and new ones git does not ignore) copied to `dest`."""
    try:
        listed = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                                capture_output=True, check=True, timeout=60).stdout.decode().split("\0")
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(REPO, dest, ignore=lambda _, names: [n for n in names if n in NOT_SOURCES
                                                              or n.endswith(".egg-info")])
        return dest
    for rel in filter(None, listed):
        source = REPO / rel
        if source.is_file():  # not a file deleted in the work tree but still tracked
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, dest / rel)
    return dest


def run(cmd: list[str], **kwargs) -> str:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=300, **kwargs)
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stderr[-3000:]}"
    return proc.stdout


def setuptools_version() -> tuple[int, ...]:
    return tuple(int(p) for p in importlib.metadata.version("setuptools").split(".")[:2] if p.isdigit())


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """Build the wheel, install it into a new virtualenv; its paths and an environment to run it in."""
    if setuptools_version() < (70, 1):
        pytest.fail(f"setuptools {importlib.metadata.version('setuptools')} here: building the wheel offline "
                    f"needs >= 70.1 (requirements.txt has it; `make setup` installs it)")
    tmp = tmp_path_factory.mktemp("wheel")
    src = copy_sources(tmp / "src")
    wheels = tmp / "wheels"
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
         "-w", wheels, src])
    (wheel,) = wheels.glob("kafkaproof-*.whl")
    venv = tmp / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", venv])
    purelib = Path(run([venv / "bin" / "python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
                   .strip())
    ours = sysconfig.get_paths()
    (purelib / "kafkaproof-test-deps.pth").write_text("\n".join(sorted({ours["purelib"], ours["platlib"]})) + "\n")
    run([sys.executable, "-m", "pip", "--python", venv / "bin" / "python", "install", "--no-deps", "--no-index", "-q",
         wheel])
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "KAFKAPROOF_SCENARIOS")}
    env.update(KAFKAPROOF_CACHE=str(tmp / "cache"), KAFKAPROOF_STATE=str(tmp / "state"),
               KAFKAPROOF_RUNS=str(tmp / "runs"))
    return {"wheel": wheel, "venv": venv, "purelib": purelib, "cwd": elsewhere, "env": env}


def test_the_wheel_holds_the_package_and_its_data_and_nothing_else(installed):
    wheel = installed["wheel"]
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert {n.split("/")[0] for n in names} == {"kafkaproof", wheel.name.split("-py3")[0] + ".dist-info"}
    assert "kafkaproof/_share/spark/analyze.py" in names and "kafkaproof/verdict/migrations/env.py" in names
    assert "kafkaproof/_share/spark/kafkaproof_analysis/job.py" in names  # the job's package, beside its entry
    assert not [n for n in names if "__pycache__" in n or "/target/" in n or n.endswith(".pyc")]
    assert wheel.stat().st_size < MAX_WHEEL_BYTES, f"{wheel.name}: {wheel.stat().st_size} bytes"


def test_the_installed_cli_lists_the_catalog_and_validates_a_packaged_scenario_outside_the_checkout(installed):
    cli = installed["venv"] / "bin" / "kafkaproof"
    listed = run([cli, "scenario", "list"], cwd=installed["cwd"], env=installed["env"]).splitlines()
    catalog = sorted((REPO / "scenarios").glob("*.yaml"))
    assert len(listed) == len(catalog) and any(line.split()[0] == "baseline" for line in listed)
    smoke = run([cli, "scenario", "list", "--tag", "smoke"], cwd=installed["cwd"], env=installed["env"])
    assert "baseline" in smoke
    validated = run([cli, "scenario", "validate", "baseline"], cwd=installed["cwd"], env=installed["env"])
    packaged = installed["purelib"] / "kafkaproof" / "_share" / "scenarios" / "baseline.yaml"
    assert validated.startswith(f"ok: {packaged} (baseline,"), validated


PROBE = """
import json, kafkaproof
from kafkaproof import paths
from kafkaproof.analysis import application_path, job_py_files
from kafkaproof.cluster.docker_engine import compose_file
from kafkaproof.run import java_driver
from kafkaproof.verdict.policy import POLICY_PATH, SUITES_DIR, load_policy
from kafkaproof.verdict.regression import REGRESSION_PATH, RegressionPolicy
load_policy(); RegressionPolicy.load(env={})
print(json.dumps({
    "package": kafkaproof.__file__, "repo_root": paths.repo_root() and str(paths.repo_root()),
    "share": str(paths.PACKAGED_SHARE),
    "files": [str(p) for p in (application_path(), POLICY_PATH, REGRESSION_PATH, java_driver.java_dir() / "pom.xml",
                               compose_file("kraft-3-combined"), paths.share_dir("scripts") / "docker-image.sh",
                               paths.scenarios_dir() / "baseline.yaml")],
    "suites": sorted(p.name for p in SUITES_DIR.glob("*.json")),
    "java_source_hash": java_driver.source_hash(),
    "py_files": str(job_py_files()),
}))
"""


def test_installed_the_package_finds_its_data_in_the_venv_and_none_in_a_checkout(installed):
    out = json.loads(run([installed["venv"] / "bin" / "python", "-c", PROBE], cwd=installed["cwd"],
                         env=installed["env"]))
    purelib = installed["purelib"]
    assert Path(out["package"]).is_relative_to(purelib), out["package"]
    assert out["repo_root"] is None
    for f in out["files"]:
        assert Path(f).is_relative_to(purelib / "kafkaproof" / "_share") and Path(f).is_file(), f
    assert out["suites"] == sorted(p.name for p in (REPO / "expectations" / "suites").glob("*.json"))
    from kafkaproof.run import java_driver  # the same sources: the checkout's driver build is reused
    assert out["java_source_hash"] == java_driver.source_hash(REPO / "java")
    # The job's package zipped for --py-files, in the installed package's cache: the checkout's bytes.
    from kafkaproof.analysis import job_py_files
    zipped = Path(out["py_files"])
    assert zipped.is_relative_to(installed["env"]["KAFKAPROOF_CACHE"]) and zipped.name == job_py_files().name
    assert zipped.read_bytes() == job_py_files().read_bytes()


def test_the_installed_spark_job_finds_its_package_beside_its_entry_file(installed):
    """Without --py-files (a local master), the wheel's spark/analyze.py imports the wheel's package."""
    entry = installed["purelib"] / "kafkaproof" / "_share" / "spark" / "analyze.py"
    helped = run([installed["venv"] / "bin" / "python", entry, "--help"], cwd=installed["cwd"], env=installed["env"])
    assert helped.startswith("usage:") and "--parallel" in helped


def test_the_packaged_data_is_the_checkouts_byte_for_byte(installed):
    share = installed["purelib"] / "kafkaproof" / "_share"
    packaged = sorted(p.relative_to(share).as_posix() for p in share.rglob("*")
                      if p.is_file() and "__pycache__" not in p.parts)  # pip compiles spark/analyze.py on install
    shared = [rel for rel in packaged if (REPO / rel).is_file()]
    assert shared == packaged, f"packaged but not in the checkout: {sorted(set(packaged) - set(shared))}"
    changed = [rel for rel in packaged if (share / rel).read_bytes() != (REPO / rel).read_bytes()]
    assert not changed, changed
    for top in ("scenarios", "expectations", "spark"):
        in_checkout = {p.relative_to(REPO).as_posix() for p in (REPO / top).rglob("*")
                       if p.is_file() and "__pycache__" not in p.parts}
        assert in_checkout <= set(packaged), f"left out of the wheel: {sorted(in_checkout - set(packaged))}"
