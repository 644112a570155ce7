"""The scenario as it will run: a scenario file's `Scenario` with a run's `Overrides` resolved once.

`resolve` is the one function that makes a `ResolvedScenario` (the overrides applied and
checked, the random schedule drawn, every fault and client property checked — the Java check
starts a JVM — the environment's extra client settings applied, the cluster reuse key computed);
everything past it (`ScenarioRun`, `pipeline.provision`, the DAG tasks) takes this type and never
resolves again. It crosses Airflow's XCom as `to_dict()`.
"""
from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from ..cluster.reuse import config_key
from ..errors import KafkaproofError, ScenarioError
from ..faults import check_scenario_faults
from ..spec.attach import check_attach
from ..spec.clients import ClientConfigError, apply_overrides, environment_overrides
from ..spec.cluster import ClusterConfig, cluster_config
from ..spec.scenario import Scenario


@dataclass(frozen=True)
class Overrides:
    """What a run changes of its scenario file: message scale, Kafka version, broker count, an existing
    cluster (`bootstrap`), the backend, the client every producer and consumer runs, the version every
    rolling upgrade goes to, the seed of a random schedule (when the file gives none), a running compose
    project to attach to and the acknowledgement that the run's faults hit it."""

    messages: int | None = None
    kafka_version: str | None = None
    brokers: int | None = None
    bootstrap: str | None = None
    backend: str | None = None
    client: str | None = None
    upgrade_to: str | None = None
    seed: int | None = None
    attach_project: str | None = None  # a running compose project of the user's (cluster.attach)
    faults_hit_attached: bool | None = None  # its owner agreed that the faults hit it (a DAG run's acknowledgement)

    def merged(self, **more: Any) -> "Overrides":
        """These overrides with those of `more` that are not None on top."""
        return dataclasses.replace(self, **{k: v for k, v in more.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        """The overrides that are set (JSON)."""
        return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "Overrides":
        """Inverse of `to_dict`."""
        return cls(**doc)


OVERRIDE_FIELDS = tuple(f.name for f in dataclasses.fields(Overrides))


@dataclass(frozen=True)
class ResolvedScenario:
    """A scenario as it will run (made by `resolve` only).

    `scenario` is what runs: the overrides applied, a random schedule drawn into its timeline, the
    environment's extra client settings (`environment_overrides`) applied. `scenario_hash` is the
    history's "same configuration": overrides included, not one draw of a random schedule nor the
    environment's settings (those are the system under test changing). `cluster_key` is what makes two
    runs' clusters the same (`cluster.reuse.config_key` of `cluster_config`): runs with equal keys may share one.
    """

    scenario: Scenario
    overrides: Overrides
    scenario_hash: str
    cluster_key: str
    environment_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.scenario.name

    @property
    def bootstrap(self) -> str | None:
        """The existing cluster the run uses, None when it starts (or is given) one of its own."""
        return self.overrides.bootstrap

    def cluster_config(self, name: str) -> ClusterConfig:
        """The cluster this run asks for, named `name` (the environment's overrides in it already)."""
        return cluster_config(self.scenario.data, name, self.scenario.directory)

    def to_dict(self) -> dict[str, Any]:
        """JSON for XCom: nothing is read or checked again on the other side."""
        return {"scenario": self.scenario.to_json(), "overrides": self.overrides.to_dict(),
                "scenario_hash": self.scenario_hash, "cluster_key": self.cluster_key,
                "environment_overrides": self.environment_overrides}

    @classmethod
    def from_dict(cls, doc: dict[str, Any]) -> "ResolvedScenario":
        """Inverse of `to_dict`."""
        return cls(Scenario.from_json(doc["scenario"]), Overrides.from_dict(doc["overrides"]), doc["scenario_hash"],
                   doc["cluster_key"], doc.get("environment_overrides") or {})


def resolve(scenario: Scenario, overrides: Overrides = Overrides()) -> ResolvedScenario:
    """The scenario as it will run, resolved once: the run's overrides applied, its random schedule drawn
    (on an existing cluster the target `random` stays one resolved when injected), every fault and client
    property checked (the Java client's check starts a JVM: this is the only place that asks), the
    environment's extra client settings applied, the cluster reuse key computed. ScenarioError naming
    the file and field when it cannot take them — before anything starts."""
    from .client_config import check_client_config
    overridden = scenario.with_overrides(overrides.messages, overrides.kafka_version, overrides.brokers,
                                         overrides.bootstrap, overrides.backend, overrides.client,
                                         overrides.upgrade_to, overrides.attach_project)
    if overrides.bootstrap and (features := overridden.data["cluster"].get("features")):
        raise ScenarioError(f"{scenario.path}: cluster.features: {features} are format-time levels of a cluster "
                            f"kafkaproof starts; the existing cluster at {overrides.bootstrap} keeps the levels it has "
                            f"(run without --bootstrap, or drop cluster.features / cluster.elr)")
    # drawn once, recorded, replayable
    drawn = overridden.with_random_schedule(overrides.seed, known_nodes=not overrides.bootstrap)
    check_attach(drawn.data, str(drawn.path))  # a random schedule's drawn kinds too
    check_scenario_faults(drawn)  # the proxy's own rule parser, before anything starts
    check_client_config(drawn)  # the client's own property names
    try:
        environment = environment_overrides(os.environ)
    except ClientConfigError as e:
        raise KafkaproofError(f"environment: {e}") from None
    # What runs includes the environment's extra settings; the hash (history's "same configuration")
    # does not: they are the system under test changing, which is what history is there to catch.
    running = Scenario(drawn.name, drawn.path, apply_overrides(drawn.data, environment))
    unkeyed = ResolvedScenario(running, overrides, overridden.hash(), "", environment)
    # keyed by the cluster it resolved to: the environment is not applied a second time
    return dataclasses.replace(unkeyed, cluster_key=config_key(unkeyed.cluster_config("-")))
