"""The `kafkaproof` command line."""
from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import Any

from . import logs, upgrade_cli
from .errors import KafkaproofError, ScenarioError

log = logging.getLogger(__name__)


def parse_kv(items: list[str] | None, what: str) -> dict[str, Any]:
    """Parse `key=value` pairs; values that look like JSON (numbers, true/false, lists) are decoded."""
    out: dict[str, Any] = {}
    for item in items or []:
        if "=" not in item:
            raise KafkaproofError(f"{what}: expected key=value, got {item!r}")
        key, raw = item.split("=", 1)
        try:
            out[key] = json.loads(raw)
        except json.JSONDecodeError:
            out[key] = raw
    return out


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}")
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


# --- cluster -----------------------------------------------------------------

def cmd_cluster_up(args) -> int:
    from .cluster import ClusterConfig, ExternalCluster, start_cluster
    bootstrap, connection = _existing_cluster(args.bootstrap, args.client_config)
    _check_proxy_listen(args.proxy_listen, bootstrap)
    if bootstrap:
        cluster = ExternalCluster.up(bootstrap, args.name, client_config=connection,
                                     proxy_host=args.proxy_listen or LOOPBACK)
        print(json.dumps(cluster.status(), indent=2) if args.json else cluster.bootstrap_servers())
        return 0
    cfg = ClusterConfig(name=args.name, brokers=args.brokers, controllers=args.controllers,
                        kafka_version=args.kafka_version, broker_config=parse_kv(args.config, "--config"),
                        network=args.network, heap=args.heap, jit=args.jit, proxy=args.proxy,
                        backend=args.backend, image=args.image, compose_file=args.compose_file, clock=args.clock,
                        disk=args.disk, log_dirs=args.log_dirs, client_security=args.security,
                        sasl_mechanism=args.sasl_mechanism, quorum=args.quorum,
                        spare_controllers=args.spare_controllers)
    cluster = start_cluster(cfg)
    if args.json:
        print(json.dumps(cluster.status(), indent=2))
    else:
        print(cluster.bootstrap_servers())
        if cluster.client_config():
            from .cluster import state
            print(f"client config: {state.cluster_dir(cluster.name) / 'client.properties'}", file=sys.stderr)
    return 0


def _check_proxy_listen(proxy_listen: str | None, bootstrap: str | None, attached: str | None = None) -> None:
    """--proxy-listen is where the proxies in front of an existing cluster or an attached compose project listen:
    refused without one."""
    if proxy_listen and not (bootstrap or attached):
        raise ScenarioError("--proxy-listen is for the fault proxies in front of an existing cluster or an attached "
                            "compose project: give --bootstrap (or --client-config with bootstrap.servers) or "
                            "--attach-compose-project too")


def _existing_cluster(bootstrap: str | None, client_config: str | None) -> tuple[str | None, dict | None]:
    """(bootstrap servers, connection config) of an existing cluster from `--bootstrap` and `--client-config FILE`
    (whose bootstrap.servers is used when there is no --bootstrap); (None, None) for none."""
    if not client_config:
        return bootstrap, None
    from .spec.connection import read_client_config
    from_file, connection, left_out = read_client_config(client_config)
    if left_out:
        log.info("--client-config %s: %s left out (scenario fields own them)", client_config, ", ".join(left_out))
    if not (bootstrap or from_file):
        raise ScenarioError(f"--client-config {client_config}: name the cluster with --bootstrap or a "
                            f"bootstrap.servers line in the file")
    return bootstrap or from_file, connection


def cmd_cluster_status(args) -> int:
    from .cluster import attach
    status = attach(args.name).status()
    if args.json:
        print(json.dumps(status, indent=2))
        return 0
    print(f"cluster {status['name']}: Kafka {status['kafka_version'] or '(existing cluster)'}, network {status['network']}, "
          f"active controller {status['active_controller']}")
    print(f"bootstrap: {status['bootstrap_servers']}" +
          (f" (fault proxies; direct: {status['direct_bootstrap']})" if status.get("proxy") else ""))
    if status.get("client_connection"):
        from .spec.connection import connection_text
        print(f"client connection: {connection_text(status['client_connection'])}")
    for n in status["nodes"]:
        proxy = n.get("proxy")
        roles = n["roles"] if isinstance(n["roles"], str) else ",".join(n["roles"])  # compose, attached: a list
        print(f"  node {n['id']:>3} {roles:<18} {n['address']:<22} pid {n['pid']} {n['state']}" +
              (f"  proxy {proxy['address']} pid {proxy['pid']} {proxy['state']} control {proxy['control']}"
               if proxy else ""))
    for topic, parts in status["topics"].items():
        for p, info in parts.items():
            print(f"  {topic}-{p}: leader {info['leader']} replicas {info['replicas']} isr {info['isr']}")
    for f in status["active_faults"]:
        print(f"  fault {f['fault_id']}: {f['kind']} {f['target']} nodes {f['nodes']} {f['params'] or ''}")
    if status["metadata_error"]:
        print(f"  (metadata unavailable: {status['metadata_error']})")
    return 0


