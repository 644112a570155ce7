"""Corruption at rest: files of one kind in a node's log directory chosen, then bits flipped in them or their
tails cut (the `file_corrupt` fault; docs/corruption.md). Works on plain files: the fault layer says which
directory, which node is stopped first, and records what changed.

File kinds (spec/corruption.py): `segment` (a partition's `.log` files: `active` is the one with the highest base
offset, `closed` the others), `index` (their `.index` and `.timeindex`), `checkpoint` (the log directory's
`replication-offset-checkpoint` and `recovery-point-offset-checkpoint`, each chosen partition's
`leader-epoch-checkpoint`; `checkpoint=` one of them), `snapshot` (the KRaft `__cluster_metadata-0` log and its
`.checkpoint` snapshots; `metadata=snapshots|log` one of them).
"""
from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any, Iterable

from ..errors import FaultError

METADATA_DIR = "__cluster_metadata-0"
BROKER_CHECKPOINTS = ("replication-offset-checkpoint", "recovery-point-offset-checkpoint")
EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
# `checkpoint=`: the checkpoint files it names (spec/corruption.py CHECKPOINTS).
CHECKPOINT_FILES = {"leader-epoch": (EPOCH_CHECKPOINT,), "replication-offset": (BROKER_CHECKPOINTS[0],),
                    "recovery-point": (BROKER_CHECKPOINTS[1],), "all": (*BROKER_CHECKPOINTS, EPOCH_CHECKPOINT)}
# `metadata=`: the suffixes of the metadata files it names (snapshots are `<offset>-<epoch>.checkpoint`).
METADATA_SUFFIXES = {"snapshots": (".checkpoint",), "log": (".log",), "all": (".log", ".checkpoint")}
MAX_OFFSETS_RECORDED = 10  # a file's flipped offsets kept in the evidence (the count is always whole)
_PARTITION_DIR = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")


def partition_dirs(log_dir: Path, topic: str | None, partition: int | None) -> list[Path]:
    """The directories of a topic's partitions in a log directory (one partition when given); without a topic
    every partition directory but the internal ones (`__...`). Sorted."""
    out = []
    for d in sorted(p for p in log_dir.iterdir() if p.is_dir()) if log_dir.is_dir() else []:
        m = _PARTITION_DIR.match(d.name)
        if m is None or (topic is None and d.name.startswith("__")):
            continue
        if topic is not None and m["topic"] != topic or partition is not None and int(m["partition"]) != partition:
            continue
        out.append(d)
    return out


def _segment_bases(pdir: Path, which: str) -> list[str]:
    """The base offsets (file stems) of a partition's segments: the active one (the highest), the closed ones,
    or all."""
    bases = sorted((p.stem for p in pdir.glob("*.log")), key=int)
    if which == "active":
        return bases[-1:]
    if which == "closed":
        return bases[:-1]
    return bases


def choose_files(log_dir: Path, file_kind: str, topic: str | None = None, partition: int | None = None,
                 segment: str = "all", checkpoint: str = "all", metadata: str = "all") -> list[Path]:
    """The files of `file_kind` in a node's log directory that a corruption acts on (those that exist): of the
    segments `segment` names, the checkpoints `checkpoint` names, the metadata files `metadata` names."""
    if file_kind == "snapshot":
        mdir, suffixes = log_dir / METADATA_DIR, METADATA_SUFFIXES[metadata]
        return sorted(p for p in mdir.glob("*") if p.suffix in suffixes) if mdir.is_dir() else []
    dirs = partition_dirs(log_dir, topic, partition)
    if file_kind == "checkpoint":
        names = CHECKPOINT_FILES[checkpoint]
        found = [log_dir / name for name in BROKER_CHECKPOINTS if name in names]
        found += [d / EPOCH_CHECKPOINT for d in dirs if EPOCH_CHECKPOINT in names]
        return [p for p in found if p.is_file()]
    suffixes = {"segment": (".log",), "index": (".index", ".timeindex")}.get(file_kind)
    if suffixes is None:
        raise FaultError(f"params.file: {file_kind!r} is not a file kind; allowed: segment, index, checkpoint, "
                         f"snapshot")
    return [d / f"{base}{suffix}" for d in dirs for base in _segment_bases(d, segment) for suffix in suffixes
            if (d / f"{base}{suffix}").is_file()]


def bitflip(path: Path, probability: float, range_bytes: int, rng: random.Random) -> dict[str, Any]:
    """Flip one random bit in each `range_bytes` range of the file with chance `probability`, in place; what it
    flipped (`flipped`: bits, `offsets`: the first byte offsets)."""
    size = path.stat().st_size
    offsets = []
    for start in range(0, size, range_bytes):
        if rng.random() < probability:
            offsets.append(start + rng.randrange(min(range_bytes, size - start)))
    bits = [rng.randrange(8) for _ in offsets]
    if offsets:
        with open(path, "r+b") as f:
            for offset, bit in zip(offsets, bits):
                f.seek(offset)
                byte = f.read(1)[0]
                f.seek(offset)
                f.write(bytes([byte ^ (1 << bit)]))
            f.flush()
            os.fsync(f.fileno())
    return {"size": size, "flipped": len(offsets), "offsets": offsets[:MAX_OFFSETS_RECORDED]}


def truncate(path: Path, fraction: float) -> dict[str, Any]:
    """Cut the file to `fraction` of its size, in place; what it cut (`cut`: bytes, `size`: before)."""
    size = path.stat().st_size
    keep = int(size * fraction)
    os.truncate(path, keep)
    return {"size": size, "cut": size - keep}


def corrupt_files(log_dir: Path, files: Iterable[Path], mode: str, rng: random.Random, probability: float = 0.01,
                  range_bytes: int = 4096, fraction: float = 0.5) -> list[dict[str, Any]]:
    """Corrupt each file by `mode` (bitflip or truncate); per file what changed, its path relative to `log_dir`."""
    out = []
    for path in files:
        done = bitflip(path, probability, range_bytes, rng) if mode == "bitflip" else truncate(path, fraction)
        out.append({"file": str(path.relative_to(log_dir)), **done})
    return out
