"""Maven builds of kafkaproof's own Java projects (the Java driver, the example application): one build
at a time per cache entry (a file lock), offline first, online (Maven Central) when that fails."""
from __future__ import annotations

import hashlib
import logging
import shutil
import subprocess
from pathlib import Path

from ..errors import InstallError

log = logging.getLogger(__name__)


def mvn() -> str:
    """The `mvn` on PATH."""
    found = shutil.which("mvn")
    if not found:
        raise InstallError("Maven (`mvn`) is needed to build kafkaproof's Java projects: apt-get install maven "
                           "(make setup does)")
    return found


def run_maven(args: list[str], cwd: Path, what: str, log_path: Path | None = None) -> None:
    """Run Maven offline first (fast when ~/.m2 has everything), online if that fails.

    With `log_path`, both attempts' output is written there and a failure names it; without, the
    failure quotes Maven's ERROR lines (or its last lines).
    """
    offline = subprocess.run([mvn(), "-B", "-q", "-o", *args], cwd=cwd, capture_output=True, text=True)
    if log_path is not None:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(f"$ mvn -B -q -o {' '.join(args)}  (in {cwd})\n{offline.stdout}{offline.stderr}")
    if offline.returncode == 0:
        return
    log.info("%s: offline Maven build failed, trying online (Maven Central)", what)
    online = subprocess.run([mvn(), "-B", "-q", *args], cwd=cwd, capture_output=True, text=True)
    if log_path is not None:
        with open(log_path, "a") as f:
            f.write(f"\n$ mvn -B -q {' '.join(args)}  (in {cwd})\n{online.stdout}{online.stderr}")
    if online.returncode != 0:
        out = (online.stdout + online.stderr).strip().splitlines()
        errors = [line for line in out if "ERROR" in line][:12] or out[-12:]
        where = f"; Maven's whole output is in {log_path}" if log_path is not None else ""
        raise InstallError(f"{what} failed (mvn {' '.join(args)} in {cwd}){where}:\n" + "\n".join(errors))


def tree_hash(root: Path, files: list[Path]) -> str:
    """Pure over the files: a short hash of their paths (relative to `root`) and contents, in the given order."""
    h = hashlib.sha256()
    for f in files:
        h.update(str(f.relative_to(root)).encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()[:16]
