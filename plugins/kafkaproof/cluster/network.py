"""Network namespaces, veth links, nftables rules and tc qdiscs for cluster nodes.

Layout (cluster slot `s`, node position `i`): namespace `kp<s>n<id>`, a veth pair
`kp<s>n<id>h` (root namespace) <-> `eth0` (node namespace) carrying the /30
`10.77.<s>.<4i>`; the root side is `.4i+1`, the node `.4i+2`. The root namespace
routes between the nodes (ip_forward), so broker-to-broker traffic crosses two
veths and the root namespace, where nothing else filters it. Faults install
nftables tables named `kp_<fault_id>` inside node namespaces; deleting the table
heals the fault.

Every function here acts only on names with the `kp` prefix it created, and on the network
namespaces of a compose cluster's containers named `docker:<container>`: those are entered by
a short-lived tools container sharing the target's network (`docker run --network
container:<name> --cap-add NET_ADMIN`, see `docker_engine.netns_command`), which works with an
engine on another machine too.
"""
from __future__ import annotations

import json
import logging
import os
import re
import shutil
import subprocess
import time

from ..errors import ClusterError, FaultError
from ..spec.cluster import NodeLink
from . import docker_engine

log = logging.getLogger(__name__)

NAME_RE = re.compile(r"^kp\d{1,3}n\d{1,4}$")
# A compose cluster's container whose network namespace is entered through the Docker engine.
ENGINE_NS_RE = re.compile(r"^docker:[a-z0-9][a-z0-9_.-]{0,127}$")
NFT_TABLE_RE = re.compile(r"^kp_[A-Za-z0-9_]+$")


def is_root() -> bool:
    return os.geteuid() == 0


def namespaces_supported() -> bool:
    """True when this process can create network namespaces (root with `ip` available)."""
    return is_root() and shutil.which("ip") is not None


