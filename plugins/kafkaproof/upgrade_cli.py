"""`kafkaproof upgrade-check`: the `kafka_upgrade_check` DAG's plan without Airflow (docs/upgrades.md): the
rolling scenarios, then each scenario on the current and the candidate version — with `--client-upgrade`
the Java clients on either kafka-clients version too — one analysis, verdicts and the upgrade page."""
from __future__ import annotations

import argparse
from typing import Any, Callable

from .errors import ScenarioError
from .spec.versions import DEFAULT_KAFKA_VERSION, PRODUCTION_KAFKA_VERSION


def client_upgrade_pair(text: str | None) -> tuple[str, str] | None:
    """`--client-upgrade 3.9.2:4.3.1` as (current, candidate); ScenarioError when it is not two versions."""
    if not text:
        return None
    parts = [p.strip() for p in text.split(":")]
    if len(parts) != 2 or not all(parts):
        raise ScenarioError(f"--client-upgrade {text!r}: give CURRENT:CANDIDATE kafka-clients versions, "
                            f"e.g. 3.9.2:4.3.1")
    return parts[0], parts[1]


def cmd_upgrade_check(args: argparse.Namespace) -> int:
    """Run the upgrade check's plan in this process; exit 1 when a roll fails or the candidate is worse."""
    from datetime import datetime, timezone
    from . import batch, pipeline
    from .run.resolved import Overrides
    batch_id = args.batch_id or f"cli/upgrade-{datetime.now(timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"
    plan = batch.upgrade_plan(pipeline.suite(names=args.rolling) if args.rolling else [],
                              pipeline.suite(names=args.scenario or ["baseline"]), args.current, args.candidate,
                              Overrides(messages=args.messages, brokers=args.brokers),
                              clients=client_upgrade_pair(args.client_upgrade))
    result = batch.run_batch(plan, batch_id)
    for s in result.summaries:
        name = s["scenario"] + (f" ({s['label']})" if s.get("label") else "")
        print(f"  {name:<48} {s['verdict']}")
    print(f"upgrade report: {result.report}")
    print("the upgrade is " + ("no worse" if result.ok else "NOT safe:\n  " + "\n  ".join(result.problems)))
    return 0 if result.ok else 1


def add_parser(sub: Any, positive_int: Callable[[str], int]) -> None:
    """The `upgrade-check` sub-command of the CLI's sub-parsers `sub`."""
    ug = sub.add_parser("upgrade-check", help="the kafka_upgrade_check DAG without Airflow: rolling scenarios, then "
                                              "each scenario on the current and the candidate version; exit 1 "
                                              "when a roll fails or the candidate is worse")
    ug.add_argument("--scenario", action="append",
                    help="scenario run on either version, repeatable (default: baseline)")
    ug.add_argument("--rolling", action="append", help="scenario with a rolling_upgrade, run first, repeatable")
    ug.add_argument("--current", default=PRODUCTION_KAFKA_VERSION,
                    help=f"the current Kafka version (default {PRODUCTION_KAFKA_VERSION})")
    ug.add_argument("--candidate", default=DEFAULT_KAFKA_VERSION,
                    help=f"the candidate Kafka version (default {DEFAULT_KAFKA_VERSION}; equal to --current: only "
                         f"the clients change)")
    ug.add_argument("--client-upgrade", metavar="CURRENT:CANDIDATE",
                    help="roll the clients too: the Java producers and consumers on kafka-clients CURRENT on the "
                         "current side, CANDIDATE on the candidate side; the page lists every client default that "
                         "differs between the two jars for the properties a scenario does not set")
    ug.add_argument("--messages", type=positive_int, help="override producers.messages")
    ug.add_argument("--brokers", type=positive_int, help="override cluster.brokers")
    ug.add_argument("--batch-id", help="name of the check in the history (default: cli/upgrade-<UTC time>)")
    ug.set_defaults(func=cmd_upgrade_check)
