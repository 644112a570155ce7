"""Running a scenario: the cluster, the workers, the fault timeline, the drain, and the ledger they produce."""
from .scenario_run import RunInterrupted, RunOptions, RunResult, ScenarioRun, new_run_id

__all__ = ["RunInterrupted", "RunOptions", "RunResult", "ScenarioRun", "new_run_id"]
