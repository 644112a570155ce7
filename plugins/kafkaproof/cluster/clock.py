"""A node's wall clock under libfaketime: how a node is started so its clock can move, and moving it.

A node of a cluster started with clock faults on (`ClusterConfig.clock`) runs with Debian's
libfaketime preloaded and reads its offset from its own file (`<node dir>/clock.rc`, e.g.
`+172800.000`), re-read within `SETTLE_S` seconds. Only the wall clock moves
(`FAKETIME_DONT_FAKE_MONOTONIC`): Java's `System.currentTimeMillis` (record timestamps, retention,
transaction and session deadlines that Kafka keeps in wall time) follows the offset, `nanoTime`
(timers, request timeouts) does not. A node restarted during a clock fault keeps its offset, as a
machine with a wrong clock would.
"""
from __future__ import annotations

from pathlib import Path

from ..errors import ClusterError
from ..paths import write_text_atomic

# The multi-threaded variant: a JVM reads the clock from many threads at once.
LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1")
CACHE_S = 1
# libfaketime checks its file when a clock read finds the cache older than CACHE_S, in whole seconds:
# a JVM saw a new offset up to 2 s after the file changed (measured). Injection and heal wait this long.
SETTLE_S = 2 * CACHE_S + 0.5
CLOCK_FILE = "clock.rc"


def clock_file(node_dir: Path) -> Path:
    return node_dir / CLOCK_FILE


def faketime_env(node_dir: Path) -> dict[str, str]:
    """The environment variables that start a node under libfaketime with its own offset file (made at
    +0 when missing); ClusterError when libfaketime is not installed."""
    if not LIBFAKETIME.exists():
        raise ClusterError(f"clock faults need libfaketime ({LIBFAKETIME}): install Debian's faketime package "
                           f"(`make setup` does)")
    path = clock_file(node_dir)
    if not path.exists():
        write_text_atomic(path, render_offset(0))
    # Without FAKETIME_FORCE_MONOTONIC_FIX=0 libfaketime reworks every timed wait of the JVM (its
    # condition variables use the monotonic clock): Thread.sleep(1) took 14 ms and a broker never
    # formed a quorum. With it, only the wall clock is touched (0.2 µs a read, sleeps exact).
    # FAKETIME_DISABLE_SHM: without it the preloading `ip netns exec` made a /dev/shm segment the JVM then
    # inherited (FAKETIME_SHARED); the offset file is all a node needs.
    return {"LD_PRELOAD": str(LIBFAKETIME), "FAKETIME_TIMESTAMP_FILE": str(path),
            "FAKETIME_CACHE_DURATION": str(CACHE_S), "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            "FAKETIME_FORCE_MONOTONIC_FIX": "0", "FAKETIME_DISABLE_SHM": "1"}


def render_offset(offset_s: float) -> str:
    """Pure: libfaketime's relative offset for `offset_s` seconds (millisecond precision)."""
    return f"{offset_s:+.3f}\n"


def parse_offset(text: str) -> float:
    """Pure: inverse of `render_offset`."""
    return float(text.strip() or 0)


def set_offset(node_dir: Path, offset_s: float) -> None:
    """Move the node's wall clock to true time + `offset_s`: its JVM reads the file within `SETTLE_S`."""
    write_text_atomic(clock_file(node_dir), render_offset(offset_s))


def read_offset(node_dir: Path) -> float:
    """The offset the node's file holds (0 when it has none)."""
    path = clock_file(node_dir)
    return parse_offset(path.read_text()) if path.exists() else 0.0


def process_has_faketime(pid: int) -> bool:
    """Whether libfaketime is loaded in the process (its memory maps), i.e. the offset reaches it."""
    try:
        return LIBFAKETIME.name in Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return False
