"""Line-based JSON control protocol of a proxy process.

One JSON object per line in each direction. Requests carry ``op`` and the
operation's fields; every reply has ``ok`` and, when ``ok`` is false, ``error``.
An optional ``req`` field in a request is echoed in its reply.

================  ==========================  ============================================
op                request fields              reply fields
================  ==========================  ============================================
ping              -                           ``pid``
add_rule          ``rule`` (object)           ``rule_id``
remove_rule       ``rule_id``                 ``removed`` (bool), ``rule`` (its final state, or null)
clear             -                           ``removed`` (int)
rules             -                           ``rules`` (list)
stats             -                           ``stats`` (object)
deliveries_start  ``limit``, ``max_bytes``,   ``deliveries`` (the new log's summary)
                  ``topics`` (all optional)
deliveries        ``start`` (0), ``max``      ``deliveries``: the summary, ``records`` from ``start``,
                  (5,000; at most 20,000)     ``unread`` (first page), ``next`` (None: the last page)
deliveries_stop   ``clear`` (false)           ``deliveries`` (the summary)
================  ==========================  ============================================

The delivery log (``deliveries.py``) keeps what Fetch answers hand the clients while it is on.

The channel is its owner's only (``kafkaproof.controlsock``): a Unix socket (``unix:PATH``, in a
0700 directory) whose server answers a peer of another uid (``SO_PEERCRED``) with a refusal, or, only
when asked for explicitly, a TCP port where every request carries the channel's secret ``token``.
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

from .. import controlsock
from .deliveries import read_all
from .errors import ControlError, ProxyError
from .server import FaultProxy, format_hostport, parse_hostport

log = logging.getLogger("kafkaproof.proxy.control")

MAX_LINE = 1 << 20


def handle_command(proxy: FaultProxy, request: Any) -> dict[str, Any]:
    """Execute one decoded control request against ``proxy``; never raises."""
    if not isinstance(request, dict):
        return {"ok": False, "error": "a control request is a JSON object"}
    op = request.get("op")
    reply: dict[str, Any] = {"ok": True}
    try:
        if op == "ping":
            reply["pid"] = os.getpid()
        elif op == "add_rule":
            reply["rule_id"] = proxy.add_rule(request.get("rule"))
        elif op == "remove_rule":
            final = proxy.remove_rule(str(request.get("rule_id")))
            reply["removed"], reply["rule"] = final is not None, final
        elif op == "clear":
            reply["removed"] = proxy.clear()
        elif op == "rules":
            reply["rules"] = proxy.rules()
        elif op == "stats":
            reply["stats"] = proxy.stats()
        elif op == "deliveries_start":
            reply["deliveries"] = proxy.start_deliveries(request.get("limit"), request.get("max_bytes"),
                                                         request.get("topics"))
        elif op == "deliveries":
            reply["deliveries"] = proxy.read_deliveries(request.get("start", 0), request.get("max"))
        elif op == "deliveries_stop":
            reply["deliveries"] = proxy.stop_deliveries(bool(request.get("clear", False)))
        else:
            reply = {"ok": False, "error": f"unknown op {op!r}; use ping, add_rule, remove_rule, clear, rules, stats, "
                                           f"deliveries_start, deliveries, deliveries_stop"}
    except ProxyError as exc:
        reply = {"ok": False, "error": str(exc)}
    if "req" in request:
        reply["req"] = request["req"]
    return reply


class ControlServer:
    """Serves the control protocol for one :class:`FaultProxy`: on a Unix socket (``unix:PATH``) for this
    process's user only, or on a TCP ``host:port`` where every request must carry ``token``."""

    def __init__(self, proxy: FaultProxy, address: str, token: str | None = None) -> None:
        self.proxy = proxy
        self.path = controlsock.unix_path(address)
        self.token = token
        if self.path is None:
            self.host, self.port = parse_hostport(address)
            if not token:
                raise ProxyError(f"a TCP control port ({address}) needs a secret token (--control-token-file); "
                                 f"without one, control the proxy through a Unix socket (--control unix:PATH)")
        self._server: asyncio.base_events.Server | None = None

    async def start(self) -> None:
        """Bind (a TCP port 0 picks a free port, see :attr:`address`); a Unix socket is made 0600."""
        if self.path is not None:
            Path(self.path).unlink(missing_ok=True)
            self._server = await asyncio.start_unix_server(self._serve, self.path, limit=MAX_LINE)
            os.chmod(self.path, 0o600)
            return
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_LINE)
        self.port = int(self._server.sockets[0].getsockname()[1])

    @property
    def address(self) -> str:
        """``unix:PATH`` or the bound ``host:port``."""
        if self.path is not None:
            return controlsock.UNIX_PREFIX + self.path
        return format_hostport(self.host, self.port)

    async def stop(self) -> None:
        """Stop accepting control connections (and remove the socket file)."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self.path is not None:
            Path(self.path).unlink(missing_ok=True)

    def _refusal(self, writer: asyncio.StreamWriter) -> str | None:
        """Why this connection may not command the proxy (None: it may)."""
        if self.path is None:
            return None
        sock = writer.get_extra_info("socket")
        try:
            return controlsock.peer_refusal(sock)
        except (OSError, AttributeError) as exc:
            return f"cannot tell who is connecting ({exc}); refused"

    def _answer(self, request: Any) -> dict[str, Any]:
        if self.token is not None and not (isinstance(request, dict)
                                           and controlsock.token_matches(request.get("token"), self.token)):
            return {"ok": False, "error": "this TCP control port needs its cluster's secret token "
                                          "(the `token` field, from the 0600 token file)"}
        return handle_command(self.proxy, request)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        refused = self._refusal(writer)
        if refused:
            log.warning("control connection refused: %s", refused)
        try:
            while True:
                try:
                    line = await reader.readline()
                except ValueError:
                    writer.write(b'{"ok":false,"error":"line too long"}\n')
                    break
                if not line:
                    break
                if not line.strip():
                    continue
                if refused:  # read before answering, so the caller gets the reason rather than a broken pipe
                    writer.write(json.dumps({"ok": False, "error": refused}).encode() + b"\n")
                    await writer.drain()
                    break
                try:
                    request = json.loads(line)
                except json.JSONDecodeError as exc:
                    reply: dict[str, Any] = {"ok": False, "error": f"invalid JSON: {exc}"}
                else:
                    reply = self._answer(request)
                writer.write(json.dumps(reply, default=str).encode() + b"\n")
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


class ControlClient:
    """Blocking client of the control protocol (one connection, one request at a time): ``unix:PATH``, or a
    TCP ``host:port`` with its ``token``."""

    def __init__(self, address: str, timeout: float = 10.0, token: str | None = None) -> None:
        path = controlsock.unix_path(address)
        try:
            if path is not None:
                self._sock = controlsock.connect_unix(path, timeout, "the proxy control socket")
            else:
                self._sock = socket.create_connection(parse_hostport(address), timeout=timeout)
        except controlsock.ControlRefused as exc:
            raise ControlError(str(exc)) from exc
        except OSError as exc:
            raise ControlError(f"cannot reach proxy control port {address}: {exc}") from exc
        self._file = self._sock.makefile("rwb")
        self.address = address
        self.token = token

    def call(self, op: str, **fields: Any) -> dict[str, Any]:
        """Send one request; returns the reply, raising :class:`ControlError` if it is not ok."""
        try:
            request = {"op": op, **fields, **({"token": self.token} if self.token else {})}
            self._file.write(json.dumps(request).encode() + b"\n")
            self._file.flush()
            line = self._file.readline()
        except OSError as exc:
            raise ControlError(f"control connection to {self.address} failed during {op}: {exc}") from exc
        if not line:
            raise ControlError(f"proxy at {self.address} closed the control connection during {op}")
        reply = json.loads(line)
        if not reply.get("ok"):
            raise ControlError(f"proxy refused {op}: {reply.get('error')}")
        return reply

    def add_rule(self, rule: dict[str, Any]) -> str:
        """Install a rule; returns its id."""
        return str(self.call("add_rule", rule=rule)["rule_id"])

    def remove_rule(self, rule_id: str) -> dict[str, Any] | None:
        """Uninstall a rule; returns it with its final counters (`fired`, `matched`), None if the proxy
        had no such rule."""
        return self.call("remove_rule", rule_id=rule_id).get("rule")

    def clear(self) -> int:
        """Uninstall every rule; returns how many there were."""
        return int(self.call("clear")["removed"])

    def rules(self) -> list[dict[str, Any]]:
        """Installed rules with state and counters."""
        return list(self.call("rules")["rules"])

    def stats(self) -> dict[str, Any]:
        """Listener counters, rules and event count."""
        return dict(self.call("stats")["stats"])

    def deliveries_start(self, limit: int | None = None, max_bytes: int | None = None,
                         topics: list[str] | None = None) -> dict[str, Any]:
        """Turn the proxy's delivery log on (anew); returns its summary."""
        fields = {k: v for k, v in (("limit", limit), ("max_bytes", max_bytes), ("topics", topics)) if v is not None}
        return dict(self.call("deliveries_start", **fields)["deliveries"])

    def deliveries(self) -> dict[str, Any]:
        """The whole delivery log, read page by page: its summary, ``records`` and ``unread``."""
        return read_all(self.call)

    def deliveries_stop(self, clear: bool = False) -> dict[str, Any]:
        """Stop the delivery log (readable until ``clear``); returns its summary."""
        return dict(self.call("deliveries_stop", clear=clear)["deliveries"])

    def close(self) -> None:
        """Close the control connection."""
        try:
            self._file.close()
        finally:
            self._sock.close()
