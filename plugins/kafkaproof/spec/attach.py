"""Pure: a scenario that runs on a team's own compose project (`cluster: {backend: compose, attach: NAME}`,
or the run's override `--attach-compose-project NAME`), checked before anything starts.

The project runs with its own settings, so the fields that describe a cluster kafkaproof would start are
refused (all but `proxy`: kafkaproof's fault proxies in front of the published ports), and so are the
faults the attached backend cannot inject (clock and disk: never, kafkaproof starts neither the project's
JVMs nor its volumes) and the rolls that would recreate the team's service (a rolling_upgrade, a
rolling_restart with `config`; a rolling_restart without it restarts each container in place): each
error names the file and the field, and says what is supported.
"""
from __future__ import annotations

import re
from typing import Any

from ..errors import ScenarioError
from .fault_families import NETWORK, PROCESS, PROXY, ROLLING, family_of

PROJECT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")  # what compose allows for a project name
SCHEMA = {"type": "string", "pattern": PROJECT_RE.pattern,
          "description": "compose backend: attach to this running compose project of yours (`docker compose ls`) "
                         "instead of starting one; process, network and proxy faults (docs/compose.md)"}
ATTACHED_FAMILIES = (PROCESS, NETWORK, PROXY)
SUPPORTED_TEXT = ("on an attached compose project (cluster.attach) the faults are process, network and proxy faults, "
                  "rolling_restart without config (each container restarted in place) and consumer/app faults; a "
                  "rolling_upgrade or a settings change would recreate your service (yours to do), clock and disk "
                  "faults need a cluster kafkaproof starts (its JVMs under libfaketime, its log directories on diskfs)")
# Fields of a cluster kafkaproof starts; an attached project has its own (`proxy` is kafkaproof's, in front of it).
_STARTING_FIELDS = ("config", "node_config", "image", "compose_file", "clock", "disk")


def attach_project(data: dict[str, Any]) -> str | None:
    """The compose project a scenario attaches to, None when it starts its own cluster."""
    return data.get("cluster", {}).get("attach")


def check_attach(data: dict[str, Any], source: str) -> None:
    """ScenarioError naming `source` and the field when an attaching scenario asks what attaching cannot give."""
    project = attach_project(data)
    if project is None:
        return
    cluster = data["cluster"]
    if not PROJECT_RE.match(str(project)):
        raise ScenarioError(f"{source}: cluster.attach: {project!r} is not a compose project name (lowercase "
                            f"letters, digits, '-' and '_')")
    if cluster.get("backend") != "compose":
        raise ScenarioError(f"{source}: cluster.backend: attach ({project}) needs backend: compose, not "
                            f"{cluster.get('backend', 'local')!r}")
    for i, fault in enumerate(data.get("faults") or []):
        _check_kind(fault.get("kind", ""), fault.get("target", ""), f"{source}: faults[{i}].kind",
                    fault.get("params") or {})
    for i, item in enumerate((data.get("random_faults") or {}).get("kinds") or []):
        _check_kind(item.get("kind", ""), "", f"{source}: random_faults.kinds[{i}].kind")
    for i, service in enumerate((data.get("application") or {}).get("services") or []):
        if isinstance(service, dict) and "image" in service:
            raise ScenarioError(f"{source}: application.services[{i}].image: container services on an attached "
                                f"compose project ({project}) are not built yet; run the service as a command")
    for key in _STARTING_FIELDS:
        if cluster.get(key):
            raise ScenarioError(f"{source}: cluster.{key}: an attached compose project ({project}) runs with its own "
                                f"settings and image; kafkaproof starts nothing to give it {key}")


def _check_kind(kind: str, target: str, where: str, params: dict[str, Any] | None = None) -> None:
    family = family_of(kind, target)
    if family is ROLLING and kind == "rolling_restart" and not (params or {}).get("config"):
        return
    if family not in ATTACHED_FAMILIES and not family.target_prefix:
        raise ScenarioError(f"{where}: {kind!r} ({family.name} fault): {SUPPORTED_TEXT}")


def with_attach(data: dict[str, Any], project: str, source: str) -> dict[str, Any]:
    """The scenario data attached to `project` (the run's override), checked as `cluster.attach` is."""
    cluster = {**data["cluster"], "backend": "compose", "attach": project}
    out = {**data, "cluster": cluster}
    check_attach(out, f"{source} (with attach={project})")
    return out
