"""Where kafkaproof keeps its caches and state (overridable with environment variables), and where it
finds its data directories (the scenario catalog, the Spark job, the expectations, ...), and the one
way to lock a file across processes (`file_lock`)."""
from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile
from pathlib import Path
from typing import Iterator

from .errors import InstallError


def cache_dir() -> Path:
    """Download cache (Kafka distributions): `$KAFKAPROOF_CACHE` or `~/.cache/kafkaproof`."""
    return Path(os.environ.get("KAFKAPROOF_CACHE") or Path.home() / ".cache" / "kafkaproof")


def state_dir() -> Path:
    """Live cluster state (data dirs, logs, state files): `$KAFKAPROOF_STATE` or `~/.local/state/kafkaproof`."""
    return Path(os.environ.get("KAFKAPROOF_STATE") or Path.home() / ".local" / "state" / "kafkaproof")


def runs_dir() -> Path:
    """Default parent of run directories: `$KAFKAPROOF_RUNS` or `./runs`."""
    return Path(os.environ.get("KAFKAPROOF_RUNS") or "runs")


def this_host() -> str:
    """The kafkaproof host this process runs on: `$KAFKAPROOF_HOST` (two workers of one machine standing in
    for two hosts, or a host name other than the machine's) or the machine's host name."""
    return os.environ.get("KAFKAPROOF_HOST") or socket.gethostname()


PACKAGE_DIR = Path(__file__).resolve().parent
SOURCE_ROOT = PACKAGE_DIR.parents[1]  # plugins/kafkaproof/paths.py -> the checkout (when it is one)
# The data directories at the top of the repository. A wheel carries copies of them in
# kafkaproof/_share/ (setup.py's build_py); `scripts` holds only the Docker scripts there.
SHARED_DIRS = ("scenarios", "spark", "expectations", "java", "compose", "scripts", "examples")
PACKAGED_SHARE = PACKAGE_DIR / "_share"


def repo_root() -> Path | None:
    """The source checkout this package runs from (editable install, tests, DAGs); None when installed."""
    in_checkout = PACKAGE_DIR.parent.name == "plugins" and (SOURCE_ROOT / "scenarios").is_dir()
    return SOURCE_ROOT if in_checkout else None


def share_dir(name: str) -> Path:
    """One of kafkaproof's data directories (`SHARED_DIRS`): the checkout's own when running from
    a checkout, the copy packaged in the wheel (`kafkaproof/_share/<name>`) otherwise.

    Read only: anything built from these (the Java driver, Docker images) goes under `cache_dir()`.
    """
    if name not in SHARED_DIRS:
        raise ValueError(f"{name!r} is not one of kafkaproof's data directories: {', '.join(SHARED_DIRS)}")
    root = repo_root()
    path = (root if root is not None else PACKAGED_SHARE) / name
    if not path.is_dir():
        raise InstallError(f"kafkaproof's {name}/ directory is missing ({path}): this installation of "
                           f"kafkaproof is incomplete; reinstall it from a wheel built by setuptools "
                           f"(`pip install <checkout>`), or run it from a checkout")
    return path


def scenarios_dir() -> Path:
    """The scenario catalog: `$KAFKAPROOF_SCENARIOS`, else `share_dir("scenarios")`."""
    if os.environ.get("KAFKAPROOF_SCENARIOS"):
        return Path(os.environ["KAFKAPROOF_SCENARIOS"])
    return share_dir("scenarios")


def write_text_atomic(path: Path, text: str, private: bool = False) -> Path:
    """Replace `path` with `text` at once: readers see the old file or the new one, never a part.

    The temporary file has a name of its own, so writers in several threads or processes
    (drivers started at once, a run and its fault tasks) never move each other's file. The file
    is readable by everyone (0644, as a report a web server publishes must be), or by its owner
    only (0600) when `private`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=f".{path.name}.",
                                     suffix=".tmp", delete=False) as tmp:
        os.fchmod(tmp.fileno(), 0o600 if private else 0o644)
        tmp.write(text)
    os.replace(tmp.name, path)
    return path


@contextlib.contextmanager
def file_lock(path: Path, every_user: bool = False) -> Iterator[None]:
    """Hold an exclusive lock on the file `path` while the block runs, waiting for whoever holds it (another
    process, or another `file_lock` of the same file in this one). The file and its directory are created
    when missing; the lock goes when the block ends, also on an exception.

    With `every_user` the lock is one all users of the host share (in a directory like /tmp): the file
    is made writable by everyone and a symbolic link in its place is refused (OSError), never followed.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_RDWR | os.O_CREAT | (os.O_NOFOLLOW if every_user else 0)
    fd = os.open(path, flags, 0o666)
    try:
        if every_user:
            with contextlib.suppress(PermissionError):  # another user's file: already 0666
                os.fchmod(fd, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)
