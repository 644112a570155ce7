"""Disk faults: rules of the diskfs under each target node's log directory (cluster/disk.py) that fail or
slow operations or fill the disk, removed at heal; the heal also starts a node the failing disk made stop
(Kafka halts a broker whose every log directory failed). `power_loss` kills the nodes at once and drops
every write since a file's last fsync; they stay down until the heal (docs/disk.md)."""
from __future__ import annotations

import contextlib

from ...cluster.heal import remove_disk_rules
from ...errors import FaultError
from ...spec.fault_families import DISK
from ...spec.faults import FaultSpec, disk_rule
from .base import FaultHandler, Injection


class DiskHandler(FaultHandler):
    family = DISK

    def inject(self, injector, spec: FaultSpec, nodes: list[int], fault_id: str) -> Injection:
        cluster = injector.cluster
        if spec.kind == "power_loss":
            lost = cluster.power_loss(nodes)
            return Injection({"restart": nodes}, {"node_states": {str(n): e.pop("node_state") for n, e in lost.items()},
                                                  "power_loss": {str(n): e for n, e in lost.items()}})
        rule = disk_rule(spec, fault_id)
        added = []
        try:
            for n in nodes:
                with cluster.disk_control(n) as control:
                    control.add_rule(rule)
                added.append([n, fault_id])
        except Exception as e:
            with contextlib.suppress(Exception):
                remove_disk_rules(cluster, added)
            raise FaultError(f"{spec.kind} on {spec.target}: the disk refused the rule: {e}") from e
        return Injection({"disk_rules": added, "restart": nodes}, {"disk_rule": rule})
