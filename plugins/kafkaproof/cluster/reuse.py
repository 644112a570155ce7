"""Cluster reuse across the scenarios of a batch: which scenarios share a cluster, and its bookkeeping.

Scenarios whose resolved cluster settings hash alike (`config_key`; `cluster_key` before they are
resolved) share one cluster name per batch (`shared_cluster_name`, of the key the resolver computed
once) and run next to each other (`reuse_order`). A teardown that keeps the cluster for the next
scenario marks it kept (`keep`); the next provision takes it only when nothing of the earlier runs is
left on it (`take_kept`: `isolation.py`'s survey, with up to `REUSE_SETTLE_S` for partitions to get back
in sync) and never after a rolling fault changed its nodes; otherwise it goes and a fresh one starts.
`record_use` writes what the run's manifest shows (`ClusterState.reuse`: reused or not, the runs before,
what was checked; `runs`). A kept cluster is idle by definition: any provision that does not reuse it
tears it down (`release_kept_clusters`).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time
from typing import Any

from ..errors import ClusterError
from ..spec.clients import apply_overrides, environment_overrides
from ..spec.cluster import ClusterConfig, cluster_config
from ..spec.scenario import Scenario
from . import state
from .backend import ClusterBackend, attach
from .isolation import isolation_problems, survey, transient

log = logging.getLogger(__name__)

AIRFLOW_CLUSTER_PREFIX = "af-"
REUSE_SETTLE_S = 30.0  # how long a kept cluster may take to get every partition back in sync


def cluster_name_for(batch_id: str, scenario: str) -> str:
    """A short cluster name unique per batch and scenario (state file names are limited)."""
    digest = hashlib.sha1(f"{batch_id}/{scenario}".encode()).hexdigest()[:10]
    return f"{AIRFLOW_CLUSTER_PREFIX}{digest}"


def scenario_cluster_config(scenario: Scenario, cluster_name: str) -> ClusterConfig:
    """The cluster a scenario not resolved yet asks for, with the environment's overrides applied (as the run
    will see it): only for keys of unresolved scenarios (`cluster_key`: `batch.suite_plan`'s order and
    `keep_for_next`, before each run is resolved). A `ResolvedScenario` has the environment applied
    already: take its `cluster_config` and `cluster_key`."""
    data = apply_overrides(scenario.data, environment_overrides(os.environ))
    return cluster_config(data, cluster_name, scenario.directory)


def config_key(config: ClusterConfig) -> str:
    """What makes two clusters the same (backend, version, nodes, settings, proxy; not the name), as a short
    hash."""
    fields = dataclasses.asdict(config)
    fields.pop("name")
    return hashlib.sha1(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:12]


def cluster_key(scenario: Scenario) -> str:
    """The `config_key` of the cluster a scenario not resolved yet asks for (`scenario_cluster_config`); a
    resolved one's is `ResolvedScenario.cluster_key`, computed once by the resolver."""
    return config_key(scenario_cluster_config(scenario, "-"))


def shared_cluster_name(batch_id: str, key: str) -> str:
    """The cluster name every run of a batch asking for the same cluster (its `cluster_key`, as
    `ResolvedScenario.cluster_key` holds it) uses, so one can reuse it."""
    return cluster_name_for(batch_id, f"cluster/{key}")


def reuse_order(scenarios: list[Scenario]) -> list[Scenario]:
    """The scenarios with those asking for the same cluster next to each other (first come, order kept)."""
    keys = [cluster_key(s) for s in scenarios]
    first = {k: keys.index(k) for k in keys}
    return [s for _, _, s in sorted(zip((first[k] for k in keys), range(len(keys)), scenarios))]


def release_kept_clusters(but: str | None = None, batch: str | None = None) -> list[str]:
    """Tear down every cluster kept for reuse (idle by definition: a kept cluster runs nothing), except `but`;
    with `batch`, only those of that batch (another DAG run's kept cluster is its own to reuse)."""
    released = []
    for name in state.list_clusters():
        if name == but:
            continue
        try:
            st = state.load_state(name)
        except (ClusterError, OSError, ValueError):
            continue
        if batch is not None and (st.owner or {}).get("batch", batch) != batch:
            continue
        if st.kept_at is not None:
            log.info("tearing down cluster %s, kept for reuse since %s and not reused",
                     name, time.strftime("%H:%M:%S", time.localtime(st.kept_at)))
            attach(name).down(keep_logs=False, graceful=False)
            released.append(name)
    return released


def take_kept(cluster_name: str, reuse: bool, topic: str, group: str | None) -> dict[str, Any] | None:
    """The reuse record (`check_reuse`) when the existing cluster `cluster_name` was kept for reuse, is
    unchanged by rolling faults and nothing of its earlier runs is left; else None, and an existing
    cluster of that name is torn down (a retry of a provision, or one not as good as a fresh one)."""
    if cluster_name not in state.list_clusters():
        return None
    cluster = attach(cluster_name)
    st = cluster.state()
    reused = None
    if reuse and st.kept_at is not None and not st.rolled:
        reused = check_reuse(cluster, topic, group)
    elif reuse and st.rolled:
        log.info("not reusing cluster %s: a rolling fault changed its nodes", cluster_name)
    if reused is None:
        cluster.down()  # a retry of this task, or a cluster not as good as fresh: start clean
    return reused


def check_reuse(cluster: ClusterBackend, topic: str, group: str | None) -> dict[str, Any] | None:
    """The reuse record when nothing of the earlier runs is left on a kept cluster, else None (said why)."""
    deadline = time.monotonic() + REUSE_SETTLE_S
    while True:
        left = survey(cluster, topic, group)
        problems = isolation_problems(left, topic, group)
        if not problems:
            runs = state.load_state(cluster.name).runs
            log.info("reusing cluster %s (after %s): nothing of the earlier runs left on it", cluster.name,
                     ", ".join(runs))
            return {"reused": True, "runs_before": runs, "checked_at": time.time(), "leftovers": left.to_json()}
        if not transient(left, topic, group) or time.monotonic() > deadline:
            log.warning("not reusing cluster %s: %s", cluster.name, "; ".join(problems))
            return None
        time.sleep(1.0)


def fresh_record(reclaimed: list[dict[str, Any]]) -> dict[str, Any]:
    """Pure: the reuse record of a freshly started cluster (and the pipeline clusters reclaimed for it)."""
    return {"reused": False, "runs_before": [], **({"reclaimed": reclaimed} if reclaimed else {})}


def record_use(cluster_name: str, reused: dict[str, Any], scenario: str, owner: dict[str, Any] | None) -> None:
    """Record that `scenario` runs on the cluster now (no longer kept), how it came to (`reused`), and its
    pipeline `owner` when given; the run puts the record in its manifest (`reuse_record`)."""
    with state.update_state(cluster_name) as st:
        st.kept_at = None
        st.reuse = reused
        st.runs = [*reused["runs_before"], scenario]
        if owner:
            st.owner = owner


def reuse_record(cluster_name: str) -> dict[str, Any] | None:
    """What a pipeline recorded of how the run got its cluster (fresh, or kept and checked); None outside one."""
    return state.load_state(cluster_name).reuse


def keep(cluster_name: str) -> None:
    """Mark a cluster kept for the next scenario of its batch (the run's leftovers already released)."""
    with state.update_state(cluster_name) as st:
        st.kept_at = time.time()
    log.info("cluster %s kept for the next scenario", cluster_name)
