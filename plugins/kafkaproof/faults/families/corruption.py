"""Corruption at rest (`file_corrupt`): files of one kind in each target node's log directory with bits flipped
or cut short (cluster/corrupt.py). `when: stopped` kills the nodes first and starts them at the heal (they
recover from what is on disk); `when: running` corrupts under the running broker and is over at once. Nothing
heals the data. A majority of a partition's replicas (of the KRaft voters, for `snapshot`) is refused here
again, against the replicas at injection, unless `allow_majority` (docs/corruption.md)."""
from __future__ import annotations

import contextlib
import random

from ...cluster.corrupt import choose_files, corrupt_files
from ...errors import ClusterError, FaultError
from ...spec.corruption import is_majority, majority_refusal, param
from ...spec.fault_families import CORRUPTION
from ...spec.faults import FaultSpec
from .base import FaultHandler, Injection


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
                files = choose_files(log_dir, params["file"], topic, partition, param(params, "segment"))
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
