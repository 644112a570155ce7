"""The manifest of a run directory (`manifest.json`): a typed view of what every later step reads.

The runner writes it as JSON (docs/ledger-schema.md "manifest.json"); `Manifest` wraps
the parsed document so readers use named properties instead of `.get` chains. The raw
document stays available as `data` (older runs may lack newer fields: properties say None).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from .client_versions import ProcessClient, read_client_versions
from .ledger import read_manifest


@dataclass(frozen=True)
class Manifest:
    """One run's manifest."""

    data: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def read(cls, run_dir: Path) -> "Manifest":
        """Read `<run_dir>/manifest.json`; LedgerError naming the file when there is none."""
        return cls(read_manifest(Path(run_dir)))

    def _get(self, *path: str) -> Any:
        cur: Any = self.data
        for key in path:
            if not isinstance(cur, Mapping) or key not in cur:
                return None
            cur = cur[key]
        return cur

    @property
    def not_applicable(self) -> dict[str, str]:
        """Anomaly kind -> why the run cannot judge it (an application run, issue 39); {} otherwise."""
        found = self._get("application", "not_applicable")
        return {str(k): str(v) for k, v in found.items()} if isinstance(found, Mapping) else {}

    @property
    def run_id(self) -> str | None:
        return self._get("run_id")

    @property
    def status(self) -> str | None:
        """complete | incomplete | error | running."""
        return self._get("status")

    @property
    def error(self) -> str | None:
        return self._get("error")

    @property
    def scenario(self) -> dict[str, Any]:
        """The resolved scenario as run ({} if unknown)."""
        return dict(self._get("scenario") or {})

    @property
    def reused_after(self) -> list[str]:
        """The scenarios that ran on the cluster before this run, when a pipeline reused it ([] when fresh)."""
        reuse = self._get("cluster_reuse") or {}
        return list(reuse.get("runs_before") or []) if reuse.get("reused") else []

    @property
    def scenario_name(self) -> str | None:
        return self._get("scenario_name") or self.scenario.get("name")

    @property
    def scenario_hash(self) -> str | None:
        return self._get("scenario_hash")

    @property
    def guarantee(self) -> str | None:
        return self._get("guarantee") or self.scenario.get("guarantee")

    @property
    def expect(self) -> dict[str, Any]:
        """{"outcome": "pass"|"detect", "detect": [...]}."""
        for e in (self._get("expect"), self.scenario.get("expect")):
            if isinstance(e, Mapping):
                detect = list(e.get("detect") or [])
                return {"outcome": e.get("outcome") or ("detect" if detect else "pass"), "detect": detect}
        return {"outcome": "pass", "detect": []}

    @property
    def expect_outcome(self) -> str:
        return self.expect["outcome"]

    @property
    def expect_why(self) -> str:
        """Why a negative control must detect what it lists ("" otherwise)."""
        for e in (self._get("expect"), self.scenario.get("expect")):
            if isinstance(e, Mapping) and e.get("why"):
                return str(e["why"])
        return ""

    @property
    def scenario_path(self) -> str | None:
        return self._get("scenario_path")

    @property
    def kafka_version(self) -> str | None:
        return self._get("versions", "kafka")

    @property
    def client_version(self) -> str | None:
        return self._get("versions", "librdkafka")

    @property
    def client_versions(self) -> list[ProcessClient]:
        """Each producer's and consumer's client libraries and exact versions (older runs: read off `clients`)."""
        return read_client_versions(self.data)

    @property
    def t0_ns(self) -> int | None:
        """The run's monotonic origin (every `*_ns` of the ledger is on this clock)."""
        v = self._get("clock", "monotonic_origin_ns")
        return None if v is None else int(v)

    @property
    def wall_origin_ns(self) -> int | None:
        v = self._get("clock", "wall_origin_ns")
        return None if v is None else int(v)

    @property
    def topic(self) -> str | None:
        return self._get("topic")

    @property
    def timings(self) -> dict[str, dict]:
        return dict(self._get("timings") or {})

    @property
    def clients(self) -> dict[str, list]:
        return dict(self._get("clients") or {})

    @property
    def fault_errors(self) -> list[str]:
        return list(self._get("fault_errors") or [])

    @property
    def cluster(self) -> dict[str, Any]:
        """The cluster's status when the run started."""
        return dict(self._get("cluster") or {})

    @property
    def counts(self) -> dict[str, int]:
        return dict(self._get("counts") or {})
