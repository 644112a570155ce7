#!/usr/bin/env python3
"""The example sign-up service's accepted events/s under kafkaproof's HTTP driver: what rate a run can drive.

    flock /tmp/kafkaproof-heavy.lock .venv/bin/python bench/example_app.py [--requests 15000] [--rounds 4]

Builds the example application if its jars are not cached (`run/example_app.py`), starts a local
1-broker cluster (torn down at the end) and a topic (3 partitions, RF 1), then two instances of the
example `signup-service` (`examples/signup-app/`, the catalog's command line: 256 MB heap, serial GC,
C1 only) on the same topic, each a black box as a run starts it (`run/services.py`):
  - after-ack: answers 200 once the broker acknowledged the send (acks=all, idempotent);
  - before-ack: answers 202 as soon as the send is handed to the producer.
After one unmeasured warm-up run each (`--warmup` requests: the JVM compiles its hot paths), it
alternates the two for `--rounds` rounds (the order swapped each round), each run `drive`-ing
`--requests` POST /signups flat out (a rate no service reaches, `--workers` threads): accepted
events/s (accepted requests over wall seconds) and the median and p99 latency from send. Then it
checks the median of each open loop at `--confirm` of it for `--confirm-s` seconds, as a run drives
(`drive.rate`): the accepted events/s reached and the p99 latency from the intended time (a rate is
sustained when every request is accepted and the p99 from intended stays under `--late-ms`).

Everything shares the host's cores (this host: 2): the broker, the service's JVM, the driver's
Python threads; the figures are what one core pair drives end to end. Exit code 1 when a request
was not accepted. Bounded: (2 + 2 * rounds) runs of at most `--requests` requests, two confirmations
of `--confirm-s` seconds, every request with a `--timeout-s` socket timeout.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "plugins"))

from rounds import alternate, not_accepted_exit  # noqa: E402  (bench/, the script's own directory)

from kafkaproof import logs  # noqa: E402
from kafkaproof.cluster import ClusterConfig, LocalCluster  # noqa: E402
from kafkaproof.run import example_app  # noqa: E402
from kafkaproof.run.http_driver import drive  # noqa: E402
from kafkaproof.run.services import ServiceFleet, ServiceSpec  # noqa: E402
from kafkaproof.spec.application import parse_request  # noqa: E402

TOPIC = "bench-signups"
MODES = ("after-ack", "before-ack")
# The catalog's E6 pair's properties (scenarios/app-e6-*.yaml), {port} and {bootstrap} filled by the fleet.
PROPERTIES = {
    "after-ack": {"signup.answer": "after-ack", "signup.ack-timeout": "40s", "spring.kafka.producer.acks": "all",
                  "spring.kafka.producer.properties.enable.idempotence": "true"},
    "before-ack": {"signup.answer": "before-ack"},
}


def service_spec(mode: str, jar: Path) -> ServiceSpec:
    """The sign-up service answering `mode`, started as a run starts it."""
    props = {"server.port": "{port}", "server.address": "127.0.0.1", "spring.kafka.bootstrap-servers": "{bootstrap}",
             "signup.topic": "{topic}", **PROPERTIES[mode]}
    return ServiceSpec(mode, example_app.command(jar, props), ready_url="http://127.0.0.1:{port}/actuator/health",
                       ready_timeout_s=180)


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def measure(template, run: dict, rate: float, requests: int, workers: int, timeout_s: float,
            duration_s: float | None = None) -> tuple[float, float, float, float, int]:
    """(accepted events/s, median and p99 latency from send ms, p99 from intended ms, not accepted) of one drive."""
    began = time.perf_counter()
    rows = drive(template, run, rate=rate, messages=requests, duration_s=duration_s, workers=workers,
                 timeout_s=timeout_s, progress_s=60).to_pylist()
    seconds = time.perf_counter() - began
    accepted = [r for r in rows if r["outcome"] == "accepted"]
    from_send = [(r["complete_ns"] - r["send_ns"]) / 1e6 for r in rows]
    from_intended = [(r["complete_ns"] - r["intended_ns"]) / 1e6 for r in rows]
    return (len(accepted) / seconds, quantile(from_send, 0.5), quantile(from_send, 0.99),
            quantile(from_intended, 0.99), len(rows) - len(accepted))


def main(argv: list[str] | None = None) -> int:
    """Run the rounds and the confirmations and print the figures."""
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--requests", type=int, default=15000, help="requests per measured run (default 15000)")
    p.add_argument("--warmup", type=int, default=5000, help="unmeasured requests per service first (default 5000)")
    p.add_argument("--rounds", type=int, default=4, help="rounds of (after-ack, before-ack) (default 4)")
    p.add_argument("--workers", type=int, default=32, help="the driver's worker threads (default 32)")
    p.add_argument("--timeout-s", type=float, default=10.0, help="each request's socket timeout (default 10)")
    p.add_argument("--confirm", type=float, default=0.8,
                   help="the open-loop check's rate, as a fraction of the flat-out median (default 0.8)")
    p.add_argument("--confirm-s", type=float, default=15.0, help="the open-loop check's length (default 15 s)")
    p.add_argument("--late-ms", type=float, default=1000.0,
                   help="sustained: p99 latency from the intended time under this (default 1000 ms)")
    args = p.parse_args(argv)
    logs.setup()
    jars = example_app.build()
    print(f"host: {os.cpu_count()} cores; example sign-up service {jars['signup-service']}")
    bad = 0
    with tempfile.TemporaryDirectory(prefix="bench-example-app-") as tmp, \
            LocalCluster.up(ClusterConfig(name="bench-example-app", brokers=1)) as cluster:
        cluster.create_topic(TOPIC, partitions=3, replication_factor=1)
        run = {"bootstrap": cluster.bootstrap_servers(), "topic": TOPIC, "group": "bench", "run_id": "bench"}
        with ServiceFleet([service_spec(mode, jars["signup-service"]) for mode in MODES], Path(tmp),
                          owner="bench-example-app-services", cluster="bench-example-app") as fleet:
            started = time.monotonic()
            fleet.start(run)
            print(f"both services ready in {time.monotonic() - started:.1f} s")
            templates = {mode: parse_request({"method": "POST", "headers": {"Content-Type": "application/json"},
                                              "url": f"http://127.0.0.1:{fleet.instances[(mode, 0)].port}/signups",
                                              "body": '{"id": "{id}"}'}, "bench.request") for mode in MODES}
            counter = iter(range(10**9))

            def once(mode: str, requests: int, rate: float = 1e9, duration_s: float | None = None):
                nonlocal bad
                result = measure(templates[mode], {**run, "run_id": f"bench-{next(counter)}"}, rate, requests,
                                 args.workers, args.timeout_s, duration_s)
                bad += result[-1]
                return result

            for mode in MODES:
                rate, *_ = once(mode, args.warmup)
                print(f"warm-up {mode:10s} {rate:7.0f} events/s (not counted)")
            print(f"{'round':>5} {'service':>10} {'accepted/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'not ok':>6}")
            med = alternate(MODES, args.rounds, lambda mode, r: once(mode, args.requests),
                            lambda n, mode, f: f"{n:>5} {mode:>10} {f[0]:>10.0f} {f[1]:>7.1f} {f[2]:>7.1f} {f[4]:>6d}")
            for mode in MODES:
                target = med[mode][0] * args.confirm
                rate, _, _, late, not_ok = once(mode, 10**9, target, args.confirm_s)
                verdict = "sustained" if not not_ok and late < args.late_ms else "NOT sustained"
                print(f"open loop {mode:10s} at {target:6.0f}/s for {args.confirm_s:g} s: {rate:6.0f} accepted/s, "
                      f"p99 from intended {late:.0f} ms, {not_ok} not accepted: {verdict}")
    print("\n".join(f"median {mode:10s} {rate:7.0f} accepted events/s flat out (p50 {p50:.1f} ms, p99 {p99:.1f} ms "
                    f"from send)" for mode, (rate, p50, p99, *_) in med.items()))
    print(f"after-ack / before-ack {med['after-ack'][0] / med['before-ack'][0]:.2f} "
          f"({args.workers} workers, {args.requests} requests a run, {args.rounds} rounds)")
    return not_accepted_exit(bad)


if __name__ == "__main__":
    sys.exit(main())