def cmd_cluster_down(args) -> int:
    from .cluster import attach, down_all
    from .cluster.state import list_clusters
    if args.all:
        names = down_all()
        print(f"down: {', '.join(names) if names else 'nothing was running'}")
        return 0
    if args.name not in list_clusters():
        print(f"no cluster named {args.name!r} is running")
        return 0
    attach(args.name).down()
    print(f"cluster {args.name} is down")
    return 0


UNDERSTAND_FLAG = "--i-understand-faults-hit-this-cluster"


def cmd_cluster_inspect(args) -> int:
    """Read-only: the Kafka nodes of a running compose project, as attaching would find them."""
    from .cluster.attached import inspect_project
    found = inspect_project(args.compose_project)
    if args.json:
        print(json.dumps(found, indent=2))
        return 0
    print(f"compose project {found['project']} (engine {found['engine']}): cluster id {found['cluster_id']}, "
          f"clients use {found['bootstrap']}")
    for n in found["nodes"]:
        address = f"{n['host']}:{n['client_port']}" if n.get("client_port") else "(no client listener)"
        print(f"  node {n['id']:>3} {','.join(n['roles']):<18} {address:<22} container {n['container']} "
              f"(service {n['service']}, {n['convention']} environment"
              f"{', config file ' + n['config_file'] if n.get('config_file') else ''})")
    return 0


def cmd_cluster_attach(args) -> int:
    from .cluster.attached import AttachedCluster
    if not args.i_understand_faults_hit_this_cluster:
        raise KafkaproofError(f"attaching lets faults stop, kill and pause the containers of your compose project "
                              f"{args.compose_project} and cut their network: add {UNDERSTAND_FLAG} (`cluster "
                              f"inspect` only reads)")
    if args.proxy_listen and not args.proxy:
        raise KafkaproofError("--proxy-listen is where the fault proxies listen: add --proxy")
    cluster = AttachedCluster.up(args.compose_project, args.name, proxy=args.proxy,
                                 proxy_host=args.proxy_listen or LOOPBACK)
    print(json.dumps(cluster.status(), indent=2) if args.json else cluster.bootstrap_servers())
    return 0


def cmd_cluster_detach(args) -> int:
    from .cluster import attach
    from .cluster.state import list_clusters, load_state
    if args.name not in list_clusters():
        print(f"no cluster named {args.name!r} is attached")
        return 0
    if load_state(args.name).backend != "attached":
        raise KafkaproofError(f"cluster {args.name!r} is not an attached compose project: `kafkaproof cluster down "
                              f"--name {args.name}`")
    attach(args.name).down()
    print(f"detached {args.name}: faults healed, every container running, kafkaproof's topics and groups deleted")
    return 0


def cmd_install_kafka(args) -> int:
    from .cluster.install import ensure_kafka
    dist = ensure_kafka(args.kafka_version)
    print(f"Kafka {dist.version} ({dist.source}): {dist.libs}")
    return 0


# --- faults ------------------------------------------------------------------

def cmd_fault_inject(args) -> int:
    from .cluster import attach
    from .faults import FaultInjector, check_fault
    from .spec.faults import FaultSpec
    spec = check_fault(FaultSpec(args.kind, args.target or "", parse_kv(args.param, "--param")))
    cluster = attach(args.name)
    injector = FaultInjector(cluster, topic=args.topic)
    fault = injector.inject(spec)
    print(json.dumps(fault.to_json(), indent=2) if args.json else
          f"{fault.fault_id}: {fault.kind} on nodes {fault.nodes} (heal with `kafkaproof fault heal {fault.fault_id}`)")
    return 0


def cmd_fault_heal(args) -> int:
    from .cluster import attach
    from .faults import FaultInjector, heal_all
    cluster = attach(args.name)
    if args.all:
        healed = heal_all(cluster)
        print(f"healed: {', '.join(healed) if healed else 'no active faults'}")
        return 0
    if not args.fault_id:
        raise KafkaproofError("give a fault id or --all")
    active = [f["fault_id"] for f in cluster.active_faults()]
    if args.fault_id not in active:
        raise KafkaproofError(f"no active fault {args.fault_id!r}; active: {', '.join(active) or 'none'}")
    FaultInjector(cluster).heal(args.fault_id)
    print(f"healed {args.fault_id}")
    return 0


def cmd_fault_list(args) -> int:
    from .cluster import attach
    from .spec.fault_families import FAMILIES
    from .spec.faults import FAULT_KINDS, FAULT_PARAMS, PARTITION_SHAPES, TARGET_FORMS
    if args.kinds:
        def named(params) -> str:
            return ", ".join(f"{p}{'' if req else '?'}" for p, (_, req) in params.items())
        for kind in FAULT_KINDS:
            print(f"{kind:<16} params: {named(FAULT_PARAMS[kind]) or '-'}")
        print("targets: " + ", ".join(TARGET_FORMS))
        print("partition shapes: " + ", ".join(PARTITION_SHAPES) + ", or explicit groups [[1],[2,3]]")
        for family in FAMILIES.values():  # those on the run's own processes: in scenarios only
            if family.target_prefix:
                kinds = ", ".join(k + (f" (params: {named(p)})" if p else "") for k, p in family.kinds.items())
                print(f"in scenarios, on {', '.join(family.target_forms)}: {kinds}")
        return 0
    faults = attach(args.name).active_faults()
    if args.json:
        print(json.dumps(faults, indent=2))
    for f in faults if not args.json else []:
        print(f"{f['fault_id']}: {f['kind']} {f['target']} nodes {f['nodes']} since {f['start_wall']} {f['params'] or ''}")
    if not faults and not args.json:
        print("no active faults")
    return 0


