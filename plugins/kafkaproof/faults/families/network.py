"""Network faults: nftables rules in the nodes' network namespaces (isolate, one-way cut, partition, cut from
the clients, random packet loss) and a tc token bucket (bandwidth). The rules are planned purely
(`faults.network_rules`); healing deletes the tables and clears tc, reading what they held back first."""
from __future__ import annotations

from ...cluster import network
from ...cluster.heal import undo
from ...errors import FaultError
from ...spec.fault_families import NETWORK
from ...spec.faults import FaultSpec
from ..network_rules import (NetworkPlan, cut_clients_rules, isolate_rules, one_way_cut_rules, packet_loss_rules,
                             partition_rules, resolve_partition_groups)
from .base import FaultHandler, Injection


class NetworkHandler(FaultHandler):
    family = NETWORK

    def inject(self, injector, spec: FaultSpec, nodes: list[int], fault_id: str) -> Injection:
        cluster = injector.cluster
        links = {nid: link for nid in cluster.node_ids() if (link := cluster.node_link(nid)) is not None}
        table = "kp_" + fault_id.replace("-", "_")
        plan = self.plan(injector, spec, nodes, {nid: link.node_ip for nid, link in links.items()})
        applied: list[list[str]] = []
        try:
            for nid, (inp, out) in plan.rules.items():
                network.nft_apply(links[nid].namespace, network.nft_ruleset(table, inp, out))
                applied.append([links[nid].namespace, table])
            for nid in plan.tc_nodes:
                network.tc_limit(links[nid], int(spec.params["rate_kbit"]))
        except Exception:
            undo(cluster, {"nft": applied, "tc": [links[n].to_json() for n in plan.tc_nodes]}, False)
            raise
        heal = {"nft": applied, "tc": [links[n].to_json() for n in plan.tc_nodes]}
        if plan.groups is None:
            return Injection(heal)
        return Injection(heal, nodes=sorted(i for g in plan.groups for i in g),
                         params={"resolved_groups": plan.groups})

    def plan(self, injector, spec: FaultSpec, nodes: list[int], ips: dict[int, str]) -> NetworkPlan:
        """The rules of `spec` on `nodes` (node id -> its IP in `ips`), resolving what the spec names now."""
        cluster_ips = sorted(ips.values())
        if spec.kind == "isolate":
            return NetworkPlan({n: isolate_rules() for n in nodes})
        if spec.kind == "cut_clients":
            return NetworkPlan({n: cut_clients_rules(cluster_ips) for n in nodes})
        if spec.kind == "packet_loss":
            return NetworkPlan({n: packet_loss_rules(float(spec.params["percent"])) for n in nodes})
        if spec.kind == "bandwidth":
            return NetworkPlan({}, tc_nodes=nodes)
        if spec.kind == "cut":
            to = spec.params["to"]
            dest = None if to == "clients" else [ips[n] for n in injector.resolve(to)]
            return NetworkPlan({n: ([], one_way_cut_rules(dest, cluster_ips)) for n in nodes})
        if spec.kind == "partition":
            shape = spec.params["groups"]
            leader = controller = None
            if isinstance(shape, str) and shape.startswith("leader-minority:"):
                leader = injector.cluster.leader_of(*injector.topic_partition(shape.split(":", 1)[1]))
            if shape == "controller-minority":
                controller = injector.cluster.active_controller()
            groups = resolve_partition_groups(shape, sorted(ips), leader, controller, injector.rng)
            return NetworkPlan(partition_rules(groups, ips, bridge=shape == "bridge"), groups=groups)
        raise FaultError(f"not a network fault: {spec.kind}")
