"""Several log directories per broker (JBOD): `cluster.log_dirs: N`, and what `log_dir_failure` needs. Pure.

With N >= 2 a broker's `log.dirs` is `data/log-0` .. `data/log-<N-1>` and its KRaft metadata log stays in
`data/` (`metadata.log.dir`), apart from them: a failed log directory takes its partitions offline on that
broker (Kafka moves their leadership to other replicas), never the broker's metadata, which would stop it.
They sit under the node's one `data/` so that diskfs (cluster.disk) can fail one of them (docs/disk.md).
Kafka runs JBOD under KRaft from 3.8 on (KIP-858).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping

MAX_LOG_DIRS = 8
MIN_KAFKA = (3, 8)
LOG_DIR_KINDS = ("log_dir_failure",)

SCHEMA = {"type": "integer", "minimum": 1, "maximum": MAX_LOG_DIRS,
          "description": "log directories per broker (JBOD; default 1): log_dir_failure fails one of them"}


def log_dir_name(index: int) -> str:
    """Pure: the name of a broker's log directory `index` inside its `data/` (with several)."""
    return f"log-{index}"


def dir_properties(data_dir: Path, log_dirs: int) -> dict[str, str]:
    """Pure: the server.properties entries for a node's log directories: `log.dirs` (and, with several,
    `metadata.log.dir`, the node's `data_dir`, apart from them)."""
    if log_dirs <= 1:
        return {"log.dirs": str(data_dir)}
    return {"log.dirs": ",".join(str(data_dir / log_dir_name(i)) for i in range(log_dirs)),
            "metadata.log.dir": str(data_dir)}


def check(data: Mapping[str, Any], fail: Callable[[str, str], None]) -> None:
    """Refuse what cannot run: several log directories off the local backend or on a Kafka before 3.8, and a
    log_dir_failure (in the timeline or drawn at random) on brokers with one log directory."""
    cluster = data["cluster"]
    n = int(cluster.get("log_dirs", 1))
    if n > 1:
        if cluster.get("backend", "local") != "local":
            fail("cluster.log_dirs", f"{n}: only the local backend lays out several log directories per broker")
        version = tuple(int(x) for x in str(cluster["kafka_version"]).split(".")[:2])
        if version < MIN_KAFKA:
            fail("cluster.log_dirs", f"{n}: Kafka {cluster['kafka_version']} has no JBOD under KRaft; use "
                                     f"{'.'.join(map(str, MIN_KAFKA))} or later")
    kinds = [(f"faults[{i}]", f["kind"]) for i, f in enumerate(data["faults"])]
    kinds += [("faults.random", k["kind"]) for k in (data.get("random_faults") or {}).get("kinds", [])]
    for where, kind in kinds:
        if kind in LOG_DIR_KINDS and n < 2:
            fail(f"{where}.kind", f"{kind} fails one of a broker's log directories, and this cluster's brokers "
                                  f"have one; set cluster.log_dirs to 2 or more")
