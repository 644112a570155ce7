"""Host-wide cluster slots: one registry for every state directory on this host.

A cluster's slot decides its subnets (`10.77.<slot>.0/24`, compose `10.79.<slot>.0/24`), its
namespaces (`kp<slot>n<id>`) and its loopback ports (`20000 + 50*slot + ...`). Each state
directory (`KAFKAPROOF_STATE`: a checkout, a user, an Airflow) keeps its own clusters, so the
slots are claimed in a registry all of them share: one file per claimed slot, `slot-<n>.json`,
naming the state file of the cluster that holds it, created under a host-wide lock while that
state file is written (`claim`). A claim whose state file is gone (the cluster went down, or its
start failed) or names another slot is stale: the next allocation takes it over.

The registry is `$KAFKAPROOF_SLOTS`, else `/run/kafkaproof/slots` for root, else
`/tmp/kafkaproof-slots`. Its directory is sticky and writable by every user (as /tmp): a user
can claim a free slot but cannot remove another user's claim, so a slot of a state directory
this process cannot read counts as taken.
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import stat
import time
from pathlib import Path
from typing import Iterable, Iterator

from ..errors import ClusterError
from ..paths import file_lock
from . import state

log = logging.getLogger(__name__)

SLOTS_ENV = "KAFKAPROOF_SLOTS"


def registry_dir() -> Path:
    """Where the host's slot claims are (see the module docstring)."""
    if os.environ.get(SLOTS_ENV):
        return Path(os.environ[SLOTS_ENV])
    if os.geteuid() == 0 and os.access("/run", os.W_OK):
        return Path("/run/kafkaproof/slots")
    return Path("/tmp/kafkaproof-slots")


def _ensure_dir(d: Path) -> Path:
    if not d.is_dir():
        d.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(PermissionError):  # made by another user a moment ago
            os.chmod(d, 0o1777)
    st = os.lstat(d)
    # Another user's directory (a link, or one without the sticky bit) could swap or remove our claims.
    if stat.S_ISLNK(st.st_mode) or (st.st_uid not in (0, os.geteuid()) and not st.st_mode & stat.S_ISVTX):
        raise ClusterError(f"the cluster slot registry {d} is a link or another user's directory; remove it, or "
                           f"set {SLOTS_ENV} to a directory of your own")
    return d


@contextlib.contextmanager
def locked() -> Iterator[Path]:
    """The registry's host-wide lock (the directory is yielded): hold it from choosing a slot until the
    cluster's state file names it."""
    d = _ensure_dir(registry_dir())
    with file_lock(d / ".lock", every_user=True):  # every user's allocations take it
        yield d


def _claim_path(d: Path, slot: int) -> Path:
    return d / f"slot-{slot}.json"


def read_claim(slot: int, d: Path | None = None) -> dict | None:
    """The claim of `slot` ({"state", "cluster", "pid", "at"}), None when there is none."""
    try:
        return json.loads(_claim_path(d or registry_dir(), slot).read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"state": None}  # unreadable: someone's, taken


def claim_is_live(claim: dict | None, slot: int) -> bool:
    """Whether a claim still holds its slot: its state file exists and names that slot. A state file this
    process cannot read (another user's) counts as live."""
    if not claim:
        return False
    path = claim.get("state")
    if not path:
        return True
    try:
        return state.slot_in_file(Path(path)) == slot
    except FileNotFoundError:
        return False
    except PermissionError:
        return True
    except (OSError, ValueError):  # being written this instant, or damaged: leave it alone
        return True


def taken_slots(d: Path | None = None) -> set[int]:
    """The slots live claims hold."""
    d = d or registry_dir()
    if not d.is_dir():
        return set()
    taken = set()
    for p in d.glob("slot-*.json"):
        try:
            slot = int(p.stem.split("-", 1)[1])
        except ValueError:
            continue
        if claim_is_live(read_claim(slot, d), slot):
            taken.add(slot)
    return taken


def claim(d: Path, state_file: Path, cluster: str, slots: Iterable[int], avoid: set[int]) -> int:
    """Claim the first of `slots` that is neither in `avoid` nor held by a live claim, for the cluster whose
    state file is `state_file` (call it within `locked()`, and write that state file before leaving it)."""
    for slot in slots:
        if slot in avoid:
            continue
        path = _claim_path(d, slot)
        old = read_claim(slot, d)
        if old is not None:
            if claim_is_live(old, slot):
                continue
            try:
                path.unlink()
            except FileNotFoundError:
                pass
            except PermissionError:  # another user's stale claim in the sticky directory: theirs to clear
                continue
        data = {"state": str(Path(state_file).resolve()), "cluster": cluster, "pid": os.getpid(), "at": time.time()}
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except OSError as e:
            if e.errno == errno.EEXIST:
                continue
            raise ClusterError(f"cannot claim cluster slot {slot} in {d}: {e}; set {SLOTS_ENV} to a directory "
                               f"this user may write") from e
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        return slot
    raise ClusterError(f"no free cluster slot on this host (claims in {d}): run `kafkaproof cluster down --all` "
                       f"in the checkouts whose clusters hold them")


def release(slot: int, state_file: Path) -> None:
    """Remove the claim of `slot` if it is `state_file`'s (a cluster going down); anyone else's stays."""
    d = registry_dir()
    c = read_claim(slot, d)
    if c and c.get("state") == str(Path(state_file).resolve()):
        with contextlib.suppress(OSError):
            _claim_path(d, slot).unlink()


def claimed_by_others(slot: int, state_root: Path) -> bool:
    """Whether a live claim of another state directory (not under `state_root`) holds `slot`."""
    c = read_claim(slot)
    if not claim_is_live(c, slot):
        return False
    path = (c or {}).get("state")
    return not path or not Path(path).is_relative_to(Path(state_root).resolve())
