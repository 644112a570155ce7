"""Log-directory failure (JBOD): one of a broker's log directories (cluster.log_dirs >= 2, on diskfs) fails
every operation, as a dead disk of several would; Kafka marks it offline ("Stopped serving replicas in dir
...") and moves the leadership of its partitions to other replicas. The heal removes the diskfs rule and
bounces the broker, which brings the directory back and catches its replicas up (docs/disk.md)."""
from __future__ import annotations

import contextlib
from pathlib import Path

from ...cluster.heal import remove_disk_rules, undo
from ...errors import FaultError
from ...spec.fault_families import LOG_DIR
from ...spec.faults import FaultSpec
from ...spec.jbod import log_dir_name
from .base import FaultHandler, Injection

OFFLINE_LINE = "Stopped serving replicas in dir "  # Kafka's ReplicaManager, once a log directory failed


def offline_lines(log: Path, directory: str) -> int:
    """How often the broker's log says it stopped serving the replicas of `directory` (0 without a log)."""
    if not log.exists():
        return 0
    needle = OFFLINE_LINE + directory
    with open(log, errors="replace") as f:
        return sum(needle in line for line in f)


class LogDirHandler(FaultHandler):
    family = LOG_DIR

    def require(self, cluster, spec: FaultSpec) -> None:
        if int((cluster.state().config or {}).get("log_dirs", 1)) < 2:
            raise FaultError(f"{spec.kind}: the brokers of cluster {cluster.name!r} have one log directory; start "
                             f"it with several (scenario: cluster.log_dirs: 2)")

    def inject(self, injector, spec: FaultSpec, nodes: list[int], fault_id: str) -> Injection:
        cluster = injector.cluster
        chosen: dict[str, str] = {}
        before: dict[str, int] = {}
        added: list[list] = []
        try:
            for n in nodes:
                index = self._dir_index(injector, spec, n)
                directory = str(cluster.disk_mount(n) / log_dir_name(index))
                before[str(n)] = offline_lines(cluster.node_log(n), directory)
                with cluster.disk_control(n) as control:
                    control.add_rule({"id": fault_id, "action": "error", "op": "all", "errno": "EIO",
                                      "path": f"{log_dir_name(index)}/"})
                added.append([n, fault_id])
                chosen[str(n)] = directory
        except FaultError:
            with contextlib.suppress(Exception):
                remove_disk_rules(cluster, added)
            raise
        return Injection({"disk_rules": added, "restart": nodes}, {"log_dir": chosen, "offline_before": before},
                         params={"log_dir": chosen})

    @staticmethod
    def _dir_index(injector, spec: FaultSpec, node: int) -> int:
        """The log directory to fail on `node`: `dir`, else the one holding the partition (`partition`, else
        the one the target names, else 0) of the topic; FaultError when no directory holds it."""
        if "dir" in spec.params:
            return int(spec.params["dir"])
        target = spec.resolved_target
        topic, partition = injector.topic, int(spec.params.get("partition", 0))
        if "partition" not in spec.params and target.startswith(("leader:", "follower:", "followers:")):
            topic, partition = injector.topic_partition(target.split(":", 1)[1])
        mount = injector.cluster.disk_mount(node)
        held = sorted(p.parent.name for p in mount.glob(f"{log_dir_name('*')}/{topic}-{partition}"))
        if not held:
            raise FaultError(f"log_dir_failure on node {node}: none of its log directories holds {topic}-{partition}; "
                             f"give params.dir")
        return int(held[0].rsplit("-", 1)[1])

    def heal(self, cluster, recipe: dict) -> dict | None:
        """Read the broker's log for the evidence, remove the rule, and bounce the broker."""
        nodes = list(recipe.get("restart") or [])
        offline = {}
        for n in nodes:
            fault = next((f for f in cluster.active_faults() if [n, f["fault_id"]] in recipe.get("disk_rules", [])), None)
            directory = ((fault or {}).get("params") or {}).get("log_dir", {}).get(str(n))
            offline[str(n)] = offline_lines(cluster.node_log(n), directory) if directory else 0
        stats = remove_disk_rules(cluster, recipe.get("disk_rules") or [])
        for n in nodes:
            cluster.stop_node(n)
        undo(cluster, {"restart": nodes}, restart_nodes=True)
        return {**stats, "log_dir_offline": offline}
