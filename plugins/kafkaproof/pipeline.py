"""The steps of the reliability pipeline, as plain functions the Airflow DAGs (and tests) call.

Each step takes and returns JSON-able values (they travel through XCom):
provision → run → analyze (spark-submit) → validate → compare with history → report,
teardown always; a final gate over every scenario's summary.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import history, state
from .clients import apply_overrides, environment_overrides
from .cluster import LocalCluster
from .errors import ClusterError, KafkaproofError, LedgerError, ScenarioError
from .ledger import read_manifest
from .paths import repo_root, runs_dir
from .regression import RegressionPolicy, compare_to_reference, judge_history
from .scenario import Scenario, load, load_catalog

log = logging.getLogger(__name__)

AIRFLOW_CLUSTER_PREFIX = "af-"


def scenarios_dir() -> Path:
    """The scenario catalog: `$KAFKAPROOF_SCENARIOS` or `scenarios/` of this checkout."""
    if os.environ.get("KAFKAPROOF_SCENARIOS"):
        return Path(os.environ["KAFKAPROOF_SCENARIOS"])
    root = repo_root()
    if root is None:
        raise KafkaproofError("cannot find the scenarios/ directory: set KAFKAPROOF_SCENARIOS")
    return root / "scenarios"


def suite(tag: str | None = None, names: list[str] | None = None) -> list[Scenario]:
    """Scenarios of a suite: by tag, or by name (any name not in the catalog is an error)."""
    catalog = load_catalog(scenarios_dir())
    if names:
        by_name = {s.name: s for s in catalog}
        unknown = [n for n in names if n not in by_name]
        if unknown:
            raise KafkaproofError(f"unknown scenarios {unknown}; the catalog has: {', '.join(sorted(by_name))}")
        return [by_name[n] for n in names]
    return [s for s in catalog if tag is None or tag in s.data["tags"]]


def cluster_name_for(batch_id: str, scenario: str) -> str:
    """A short cluster name unique per batch and scenario (state file names are limited)."""
    import hashlib
    digest = hashlib.sha1(f"{batch_id}/{scenario}".encode()).hexdigest()[:10]
    return f"{AIRFLOW_CLUSTER_PREFIX}{digest}"


def wait_for_exclusive_host(own: str, timeout_s: float = 1800) -> None:
    """Wait until no other pipeline cluster runs on this host (two clusters would starve each other)."""
    deadline = time.monotonic() + timeout_s
    while True:
        others = [n for n in state.list_clusters() if n.startswith(AIRFLOW_CLUSTER_PREFIX) and n != own]
        if not others:
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"other pipeline clusters still running after {timeout_s:.0f}s: {others}; "
                               f"`kafkaproof cluster down --name NAME` if they are leftovers")
        log.info("waiting for other pipeline clusters to finish: %s", others)
        time.sleep(5)


def override_error(scenario_path: str, messages: int | None = None, kafka_version: str | None = None,
                   brokers: int | None = None, bootstrap: str | None = None) -> str | None:
    """Why the scenario cannot take a run's overrides (naming the file and field), or None if it can.

    Checked before anything starts; the caller turns a refusal into an error verdict.
    """
    try:
        load(scenario_path).with_overrides(messages, kafka_version, brokers, bootstrap)
    except ScenarioError as e:
        return str(e)
    return None


def provision(scenario_path: str, cluster_name: str, kafka_version: str | None = None,
              brokers: int | None = None) -> dict:
    """Start the local cluster a scenario asks for (with the run's overrides); returns its status."""
    scn = load(scenario_path).with_overrides(kafka_version=kafka_version, brokers=brokers)
    if cluster_name in state.list_clusters():
        LocalCluster.attach(cluster_name).down()  # a retry of this task: start clean
    wait_for_exclusive_host(cluster_name)
    from .runner import cluster_config
    data = apply_overrides(scn.data, environment_overrides(os.environ))  # as the run will see it
    cluster = LocalCluster.up(cluster_config(data, cluster_name))
    return {"cluster": cluster_name, "bootstrap": cluster.bootstrap_servers(),
            "kafka_version": scn.data["cluster"]["kafka_version"]}


def run(scenario_path: str, out: str | None = None, cluster_name: str | None = None, messages: int | None = None,
        kafka_version: str | None = None, bootstrap: str | None = None, brokers: int | None = None) -> dict:
    """Run a scenario on a provisioned cluster (or an existing one by bootstrap)."""
    from .runner import RunOptions, ScenarioRun
    scn = load(scenario_path)
    options = RunOptions(out=Path(out) if out else runs_dir(), messages=messages, kafka_version=kafka_version,
                         brokers=brokers, bootstrap=bootstrap, cluster_name=cluster_name,
                         attach=bool(cluster_name and not bootstrap))
    result = ScenarioRun(scn, options).execute()
    return {"run_id": result.run_id, "run_dir": str(result.run_dir), "status": result.status, "error": result.error,
            "scenario": scn.name}


def teardown(cluster_name: str) -> None:
    """Tear a pipeline cluster down (idempotent)."""
    if cluster_name in state.list_clusters():
        LocalCluster.attach(cluster_name).down(keep_logs=False, graceful=False)


@dataclass
class ScenarioSummary:
    """What the gate and the night report need about one scenario run."""

    scenario: str
    run_id: str | None
    run_dir: str | None
    verdict: str  # pass | fail | error
    guarantee: str | None = None
    expect: str | None = None
    kafka_version: str | None = None
    violations: list[str] = field(default_factory=list)
    regressions: list[str] = field(default_factory=list)  # fail the gate
    warnings: list[str] = field(default_factory=list)     # shown, never fail: drift on a thin baseline, ...
    baseline: str | None = None                           # "baseline: 2 of 5 runs ..."
    error: str | None = None
    report: str | None = None
    metrics: dict = field(default_factory=dict)


def summarize(run_dir: str | None, scenario: str, batch_id: str, record_history: bool = True,
              error: str | None = None) -> dict:
    """Verdict of one scenario run (from validation), regressions against history, history row.

    Missing data (the run or analysis failed) is an error verdict, never a pass; `error` says why
    when there is no run directory (e.g. the scenario could not take the run's overrides).
    """
    if not run_dir:
        return asdict(ScenarioSummary(scenario, None, None, "error", error=error or "the run produced no run directory"))
    rd = Path(run_dir)
    try:
        manifest = read_manifest(rd)
    except LedgerError as e:
        return asdict(ScenarioSummary(scenario, None, run_dir, "error", error=str(e)))
    summary = ScenarioSummary(scenario, manifest["run_id"], run_dir, "error", guarantee=manifest.get("guarantee"),
                              expect=manifest.get("expect", {}).get("outcome"),
                              kafka_version=manifest.get("versions", {}).get("kafka"))
    result_path = rd / "validation" / "result.json"
    metrics_path = rd / "analysis" / "metrics.json"
    if manifest.get("status") != "complete":
        summary.error = f"run {manifest.get('status')}: {manifest.get('error')}"
    elif not result_path.exists():
        summary.error = "no validation result (analysis or validation failed)"
    else:
        result = json.loads(result_path.read_text())
        summary.verdict = result["status"]
        summary.violations = [r["summary"] for r in result.get("rows", []) if not r.get("ok")]
        if result["status"] == "error":
            summary.error = "; ".join(result.get("errors") or ["validation error"])
    metrics = json.loads(metrics_path.read_text()) if metrics_path.exists() else {}
    summary.metrics = history.key_metrics(metrics)
    if summary.verdict == "pass" and summary.expect == "pass":
        policy = RegressionPolicy.load()
        # A passing run the gate flagged as a regression never joins the baseline it regressed from.
        past = [r["metrics"] for r in history.runs(scenario, summary.kafka_version, verdict="pass",
                                                   before_run_id=summary.run_id, limit=policy.window * 2,
                                                   scenario_hash=manifest.get("scenario_hash"))
                if not r["metrics"].get("regressed")][: policy.window]
        judged = judge_history(scenario, summary.metrics, past, policy)
        summary.regressions = [f.message for f in judged.regressions]
        summary.warnings = [f.message for f in judged.warnings]
        summary.baseline = judged.baseline_text
    if summary.regressions:
        summary.metrics["regressed"] = True
    if record_history and summary.run_id:
        history.record({"scenario": scenario, "run_id": summary.run_id, "batch_id": batch_id,
                        "kafka_version": summary.kafka_version,
                        "client_version": manifest.get("versions", {}).get("librdkafka"),
                        "scenario_hash": manifest.get("scenario_hash"), "guarantee": summary.guarantee,
                        "verdict": summary.verdict, "status": manifest.get("status"), "metrics": summary.metrics,
                        "report": str(rd / "report" / "index.html")})
    return asdict(summary)


def gate(summaries: list[dict]) -> tuple[bool, list[str]]:
    """Pure: whether the batch passes, and one line per problem (a batch that judged nothing fails)."""
    if not summaries:
        return False, ["no scenario ran: the suite selected none (check the tag or the scenario list)"]
    problems = []
    for s in summaries:
        if s is None:
            problems.append("a scenario produced no summary (its tasks failed before summarising)")
            continue
        where = f"{s['scenario']} ({s.get('run_id') or 'no run'})"
        if s["verdict"] == "error":
            problems.append(f"{where}: error: {s.get('error')}")
        elif s["verdict"] == "fail":
            what = "negative control not detected" if s.get("expect") == "detect" else "guarantee violated"
            problems.append(f"{where}: {what}: " + "; ".join(s.get("violations") or ["see report"]))
        for r in s.get("regressions") or []:
            problems.append(f"{where}: regression: {r}")
    return not problems, problems


def analyze(run_dir: str) -> dict:
    """Run the Spark analysis job on a run directory (spark-submit)."""
    from .analysis import analyze as spark_analyze
    return spark_analyze(Path(run_dir))


def validate(run_dir: str) -> str:
    """Run the Great Expectations suites; returns the status (pass | fail | error)."""
    from .validation import validate as gx_validate
    return gx_validate(Path(run_dir)).status


def report(run_dir: str) -> str:
    """Write the run's HTML report; returns its path."""
    from .report import write_run_report
    return str(write_run_report(Path(run_dir)))


def write_batch_report(summaries: list[dict], batch_id: str, out: Path | None = None) -> str:
    """Write the index page of a batch (a DAG run): scenario × verdict with change since the last batch."""
    from .report import write_batch_report as write
    return str(write([s for s in summaries if s], batch_id, out or runs_dir()))


def write_upgrade_report(summaries: list[dict], batch_id: str, out: Path | None = None) -> tuple[str, list[str]]:
    """Compare current vs candidate version per scenario; returns (report path, reasons the candidate is worse)."""
    from .report import write_upgrade_report as write
    worse = upgrade_differences(summaries)
    return str(write(summaries, worse, batch_id, out or runs_dir())), worse


def upgrade_differences(summaries: list[dict]) -> list[str]:
    """Pure: where the candidate version does worse than the current one on the same scenario."""
    by = {(s["scenario"], s.get("label")): s for s in summaries}
    worse = []
    rank = {"pass": 0, "fail": 1, "error": 2}
    for (scenario, label), cand in sorted(by.items()):
        if label != "candidate":
            continue
        cur = by.get((scenario, "current"))
        if cur is None:
            worse.append(f"{scenario}: no result on the current version to compare with")
            continue
        if rank[cand["verdict"]] > rank[cur["verdict"]]:
            worse.append(f"{scenario}: {cur['verdict']} on {cur.get('kafka_version')} but {cand['verdict']} on "
                         f"{cand.get('kafka_version')}")
        worse += [f"{scenario}: candidate {f.message}" for f in compare_to_reference(
            scenario, cand.get("metrics", {}), cur.get("metrics", {}), RegressionPolicy.load(),
            what=f"the current version ({cur.get('kafka_version')})")]
    return worse


def run_pipeline(scenario: str, batch_id: str, kafka_version: str | None = None, messages: int | None = None,
                 bootstrap: str | None = None, label: str = "", brokers: int | None = None) -> dict:
    """Every step for one scenario in one call (for mapped Airflow tasks and the CLI); always tears down."""
    (scn,) = suite(names=[scenario])
    refused = override_error(scn.path, messages, kafka_version, brokers, bootstrap)
    if refused:
        return {**summarize(None, scenario, batch_id, error=refused), "label": label}
    cluster = None if bootstrap else cluster_name_for(batch_id, f"{scenario}/{label}")
    try:
        if cluster:
            provision(scn.path, cluster, kafka_version, brokers)
        result = run(scn.path, cluster_name=cluster, messages=messages, kafka_version=kafka_version, bootstrap=bootstrap,
                     brokers=brokers)
    finally:
        if cluster:
            teardown(cluster)
    if result["status"] == "complete":
        try:
            analyze(result["run_dir"])
            validate(result["run_dir"])
        except KafkaproofError as e:
            log.error("%s: %s", scenario, e)
    summary = summarize(result["run_dir"], scenario, batch_id)
    summary["report"] = report(result["run_dir"])
    summary["label"] = label
    return summary


@dataclass
class BatchResult:
    """A batch (a night) run without Airflow: every scenario's summary, the gate, the batch page."""

    batch_id: str
    summaries: list[dict]
    ok: bool
    problems: list[str]
    report: str


def run_batch(scenarios: list[Scenario], batch_id: str, messages: int | None = None,
              kafka_version: str | None = None, brokers: int | None = None) -> BatchResult:
    """Run scenarios one after another on their own local clusters, analyse every complete run with
    one spark-submit, then validate, compare with history and report each, and gate the batch.

    The same steps and verdicts as the nightly DAG, for a host without Airflow (and the flake
    bench). A run or an analysis that fails is an error summary, never a lost scenario.
    """
    from .analysis import analyze_many
    runs: list[tuple[Scenario, dict | None, str | None]] = []
    for scn in scenarios:
        refused = override_error(scn.path, messages, kafka_version, brokers)
        if refused:
            runs.append((scn, None, refused))
            continue
        log.info("batch %s: %s", batch_id, scn.name)
        runs.append((scn, run(scn.path, messages=messages, kafka_version=kafka_version, brokers=brokers), None))
    complete = [Path(r["run_dir"]) for _, r, _ in runs if r and r["status"] == "complete"]
    if complete:
        try:
            analyze_many(complete, quiet=True)
        except KafkaproofError as e:  # runs whose analysis is missing become error verdicts below
            log.error("analysis of batch %s: %s", batch_id, e)
    summaries = []
    for scn, result, refused in runs:
        if result is None:
            summaries.append(summarize(None, scn.name, batch_id, error=refused))
            continue
        if result["status"] == "complete" and (Path(result["run_dir"]) / "analysis" / "metrics.json").exists():
            try:
                validate(result["run_dir"])
            except KafkaproofError as e:
                log.error("%s: %s", scn.name, e)
        summary = summarize(result["run_dir"], scn.name, batch_id)
        summary["report"] = report(result["run_dir"])
        summaries.append(summary)
    ok, problems = gate(summaries)
    return BatchResult(batch_id, summaries, ok, problems, write_batch_report(summaries, batch_id))
