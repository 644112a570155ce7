"""Control channels only for their owner: private directories for Unix sockets, the peer's credentials,
and the secret token of a TCP control port asked for explicitly.

Every control channel kafkaproof opens (a fault proxy's, a diskfs', a run's fault-task control) is
its owner's only, twice over:
- its socket lives in a directory of mode 0700 owned by the user who started it (`socket_dir`), so
  another user cannot even connect;
- the server reads the peer's credentials (`SO_PEERCRED`) of every connection and answers any other
  uid with `refusal(...)` instead of obeying it (`peer_refusal`), should the directory ever be opened.

A Unix socket's path holds at most 107 bytes: when the state directory is too deep for that, the
sockets go to a directory of the same kind under /run/user/UID or /tmp (`socket_dir`).
"""
from __future__ import annotations

import hashlib
import hmac
import os
import pwd
import re
import secrets
import socket
import stat
import struct
from pathlib import Path

from .errors import FaultError
from .paths import state_dir, write_text_atomic

#: sun_path holds 108 bytes with its terminating NUL.
MAX_SOCKET_PATH = 107
#: Socket file names are at most this long (longer names are shortened with a hash).
MAX_NAME = 40
SOCKET_DIR = "sockets"
UNIX_PREFIX = "unix:"


class ControlRefused(FaultError):
    """A control channel refused a caller that is not its owner, or its private directory is not private."""


def user_label(uid: int) -> str:
    """`name (uid N)` of a user id, or `uid N` when it has no name."""
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def refusal(peer_uid: int, owner_uid: int) -> str | None:
    """Pure: None when `peer_uid` may command a channel of `owner_uid`, else the message it gets."""
    if peer_uid == owner_uid:
        return None
    return (f"this control socket accepts only its owner {user_label(owner_uid)}; the connecting process runs as "
            f"{user_label(peer_uid)}")


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket (`SO_PEERCRED`)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def peer_refusal(sock: socket.socket) -> str | None:
    """None when the peer of a connected Unix socket is this process's user, else its refusal."""
    return refusal(peer_uid(sock), os.geteuid())


def private_dir(path: Path) -> Path:
    """Create `path` (and its parents) if missing and make it 0700; ControlRefused when it is a symlink or not
    ours (another user made it first, e.g. under /tmp)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True, mode=0o700)
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
        raise ControlRefused(f"{path} should be a private directory of {user_label(os.geteuid())} but is "
                             f"{'a symlink or file' if not stat.S_ISDIR(st.st_mode) else 'owned by ' + user_label(st.st_uid)}: "
                             f"remove it, or set KAFKAPROOF_STATE to a directory of your own")
    if stat.S_IMODE(st.st_mode) != 0o700:
        os.chmod(path, 0o700)
    return path


def fallback_socket_dir(state: Path, uid: int, run_user: Path = Path("/run/user")) -> Path:
    """Pure: where the sockets of the state directory `state` go when its own path is too long (one
    directory per user and state directory, under /run/user/UID when that exists, else /tmp)."""
    digest = hashlib.sha1(str(state).encode()).hexdigest()[:12]
    base = run_user / str(uid)
    return (base if base.is_dir() else Path("/tmp")) / f"kafkaproof-{uid}-{digest}"


def socket_dir_for(state: Path, uid: int) -> Path:
    """Pure: `state/sockets`, unless a socket name there would pass the 107-byte limit."""
    preferred = Path(state).absolute() / SOCKET_DIR
    if len(os.fsencode(str(preferred))) + 1 + MAX_NAME + len(".sock") <= MAX_SOCKET_PATH:
        return preferred
    return fallback_socket_dir(Path(state).absolute(), uid)


def socket_dir() -> Path:
    """The private (0700) directory of this user's control sockets for the current state directory."""
    return private_dir(socket_dir_for(state_dir(), os.geteuid()))


def socket_name(name: str) -> str:
    """Pure: a socket file name for `name` that fits MAX_NAME (a readable prefix and a hash when too long)."""
    clean = re.sub(r"[^A-Za-z0-9_.-]", "-", name)
    if len(clean) > MAX_NAME:
        clean = f"{clean[:MAX_NAME - 13]}-{hashlib.sha1(name.encode()).hexdigest()[:12]}"
    return clean + ".sock"


def socket_path(name: str) -> Path:
    """A control socket's path in `socket_dir()` (the directory is created, the socket is not)."""
    return socket_dir() / socket_name(name)


def unix_path(address: str) -> str | None:
    """The path of a `unix:PATH` (or absolute path) control address; None for a HOST:PORT address."""
    if address.startswith(UNIX_PREFIX):
        return address[len(UNIX_PREFIX):]
    return address if address.startswith("/") else None


def connect_unix(path: str | Path, timeout_s: float, what: str) -> socket.socket:
    """A connected Unix socket to the control channel `what` at `path`; ControlRefused when the filesystem
    keeps us out (not its owner), OSError for the rest."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(str(path))
    except PermissionError as e:
        sock.close()
        try:
            owner = user_label(os.stat(Path(path).parent).st_uid)
        except OSError:
            owner = "the user that started it"
        raise ControlRefused(f"{what} at {path} accepts only its owner {owner}; this process runs as "
                             f"{user_label(os.geteuid())} ({e.strerror})") from e
    except OSError:
        sock.close()
        raise
    return sock


# --- the token of a TCP control port (only when asked for explicitly) ------------------------------

def write_token(path: Path) -> str:
    """A fresh secret token in a file only its owner may read (0600); returns the token."""
    token = secrets.token_hex(32)
    write_text_atomic(Path(path), token + "\n", private=True)
    return token


def read_token(path: Path) -> str:
    """The token of a TCP control port from its file; ControlRefused when others may read the file."""
    st = os.stat(path)
    if st.st_mode & 0o077 or st.st_uid != os.geteuid():
        raise ControlRefused(f"the control token file {path} must be its owner's only (mode 0600, owned by "
                             f"{user_label(os.geteuid())}); it is {stat.filemode(st.st_mode)} of {user_label(st.st_uid)}")
    token = Path(path).read_text().strip()
    if not token:
        raise ControlRefused(f"the control token file {path} is empty")
    return token


def token_matches(given: object, token: str) -> bool:
    """Constant-time comparison of a request's token with the channel's."""
    return isinstance(given, str) and hmac.compare_digest(given.encode(), token.encode())
