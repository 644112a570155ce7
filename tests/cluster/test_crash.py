"""A crashed run leaves nothing running: the runner is SIGKILLed at random moments (one in the middle
of a rolling upgrade, a node out; one with a disk fault on diskfs), then `kafkaproof cluster down --all`
must leave no process, namespace, veth, nft table, proxy, FUSE mount or registry entry of it behind, and
the next run on the same host must pass."""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kafkaproof.cluster import network, procs, slots, state
from kafkaproof.cluster.disk import fuse_mounts_under

from support import needs_root

pytestmark = [pytest.mark.cluster, needs_root]

from support import REPO  # noqa: E402
SCENARIO = REPO / "tests" / "data" / "crash-lost-acks.yaml"
ROLLING = REPO / "tests" / "data" / "crash-rolling.yaml"
DISK = REPO / "tests" / "data" / "crash-disk.yaml"
# Where to kill (a line of the runner's log that starts the window, and how long after it), in which run.
KILL_POINTS = {
    "provisioning": (re.compile(r"\] provision$"), (0.5, 6.0), SCENARIO),
    "mid-fault": (re.compile(r"fault lost_ack-[0-9a-f]+: lost_ack on all"), (0.0, 1.5), SCENARIO),
    "drain": (re.compile(r"\] drain$"), (0.0, 0.4), SCENARIO),
    # a node of a rolling upgrade stopped and being started on the new version
    "mid-roll": (re.compile(r"node \d+ will start as Kafka 4\.3\.1"), (0.0, 1.0), ROLLING),
    # every node's log directory on diskfs, a slow-disk rule active
    "mid-disk": (re.compile(r"fault disk_latency-[0-9a-f]+: disk_latency on all"), (0.0, 1.5), DISK),
}
ROUNDS = ["provisioning", "mid-fault", "drain", "mid-roll", "mid-disk"]


def ours(marker: str) -> list[str]:
    """Command lines of live processes that mention `marker` (a state or runs directory of this test)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmd:
            found.append(f"{pid}: {cmd[:200]}")
    return found


def others(namespace: str) -> bool:
    """Whether `namespace` (kp<slot>n<id>) is of a cluster of another state directory on this host (a live
    claim of its slot names a state file outside ours): not this test's to judge, as `down --all` leaves it."""
    slot = int(namespace[2:namespace.index("n", 2)])
    return slots.claimed_by_others(slot, state.state_dir())


def leftovers(out: Path) -> dict[str, list[str]]:
    """Everything of ours still present on the host."""
    st = str(state.state_dir())
    root_nft = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout.split("\n")
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    found = {
        "processes": ours(st) + ours(str(out)),
        "namespaces": [ns for ns in network.list_kafkaproof_namespaces() if not others(ns)],
        "veths": sorted(v for v in set(re.findall(r"kp\d+n\d+h", links)) if not others(v[:-1])),
        "nft_tables": [t for t in root_nft if "kp_" in t],
        "clusters": state.list_clusters(),
        "fuse_mounts": fuse_mounts_under(state.state_dir()),
        "registered": [e["owner"] for e in procs.entries()],
    }
    return {k: v for k, v in found.items() if v}


def claims(result: dict) -> dict[str, dict | None]:
    """The host registry's claims of the slots of leftover namespaces (whose they are, for the message)."""
    names = result["leftovers"].get("namespaces", [])
    return {ns: slots.read_claim(int(ns[2:ns.index("n", 2)])) for ns in names}


def kafkaproof(*args: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kafkaproof", *args], capture_output=True, text=True, **kw)


def run_and_kill(out: Path, point: str, rng: random.Random) -> dict:
    """Start a run, SIGKILL its runner at `point`; returns what happened."""
    pattern, (lo, hi), scenario = KILL_POINTS[point]
    proc = subprocess.Popen([sys.executable, "-m", "kafkaproof", "run", str(scenario), "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 180
    seen = []
    for line in proc.stdout:
        seen.append(line.rstrip())
        if pattern.search(line.rstrip()) or time.monotonic() > deadline:
            break
    else:
        pytest.fail(f"the run ended before reaching {point}:\n" + "\n".join(seen[-15:]))
    time.sleep(rng.uniform(lo, hi))
    proc.send_signal(signal.SIGKILL)
    killed_at = time.monotonic()
    proc.wait(10)
    # Workers notice their runner's death by themselves (within a second), before anyone cleans up.
    workers = [p for p in ours(str(out)) if "kafkaproof.run.workload" in p]
    while workers and time.monotonic() - killed_at < 10:
        time.sleep(0.1)
        workers = [p for p in ours(str(out)) if "kafkaproof.run.workload" in p]
    return {"point": point, "workers_gone_s": round(time.monotonic() - killed_at, 2), "workers_left": workers,
            "last_line": seen[-1]}


def test_runner_killed_at_random_moments_leaves_nothing_behind(tmp_path):
    seed = int(os.environ.get("KAFKAPROOF_CRASH_SEED") or time.time())
    rng = random.Random(seed)
    rounds = []
    for i, point in enumerate(ROUNDS):
        out = tmp_path / f"round-{i}"
        result = run_and_kill(out, point, rng)
        down = kafkaproof("cluster", "down", "--all", timeout=180)
        assert down.returncode == 0, down.stderr
        result["leftovers"] = leftovers(out)
        rounds.append(result)
        print(f"round {i} ({point}): workers gone {result['workers_gone_s']} s after the kill; "
              f"leftovers after down --all: {result['leftovers'] or 'none'}")
        assert not result["workers_left"], f"seed {seed}: workers outlived their runner: {result}"
        assert not result["leftovers"], f"seed {seed}: left behind: {result}; slot claims: {claims(result)}"
    # The next run on the same host passes.
    out = tmp_path / "after"
    done = kafkaproof("run", str(SCENARIO), "--out", str(out), timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    (run_dir,) = out.iterdir()
    analysed = kafkaproof("analyze", str(run_dir), timeout=300)
    assert analysed.returncode == 0, analysed.stderr[-3000:]
    verdict = kafkaproof("validate", str(run_dir), timeout=300)
    assert verdict.returncode == 0, verdict.stdout + verdict.stderr[-2000:]
    assert not leftovers(out)
    print(f"seed {seed}: {len(rounds)} runs killed ({', '.join(r['point'] for r in rounds)}), 0 leftovers; "
          f"workers gone after the kill: max {max(r['workers_gone_s'] for r in rounds)} s; the next run passed")
