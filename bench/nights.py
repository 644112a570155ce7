"""Night after night without false alarms: the nightly suite K nights in a row in one checkout.

History accumulates across the nights (a history database of its own, so the bench starts
from nothing and leaves the real history alone). Prints, per night, whether the gate passed
and why not; then the false-failure count. Then it plants real regressions, each for one
night, and shows whether the gate catches them:

- `linger`: the producers' client settings change (`linger.ms` 1000, given through
  `KAFKAPROOF_EXTRA_PRODUCER_CONFIG` as a team's shipped client config would be): every send
  waits a second — a latency regression only the history can see;
- `idempotence`: `enable.idempotence` false for every producer — exactly-once scenarios with
  lost acks must fail by their guarantee.

    .venv/bin/python bench/nights.py [--nights 5] [--tag nightly] [--plant linger,idempotence]

Each night takes as long as `kafkaproof batch --tag nightly` (about ten minutes here).
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "plugins"))

from kafkaproof import batch, logs, pipeline  # noqa: E402

PLANTS = {
    "linger": {"KAFKAPROOF_EXTRA_PRODUCER_CONFIG": '{"linger.ms": 1000}'},
    "idempotence": {"KAFKAPROOF_EXTRA_PRODUCER_CONFIG": '{"enable.idempotence": false}'},
}


def night(tag: str, batch_id: str, env: dict[str, str] | None = None) -> batch.BatchResult:
    """One batch with `env` set for its duration."""
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        return batch.run_batch(batch.matrix_plan(pipeline.suite(tag)), batch_id)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nights", type=int, default=5)
    parser.add_argument("--tag", default="nightly")
    parser.add_argument("--plant", default="linger,idempotence", help="regressions to plant after the nights")
    parser.add_argument("--out", type=Path, default=Path("runs") / "bench-nights")
    args = parser.parse_args()
    logs.setup()
    args.out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    os.environ["KAFKAPROOF_RUNS"] = str(args.out.resolve())
    os.environ["KAFKAPROOF_HISTORY_URL"] = f"sqlite:///{(args.out / f'history-{stamp}.sqlite').resolve()}"
    results = []
    for i in range(1, args.nights + 1):
        started = time.monotonic()
        r = night(args.tag, f"bench/{stamp}/night-{i}")
        results.append(r)
        warnings = sum(len(s.get("warnings") or []) for s in r.summaries)
        print(f"night {i}: gate {'passed' if r.ok else 'FAILED'} in {time.monotonic() - started:.0f} s, "
              f"{len(r.summaries)} scenarios, {warnings} warnings" + "".join(f"\n    {p}" for p in r.problems),
              flush=True)
    false_failures = sum(1 for r in results if not r.ok)
    print(f"false failures: {false_failures} of {len(results)} nights (nothing changed between them)")
    caught = {}
    for name in [p for p in args.plant.split(",") if p]:
        started = time.monotonic()
        r = night(args.tag, f"bench/{stamp}/planted-{name}", PLANTS[name])
        caught[name] = not r.ok
        print(f"planted {name} ({PLANTS[name]}): {'CAUGHT' if not r.ok else 'MISSED'} in "
              f"{time.monotonic() - started:.0f} s" + "".join(f"\n    {p}" for p in r.problems[:8]), flush=True)
    print(f"summary: {false_failures} false failures in {len(results)} nights; planted regressions caught: "
          f"{sum(caught.values())} of {len(caught)} ({', '.join(f'{k}: {v}' for k, v in caught.items())})")
    return 0 if false_failures == 0 and all(caught.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
