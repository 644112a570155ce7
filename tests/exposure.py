"""Who listens where: the host's listening sockets (`ss -Hltunp`), and those of kafkaproof's processes bound
beyond loopback and kafkaproof's own subnets (issue 37: listeners only where they must be).

`Survey` samples the sockets in a thread while a run goes on (a proxy lives seconds), keeping those of
"our" processes: the test's own descendants and every process a cluster's state file records (proxies,
brokers, disks, which outlive the process that started them), and their descendants.

    with Survey() as survey:
        ScenarioRun(...).execute()
    assert not survey.exposed(), survey.report()
"""
from __future__ import annotations

import ipaddress
import json
import os
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

from kafkaproof.paths import state_dir
from kafkaproof.spec.cluster import COMPOSE_SUBNET_PREFIX, SUBNET_PREFIX

#: Where kafkaproof may listen: loopback, and its own subnets (node links, compose bridges).
ALLOWED = (ipaddress.ip_network("127.0.0.0/8"), ipaddress.ip_network("::1/128"),
           ipaddress.ip_network(f"{SUBNET_PREFIX}.0.0/16"), ipaddress.ip_network(f"{COMPOSE_SUBNET_PREFIX}.0.0/16"))


@dataclass(frozen=True)
class Listener:
    """One listening socket: protocol, local address (`*` for a wildcard), port, the pids holding it."""

    proto: str
    address: str
    port: int
    pids: tuple[int, ...]
    process: str

    def __str__(self) -> str:
        return f"{self.proto} {self.address}:{self.port} {self.process} pids {list(self.pids)}"


def parse_ss(text: str) -> list[Listener]:
    """Pure: the listeners of `ss -Hltunp` output (any order of tcp/udp lines; unknown lines skipped)."""
    found = []
    for line in text.splitlines():
        cols = line.split()
        if len(cols) < 5 or cols[0] not in ("tcp", "udp"):
            continue
        local = cols[4]
        host, _, port = local.rpartition(":")
        host = host.strip("[]").split("%")[0]
        if host.startswith("::ffff:") and "." in host:
            host = host[len("::ffff:"):]
        if host in ("", "0.0.0.0", "::"):
            host = "*"
        rest = " ".join(cols[6:])
        pids = tuple(sorted({int(p) for p in re.findall(r"pid=(\d+)", rest)}))
        names = sorted(set(re.findall(r'\("([^"]*)",pid=', rest)))
        found.append(Listener(cols[0], host, int(port) if port.isdigit() else 0, pids, ",".join(names)))
    return found


def is_allowed(address: str, allowed: Iterable[ipaddress._BaseNetwork] = ALLOWED) -> bool:
    """Pure: whether a listener's address is loopback or one of kafkaproof's subnets (a wildcard is not)."""
    if address == "*":
        return False
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return False
    return any(ip in net for net in allowed if net.version == ip.version)


def exposed(listeners: Iterable[Listener], ours: set[int]) -> list[Listener]:
    """Pure: the listeners of `ours` (pids) bound beyond loopback and kafkaproof's subnets."""
    return [l for l in listeners if set(l.pids) & ours and not is_allowed(l.address)]


def listeners() -> list[Listener]:
    """Every listening TCP and UDP socket of this network namespace, now."""
    out = subprocess.run(["ss", "-Hltunp"], capture_output=True, text=True, check=True).stdout
    return parse_ss(out)


def children() -> dict[int, list[int]]:
    """Parent pid -> child pids of every process, from /proc."""
    tree: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        tree.setdefault(ppid, []).append(int(entry.name))
    return tree


def recorded_pids(state: Path | None = None) -> set[int]:
    """Pids of the processes the clusters' state files record (nodes, proxies, disks)."""
    pids = set()
    for path in (state or state_dir()).glob("clusters/*/state.json"):
        try:
            st = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        for node in st.get("nodes", []):
            for ref in (node.get("process"), (node.get("proxy") or {}).get("process"),
                        (node.get("disk") or {}).get("process")):
                if isinstance(ref, dict) and ref.get("pid"):
                    pids.add(int(ref["pid"]))
    return pids


def our_pids(roots: Iterable[int] | None = None) -> set[int]:
    """This process, the processes the state files record, and all their descendants."""
    tree = children()
    todo = list(roots if roots is not None else {os.getpid(), *recorded_pids()})
    seen: set[int] = set()
    while todo:
        pid = todo.pop()
        if pid not in seen:
            seen.add(pid)
            todo += tree.get(pid, [])
    return seen


class Survey:
    """Samples the listeners of our processes every `interval_s` in a thread, while the `with` block runs."""

    def __init__(self, interval_s: float = 0.5, ours: Callable[[], set[int]] = our_pids) -> None:
        self.interval_s = interval_s
        self.ours = ours
        self.seen: set[Listener] = set()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="socket-survey", daemon=True)

    def sample(self) -> None:
        pids = self.ours()
        self.seen.update(l for l in listeners() if set(l.pids) & pids)
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval_s)

    def __enter__(self) -> "Survey":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def exposed(self) -> list[Listener]:
        """What our processes bound beyond loopback and kafkaproof's subnets, over the whole survey."""
        return sorted((l for l in self.seen if not is_allowed(l.address)), key=str)

    def report(self) -> str:
        """Every listener seen, one a line (for assertion messages)."""
        return f"{self.samples} samples:\n" + "\n".join(sorted(map(str, self.seen)))
