"""Long runs, shortened: `kafkaproof stop` ends a run's workload early and the run still heals, drains and
accounts for every value it sent; a run whose runner was killed is salvaged from its streams, analysed,
and judged incomplete (never a pass)."""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import yaml

from kafkaproof.spec import ledger

from support import REPO

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(600)]


def soak_scenario(tmp_path: Path, name: str) -> Path:
    """The soak scenario at a test's scale: a one-minute bound, random faults every few seconds."""
    doc = yaml.safe_load((REPO / "scenarios" / "soak-random-faults.yaml").read_text())
    doc["name"] = name
    doc["producers"].update(rate=300, messages=18000, duration_s=60)
    doc["faults"]["random"].update(interval_s=[3, 5], duration_s=[1, 2], quiet_s=1, start_s=3, seed=11)
    doc["faults"]["random"]["kinds"] = [{"kind": "kill"}, {"kind": "disk_latency", "params": {"ms": 20, "op": "write"}}]
    doc.update(timeout_s=300, drain={"timeout_s": 60})
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def start_run(scenario: Path, out: Path) -> tuple[subprocess.Popen, Path]:
    """Start `kafkaproof run`; returns the process and its run directory once the workload runs."""
    proc = subprocess.Popen([sys.executable, "-m", "kafkaproof", "run", str(scenario), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        if "] workload" in line:
            break
    else:
        pytest.fail(f"the run ended before its workload: exit {proc.wait()}")
    (run_dir,) = out.iterdir()
    return proc, run_dir


def kafkaproof(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkaproof", *args], capture_output=True, text=True, timeout=timeout)


def test_a_stopped_run_heals_drains_and_accounts_for_every_value_it_sent(tmp_path):
    proc, run_dir = start_run(soak_scenario(tmp_path, "soak-stopped"), tmp_path / "runs")
    time.sleep(12)
    asked = kafkaproof("stop", str(run_dir), "--reason", "test: the host is needed")
    assert asked.returncode == 0, asked.stderr
    started = time.monotonic()
    out, _ = proc.communicate(timeout=240)
    assert proc.returncode == 0, out[-3000:]
    manifest = ledger.read_manifest(run_dir)
    assert manifest["status"] == "complete"
    assert manifest["stopped_early"]["reason"] == "test: the host is needed"
    assert 10 < manifest["stopped_early"]["at_s"] < 30
    sends = pq.read_table(ledger.table_path(run_dir, "sends")).to_pandas()
    audit = pq.read_table(ledger.table_path(run_dir, "audit")).to_pandas()
    acked = set(sends[sends["outcome"] == "ok"]["value_id"])
    assert 1000 < len(sends) < 18000, f"{len(sends)} sent of 18,000 planned"
    assert acked <= set(audit["value_id"]), "an acknowledged value of a stopped run is missing from the log"
    assert kafkaproof("stop", str(run_dir)).returncode == 1  # a finished run cannot be stopped
    print(f"stopped at t={manifest['stopped_early']['at_s']} s: {len(sends)} sent, {len(acked)} acknowledged, "
          f"all in the log; the run ended {time.monotonic() - started:.1f} s after the request")


@pytest.mark.long
def test_a_killed_run_is_salvaged_analysed_and_judged_incomplete(tmp_path):
    proc, run_dir = start_run(soak_scenario(tmp_path, "soak-killed"), tmp_path / "runs")
    time.sleep(10)
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    down = kafkaproof("cluster", "down", "--all")
    assert down.returncode == 0, down.stderr
    salvaged = kafkaproof("run", "--salvage", str(run_dir))
    assert salvaged.returncode == 0, salvaged.stderr[-2000:]
    manifest = ledger.read_manifest(run_dir)
    assert manifest["status"] == "incomplete" and manifest["salvaged"]["status_before"] == "running"
    assert manifest["counts"]["sends"] > 1000 and manifest["counts"]["audit"] == 0
    analysed = kafkaproof("analyze", str(run_dir))
    assert analysed.returncode == 0, analysed.stderr[-3000:]
    metrics = json.loads((run_dir / "analysis" / "metrics.json").read_text())
    assert metrics["counts"]["unseen"] > 0  # acknowledged, never checked against the log
    verdict = kafkaproof("validate", str(run_dir))
    assert verdict.returncode == 1 and "incomplete" in verdict.stdout + verdict.stderr
    assert kafkaproof("run", "--salvage", str(run_dir)).returncode == 0  # a second salvage changes nothing