# --- scenarios and runs --------------------------------------------------------

def _raise_interrupt(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def cmd_run(args) -> int:
    import signal
    from pathlib import Path
    from .paths import runs_dir
    from .run import RunOptions, ScenarioRun
    from .run.resolved import Overrides, resolve
    from .spec import scenario as scenario_mod
    if args.salvage:
        from .run.salvage import salvage_run
        manifest = salvage_run(Path(args.salvage))
        print(f"salvaged ({manifest['status']}): {args.salvage} ({manifest['error']})")
        return 0
    if args.replay:  # the scenario as that run ran it: its overrides applied, its random schedule drawn
        from .spec import ledger
        manifest = ledger.read_manifest(Path(args.replay))
        scn = scenario_mod.Scenario(manifest["scenario_name"], manifest.get("scenario_path") or "", manifest["scenario"])
    elif args.scenario:
        scn = scenario_mod.load(scenario_file(args.scenario))  # validated before anything starts
    else:
        print("kafkaproof run: give a SCENARIO file or catalog name, --replay RUN_DIR or --salvage RUN_DIR",
              file=sys.stderr)
        return 2
    signal.signal(signal.SIGTERM, _raise_interrupt)  # Airflow stops tasks with SIGTERM: clean up as for Ctrl-C
    bootstrap, connection = _existing_cluster(args.bootstrap, args.client_config)
    _check_proxy_listen(args.proxy_listen, bootstrap, args.attach_compose_project)
    if args.attach_compose_project and (bootstrap or args.backend):
        raise ScenarioError("--attach-compose-project uses your running compose project: leave out --bootstrap, "
                            "--client-config and --backend")
    resolved = resolve(scn, Overrides(messages=args.messages, kafka_version=args.kafka_version, brokers=args.brokers,
                                      bootstrap=bootstrap, backend=args.backend, upgrade_to=args.upgrade_to,
                                      seed=args.seed, attach_project=args.attach_compose_project,
                                      faults_hit_attached=args.i_understand_faults_hit_this_cluster or None))
    project = resolved.scenario.data["cluster"].get("attach")
    if project and not args.i_understand_faults_hit_this_cluster:
        raise ScenarioError(f"{scn.path}: the faults of this run hit your compose project {project}: add "
                            f"{UNDERSTAND_FLAG}")
    result = ScenarioRun(resolved, RunOptions(out=Path(args.out) if args.out else runs_dir(), client_config=connection,
                                              proxy_listen=args.proxy_listen or LOOPBACK)).execute()
    print(f"{result.status}: {result.run_dir}" + (f" ({result.error})" if result.error else ""))
    return 0 if result.status == "complete" else 1


def cmd_stop(args) -> int:
    from pathlib import Path
    from .run.stopping import request_stop
    from .spec import ledger
    manifest = ledger.read_manifest(Path(args.run_dir))
    if manifest.get("status") != "running":
        print(f"kafkaproof stop: {args.run_dir} is not running (status {manifest.get('status')!r})", file=sys.stderr)
        return 1
    path = request_stop(Path(args.run_dir), args.reason or "stopped by `kafkaproof stop`")
    print(f"asked the run to end its workload ({path}); it heals, drains and assembles what was sent")
    return 0


def cmd_batch(args) -> int:
    from datetime import datetime, timezone
    from . import batch, pipeline
    from .run.resolved import Overrides
    scenarios = pipeline.suite(names=args.scenario) if args.scenario else pipeline.suite(args.tag)
    if not scenarios:
        raise ScenarioError(f"no scenario has the tag {args.tag!r}: see `kafkaproof scenario list`")
    batch_id = args.batch_id or f"cli/{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    plan = batch.matrix_plan(scenarios, _client_list(args.clients),
                             Overrides(messages=args.messages, kafka_version=args.kafka_version, brokers=args.brokers,
                                       backend=args.backend))
    result = batch.run_batch(plan, batch_id)
    for s in result.summaries:
        notes = "; ".join((s.get("regressions") or []) + [f"warning: {w}" for w in s.get("warnings") or []])
        name = s["scenario"] + (f" ({s['label']})" if s.get("label") else "")
        print(f"  {name:<48} {s['verdict']:<6} {notes}")
    if plan.page == "clients":
        print(batch.differences_line(result.outcome.differences))
    print(f"summary report: {result.report}")
    print("reliability gate " + ("passed" if result.ok else "FAILED:\n  " + "\n  ".join(result.problems)))
    return 0 if result.ok else 1


