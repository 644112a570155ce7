"""``python -m kafkaproof.proxy``: run a fault proxy with a control channel (its owner's Unix socket by default).

Prints one JSON "ready" line on stdout once every socket is bound (ports given as
0 are resolved there), then logs to stderr until SIGTERM/SIGINT.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Sequence

from .. import controlsock
from .control import ControlServer
from .errors import ProxyError
from .protocol import api_key_of
from .server import FaultProxy, Route, parse_hostport

log = logging.getLogger("kafkaproof.proxy")


def build_parser() -> argparse.ArgumentParser:
    """Command-line interface."""
    p = argparse.ArgumentParser(
        prog="python -m kafkaproof.proxy",
        description="Kafka-aware fault proxy: one listener per broker, rules driven over a JSON control channel.")
    p.add_argument("--listen", action="append", required=True, metavar="[NODE_ID@]HOST:PORT=UPSTREAM_HOST:PORT",
                   help="a listener in front of one broker (repeat per broker); port 0 picks a free port")
    p.add_argument("--control", metavar="unix:PATH|HOST:PORT",
                   help="the control channel (reported in the ready line): a Unix socket only this user may use "
                        "(default: unix:<state dir>/sockets/proxy-<pid>.sock), or, asked for explicitly, a TCP "
                        "port, which needs --control-token-file")
    p.add_argument("--control-token-file", metavar="FILE",
                   help="a TCP control port's secret token (a 0600 file): every request must carry it")
    p.add_argument("--events", metavar="FILE", help="append events as JSON lines to FILE")
    p.add_argument("--advertise-host", help="host written into rewritten broker addresses "
                                            "(default: the listen host, 127.0.0.1 for a wildcard)")
    p.add_argument("--no-rewrite", action="store_true",
                   help="do not rewrite broker addresses (brokers advertise the proxy addresses themselves)")
    p.add_argument("--peer", action="append", default=[], metavar="NODE_ID=HOST:PORT",
                   help="broker NODE_ID is fronted by another proxy process at HOST:PORT: rewrite its address "
                        "to that (repeat per broker; with one proxy process per broker)")
    p.add_argument("--max-version", action="append", default=[], metavar="API=VERSION",
                   help="cap an API's max version in ApiVersions responses, e.g. produce=9")
    p.add_argument("--rule", action="append", default=[], metavar="JSON", help="install a rule at start")
    p.add_argument("--seed", type=int, help="seed of the random draws (probabilities, latency)")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--no-uvloop", action="store_true", help="use the stock asyncio loop even if uvloop is installed")
    p.add_argument("--exit-with-parent", action="store_true",
                   help="stop when the parent process dies (used by ProxyProcess, so no proxy outlives its owner)")
    return p


def _peers(items: Sequence[str]) -> dict[int, tuple[str, int]]:
    peers = {}
    for item in items:
        node, sep, address = item.partition("=")
        if not sep or not node.strip().isdigit():
            raise ProxyError(f"--peer expects NODE_ID=HOST:PORT, got {item!r}")
        peers[int(node)] = parse_hostport(address)
    return peers


def _caps(items: Sequence[str]) -> dict[int, int]:
    caps = {}
    for item in items:
        api, sep, version = item.partition("=")
        if not sep or not version.strip().isdigit():
            raise ProxyError(f"--max-version expects API=VERSION, got {item!r}")
        try:
            caps[api_key_of(api)] = int(version)
        except ValueError as exc:
            raise ProxyError(f"--max-version {item!r}: {exc}") from None
    return caps


async def serve(args: argparse.Namespace) -> None:
    """Start proxy and control server, print the ready line, run until signalled."""
    proxy = FaultProxy([Route.parse(text) for text in args.listen], events=args.events,
                       rewrite=not args.no_rewrite, advertise_host=args.advertise_host,
                       version_caps=_caps(args.max_version), seed=args.seed, peers=_peers(args.peer))
    control = ControlServer(proxy, args.control or controlsock.UNIX_PREFIX + str(
        controlsock.socket_path(f"proxy-{os.getpid()}")),
        token=controlsock.read_token(Path(args.control_token_file)) if args.control_token_file else None)
    await proxy.start()
    try:
        for text in args.rule:
            proxy.add_rule(json.loads(text))
        await control.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        ready = {"ready": True, "pid": os.getpid(), "control": control.address, **proxy.describe(),
                 "bootstrap": proxy.bootstrap}
        sys.stdout.write(json.dumps(ready) + "\n")
        sys.stdout.flush()
        if args.exit_with_parent:
            asyncio.create_task(_watch_parent(args.parent_pid, stop))
        await stop.wait()
        log.info("signal received, stopping")
    finally:
        await control.stop()
        await proxy.stop()


async def _watch_parent(parent: int, stop: asyncio.Event) -> None:
    while not stop.is_set():
        if os.getppid() != parent:
            log.warning("parent process %d is gone, stopping", parent)
            stop.set()
            return
        await asyncio.sleep(1.0)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the process exit code."""
    args = build_parser().parse_args(argv)
    # Read before anything slow: the owner waits for our ready line, so it is alive now.
    args.parent_pid = os.getppid()
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s.%(msecs)03d %(levelname)s %(name)s[%(process)d]: %(message)s",
                        datefmt="%Y-%m-%dT%H:%M:%S")
    runner = asyncio.run
    if not args.no_uvloop:
        try:
            import uvloop

            runner = uvloop.run
        except ImportError:
            pass
    try:
        runner(serve(args))
    except (ProxyError, controlsock.ControlRefused, json.JSONDecodeError, OSError) as exc:
        log.error("%s", exc)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
