"""A local cluster's dynamic KRaft quorum (KIP-853): read it and change its voters with Kafka's own tool,
`kafka-metadata-quorum` (org.apache.kafka.tools.MetadataQuorumCommand), against the controllers' CONTROLLER
listeners (`--bootstrap-controller`).

`describe --status` gives the leader, its epoch and the voters with their directory ids; `add-controller` takes
the new controller's own server.properties (`--command-config`: the tool reads its node id, its directory id from
its metadata log directory and its controller endpoints); `remove-controller` takes `--controller-id` and
`--controller-directory-id`. Both return once the new voter set is committed. docs/quorum.md.
"""
from __future__ import annotations

import json
import logging
import re
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from ..errors import ClusterError, FaultError
from . import state

log = logging.getLogger(__name__)

TOOL = "org.apache.kafka.tools.MetadataQuorumCommand"
TOOL_TIMEOUT_S = 90.0
_FIELD_RE = re.compile(r"^(\w+):\s*(.*)$")


@dataclass
class QuorumStatus:
    """What `describe --status` says: the leader, its epoch, the voters (with directory ids) and the observers."""

    leader: int | None
    epoch: int
    voters: list[int]
    directories: dict[int, str] = field(default_factory=dict)
    observers: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"leader": self.leader, "epoch": self.epoch, "voters": self.voters, "observers": self.observers}


def _replicas(value: str) -> list[dict[str, Any]]:
    """Pure: a CurrentVoters/CurrentObservers value: a JSON list of {id, directoryId, ...} (kraft.version 1), or of
    plain ids (older tools, a static quorum)."""
    try:
        items = json.loads(value)
    except json.JSONDecodeError:
        return [{"id": int(i)} for i in re.findall(r"\d+", value)]
    return [item if isinstance(item, dict) else {"id": int(item)} for item in items]


def parse_status(text: str) -> QuorumStatus:
    """Pure: the output of `kafka-metadata-quorum describe --status`; ClusterError when it holds no leader line."""
    fields = {m.group(1): m.group(2).strip() for line in text.splitlines() if (m := _FIELD_RE.match(line.strip()))}
    if "LeaderId" not in fields or "CurrentVoters" not in fields:
        raise ClusterError(f"kafka-metadata-quorum describe gave no quorum status: {text.strip()[-300:]!r}")
    voters = _replicas(fields["CurrentVoters"])
    observers = _replicas(fields.get("CurrentObservers", "[]"))
    leader = int(fields["LeaderId"])
    return QuorumStatus(leader=leader if leader >= 0 else None, epoch=int(fields.get("LeaderEpoch", -1)),
                        voters=sorted(int(v["id"]) for v in voters),
                        directories={int(v["id"]): v["directoryId"] for v in voters if v.get("directoryId")},
                        observers=sorted(int(o["id"]) for o in observers))


def is_dynamic(cluster) -> bool:
    """Whether the cluster was formatted with a dynamic quorum (its state's node layout says so)."""
    try:
        return getattr(cluster, "backend", "") == "local" and cluster.state().config.get("quorum") == "dynamic"
    except ClusterError:
        return False


def spare_ids(cluster) -> list[int]:
    """The cluster's spare controllers (formatted as observers), from its state's node layout."""
    from ..spec.quorum import spare_ids as planned
    layout = cluster.state().config
    return planned(int(layout.get("controllers", 0)), int(layout.get("spare_controllers", 0)))


def controller_endpoints(cluster) -> str:
    """`--bootstrap-controller`: the CONTROLLER endpoints of every running controller node."""
    nodes = [n for n in cluster.state().nodes if n.is_controller and cluster.node_state(n.id) == "running"]
    if not nodes:
        raise FaultError(f"cluster {cluster.name!r} has no running controller to ask about its quorum")
    return ",".join(f"{n.host}:{n.controller_port}" for n in nodes)


def run_tool(cluster, *args: str, timeout_s: float = TOOL_TIMEOUT_S) -> str:
    """Run kafka-metadata-quorum with `args` after `--bootstrap-controller`; its stdout, FaultError with its last
    lines when it fails."""
    cmd = cluster.dist.java_command(TOOL, "--bootstrap-controller", controller_endpoints(cluster), *args, heap="128m",
                                    jvm_opts=("-XX:TieredStopAtLevel=1",))
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise FaultError(f"kafka-metadata-quorum {' '.join(args)} did not finish in {timeout_s:.0f}s") from None
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-6:])
        raise FaultError(f"kafka-metadata-quorum {' '.join(args)} failed (exit {proc.returncode}):\n{tail}")
    return proc.stdout


def describe(cluster) -> QuorumStatus:
    """The quorum now, as `describe --status` says."""
    return parse_status(run_tool(cluster, "describe", "--status"))


def wait_status(cluster, want, what: str, timeout_s: float) -> QuorumStatus:
    """Describe the quorum until `want(status)` holds (a leader among the voters, too); FaultError naming `what`
    and the last status after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    last: QuorumStatus | None = None
    error = ""
    while True:
        try:
            last = describe(cluster)
            if last.leader in last.voters and want(last):
                return last
        except (ClusterError, FaultError) as e:
            error = str(e)
        if time.monotonic() > deadline:
            seen = last.to_json() if last else error or "no status"
            raise FaultError(f"quorum: {what} not seen within {timeout_s:.0f}s (last: {seen})")
        time.sleep(0.5)


def add_controller(cluster, node_id: int) -> None:
    """Add a running observer controller as a voter (`add-controller` with its own server.properties)."""
    run_tool(cluster, "--command-config", str(cluster.node_dir(node_id) / "server.properties"), "add-controller")


def remove_controller(cluster, node_id: int, directory_id: str) -> None:
    """Remove a voter (`remove-controller --controller-id --controller-directory-id`)."""
    run_tool(cluster, "remove-controller", "--controller-id", str(node_id), "--controller-directory-id", directory_id)


def mark_changed(cluster) -> None:
    """Record that the cluster's quorum changed: like a rolled cluster, it is never reused by the next scenario."""
    with state.update_state(cluster.name) as st:
        st.rolled = True
