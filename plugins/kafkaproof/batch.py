"""One batch plan for `kafkaproof batch` and every DAG: which runs, in what order, on which clusters,
and how the finished batch is judged.

A `BatchPlan` is an ordered list of `PlannedRun`s (a scenario file's `Scenario`, its label, its
`Overrides`, and `keep_for_next`: the next run asks for the same cluster, so a teardown may keep it)
and the page the gate shows (`batch`, `clients`: a client matrix side by side, `upgrade`: current
against candidate version). It is built from a suite (`suite_plan`: runs asking for the same cluster
next to each other), a scenario × client matrix (`matrix_plan`) or an upgrade check (`upgrade_plan`).
Each run is resolved once (`run.resolved.resolve`, in `resolve_run`): what crosses XCom to the task that
runs it is its `ResolvedScenario`, or the refusal that is its error verdict. `judge_batch` turns the
judged summaries into a `GateOutcome`: the verdict, the lines to print, the failure message, the page.
The DAGs map the plan onto tasks and wire them; `run_batch` runs it in one process.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import pipeline
from .cluster import reuse as cluster_reuse
from .errors import ScenarioError
from .hosts import HostLayout
from .paths import this_host
from .run.resolved import Overrides, ResolvedScenario, resolve
from .spec.scenario import Scenario

log = logging.getLogger(__name__)

PAGES = ("batch", "clients", "upgrade")


@dataclass(frozen=True)
class PlannedRun:
    """One run of a batch: the scenario as its file says, its label (client, version side), its overrides,
    and whether the next run of the plan asks for the same cluster (`keep_for_next`)."""

    scenario: Scenario
    label: str = ""
    overrides: Overrides = Overrides()
    keep_for_next: bool = False
    host: str = ""  # the worker host of its group (`place`); "" before placement

    @property
    def name(self) -> str:
        return self.scenario.name


@dataclass(frozen=True)
class BatchPlan:
    """The ordered runs of a batch and the page its gate shows."""

    runs: list[PlannedRun] = field(default_factory=list)
    page: str = "batch"

    def resolved_items(self) -> list[dict[str, Any]]:
        """Every run resolved once, as it crosses XCom to the task that runs it (`resolve_run`)."""
        return [resolve_run(run) for run in self.runs]


def place(plan: BatchPlan, layout: HostLayout, shared_clusters: bool = True) -> BatchPlan:
    """The plan with each run's worker host (`hosts.HostLayout.assign`: runs sharing a cluster on one host, the
    others round robin or pinned); a run keeps its cluster for the next only when the next runs on its host.

    Without `shared_clusters` (cluster reuse off) runs that could share a cluster are placed one by one like
    the others instead of piling up on one host (then a run keeps its cluster only for a next run that landed
    on its host anyway: one host, or a pin)."""
    placed = layout.assign([run.name for run in plan.runs],
                           [run.keep_for_next and shared_clusters for run in plan.runs])
    return dataclasses.replace(plan, runs=[
        dataclasses.replace(run, host=host, keep_for_next=run.keep_for_next and placed[i + 1:i + 2] == [host])
        for i, (run, host) in enumerate(zip(plan.runs, placed))])


def lanes(plan: BatchPlan) -> dict[str, list[int]]:
    """The indexes of a placed plan's runs per host, in plan order: each host runs its groups one after another."""
    by_host: dict[str, list[int]] = {}
    for i, run in enumerate(plan.runs):
        by_host.setdefault(run.host, []).append(i)
    return by_host


def matrix_page(clients: list[str] | None) -> str:
    """The page of a batch run under `clients`: side by side when more than one client ran each scenario."""
    return "clients" if clients and len(clients) > 1 else "batch"


def suite_plan(scenarios: list[Scenario], overrides: Overrides = Overrides()) -> BatchPlan:
    """A suite (the nightly and soak DAGs): scenarios asking for the same cluster next to each other
    (`cluster.reuse.reuse_order`), each knowing whether the next one may reuse its cluster (equal
    `cluster.reuse.cluster_key`)."""
    ordered = cluster_reuse.reuse_order(scenarios)
    keys = [cluster_reuse.cluster_key(s) for s in ordered]
    return BatchPlan([PlannedRun(s, "", overrides, keep_for_next=i + 1 < len(keys) and keys[i + 1] == keys[i])
                      for i, s in enumerate(ordered)])


def matrix_plan(scenarios: list[Scenario], clients: list[str] | None = None,
                overrides: Overrides = Overrides()) -> BatchPlan:
    """Each scenario once per client (labelled with it), in the given order (`kafkaproof batch`, the manual DAG)."""
    return BatchPlan([PlannedRun(s, client or "", overrides.merged(client=client))
                      for s in scenarios for client in clients or [None]], matrix_page(clients))