def _client_list(text: str | None) -> list[str] | None:
    """`--clients librdkafka,java` as a list; ScenarioError naming what is allowed."""
    from .spec.clients import CLIENTS
    if not text:
        return None
    clients = [c.strip() for c in text.split(",") if c.strip()]
    bad = [c for c in clients if c not in CLIENTS]
    if bad or len(set(clients)) != len(clients):
        raise ScenarioError(f"--clients {text!r}: name each client once, from {', '.join(CLIENTS)}")
    return clients


def scenario_file(arg: str) -> str:
    """A scenario file given on the command line: the path when it exists, else the catalog's scenario
    of that name (so an installed kafkaproof validates `baseline` without knowing where the catalog is)."""
    from pathlib import Path
    from .paths import scenarios_dir
    if Path(arg).exists() or "/" in arg or arg.endswith((".yaml", ".yml")):
        return arg
    from .spec import scenario as scenario_mod
    catalog = scenarios_dir()
    by_name = {s.name: s.path for s in scenario_mod.load_catalog(catalog)}
    if arg not in by_name:
        raise ScenarioError(f"{arg}: no such file, and no scenario of that name in the catalog ({catalog}); "
                            f"see `kafkaproof scenario list`")
    return str(by_name[arg])


def cmd_scenario_validate(args) -> int:
    from .faults import check_scenario_faults
    from .run.client_config import check_client_config
    from .spec import scenario as scenario_mod
    for path in map(scenario_file, args.files):
        s = scenario_mod.load(path)
        check_scenario_faults(s)
        check_client_config(s)
        print(f"ok: {path} ({s.name}, {s.guarantee}, expect {s.expect['outcome']})")
    return 0


def cmd_scenario_list(args) -> int:
    from .paths import scenarios_dir
    from .spec import scenario as scenario_mod
    catalog = args.dir or scenarios_dir()
    selected = scenario_mod.load_catalog(catalog, args.tag)
    if not selected and args.tag:
        tags = sorted({t for s in scenario_mod.load_catalog(catalog) for t in s.data["tags"]})
        raise ScenarioError(f"{catalog}: no scenario has the tag {args.tag!r}; tags in the catalog: {', '.join(tags)}")
    for s in selected:
        detect = f" detect {','.join(s.expect['detect'])}" if s.expect["detect"] else ""
        print(f"{s.name:<36} {s.guarantee:<14} {','.join(s.data['tags']):<22}{detect}")
    return 0


def cmd_scenario_schema(args) -> int:
    from .spec.scenario import schema_json
    sys.stdout.write(schema_json())
    return 0


def cmd_analyze(args) -> int:
    from pathlib import Path
    from .analysis import analyze, analyze_locations
    from .analysis.submit import is_uri
    if is_uri(args.run_dir):  # on the Spark application's filesystem (HDFS, S3...): not read here
        analyze_locations([args.run_dir], **({"master": args.master} if args.master else {}))
        print(f"analysis written to {args.run_dir.rstrip('/')}/analysis")
        return 0
    metrics = analyze(Path(args.run_dir), master=args.master) if args.master else analyze(Path(args.run_dir))
    anomalies = {k: v for k, v in metrics.get("counts", {}).items() if v}
    print(f"analysis written to {Path(args.run_dir) / 'analysis'}; anomalies: "
          + (", ".join(f"{k}={v}" for k, v in sorted(anomalies.items())) or "none"))
    return 0


def cmd_validate(args) -> int:
    from pathlib import Path
    from .verdict.validation import format_result, validate
    result = validate(Path(args.run_dir))
    print(format_result(result))
    return 0 if result.status == "pass" else 1


def cmd_report(args) -> int:
    from pathlib import Path
    from . import report
    if args.night:
        path = report.write_night_report(Path(args.night))
    elif args.run_dir:
        path = report.write_run_report(Path(args.run_dir))
    else:
        raise KafkaproofError("give a run directory or --night DIR")
    print(path)
    return 0


def cmd_hosts(args) -> int:
    """The worker hosts of the DAGs (`kafkaproof.hosts`): queues and pools, or with --pools the pools to create
    (name, slots, description; tab-separated, what the setup gives `airflow pools set`)."""
    import os
    from .hosts import layout_from, settings_lookup
    layout = layout_from(settings_lookup(os.environ))
    for name, slots, description in layout.pools():
        if args.pools:
            print(f"{name}\t{slots}\t{description}")
    if not args.pools:
        for h in layout.hosts:
            print(f"{h.name:<24} queue {h.queue or '(default)':<28} pool {h.pool} ({h.slots} slot"
                  f"{'s' if h.slots > 1 else ''}){'' if h.up else ' DOWN'}")
        for scenario, host in sorted(layout.pins.items()):
            print(f"pinned: {scenario} -> {host}")
    return 0


def cmd_history(args) -> int:
    from .verdict import history
    rows = history.runs(scenario=args.scenario, kafka_version=args.kafka_version, limit=args.limit)
    if not rows:
        print(f"no runs recorded in {history.history_url()}")
        return 0
    print(history.format_trend(rows))
    return 0


# --- audit -------------------------------------------------------------------

