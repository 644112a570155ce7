"""Running a scenario: the cluster, the workers, the fault timeline, the drain, and the ledger they produce."""
from __future__ import annotations

from typing import Any

__all__ = ["RunInterrupted", "RunOptions", "RunResult", "ScenarioRun", "new_run_id"]


def __getattr__(name: str) -> Any:
    # Lazily: a worker process (`python -m kafkaproof.run.workload`) imports this package first and
    # must not pay for (or be warned about re-importing) the runner and everything it imports.
    if name in __all__:
        from . import scenario_run
        return getattr(scenario_run, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