def upgrade_plan(rolling: list[Scenario], scenarios: list[Scenario], current: str, candidate: str,
                 overrides: Overrides = Overrides(), clients: tuple[str, str] | None = None) -> BatchPlan:
    """The upgrade check: each rolling scenario from `current` to `candidate` under load (at its own scale:
    its workload must outlast the roll), then every scenario on either version. `clients` (current, candidate
    kafka-clients versions): a client upgrade too — on either side every producer and consumer runs the Java
    driver on that side's kafka-clients (`Overrides.client_version`; the rolling scenarios keep their clients).
    Current and candidate Kafka versions may be equal: then only the clients change."""
    if clients is not None and (len(clients) != 2 or not all(clients)):
        raise ScenarioError(f"client upgrade {clients!r}: give the current and the candidate kafka-clients version")
    rolls = [PlannedRun(s, "rolling", dataclasses.replace(overrides, messages=None, kafka_version=current,
                                                          upgrade_to=candidate)) for s in rolling]
    sides = [PlannedRun(s, label, overrides.merged(kafka_version=version,
                                                   client_version=clients[i] if clients else None))
             for i, (label, version) in enumerate((("current", current), ("candidate", candidate))) for s in scenarios]
    return BatchPlan(rolls + sides, "upgrade")


def resolve_run(run: PlannedRun) -> dict[str, Any]:
    """`{"scenario", "label", "resolved"}` (its `ResolvedScenario.to_dict()`), or `{"scenario", "label",
    "error"}` for a scenario that cannot take its overrides (its error verdict says why)."""
    try:
        resolved = resolve(run.scenario, run.overrides)
    except ScenarioError as e:
        return {"scenario": run.name, "label": run.label, "error": str(e)}
    return {"scenario": run.name, "label": run.label, "resolved": resolved.to_dict()}


def run_resolved(item: dict[str, Any], batch_id: str, client_config: dict | None = None,
                 dagrun_state: pipeline.DagRunState | None = None, wait: bool = True,
                 proxy_listen: str = "127.0.0.1") -> dict:
    """Provision, run and tear down one item of `resolved_items` (`pipeline.run_scenario`); a refused one is
    an error run (`pipeline.unstarted_run`) before anything starts."""
    if not item.get("resolved"):
        return pipeline.unstarted_run(item["scenario"], item["error"], item.get("label", ""))
    return pipeline.run_scenario(ResolvedScenario.from_dict(item["resolved"]), batch_id, item.get("label", ""),
                                 client_config=client_config, dagrun_state=dagrun_state, wait=wait,
                                 proxy_listen=proxy_listen)


def provision_run(run: PlannedRun, batch_id: str, key: str, overrides: Overrides, reuse: bool = False,
                  fault_tasks: bool = False, dagrun_state: pipeline.DagRunState | None = None,
                  wait: bool = True) -> dict[str, Any]:
    """A run whose steps are tasks (the nightly DAG's provision): resolve it once with the batch's
    `overrides`, make its fault tasks' control directory (with `fault_tasks`), start its cluster — or
    with `reuse` reuse the one an earlier run of the batch kept (`cluster.reuse.shared_cluster_name`) — and
    return what its run, fault and teardown tasks get: `{"resolved", "cluster", "bootstrap", "control",
    "keep", "host"}` (`host`: where the run is, `paths.this_host`, which its fault tasks check) (`keep`: its teardown keeps the cluster for the next run), or `{"error"}` when the scenario
    cannot take the overrides (no cluster). `key` names its cluster and control directory in the batch.
    HostBusy when another pipeline's cluster runs and `wait` is False.
    """
    try:
        resolved = resolve(run.scenario, run.overrides.merged(**overrides.to_dict()))
    except ScenarioError as e:  # an error verdict that says why, and no cluster
        return {"cluster": None, "bootstrap": None, "error": str(e)}
    control = pipeline.fault_control(batch_id, key) if fault_tasks else None
    if resolved.bootstrap:
        return {"cluster": None, "bootstrap": resolved.bootstrap, "resolved": resolved.to_dict(), "control": control,
                "host": this_host()}
    name = (cluster_reuse.shared_cluster_name(batch_id, resolved.cluster_key) if reuse
            else cluster_reuse.cluster_name_for(batch_id, key))
    cluster = pipeline.provision(resolved, name, reuse=reuse, owner=pipeline.pipeline_owner(batch_id),
                                 dagrun_state=dagrun_state, wait=wait)
    return {**cluster, "resolved": resolved.to_dict(), "control": control, "reuse": reuse,
            "keep": run.keep_for_next and reuse and not cluster.get("attached"), "host": this_host()}