def cmd_audit(args) -> int:
    """The audit of an existing cluster (`audit.run_audit`): findings, one line per topic, the proven fixes and
    the page; exit 0 pass, 1 fail, 2 error. With --discover-only, what discovery read (read-only), printed; with
    --plan-only, the audit's plan (classes, replica scenarios) written into --out and printed."""
    import time
    from pathlib import Path
    from .audit import AuditRequest, read_inputs, run_audit
    from .cluster.discovery import discover
    from .spec.audit_plan import plan_audit, plan_text, write_suite
    from .spec.client_settings import settings_text
    from .spec.inventory import inventory_text
    if not args.discover_only and not args.out:
        raise ScenarioError(f"kafkaproof audit{' --plan-only' if args.plan_only else ''}: name the directory the "
                            "scenarios, runs and report are written to with --out DIR")
    request = AuditRequest(
        out=Path(args.out or "."), bootstrap=args.bootstrap, client_config=args.client_config,
        app_config=args.app_config, app_format=args.app_format, app_role=args.app_role,
        topics=tuple(t.strip() for t in (args.topics or "").split(",") if t.strip()),
        faults=tuple(f.strip() for f in (args.faults or "").split(",") if f.strip()), max_classes=args.max_classes,
        fixes=not args.no_fixes, max_fix_tries=args.max_fix_tries)
    if not (args.discover_only or args.plan_only):
        result = run_audit(request)
        print(json.dumps(result.audit, indent=2, default=str) if args.json else "\n".join(result.lines))
        return result.exit_code
    bootstrap, connection, settings = read_inputs(request)
    inventory = discover(bootstrap, connection, topics=list(request.topics))
    if args.discover_only:
        if args.json:
            print(json.dumps({"inventory": inventory.to_dict(),
                              "client_settings": settings.to_dict(redact=True) if settings else None}, indent=2))
        else:
            print(inventory_text(inventory))
            if settings:
                print(settings_text(settings))
        return 0
    plan = plan_audit(inventory, settings, args.max_classes)
    written = write_suite(plan, args.out, time.time())
    if args.json:
        print(json.dumps({"plan": plan.to_dict(), "files": [str(p) for p in written]}, indent=2, default=str))
    else:
        print(plan_text(plan))
        print(f"wrote {len(written) - 1} scenario file(s) and audit-plan.json into {args.out}")
    return 0


# --- parser ------------------------------------------------------------------

CLIENT_CONFIG_HELP = ("an existing cluster's client properties file (librdkafka names, as `name=value` lines): how "
                      "to connect (security.protocol, sasl.*, ssl.*); its bootstrap.servers is used without "
                      "--bootstrap. Every client gets it: producers, consumers, kafkaproof's admin client, the drain")
LOOPBACK = "127.0.0.1"  # cluster.external.LOOPBACK, without importing the cluster package for the parser
PROXY_LISTEN_HELP = ("with --bootstrap, or an attached compose project's proxies: the IPv4 address the fault proxies "
                     f"listen on and send clients to (default {LOOPBACK}: this host only). Anyone who reaches it "
                     "reaches the cluster through them, faults included (docs/security.md)")

AUDIT_HELP = ("Audit an existing Kafka cluster (docs/audit.md): discover it, read-only (the Kafka release, nodes "
              "and roles, the broker settings that decide reliability, every topic's partitions, replication factor, "
              "min ISR, unclean election, retention and cleanup policy, the consumer groups) with the team's client "
              "settings (--app-config / --spring-config); group the topics into reliability classes; run each class "
              "on a replica cluster under the fault matrix (scenario files written into --out DIR/suite, runs into "
              "DIR/runs); for each class that fails, try the documented fixes smallest first and report one only "
              "when the class's whole matrix passes with it. Prints the findings, one line per topic and the proven "
              "fixes; writes DIR/audit.json and DIR/audit.html. Exit 0 pass, 1 fail, 2 error. Nothing is written to "
              "the cluster.")

