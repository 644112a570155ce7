"""Whether a cluster an earlier run used is as good as a fresh one for the next run (cluster reuse).

A pipeline may run the next scenario on the cluster the previous one left, when both ask for
the same cluster, only if nothing of the earlier run can reach the next: `survey` reads what
could be left (a node or proxy not running, a fault still recorded, an nftables table or a
token bucket of ours, a proxy rule, a partition whose ISR is short of its replicas, a broker
not registered, a run's worker still alive, a consumer group with members, the next run's
topic or group already there) and `isolation_problems` (pure) names each. An empty list is
the proof the run's manifest records; anything else means a fresh cluster.
"""
from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass, field

from ..errors import ClusterError
from . import network, procs
from .heal import PROXY_RULE_ID_RE

# Group states of a group without members (confluent_kafka ConsumerGroupState names).
IDLE_GROUP_STATES = frozenset({"EMPTY", "DEAD"})


@dataclass(frozen=True)
class Leftovers:
    """What an earlier run could have left on a cluster, as read just before the next run."""

    node_states: dict[int, str]
    proxy_states: dict[int, str] = field(default_factory=dict)
    recorded_faults: list[str] = field(default_factory=list)
    nft_tables: dict[int, list[str]] = field(default_factory=dict)  # kafkaproof's tables per node namespace
    bandwidth_limited: list[int] = field(default_factory=list)  # nodes whose link a token bucket limits
    proxy_rules: dict[int, list[str]] = field(default_factory=dict)
    brokers: list[int] = field(default_factory=list)
    registered_brokers: list[int] = field(default_factory=list)
    partitions: int = 0  # partitions of every topic, internal ones included
    not_in_sync: list[str] = field(default_factory=list)  # "topic-p: isr [..] of replicas [..]"
    live_workers: list[str] = field(default_factory=list)
    active_groups: dict[str, str] = field(default_factory=dict)  # group -> state, groups with members
    topic_exists: bool = False
    group_exists: bool = False
    metadata_error: str | None = None

    def to_json(self) -> dict:
        return {k: ({str(n): v for n, v in val.items()} if isinstance(val, dict) else val)
                for k, val in asdict(self).items()}


def isolation_problems(left: Leftovers, topic: str, group: str | None) -> list[str]:
    """Pure: why the next run on `topic` (consumer group `group`) would not start as on a fresh cluster."""
    problems = [f"node {n} is {s}" for n, s in sorted(left.node_states.items()) if s != "running"]
    problems += [f"the fault proxy of node {n} is {s}" for n, s in sorted(left.proxy_states.items()) if s != "running"]
    if left.recorded_faults:
        problems.append(f"faults still recorded: {', '.join(left.recorded_faults)}")
    problems += [f"node {n} still has nftables tables {', '.join(t)}" for n, t in sorted(left.nft_tables.items()) if t]
    problems += [f"a bandwidth limit is left on node {n}" for n in left.bandwidth_limited]
    problems += [f"the fault proxy of node {n} still has rules {', '.join(r)}"
                 for n, r in sorted(left.proxy_rules.items()) if r]
    if left.metadata_error:
        problems.append(f"metadata unreadable: {left.metadata_error}")
    missing = sorted(set(left.brokers) - set(left.registered_brokers))
    if missing:
        problems.append(f"brokers {missing} are not registered")
    if left.not_in_sync:
        shown = "; ".join(left.not_in_sync[:5]) + (" ..." if len(left.not_in_sync) > 5 else "")
        problems.append(f"{len(left.not_in_sync)} partitions not fully in sync: {shown}")
    if left.live_workers:
        problems.append(f"workers of an earlier run still alive: {', '.join(left.live_workers)}")
    problems += [f"consumer group {g} still has members ({s})" for g, s in sorted(left.active_groups.items())]
    if left.topic_exists:
        problems.append(f"topic {topic} already exists")
    if group and left.group_exists:
        problems.append(f"consumer group {group} already exists")
    return problems


def transient(left: Leftovers, topic: str, group: str | None) -> bool:
    """Pure: whether every problem of `left` is one a cluster gets over by itself (replicas catching up,
    a restarted broker registering, a dead member's session expiring), so a second look may find it clean."""
    settled = dataclasses.replace(left, registered_brokers=left.brokers, not_in_sync=[], metadata_error=None,
                                  active_groups={})
    return not isolation_problems(settled, topic, group)


def survey(cluster, topic: str, group: str | None, timeout_s: float = 10.0) -> Leftovers:
    """Read what an earlier run could have left on `cluster` (a local or external cluster backend)."""
    nodes = cluster.node_ids()
    node_states = {n: cluster.node_state(n) for n in nodes}
    proxy_states = {n: cluster.proxy_state(n) for n in cluster.proxy_ids()}
    nft, limited = {}, []
    for n in nodes:
        link = cluster.node_link(n)
        if link is None:
            continue
        nft[n] = [t for t in network.nft_tables(link.namespace) if network.NFT_TABLE_RE.match(t)]
        if network.tc_limited(link):
            limited.append(n)
    rules = {n: _proxy_rules(cluster, n) for n in proxy_states if proxy_states[n] == "running"}
    live = [f"{p['role']} of {e['owner']} (pid {p['pid']})" for e in procs.entries()
            if e.get("cluster") == cluster.name for p in procs.live(e)]
    left = dict(node_states=node_states, proxy_states=proxy_states,
                recorded_faults=[f["fault_id"] for f in cluster.active_faults()], nft_tables=nft,
                bandwidth_limited=limited, proxy_rules=rules, brokers=cluster.broker_ids(), live_workers=live)
    try:
        md = cluster.metadata(timeout_s=timeout_s)
        groups = _groups(cluster, timeout_s)
    except Exception as e:  # whatever cannot be read cannot be shown clean: a fresh cluster then
        return Leftovers(**left, metadata_error=f"{type(e).__name__}: {e}")
    not_in_sync, partitions = [], 0
    for tname, t in sorted(md.topics.items()):
        for p in sorted(t.partitions.values(), key=lambda p: p.id):
            partitions += 1
            if p.leader < 0 or sorted(p.isrs) != sorted(p.replicas):
                not_in_sync.append(f"{tname}-{p.id}: leader {p.leader}, isr {sorted(p.isrs)} of replicas "
                                   f"{sorted(p.replicas)}")
    return Leftovers(**left, registered_brokers=sorted(md.brokers), partitions=partitions, not_in_sync=not_in_sync,
                     active_groups={g: s for g, s in groups.items() if s not in IDLE_GROUP_STATES},
                     topic_exists=topic in md.topics, group_exists=bool(group) and group in groups)


def _proxy_rules(cluster, node_id: int) -> list[str]:
    client = cluster.proxy_control(node_id)
    try:
        return [str(r.get("id")) for r in client.rules() if PROXY_RULE_ID_RE.match(str(r.get("id")))]
    finally:
        client.close()


def _groups(cluster, timeout_s: float) -> dict[str, str]:
    """Every consumer group the cluster knows, with its state name."""
    result = cluster.admin().list_consumer_groups(request_timeout=timeout_s).result()
    if result.errors:
        raise ClusterError(f"listing consumer groups: {result.errors[0]}")
    return {g.group_id: getattr(g.state, "name", str(g.state)) for g in result.valid}