@dataclass(frozen=True)
class GateOutcome:
    """A judged batch: whether it passes, the problems, the page written (`page`: batch, clients or
    upgrade) and, for a client matrix where the clients differ, for an upgrade why the candidate is worse."""

    ok: bool
    problems: list[str]
    report: str
    page: str
    differences: list[str] = field(default_factory=list)
    lines: list[str] = field(default_factory=list)  # what the gate prints, in order

    def failure(self) -> str:
        """The message a failed gate fails with (and notifies)."""
        if self.page == "upgrade":
            return "the upgrade is not safe:\n  " + "\n  ".join(self.problems) + f"\nreport: {self.report}"
        return "reliability gate failed:\n  " + "\n  ".join(self.problems) + f"\nsummary: {self.report}"


def differences_line(differences: list[str]) -> str:
    """Where the clients of a client matrix differ, as the gate prints it."""
    return "clients differ:\n  " + "\n  ".join(differences) if differences else "clients do not differ"


def judge_batch(summaries: list[dict | None], batch_id: str, page: str = "batch",
                fault_results: list[dict | None] | None = None, out: Path | None = None) -> GateOutcome:
    """Write the batch's page (into `out`, default the runs directory) and gate it: any violation, undetected
    negative control, regression or error fails (`verdict.summary.gate`); an upgrade check fails when the
    candidate is worse. `fault_results` (the fault tasks' returns, when the faults were tasks) adds how late
    they began."""
    if page not in PAGES:
        raise ValueError(f"page {page!r}: expected one of {', '.join(PAGES)}")
    summaries = list(summaries or [])
    if page == "upgrade":
        report, worse = pipeline.write_upgrade_report([s for s in summaries if s], batch_id, out)
        return GateOutcome(not worse, worse, report, page, worse, [f"upgrade report: {report}"])
    lines: list[str] = []
    differences: list[str] = []
    if page == "clients":
        report, differences = pipeline.write_client_report(summaries, batch_id, out)
        lines.append(differences_line(differences))
    else:
        report = pipeline.write_batch_report(summaries, batch_id, out)
    lines.append(f"summary report: {report}")
    if fault_results is not None:
        lines.append(pipeline.fault_timing(fault_results) or "fault tasks: none injected")
    ok, problems = pipeline.gate(summaries)
    for s in summaries:
        if s:
            lines.append(f"  {s['scenario']:<36} {s['verdict']:<6} {s.get('report') or ''}")
            # warnings are shown, never failing: see expectations/regression.yaml
            lines += [f"      warning: {w} ({s.get('baseline') or 'no baseline'})" for w in s.get("warnings") or []]
    lines += ["reliability gate failed:", *(f"  {p}" for p in problems)] if not ok else ["reliability gate passed"]
    return GateOutcome(ok, problems, report, page, differences, lines)


@dataclass
class BatchResult:
    """A batch (a night) run without Airflow: every scenario's summary and the gate's outcome."""

    batch_id: str
    summaries: list[dict]
    outcome: GateOutcome

    @property
    def ok(self) -> bool:
        return self.outcome.ok

    @property
    def problems(self) -> list[str]:
        return self.outcome.problems

    @property
    def report(self) -> str:
        return self.outcome.report


def run_batch(plan: BatchPlan, batch_id: str, out: Path | None = None) -> BatchResult:
    """Run a plan's runs one after another, each on a local cluster of its own, analyse every complete run
    with one spark-submit, then validate, compare with history and report each, and gate the batch. The
    run directories and the batch page go under `out` (default: the runs directory, `paths.runs_dir`).

    The same steps and verdicts as the DAGs, for a host without Airflow (and the flake bench). A run
    or an analysis that fails is an error summary, never a lost scenario.
    """
    runs: list[dict] = []
    for run in plan.runs:
        try:
            resolved = resolve(run.scenario, run.overrides)
        except ScenarioError as e:
            runs.append(pipeline.unstarted_run(run.name, str(e), run.label))
            continue
        log.info("batch %s: %s%s", batch_id, run.name, f" ({run.label})" if run.label else "")
        runs.append({**pipeline.run(resolved, out=str(out) if out else None), "scenario": run.name,
                     "label": run.label})
    pipeline.analyze_batch(runs, batch_id)
    summaries = [pipeline.judge(r, batch_id) for r in runs]
    return BatchResult(batch_id, summaries, judge_batch(summaries, batch_id, plan.page, out=out))