def build_parser() -> argparse.ArgumentParser:
    from .spec.cluster import CLUSTER_BACKENDS, JIT_MODES
    from .spec.connection import SASL_MECHANISMS, SECURITY_PROTOCOLS
    from .spec.versions import DEFAULT_KAFKA_VERSION
    p = argparse.ArgumentParser(prog="kafkaproof", description="Reliability tests for Apache Kafka.")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="command", required=True)

    def named(sp: argparse.ArgumentParser) -> argparse.ArgumentParser:
        sp.add_argument("--name", default="default", help="cluster name (default: default)")
        return sp

    cl = sub.add_parser("cluster", help="start, inspect and stop a local Kafka cluster")
    clsub = cl.add_subparsers(dest="cluster_command", required=True)
    up = named(clsub.add_parser("up", help="start a KRaft cluster and wait until it is ready"))
    up.add_argument("--brokers", type=_positive_int, default=3, help="broker nodes (default 3)")
    up.add_argument("--controllers", type=int, default=0,
                    help="dedicated controller nodes; 0 = brokers are also the controllers (default)")
    up.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION, help=f"default {DEFAULT_KAFKA_VERSION}")
    up.add_argument("--config", action="append", metavar="KEY=VALUE", help="broker config, repeatable")
    up.add_argument("--network", choices=["auto", "netns", "loopback"], default="auto")
    up.add_argument("--heap", default="512m", help="JVM heap per node (default 512m)")
    up.add_argument("--jit", choices=list(JIT_MODES), default="quick",
                    help="quick: C1 JIT only, nodes start in about half the time (default); "
                         "full: the JVM's default tiered compilation, for long or heavy runs")
    up.add_argument("--backend", choices=list(CLUSTER_BACKENDS), default="local",
                    help="local: Kafka JVMs on this host (default); compose: containers of a Docker Compose "
                         "project (compose/; 2 or 3 combined nodes, or 3 brokers with 1 controller)")
    up.add_argument("--image", help="compose backend: the Kafka image, configured like apache/kafka (default: "
                                    "$KAFKAPROOF_KAFKA_IMAGE, else kafkaproof/kafka:<version> built locally)")
    up.add_argument("--compose-file", help="compose backend: your own compose file instead of compose/<topology>.yml, "
                                           "keeping kafkaproof's service names, addresses and labels (docs/compose.md)")
    up.add_argument("--proxy", action="store_true",
                    help="a Kafka-aware fault proxy in front of each broker on the client path "
                         "(needed by lost_ack, error, latency, proxy_bandwidth, reset, blackhole, metadata, "
                         "fetch_corrupt, fetch_duplicate)")
    up.add_argument("--clock", action="store_true",
                    help="local backend: start the nodes under libfaketime, so clock_skew faults can move their "
                         "wall clocks (docs/clock.md)")
    up.add_argument("--disk", action="store_true",
                    help="local backend: put the nodes' log directories on diskfs (FUSE), so disk faults can fail, "
                         "slow or fill them, or cut a node's power (docs/disk.md)")
    up.add_argument("--log-dirs", type=int, default=1, metavar="N",
                    help="local backend: N log directories per broker (JBOD; with --disk, log_dir_failure fails one)")
    up.add_argument("--quorum", choices=("static", "dynamic"), default="static",
                    help="local backend, Kafka 3.9+: a dynamic KRaft quorum (KIP-853), so add_controller, "
                         "remove_controller and replace_controller faults can change its voters (docs/quorum.md)")
    up.add_argument("--spare-controllers", type=int, default=0, metavar="N",
                    help="with --quorum dynamic: N dedicated controllers started as observers, for add_controller")
    up.add_argument("--bootstrap", metavar="HOST:PORT[,...]",
                    help="do not start brokers: front the existing cluster at these bootstrap servers with one "
                         "fault proxy per broker (proxy faults only; `cluster down` stops the proxies)")
    up.add_argument("--proxy-listen", metavar="ADDRESS", help=PROXY_LISTEN_HELP)
    up.add_argument("--security", choices=SECURITY_PROTOCOLS, default="PLAINTEXT",
                    help="local backend: the protocol of the brokers' CLIENT listeners; kafkaproof makes a user, and "
                         "for TLS a CA of the cluster's own, and writes client.properties in the cluster's "
                         "directory (docs/security.md)")
    up.add_argument("--sasl-mechanism", choices=SASL_MECHANISMS, default="SCRAM-SHA-256",
                    help="with --security SASL_*: the mechanism (default: SCRAM-SHA-256)")
    up.add_argument("--client-config", metavar="FILE", help=CLIENT_CONFIG_HELP)
    up.add_argument("--json", action="store_true", help="print the status as JSON")
    up.set_defaults(func=cmd_cluster_up)
    stp = named(clsub.add_parser("status", help="nodes, controller, partitions, active faults"))
    stp.add_argument("--json", action="store_true")
    stp.set_defaults(func=cmd_cluster_status)
    dn = named(clsub.add_parser("down", help="heal faults, stop nodes, remove namespaces (also after a crash)"))
    dn.add_argument("--all", action="store_true",
                    help="every cluster and leftover of this state directory ($KAFKAPROOF_STATE)")
    dn.set_defaults(func=cmd_cluster_down)
    ins = clsub.add_parser("inspect", help="read-only: the Kafka nodes of your running compose project (ids, roles, "
                                            "addresses clients use), as `attach` would find them")
    ins.add_argument("--compose-project", required=True, metavar="NAME", help="as `docker compose ls` names it")
    ins.add_argument("--json", action="store_true")
    ins.set_defaults(func=cmd_cluster_inspect)
    att = named(clsub.add_parser("attach", help="attach to your running compose project for process faults (kill, "
                                                "stop, pause, restart of its containers), network faults (in their "
                                                "namespaces) and, with --proxy, proxy faults; `detach` heals"))
    att.add_argument("--compose-project", required=True, metavar="NAME", help="as `docker compose ls` names it")
    att.add_argument("--proxy", action="store_true",
                     help="front the published client ports with kafkaproof's fault proxies (rewriting metadata, "
                          "so clients at the printed bootstrap go through them): proxy faults")
    att.add_argument("--proxy-listen", metavar="ADDRESS", help=PROXY_LISTEN_HELP)
    att.add_argument(UNDERSTAND_FLAG, action="store_true",
                     help="faults will stop, kill and pause its containers and cut their network")
    att.add_argument("--json", action="store_true", help="print the status as JSON")
    att.set_defaults(func=cmd_cluster_attach)
    det = named(clsub.add_parser("detach", help="heal an attached compose project and forget it: its containers run "
                                                "again, kafkaproof's topics and groups are deleted, nothing else"))
    det.set_defaults(func=cmd_cluster_detach)

    ik = sub.add_parser("install-kafka", help="install a Kafka distribution from Maven Central")
    ik.add_argument("--kafka-version", default=DEFAULT_KAFKA_VERSION)
    ik.set_defaults(func=cmd_install_kafka)

    fl = sub.add_parser("fault", help="inject and heal faults by hand")
    flsub = fl.add_subparsers(dest="fault_command", required=True)
    inj = named(flsub.add_parser("inject", help="inject a fault (see `fault list --kinds`)"))
    inj.add_argument("kind")
    inj.add_argument("--target", help="e.g. node:2, broker:2, leader:0, controller, follower:0, random, all")
    inj.add_argument("--param", action="append", metavar="KEY=VALUE", help="fault parameter, repeatable")
    inj.add_argument("--topic", help="topic for leader:/follower: targets")
    inj.add_argument("--json", action="store_true")
    inj.set_defaults(func=cmd_fault_inject)
    hl = named(flsub.add_parser("heal", help="heal one fault or all"))
    hl.add_argument("fault_id", nargs="?")
    hl.add_argument("--all", action="store_true")
    hl.set_defaults(func=cmd_fault_heal)
    ls = named(flsub.add_parser("list", help="active faults, or the fault catalog with --kinds"))
    ls.add_argument("--kinds", action="store_true")
    ls.add_argument("--json", action="store_true")
    ls.set_defaults(func=cmd_fault_list)

    rn = sub.add_parser("run", help="run a scenario and write its ledger to a run directory")
    rn.add_argument("scenario", nargs="?",
                    help="a scenario file, or the name of a catalog scenario (or --replay RUN_DIR)")
    rn.add_argument("--out", default=None, help="parent of run directories (default: $KAFKAPROOF_RUNS or ./runs)")
    rn.add_argument("--messages", type=_positive_int, help="override producers.messages")
    rn.add_argument("--kafka-version", help="override cluster.kafka_version")
    rn.add_argument("--upgrade-to", help="override the version every rolling_upgrade of the timeline rolls to")
    rn.add_argument("--seed", type=int, help="the seed of a random fault schedule (default: the scenario's, else new)")
    rn.add_argument("--replay", metavar="RUN_DIR",
                    help="run the scenario exactly as RUN_DIR ran it (its overrides, its drawn random schedule)")
    rn.add_argument("--brokers", type=_positive_int, help="override cluster.brokers (local cluster only)")
    rn.add_argument("--backend", choices=list(CLUSTER_BACKENDS),
                    help="override cluster.backend: local (JVMs here) or compose (containers, compose/)")
    rn.add_argument("--bootstrap", help="use an existing cluster instead of a local one: proxy and consumer "
                                        "faults only (proxies are started on this host when the scenario needs them)")
    rn.add_argument("--proxy-listen", metavar="ADDRESS", help=PROXY_LISTEN_HELP)
    rn.add_argument("--client-config", metavar="FILE", help=CLIENT_CONFIG_HELP)
    rn.add_argument("--attach-compose-project", metavar="NAME",
                    help="run on your own running compose project (as cluster.attach): process, network and proxy "
                         "faults on its containers; needs " + UNDERSTAND_FLAG)
    rn.add_argument(UNDERSTAND_FLAG, action="store_true",
                    help="the run's faults may stop, kill and pause the containers of the attached project")
    rn.add_argument("--salvage", metavar="RUN_DIR",
                    help="assemble the ledger of a run that ended before its drain (its runner killed), so it can "
                         "be analysed; it stays incomplete")
    rn.set_defaults(func=cmd_run)

    sp = sub.add_parser("stop", help="end a running run's workload early: it heals, drains and judges what was sent")
    sp.add_argument("run_dir", help="the run directory of the running run")
    sp.add_argument("--reason", help="why (recorded in its manifest as stopped_early.reason)")
    sp.set_defaults(func=cmd_stop)

    bt = sub.add_parser("batch", help="run a suite without Airflow: every scenario, one analysis, verdicts, "
                                       "history and the gate (exit 1 when the gate fails)")
    bt.add_argument("--tag", default="nightly", help="suite tag (default: nightly)")
    bt.add_argument("--scenario", action="append", help="scenario name instead of a tag, repeatable")
    bt.add_argument("--batch-id", help="name of the batch in the history (default: cli/<UTC time>)")
    bt.add_argument("--messages", type=_positive_int, help="override producers.messages")
    bt.add_argument("--kafka-version", help="override cluster.kafka_version")
    bt.add_argument("--brokers", type=_positive_int, help="override cluster.brokers")
    bt.add_argument("--backend", choices=list(CLUSTER_BACKENDS), help="override cluster.backend")
    bt.add_argument("--clients", metavar="librdkafka,java",
                    help="a client matrix: every scenario once per client (producers and consumers), on the same "
                         "faults; the batch report compares them side by side")
    bt.set_defaults(func=cmd_batch)

    upgrade_cli.add_parser(sub, _positive_int)

    an = sub.add_parser("analyze", help="run the Spark analysis of a run directory (spark-submit)")
    an.add_argument("run_dir", help="a run directory, or its URI on a Hadoop filesystem the Spark application "
                                    "reaches (hdfs://, s3a://, ...; docs/analysis.md)")
    an.add_argument("--master", help="Spark master (default: $KAFKAPROOF_SPARK_MASTER or local[2])")
    an.set_defaults(func=cmd_analyze)
    va = sub.add_parser("validate", help="Great Expectations verdict of an analysed run; exit 1 when it fails")
    va.add_argument("run_dir")
    va.set_defaults(func=cmd_validate)
    rp = sub.add_parser("report", help="write the HTML report of a run, or of a night (--night DIR)")
    rp.add_argument("run_dir", nargs="?")
    rp.add_argument("--night", metavar="DIR", help="directory of run directories (one DAG run or batch)")
    rp.set_defaults(func=cmd_report)
    hi = sub.add_parser("history", help="results history: verdicts and key metrics per run")
    hi.add_argument("--scenario")
    hi.add_argument("--kafka-version")
    hi.add_argument("--limit", type=_positive_int, default=30)
    hi.set_defaults(func=cmd_history)

    au = sub.add_parser("audit", help="audit an existing cluster on a replica: per-topic verdicts under a fault matrix "
                                       "and the proven fixes", description=AUDIT_HELP)
    au.add_argument("--bootstrap", metavar="HOST:PORT[,...]", help="the existing cluster's bootstrap servers")
    au.add_argument("--client-config", metavar="FILE", help="the cluster's client properties file (librdkafka names): "
                                                            "how to connect (security.protocol, sasl.*, ssl.*)")
    au.add_argument("--app-config", metavar="FILE",
                    help="the team's client settings: a Spring Boot application.yml / application.properties, or a "
                         "Java or librdkafka client properties file (see --app-format); read, mapped to client "
                         "property names and printed with the keys that map to none")
    au.add_argument("--app-format", choices=["spring", "java", "librdkafka"],
                    help="the format of --app-config (default: spring for .yml/.yaml or spring.kafka.* keys, else java)")
    au.add_argument("--app-role", choices=["producer", "consumer", "both"], default="both",
                    help="whose properties a Java or librdkafka --app-config holds (default: both)")
    au.add_argument("--topics", metavar="NAME[,GLOB...]", help="only these topics (names or shell globs); default all")
    au.add_argument("--spring-config", dest="app_config", metavar="FILE",
                    help="the team's Spring Boot application.yml / application.properties (the same as --app-config)")
    au.add_argument("--max-classes", type=_positive_int, metavar="N",
                    help="at most N reliability classes: the smallest join the class they differ from least (the "
                         "plan lists them)")
    au.add_argument("--discover-only", action="store_true",
                    help="print the inventory and stop")
    au.add_argument("--plan-only", action="store_true",
                    help="group the topics into reliability classes and write each class's replica scenarios (one "
                         "per fault of the matrix) into --out; no replica is started")
    au.add_argument("--out", metavar="DIR", help="where the audit writes: suite/ (scenario files), runs/, audit.json, "
                                                 "audit.html (with --plan-only: the scenario files)")
    au.add_argument("--faults", metavar="ID[,ID...]",
                    help="run only these faults of the matrix (leader-kill, leader-outage, isolate, lost-ack, "
                         "rolling-restart, power-loss); default all")
    au.add_argument("--no-fixes", action="store_true", help="do not search fixes for the classes that fail")
    au.add_argument("--max-fix-tries", type=_positive_int, default=3, metavar="N",
                    help="at most N fix candidates per failed class (default 3)")
    au.add_argument("--json", action="store_true", help="print JSON (the inventory and client settings; the plan; the "
                                                        "audit.json document)")
    au.set_defaults(func=cmd_audit)

    ho = sub.add_parser("hosts", help="the DAGs' worker hosts: their queues and cluster pools (KAFKAPROOF_HOSTS, ...)")
    ho.add_argument("--pools", action="store_true", help="print the pools to create: name, slots, description "
                                                         "(tab-separated)")
    ho.set_defaults(func=cmd_hosts)

    sc = sub.add_parser("scenario", help="validate and list scenario files")
    scsub = sc.add_subparsers(dest="scenario_command", required=True)
    sv = scsub.add_parser("validate", help="validate scenario files")
    sv.add_argument("files", nargs="+", metavar="FILE", help="a scenario file, or the name of a catalog scenario")
    sv.set_defaults(func=cmd_scenario_validate)
    sl = scsub.add_parser("list", help="list the catalog")
    sl.add_argument("--dir", help="a directory of scenario files (default: $KAFKAPROOF_SCENARIOS, else the catalog "
                                   "of the checkout or of the installed package)")
    sl.add_argument("--tag")
    sl.set_defaults(func=cmd_scenario_list)
    ss = scsub.add_parser("schema", help="print the scenario JSON Schema")
    ss.set_defaults(func=cmd_scenario_schema)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logs.setup(args.verbose)
    try:
        return int(args.func(args) or 0)
    except KafkaproofError as e:
        print(f"kafkaproof: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("kafkaproof: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
