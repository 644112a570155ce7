"""Corruption at rest (`file_corrupt`): files of one kind in each target node's log directory with bits flipped
or cut short (cluster/corrupt.py). `when: stopped` kills the nodes first and starts them at the heal (they
recover from what is on disk); `when: running` corrupts under the running broker and is over at once. Nothing
heals the data. A majority of a partition's replicas (of the KRaft voters, for `snapshot`) is refused here
again, against the replicas at injection, unless `allow_majority` (docs/corruption.md).

A node started at the heal may refuse its damaged files: Kafka exits (a KRaft snapshot that fails its CRC, a
leader-epoch checkpoint it cannot read takes the only log directory offline). That is the fault's outcome, not
a failed heal: the heal records it (`start_refused`: node -> Kafka's own exception line) and leaves the node
down. A node that neither starts nor exits within START_WAIT_S is still a failed heal."""
from __future__ import annotations

import contextlib
import random
import re
import time

from ...cluster.base import SERVER_STARTED_LINE
from ...cluster.corrupt import choose_files, corrupt_files
from ...errors import ClusterError, FaultError
from ...spec.corruption import is_majority, majority_refusal, param
from ...spec.fault_families import CORRUPTION
from ...spec.faults import FaultSpec
from .base import FaultHandler, Injection

START_WAIT_S = 60.0  # a node started at the heal logs that it started, or exits, within this
# A Java exception line as Kafka logs it: `java.lang.IllegalStateException: ...`, `Caused by: ...`, or an
# ERROR/FATAL log line naming one.
_EXCEPTION = re.compile(r"\b(?:[a-z_$][\w$]*\.)+[A-Z][\w$]*(?:Exception|Error)\b")
_LOG_LEVEL = re.compile(r"\b(ERROR|FATAL)\b")


def refusal_line(log_text: str) -> str | None:
    """Pure: Kafka's own line saying why a node refused to start, from its log since the start: the first
    exception line of an ERROR or FATAL entry (or the first exception line at all), the entry's own line when it
    names none; None when the log has neither."""
    lines = log_text.splitlines()
    first_error = None
    for i, line in enumerate(lines):
        if not _LOG_LEVEL.search(line[:120]):
            continue
        first_error = first_error if first_error is not None else i
        if _EXCEPTION.search(line):
            return line.strip()[:400]
        for follow in lines[i + 1:i + 4]:  # the stack trace's first line under the entry
            if _EXCEPTION.match(follow.strip()):
                return follow.strip()[:400]
    exception = next((ln for ln in lines if _EXCEPTION.match(ln.strip())), None)
    if exception is not None:
        return exception.strip()[:400]
    return lines[first_error].strip()[:400] if first_error is not None else None


def await_start(cluster, node: int, timeout_s: float = START_WAIT_S, poll_s: float = 0.3) -> tuple[str, str | None]:
    """Wait until a node started at a heal logs that it started (`started`) or exits (`refused`, with Kafka's
    exception line); (`neither`, None) after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while True:
        text = cluster.node_log_since_start(node)
        if SERVER_STARTED_LINE in text:
            return "started", None
        if cluster.node_state(node) == "dead":
            text = cluster.node_log_since_start(node)  # what it wrote until it exited
            return "refused", refusal_line(text) or f"exited without an exception line; see {cluster.log_hint(node)}"
        if time.monotonic() > deadline:
            return "neither", None
        time.sleep(poll_s)


def target_partition(topic: str | None, given) -> tuple[str | None, int | None]:
    """Pure: the topic and partition a `partition` parameter names (<p> of the run's topic, or <topic>:<p>);
    no partition: every partition of the run's topic."""
    if given is None:
        return topic, None
    if isinstance(given, str):
        name, _, part = given.rpartition(":")
        return name, int(part)
    return topic, int(given)


class CorruptionHandler(FaultHandler):
    family = CORRUPTION

    def require(self, cluster, spec: FaultSpec) -> None:
        if not hasattr(cluster, "log_dir"):
            raise FaultError(cluster.unsupported_reason(spec.kind))

    def check_majority(self, cluster, spec: FaultSpec, nodes: list[int], topic: str | None,
                       partition: int | None) -> None:
        """FaultError when the nodes hold a majority of a chosen partition's replicas (of the KRaft voters, for
        `snapshot`) and the fault does not say `allow_majority`."""
        if spec.params.get("allow_majority"):
            return
        if spec.params["file"] == "snapshot":
            voters = cluster.controller_ids()
            damaged = len(set(nodes) & set(voters))
            if is_majority(damaged, len(voters)):
                raise FaultError(majority_refusal(damaged, len(voters), "KRaft voters"))
            return
        if topic is None:
            return  # no topic known: nothing to count against (the CLI without --topic)
        for p, info in sorted(cluster.partitions(topic).items()):
            if partition is not None and p != partition:
                continue
            damaged = len(set(nodes) & set(info["replicas"]))
            if is_majority(damaged, len(info["replicas"])):
                raise FaultError(majority_refusal(damaged, len(info["replicas"]), f"replicas of {topic}-{p}"))

    def inject(self, injector, spec: FaultSpec, nodes: list[int], fault_id: str) -> Injection:
        cluster, params = injector.cluster, spec.params
        topic, partition = target_partition(injector.topic, params.get("partition"))
        self.check_majority(cluster, spec, nodes, topic, partition)
        seed = int(params["seed"]) if "seed" in params else injector.rng.randrange(2 ** 32)
        rng = random.Random(seed)
        stopped = param(params, "when") == "stopped"
        if stopped:
            for n in nodes:
                cluster.stop_node(n, graceful=False)
        corrupted = {}
        try:
            for n in nodes:
                log_dir = cluster.log_dir(n)
                files = choose_files(log_dir, params["file"], topic, partition, param(params, "segment"),
                                     param(params, "checkpoint"), param(params, "metadata"))
                corrupted[str(n)] = corrupt_files(log_dir, files, params["mode"], rng, param(params, "probability"),
                                                  param(params, "range_bytes"), param(params, "fraction"))
        except OSError as e:
            if stopped:
                for n in nodes:
                    with contextlib.suppress(ClusterError, FaultError, OSError):
                        cluster.start_node(n)
            raise FaultError(f"file_corrupt on {spec.target}: {e}") from e
        effect = {"corrupted": corrupted, "seed": seed}
        if not stopped:
            return Injection({}, effect, params={"seed": seed}, over=True)
        return Injection({"restart": nodes}, {**effect, "node_states": self.node_states(cluster, nodes)},
                         params={"seed": seed})

    def heal(self, cluster, recipe: dict) -> dict | None:
        """Start the nodes killed for the corruption; a node that refuses its damaged files (exits) is the
        fault's outcome (`start_refused`), one that neither starts nor exits within START_WAIT_S a failed heal."""
        nodes = list(recipe.get("restart") or [])
        errors: list[str] = []
        for n in nodes:
            try:
                cluster.start_node(n)
            except (ClusterError, FaultError, OSError) as e:
                errors.append(f"node {n}: {e}")
        refused = {}
        for n in nodes:
            if any(e.startswith(f"node {n}:") for e in errors):
                continue
            outcome, line = await_start(cluster, n, START_WAIT_S)
            if outcome == "refused":
                refused[str(n)] = line
            elif outcome == "neither":
                errors.append(f"node {n} neither started nor exited within {START_WAIT_S:g}s; see "
                              f"{cluster.log_hint(n)}")
        if errors:
            raise FaultError("healing failed: " + "; ".join(errors))
        return {"start_refused": refused} if refused else None