def run(cmd: list[str], *, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess:
    """Run a system command, raising ClusterError with its stderr when it fails and `check`."""
    proc = subprocess.run(cmd, capture_output=True, text=True, input=input)
    if check and proc.returncode != 0:
        raise ClusterError(f"command failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr.strip()}")
    return proc


def _check_name(name: str) -> None:
    if not (NAME_RE.match(name) or ENGINE_NS_RE.match(name)):
        raise FaultError(f"refusing to touch {name!r}: not a kafkaproof namespace")


def create_link(link: NodeLink) -> None:
    """Create the namespace and veth pair of one node and address both ends."""
    _check_name(link.namespace)
    destroy_link(link)  # leftovers of a crashed run with the same slot
    ns = link.namespace
    run(["ip", "netns", "add", ns])
    run(["ip", "link", "add", link.veth_host, "type", "veth", "peer", "name", "eth0", "netns", ns])
    run(["ip", "addr", "add", f"{link.host_ip}/30", "dev", link.veth_host])
    run(["ip", "link", "set", link.veth_host, "up"])
    run(["ip", "-n", ns, "addr", "add", f"{link.node_ip}/30", "dev", "eth0"])
    run(["ip", "-n", ns, "link", "set", "lo", "up"])
    run(["ip", "-n", ns, "link", "set", "eth0", "up"])
    run(["ip", "-n", ns, "route", "add", "default", "via", link.host_ip])
    enable_forwarding()


def enable_forwarding() -> None:
    """Let the root namespace route between node namespaces."""
    with open("/proc/sys/net/ipv4/ip_forward") as f:
        if f.read().strip() == "1":
            return
    with open("/proc/sys/net/ipv4/ip_forward", "w") as f:
        f.write("1\n")


def destroy_link(link: NodeLink) -> None:
    """Delete a node's namespace (which deletes its veth end, rules and qdiscs) and the host veth."""
    _check_name(link.namespace)
    run(["ip", "link", "del", link.veth_host], check=False)
    for attempt in range(5):
        proc = run(["ip", "netns", "del", link.namespace], check=False)
        if link.namespace not in list_kafkaproof_namespaces():
            return
        # The name's bind mount can be busy for an instant (a process entering the namespace as it goes).
        log.warning("namespace %s is still there after `ip netns del` (%s); again in 0.2 s", link.namespace,
                    proc.stderr.strip() or f"exit {proc.returncode}")
        time.sleep(0.2)
    raise ClusterError(f"namespace {link.namespace} could not be deleted: {proc.stderr.strip()}; "
                       f"`ip netns del {link.namespace}` by hand, then `kafkaproof cluster down --all`")


def list_kafkaproof_namespaces() -> list[str]:
    """Names of existing namespaces that kafkaproof creates (by naming convention)."""
    proc = run(["ip", "netns", "list"], check=False)
    return [line.split()[0] for line in proc.stdout.splitlines() if line and NAME_RE.match(line.split()[0])]


def route_destinations() -> list[str]:
    """The destinations of every IPv4 route of this host's root namespace, in every table."""
    proc = run(["ip", "-j", "-4", "route", "show", "table", "all"], check=False)
    try:
        return [r["dst"] for r in json.loads(proc.stdout or "[]") if r.get("dst")]
    except (ValueError, TypeError):
        return []


def netns_prefix(namespace: str | None) -> list[str]:
    """Command prefix to run something inside `namespace` (empty for the root namespace)."""
    if namespace and ENGINE_NS_RE.match(namespace):
        return docker_engine.netns_command(namespace.split(":", 1)[1])
    return ["ip", "netns", "exec", namespace] if namespace else []


# --- a compose node's container: its network namespace named like a local node's ---

def attach_netns(container: str, ns_name: str) -> None:
    """Name the container's network namespace `ns_name` (`ip netns attach`), replacing a stale name.

    `ns_name` must follow this module's convention (`kp<slot>n<id>`), so the fault code that
    runs `ip netns exec <ns_name> nft ...` accepts it unchanged.
    """
    if not NAME_RE.match(ns_name):
        raise ClusterError(f"namespace name {ns_name!r} must look like kp<slot>n<node id>")
    if not namespaces_supported():
        raise ClusterError("attaching a container's network namespace needs root and iproute2")
    pid = docker_engine.container_pid(container)
    # A container started again lives in a new namespace; the old name would point at the dead one.
    run(["ip", "netns", "delete", ns_name], check=False)
    run(["ip", "netns", "attach", ns_name, str(pid)])
    log.info("container %s (pid %d): network namespace attached as %s", container, pid, ns_name)


def detach_netns(ns_name: str) -> None:
    """Remove a namespace name made by `attach_netns` (the container keeps its namespace)."""
    if not NAME_RE.match(ns_name):
        raise ClusterError(f"refusing to delete namespace {ns_name!r}: not a kafkaproof name")
    run(["ip", "netns", "delete", ns_name], check=False)


def host_veth(container: str) -> str:
    """Name of the host-side veth of the container's eth0 (for tc on the host side)."""
    pid = docker_engine.container_pid(container)
    inner = run(["nsenter", "-t", str(pid), "-n", "ip", "-j", "link", "show", "eth0"])
    links = json.loads(inner.stdout or "[]")
    peer = links[0].get("link_index") if links else None
    if not peer:
        raise ClusterError(f"container {container} has no veth eth0 (network mode host or none?)")
    for link in json.loads(run(["ip", "-j", "link", "show"]).stdout or "[]"):
        if link.get("ifindex") == peer:
            return link["ifname"]
    raise ClusterError(f"no host interface with index {peer} (the peer of {container}'s eth0)")


# --- nftables ---------------------------------------------------------------

def with_counter(rule: str) -> str:
    """Pure: a drop rule that also counts what it dropped (the heal reads it: did the fault take effect?)."""
    return rule[: -len("drop")] + "counter drop" if rule.endswith(" drop") and "counter" not in rule else rule


def nft_ruleset(table: str, input_rules: list[str], output_rules: list[str]) -> str:
    """Pure: an nft script creating `table` with filter chains holding the given rules (each counting its drops)."""
    if not NFT_TABLE_RE.match(table):
        raise FaultError(f"bad nft table name {table!r}")
    lines = [f"table inet {table} {{",
             "  chain input { type filter hook input priority -10; policy accept;"]
    lines += [f"    {with_counter(r)}" for r in input_rules]
    lines += ["  }", "  chain output { type filter hook output priority -10; policy accept;"]
    lines += [f"    {with_counter(r)}" for r in output_rules]
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


def nft_apply(namespace: str, script: str) -> None:
    """Load an nft script inside a node namespace."""
    _check_name(namespace)
    if NAME_RE.match(namespace) and not shutil.which("nft"):
        raise FaultError("network faults need nftables: apt-get install nftables")
    proc = run(netns_prefix(namespace) + ["nft", "-f", "-"], check=False, input=script)
    if proc.returncode != 0:
        raise FaultError(f"nft rejected the rules in {namespace}: {proc.stderr.strip()}\n{script}")


def nft_delete_table(namespace: str, table: str) -> None:
    """Delete one of our nft tables in a namespace; a missing table or namespace is fine."""
    _check_name(namespace)
    if not NFT_TABLE_RE.match(table):
        raise FaultError(f"refusing to delete nft table {table!r}: not created by kafkaproof")
    run(netns_prefix(namespace) + ["nft", "delete", "table", "inet", table], check=False)


def nft_dropped(namespace: str, table: str) -> dict[str, int]:
    """Packets and bytes the counters of one of our tables dropped so far ({} if the table is gone)."""
    _check_name(namespace)
    if not NFT_TABLE_RE.match(table):
        raise FaultError(f"refusing to read nft table {table!r}: not created by kafkaproof")
    proc = run(netns_prefix(namespace) + ["nft", "-j", "list", "table", "inet", table], check=False)
    if proc.returncode != 0:
        return {}
    return counters_from_json(proc.stdout)


def counters_from_json(text: str) -> dict[str, int]:
    """Pure: summed `counter` packets/bytes of an `nft -j list table` document."""
    packets = bytes_ = 0
    for item in json.loads(text).get("nftables", []):
        for expr in (item.get("rule") or {}).get("expr", []):
            counter = expr.get("counter") if isinstance(expr, dict) else None
            if counter:
                packets += int(counter.get("packets", 0))
                bytes_ += int(counter.get("bytes", 0))
    return {"packets": packets, "bytes": bytes_}


def nft_tables(namespace: str) -> list[str]:
    """Names of the nft tables inside a node namespace."""
    _check_name(namespace)
    proc = run(netns_prefix(namespace) + ["nft", "list", "tables"], check=False)
    return [line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("table")]


# --- tc (bandwidth) ---------------------------------------------------------

def tbf_args(rate_kbit: int, burst_kbit: int | None = None, latency_ms: int = 500) -> list[str]:
    """Pure: tc arguments of a token bucket filter limiting to `rate_kbit`."""
    if rate_kbit <= 0:
        raise FaultError(f"bandwidth rate must be > 0 kbit/s, got {rate_kbit}")
    burst = burst_kbit or max(32, rate_kbit // 50)
    return ["tbf", "rate", f"{rate_kbit}kbit", "burst", f"{burst}kbit", "latency", f"{latency_ms}ms"]


def _tc_ends(link: NodeLink, *args: str) -> list[list[str]]:
    """`tc ARGS dev <if>` at both ends of a node's link: its eth0, and the host veth toward it when
    there is one here (a container entered through the engine has only its own end)."""
    _check_name(link.namespace)
    cmds = [netns_prefix(link.namespace) + ["tc", *args, "dev", "eth0"]]
    if link.veth_host:
        cmds.append(["tc", *args, "dev", link.veth_host])
    return cmds


def tc_limit(link: NodeLink, rate_kbit: int) -> None:
    """Limit a node's bandwidth: egress of its eth0 and of the host veth toward it (both ways)."""
    for cmd in _tc_ends(link, "qdisc", "replace"):
        run(cmd + ["root", *tbf_args(rate_kbit)])


def tc_stats(link: NodeLink) -> dict[str, int]:
    """What our token buckets on a node's link held back so far: overlimits and drops, summed over both ends."""
    total = {"overlimits": 0, "dropped": 0}
    for cmd in _tc_ends(link, "-s", "-j", "qdisc", "show"):
        proc = run(cmd, check=False)
        if proc.returncode == 0:
            for k, v in qdisc_stats_from_json(proc.stdout).items():
                total[k] += v
    return total


def qdisc_stats_from_json(text: str) -> dict[str, int]:
    """Pure: overlimits and drops of the tbf qdiscs in a `tc -s -j qdisc show` document."""
    out = {"overlimits": 0, "dropped": 0}
    for q in json.loads(text or "[]"):
        if q.get("kind") == "tbf":
            out["overlimits"] += int(q.get("overlimits", 0))
            out["dropped"] += int(q.get("drops", 0))
    return out


def tc_limited(link: NodeLink) -> bool:
    """Whether a token bucket of ours still limits a node's link (at either end)."""
    for cmd in _tc_ends(link, "-j", "qdisc", "show"):
        proc = run(cmd, check=False)
        if proc.returncode == 0 and any(q.get("kind") == "tbf" for q in json.loads(proc.stdout or "[]")):
            return True
    return False


def tc_clear(link: NodeLink) -> None:
    """Remove our bandwidth limits from a node's link."""
    for cmd in _tc_ends(link, "qdisc", "del"):
        run(cmd + ["root"], check=False)
