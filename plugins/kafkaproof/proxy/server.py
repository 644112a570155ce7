"""The asyncio Kafka-aware fault proxy: listeners, connections, rules and actions.

Per client connection there are two frame protocols (client side, broker side,
see :mod:`.stream`) and two ordered senders. Requests are peeked (header,
Produce acks) and forwarded; each request that will get a response reserves a
*slot* in the client-bound sender, in request order, and goes on the FIFO of
requests awaiting the broker. A broker response fills the slot of the FIFO
head. Because the client-bound sender writes slots strictly in order, the
proxy can delay, drop, replace or synthesise a response without ever
reordering the stream: a synthetic error for request N waits behind the real
response to request N-1.

Without rules the per-request work is a header peek, two deque appends and a
write; bodies are decoded only for ApiVersions/Metadata/FindCoordinator/
DescribeCluster responses (rare) and for requests a rule selects.
"""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import ipaddress
import itertools
import logging
import random
import socket
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from . import protocol as kp
from .errors import KafkaProtocolError, ProxyError, RuleError, UnsupportedVersion
from .events import EventSink, JsonlEventSink, stamp
from .stream import (
    SLOT_DROP, SLOT_PENDING, SLOT_READY, SLOT_RESET, FrameProtocol, Item, OrderedSender, abort_with_rst,
)
from .rules import (
    BANDWIDTH, BLACKHOLE, BOTH, ERROR, LATENCY, LOST_ACK, REQUEST, RESET, RESPONSE,
    Pacer, Rule, RuleState, parse_rule,
)

log = logging.getLogger("kafkaproof.proxy")

#: Max versions the proxy lets through ApiVersions: what kio can decode for the APIs it decodes.
KIO_CAPS: Mapping[int, int] = {
    api: kp.max_supported_version(api)
    for api in (kp.PRODUCE, kp.FETCH, kp.METADATA, kp.FIND_COORDINATOR, kp.DESCRIBE_CLUSTER)
}
#: Extra caps when rewriting addresses: Produce v10+ and Fetch v16+ responses may carry
#: broker endpoints (KIP-951) that would send the client around the proxy.
REWRITE_CAPS: Mapping[int, int] = {kp.PRODUCE: 9, kp.FETCH: 15}

_SETTLE_TIMEOUT_S = 60.0


def parse_hostport(text: str) -> tuple[str, int]:
    """``host:port`` or ``[v6]:port`` -> (host, port)."""
    text = text.strip()
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]:")
    else:
        host, sep, rest = text.rpartition(":")
    if not sep or not rest.isdigit():
        raise ProxyError(f"expected HOST:PORT, got {text!r}")
    return host, int(rest)


def format_hostport(host: str, port: int) -> str:
    """Inverse of :func:`parse_hostport`."""
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


@dataclasses.dataclass
class Route:
    """One proxied broker: listen address -> upstream broker address.

    ``broker`` is the broker's node id when known (it is learned from Metadata
    otherwise); ``advertise`` is the address written into rewritten responses
    (default: the bound listen address, 127.0.0.1 for a wildcard host).
    """

    listen: tuple[str, int]
    upstream: tuple[str, int]
    broker: int | None = None
    advertise: tuple[str, int] | None = None

    @classmethod
    def parse(cls, text: str) -> Route:
        """Parse ``[NODE_ID@]HOST:PORT=UPSTREAM_HOST:PORT``."""
        broker: int | None = None
        spec = text.strip()
        if "@" in spec:
            prefix, spec = spec.split("@", 1)
            if not prefix.lstrip("-").isdigit():
                raise ProxyError(f"node id before '@' must be an integer in {text!r}")
            broker = int(prefix)
        listen, sep, upstream = spec.partition("=")
        if not sep:
            raise ProxyError(f"expected [NODE_ID@]HOST:PORT=UPSTREAM_HOST:PORT, got {text!r}")
        return cls(parse_hostport(listen), parse_hostport(upstream), broker)


@dataclasses.dataclass
class ListenerStats:
    """Counters of one listener."""

    connections_total: int = 0
    requests: int = 0
    responses: int = 0
    bytes_from_clients: int = 0
    bytes_to_clients: int = 0
    faults: int = 0


@dataclasses.dataclass(slots=True)
class _Request:
    """What the proxy knows of one request while it is in flight."""

    header: kp.RequestHeader
    frame: bytes
    expects_response: bool
    head: bytes = b""
    delayed_by: RuleState | None = None  # the (first) latency rule that held this request or its answer back
    _targets: tuple[kp.TopicPartitions, ...] | None = None
    _targets_error: str | None = None
    _parsed: bool = False

    def targets(self, topic_names: Mapping[uuid.UUID, str]) -> tuple[kp.TopicPartitions, ...] | None:
        """Topic/partitions of a Produce or Fetch request (decoded once, on demand); None if undecodable."""
        if not self._parsed:
            self._parsed = True
            try:
                if self.header.api_key == kp.PRODUCE:
                    self._targets = kp.produce_targets(self.frame, self.header, topic_names)
                elif self.header.api_key == kp.FETCH:
                    self._targets = kp.request_targets(kp.decode_request(self.frame, self.header), topic_names)
                else:
                    self._targets = ()
            except (KafkaProtocolError, UnsupportedVersion) as exc:
                self._targets_error = str(exc)
        return self._targets


@dataclasses.dataclass(slots=True)
class _InFlight:
    """A forwarded request awaiting its broker response."""

    ctx: _Request
    slot: Item
    special: bool
    fault: RuleState | None = None
    replacement: bytes | None = None
    response_delay: float = 0.0
    response_pacers: tuple = ()
    response_budgets: tuple = ()


@dataclasses.dataclass
class _Plan:
    """What the rules decided for one request."""

    disposition: RuleState | None = None
    request_delay: float = 0.0
    response_delay: float = 0.0
    request_pacers: list = dataclasses.field(default_factory=list)
    response_pacers: list = dataclasses.field(default_factory=list)
    request_budgets: list = dataclasses.field(default_factory=list)
    response_budgets: list = dataclasses.field(default_factory=list)
    delays: list = dataclasses.field(default_factory=list)


class _Connection:
    """One client connection and its upstream connection."""

    def __init__(self, listener: _Listener, conn_id: int, client: FrameProtocol) -> None:
        self.listener = listener
        self.proxy = listener.proxy
        self.id = conn_id
        self.client_side = client
        self.upstream_side: FrameProtocol | None = None
        assert client.transport is not None
        peer = client.transport.get_extra_info("peername") or ("?", 0)
        self.client = format_hostport(str(peer[0]), int(peer[1]))
        self.up: OrderedSender | None = None
        self.down: OrderedSender | None = None
        self.pending: collections.deque[_InFlight] = collections.deque()
        self.blackhole: RuleState | None = None
        self.budgets: dict[tuple[str, str], list[int]] = {}
        self.closed = False
        self.close_reason = ""
        self.requests = 0
        self._tasks: set[asyncio.Task[Any]] = set()
        self.now = self.proxy.now

    # ----------------------------------------------------------------- lifecycle

    def start(self) -> None:
        """Hold the client until the upstream connection is up, then let frames flow."""
        client = self.client_side
        client.pause("connecting")
        client.on_frame = self.on_request
        client.on_lost = self._client_lost
        self._spawn(self._connect(), "connect")

    def _spawn(self, coro: Any, what: str) -> None:
        task = asyncio.create_task(coro, name=f"{what}-{self.id}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _connect(self) -> None:
        host, port = self.listener.route.upstream
        loop = asyncio.get_running_loop()
        upstream = FrameProtocol(f"upstream-{self.id}")
        try:
            await asyncio.wait_for(loop.create_connection(lambda: upstream, host, port), self.proxy.connect_timeout)
        except (OSError, asyncio.TimeoutError) as exc:
            self.event("upstream_unreachable", detail={"error": repr(exc)})
            self.closed = True
            self.close_reason = "upstream unreachable"
            self.client_side.detach()
            if self.client_side.transport is not None:
                self.client_side.transport.abort()
            self.listener.connections.discard(self)
            return
        if self.closed:  # the client left while we were connecting
            upstream.detach()
            if upstream.transport is not None:
                upstream.transport.close()
            return
        self.upstream_side = upstream
        upstream.on_frame = self.on_response
        upstream.on_lost = self._upstream_lost
        self.up = OrderedSender(self, upstream, self.client_side, REQUEST)
        self.down = OrderedSender(self, self.client_side, upstream, RESPONSE)
        self.event("conn_open")
        self.client_side.resume("connecting")

    def _client_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, KafkaProtocolError):
            self.event("protocol_error", detail={"direction": REQUEST, "error": str(exc)})
            self.close(f"bad request: {exc}")
        elif self.up is None or self.up.idle():
            self.close(_lost_reason("client", exc))
        else:
            # Requests still queued (latency, bandwidth) were on the wire: deliver them.
            self._spawn(self._finish(self.up, _lost_reason("client", exc)), "finish")

    def _upstream_lost(self, exc: Exception | None) -> None:
        if isinstance(exc, KafkaProtocolError):
            self.event("protocol_error", detail={"direction": RESPONSE, "error": str(exc)})
            self.close(f"bad response: {exc}")
        elif self.down is None or self.down.idle():
            self.close(_lost_reason("broker", exc))
        else:
            self._spawn(self._finish(self.down, _lost_reason("broker", exc)), "finish")

    async def _finish(self, sender: OrderedSender, reason: str) -> None:
        await sender.settle(_SETTLE_TIMEOUT_S)
        self.close(reason)

    def reset(self, state: RuleState, caused_by: str, reason: str, torn: Item | None = None,
              torn_direction: str = RESPONSE) -> None:
        """Reset the connection (RST) because rule ``state`` acted (its event's phase: ``caused_by``).

        Every request whose answer the client will now never get is reported first,
        one ``response_discarded`` event each, in request order: answers that had
        arrived (with the ``results`` of a Produce, i.e. what the broker wrote) and
        requests still awaiting theirs. Not reported: a lost ack's own request (its
        ``response_dropped`` says so), and a request ``torn`` on its way to the broker
        (its ``connection_reset`` says so; it never reached the broker whole). A
        response ``torn`` on its way to the client was discarded too.
        """
        if self.closed:
            return
        if not self.client_side.lost:  # a client already gone lost its answers by leaving, not to the rule
            self._report_discarded(state, caused_by, torn, torn_direction)
        self.close(reason, rst=True)

    def _report_discarded(self, state: RuleState, caused_by: str, torn: Item | None, torn_direction: str) -> None:
        items: list[Item] = []
        torn_request = None
        if torn is not None:
            if torn_direction == RESPONSE:
                items.append(torn)
            else:
                torn_request = torn.ctx
        if self.down is not None:
            items.extend(self.down.queued())
        for item in items:
            if item.state == SLOT_READY:
                received = True
            elif item.state == SLOT_PENDING:
                received = False
            else:
                continue  # SLOT_DROP/SLOT_RESET: a lost ack, already reported as response_dropped
            if item.ctx is None or item.ctx is torn_request:
                continue
            self._discarded(item, state, caused_by, received)

    def _report_held_back(self) -> None:
        """Report the answers a latency rule still held back when the connection closed.

        The client gave up on them (a request timeout) or left; the broker had written
        what they answer. Answers queued behind a held one were held back by it too.
        """
        assert self.down is not None
        holder: RuleState | None = None
        for item in self.down.queued():
            if item.ctx is None:
                continue
            holder = item.ctx.delayed_by or holder
            if holder is not None and item.state in (SLOT_READY, SLOT_PENDING):
                self._discarded(item, holder, "delayed", item.state == SLOT_READY)

    def _discarded(self, item: Item, state: RuleState, caused_by: str, received: bool) -> None:
        """One ``response_discarded`` event: with what the broker wrote, when its Produce answer had arrived."""
        detail: dict[str, Any] = {"caused_by": caused_by, "response_received": received}
        if received:
            # A broker frame is queued without its length prefix (kept in ``head``);
            # one the proxy built (rewritten, injected error) carries its prefix.
            body = item.data if item.head else item.data[4:]
            results = self._produce_results(item.ctx.header, body)
            if results is not None:
                detail["results"] = results
        self.event("fault", item.ctx, state, phase="response_discarded", detail=detail)

    def close(self, reason: str, rst: bool = False) -> None:
        """Close both sides (with RST when ``rst``); idempotent.

        Every RST close is a rule's reset, which reported what it discarded (``reset``); any
        other close reports the answers a latency rule was still holding back.
        """
        if self.closed:
            return
        self.closed = True
        self.close_reason = reason
        if not rst and self.down is not None:
            self._report_held_back()
        for sender in (self.up, self.down):
            if sender is not None:
                sender.flush()
                sender.cancel()
        for side in (self.client_side, self.upstream_side):
            if side is None:
                continue
            side.detach()
            if rst:
                abort_with_rst(side.transport)
            elif side.transport is not None:
                side.transport.close()
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        self.listener.connections.discard(self)
        self.event("conn_close", detail={"reason": reason, "rst": rst, "requests": self.requests,
                                         "in_flight": len(self.pending)})

    # ----------------------------------------------------------------- requests

    def on_request(self, head: bytes, frame: bytes) -> None:
        """Handle one client request frame: peek, apply rules, forward or answer."""
        header = kp.parse_request_header(frame)
        expects = True
        if header.api_key == kp.PRODUCE:
            expects = kp.produce_acks(frame, header) != 0
        self.requests += 1
        self.listener.stats.requests += 1
        self.listener.stats.bytes_from_clients += 4 + len(frame)
        ctx = _Request(header, frame, expects, head)
        if self.blackhole is not None:
            self.event("fault", ctx, self.blackhole, phase="request_discarded")
            return
        states = self.proxy.live_rules()
        if not states:
            self._forward(ctx)
            ctx.frame = b""  # the sender holds its own reference; the FIFO needs only the header
            return
        plan = self._plan(ctx, states)
        if plan.delays:
            ctx.delayed_by = plan.delays[0][0]
        for state, direction, delay in plan.delays:
            self.event("fault", ctx, state, phase="delayed",
                       detail={"direction": direction, "delay_ms": round(delay * 1000, 3)})
        if plan.disposition is not None and self._dispose(ctx, plan):
            return
        self._forward(ctx, plan)

    def _on_request_before_reset(self, head: bytes, frame: bytes) -> None:
        """``on_request`` once a lost ack with reset is due on this connection.

        The requests pipelined until the reset lose their answers with it; their
        ``response_discarded`` events name their topics and partitions, so each
        keeps its frame, which the no-rule path of ``on_request`` lets go.
        """
        depth = len(self.pending)
        self.on_request(head, frame)
        if len(self.pending) > depth:
            self.pending[-1].ctx.frame = frame

    def _forward(self, ctx: _Request, plan: _Plan | None = None,
                 fault: RuleState | None = None, replacement: bytes | None = None) -> None:
        assert self.up is not None and self.down is not None
        if ctx.expects_response:
            inflight = _InFlight(ctx, self.down.reserve(ctx), ctx.header.api_key in _SPECIAL_APIS, fault, replacement)
            if plan is not None:
                inflight.response_delay = plan.response_delay
                inflight.response_pacers = tuple(plan.response_pacers)
                inflight.response_budgets = tuple(plan.response_budgets)
            self.pending.append(inflight)
        if plan is None:
            self.up.push(ctx.frame, ctx=ctx, head=ctx.head)
        else:
            not_before = self.proxy.now() + plan.request_delay if plan.request_delay else 0.0
            self.up.push(ctx.frame, not_before, ctx, tuple(plan.request_pacers), tuple(plan.request_budgets),
                         ctx.head)

    def _plan(self, ctx: _Request, states: Iterable[RuleState]) -> _Plan:
        plan = _Plan()
        header = ctx.header
        rng = self.proxy.rng
        for state in states:
            rule = state.rule
            if not rule.matches_header(self.listener.node_id, self.listener.name, header.api_key, header.client_id):
                continue
            if rule.needs_targets and not rule.matches_targets(ctx.targets(self.proxy.topic_names)):
                continue
            if rule.action == BANDWIDTH:
                state.matched += 1
                for direction in _directions(rule.direction):
                    pacers = plan.request_pacers if direction == REQUEST else plan.response_pacers
                    pacers.append((state, self.proxy.pacer(rule, direction)))
                continue
            if rule.action == RESET and rule.after_bytes is not None:
                state.matched += 1
                for direction in _directions(rule.direction):
                    budget = self.budgets.setdefault((rule.id, direction), [rule.after_bytes])
                    budgets = plan.request_budgets if direction == REQUEST else plan.response_budgets
                    budgets.append((state, budget))
                continue
            if rule.is_disposition:
                if plan.disposition is not None:
                    continue
                if rule.action == LOST_ACK and not ctx.expects_response:
                    continue  # acks=0: there is no ack to lose
                if state.roll(rng) and state.fire():
                    plan.disposition = state
                continue
            if rule.action == LATENCY and rule.latency is not None and state.roll(rng) and state.fire():
                for direction in _directions(rule.direction):
                    delay = rule.latency.sample_s(rng)
                    if direction == REQUEST:
                        plan.request_delay += delay
                    else:
                        plan.response_delay += delay
                    plan.delays.append((state, direction, delay))
        return plan

    def _dispose(self, ctx: _Request, plan: _Plan) -> bool:
        """Apply the plan's disposition; True if the request must not be forwarded as usual."""
        state = plan.disposition
        assert state is not None
        rule = state.rule
        if rule.action == BLACKHOLE:
            self.blackhole = state
            self.event("fault", ctx, state, phase="request_discarded", detail={"connection_blackholed": True})
            return True
        if rule.action == RESET:
            self.event("fault", ctx, state, phase="connection_reset", detail={"forwarded": False})
            self.reset(state, "connection_reset", f"reset by rule {rule.id}")
            return True
        if rule.action == LOST_ACK:
            self.event("fault", ctx, state, phase="request_forwarded", detail={"reset": rule.reset})
            self._forward(ctx, plan, fault=state)
            if rule.reset:
                self.client_side.on_frame = self._on_request_before_reset
            return True
        if rule.action == ERROR:
            return self._inject_error(ctx, plan, state)
        return False

    def _inject_error(self, ctx: _Request, plan: _Plan, state: RuleState) -> bool:
        rule = state.rule
        header = ctx.header
        targets = ctx.targets(self.proxy.topic_names)
        try:
            if targets is None:
                raise UnsupportedVersion(ctx._targets_error or "request body not decodable")
            reply = kp.encode_error_response(header.api_key, header.api_version, targets,
                                             rule.error or 0, header.correlation_id)
        except (UnsupportedVersion, KafkaProtocolError, ValueError) as exc:
            self.event("fault", ctx, state, phase="not_applied", detail={"error": str(exc)})
            log.warning("rule %s could not inject an error into %s v%d: %s",
                        rule.id, kp.api_name(header.api_key), header.api_version, exc)
            return False
        detail = {"error_code": rule.error, "error": _error_name(rule.error), "forward": rule.forward}
        if rule.forward:
            self.event("fault", ctx, state, phase="request_forwarded", detail=detail)
            self._forward(ctx, plan, fault=state, replacement=reply)
            return True
        if not ctx.expects_response:
            self.event("fault", ctx, state, phase="request_dropped", detail={**detail, "acks": 0})
            return True
        self.event("fault", ctx, state, phase="answered_without_forwarding", detail=detail)
        assert self.down is not None
        slot = self.down.reserve(ctx)
        not_before = self.proxy.now() + plan.response_delay if plan.response_delay else 0.0
        self.down.fill(slot, SLOT_READY, reply, not_before, tuple(plan.response_pacers), tuple(plan.response_budgets))
        return True

    # ----------------------------------------------------------------- responses

    def on_response(self, head: bytes, frame: bytes) -> None:
        """Handle one broker response frame: match it to its request, rewrite/drop/replace, queue it."""
        assert self.down is not None
        correlation_id = kp.response_correlation_id(frame)
        if not self.pending or self.pending[0].ctx.header.correlation_id != correlation_id:
            expected = self.pending[0].ctx.header.correlation_id if self.pending else None
            raise KafkaProtocolError(
                f"response correlation id {correlation_id} does not match the oldest in-flight request ({expected})")
        inflight = self.pending.popleft()
        self.listener.stats.responses += 1
        data = frame
        if inflight.special:
            rewritten = self.proxy.process_special(self, inflight.ctx.header, frame)
            if rewritten is not None:
                head, data = b"", rewritten
        state = inflight.fault
        not_before = self.proxy.now() + inflight.response_delay if inflight.response_delay else 0.0
        if state is None:
            self.down.fill(inflight.slot, SLOT_READY, data, not_before,
                           inflight.response_pacers, inflight.response_budgets, head)
            return
        detail: dict[str, Any] = {"response_bytes": len(frame) + 4}
        results = self._produce_results(inflight.ctx.header, frame)
        if results is not None:
            detail["results"] = results
        if state.rule.action == LOST_ACK:
            detail["reset"] = state.rule.reset
            self.event("fault", inflight.ctx, state, phase="response_dropped", detail=detail)
            if state.rule.reset:
                self.down.fill(inflight.slot, SLOT_RESET, state, not_before)
            else:
                self.down.fill(inflight.slot, SLOT_DROP, b"", not_before)
        else:
            detail["error_code"] = state.rule.error
            self.event("fault", inflight.ctx, state, phase="response_replaced", detail=detail)
            self.down.fill(inflight.slot, SLOT_READY, inflight.replacement or head + data, not_before,
                           inflight.response_pacers, inflight.response_budgets)

    def _produce_results(self, header: kp.RequestHeader, frame: bytes) -> list[dict[str, Any]] | None:
        if header.api_key != kp.PRODUCE:
            return None
        try:
            payload = kp.decode_response(frame, header.api_key, header.api_version)
        except (KafkaProtocolError, UnsupportedVersion) as exc:
            log.warning("cannot decode the Produce response the proxy dropped/replaced/discarded: %s", exc)
            return None
        return kp.produce_results(payload, self.proxy.topic_names)

    # ----------------------------------------------------------------- helpers

    def count_bytes(self, direction: str, size: int) -> None:
        """Account bytes written towards the client."""
        if direction == RESPONSE:
            self.listener.stats.bytes_to_clients += size

    def event(self, kind: str, ctx: _Request | None = None, state: RuleState | None = None,
              **fields: Any) -> None:
        """Report an event about this connection (and request/rule, if given)."""
        listener = self.listener
        base: dict[str, Any] = {
            "proxy": listener.name, "broker": listener.node_id,
            "upstream": format_hostport(*listener.route.upstream),
            "conn": self.id, "client": self.client,
        }
        if ctx is not None:
            header = ctx.header
            base.update(api_key=header.api_key, api=kp.api_name(header.api_key), api_version=header.api_version,
                        correlation_id=header.correlation_id, client_id=header.client_id)
            if header.api_key in (kp.PRODUCE, kp.FETCH):
                targets = ctx.targets(self.proxy.topic_names)
                if targets is not None:
                    base["topics"] = [t.as_json() for t in targets]
            if header.api_key == kp.PRODUCE:
                base["acks_zero"] = not ctx.expects_response or None
        if state is not None:
            base.update(rule_id=state.rule.id, action=state.rule.action)
            listener.stats.faults += kind == "fault"
        base.update(fields)
        self.proxy.emit(stamp(kind, **base))


_SPECIAL_APIS = frozenset({kp.API_VERSIONS, kp.METADATA, kp.FIND_COORDINATOR, kp.DESCRIBE_CLUSTER})


def _directions(direction: str) -> tuple[str, ...]:
    return (REQUEST, RESPONSE) if direction == BOTH else (direction,)


def _error_name(code: int | None) -> str:
    try:
        return kp.error_code_of(code or 0).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"


def _lost_reason(side: str, exc: Exception | None) -> str:
    return f"{side} closed" if exc is None else f"{side} connection failed: {exc!r}"


class _Listener:
    """One listen socket in front of one broker."""

    def __init__(self, proxy: FaultProxy, route: Route) -> None:
        self.proxy = proxy
        self.route = route
        self.node_id: int | None = route.broker
        self.server: asyncio.base_events.Server | None = None
        self.bound: tuple[str, int] = route.listen
        self.advertised: tuple[str, int] = route.advertise or route.listen
        self.stats = ListenerStats()
        self.connections: set[_Connection] = set()
        self._upstream_ips: set[str] = set()

    @property
    def name(self) -> str:
        """The listener's identity in events and rules: its bound ``host:port``."""
        return format_hostport(*self.bound)

    async def start(self, advertise_host: str | None) -> None:
        """Bind the listen socket (port 0 picks a free port)."""
        host, port = self.route.listen
        loop = asyncio.get_running_loop()
        self.server = await loop.create_server(self._protocol, host, port)
        sockname = self.server.sockets[0].getsockname()
        self.bound = (host, int(sockname[1]))
        if self.route.advertise is None:
            adv_host = advertise_host or (host if host not in ("", "0.0.0.0", "::") else "127.0.0.1")
            self.advertised = (adv_host, self.bound[1])
        self._upstream_ips = _resolve(self.route.upstream[0])

    async def stop(self) -> None:
        """Stop accepting and close every connection."""
        if self.server is not None:
            self.server.close()
        for conn in list(self.connections):
            conn.close("proxy stopping")
        if self.server is not None:
            await self.server.wait_closed()

    def is_upstream(self, host: str, port: int) -> bool:
        """Whether (host, port), as a broker advertises itself, is this listener's upstream."""
        up_host, up_port = self.route.upstream
        if port != up_port:
            return False
        if host.lower() == up_host.lower():
            return True
        return bool(_resolve(host) & self._upstream_ips)

    def _protocol(self) -> FrameProtocol:
        protocol = FrameProtocol(f"client-{self.name}")
        protocol.on_made = self._accept
        return protocol

    def _accept(self, protocol: FrameProtocol) -> None:
        conn = _Connection(self, next(self.proxy.conn_ids), protocol)
        self.connections.add(conn)
        self.stats.connections_total += 1
        conn.start()


_RESOLVED: dict[str, frozenset[str]] = {}


def _resolve(host: str) -> set[str]:
    """IP addresses of a host (cached; failures resolve to nothing)."""
    try:
        return {str(ipaddress.ip_address(host))}
    except ValueError:
        pass
    if host not in _RESOLVED:
        try:
            infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
            _RESOLVED[host] = frozenset(str(info[4][0]) for info in infos)
        except OSError:
            _RESOLVED[host] = frozenset()
    return set(_RESOLVED[host])


class FaultProxy:
    """A Kafka-aware fault proxy: one listener per broker, shared rules and event sink.

    >>> proxy = FaultProxy([Route(("127.0.0.1", 0), ("127.0.0.1", 9092), broker=1)], events="events.jsonl")
    >>> await proxy.start(); rule_id = proxy.add_rule({"action": "lost_ack", "api": "produce", "count": 1})

    ``rewrite`` rewrites broker addresses in Metadata/FindCoordinator/
    DescribeCluster responses to the proxy listeners (and caps Produce at v9 and
    Fetch at v15, see docs/proxy.md); turn it off when brokers already advertise
    the proxy addresses. ``version_caps`` adds or overrides ApiVersions caps.
    ``peers`` maps node ids of brokers fronted by *other* proxy processes to their
    listener addresses, so a rewriting proxy sends clients to those, not around them
    (one process per broker in front of an existing cluster).
    """

    def __init__(self, routes: Iterable[Route | str], *, events: EventSink | str | Path | None = None,
                 rewrite: bool = True, advertise_host: str | None = None,
                 version_caps: Mapping[int, int] | None = None, seed: int | None = None,
                 connect_timeout: float = 10.0, peers: Mapping[int, tuple[str, int]] | None = None) -> None:
        self.routes = [r if isinstance(r, Route) else Route.parse(r) for r in routes]
        self.peers: dict[int, tuple[str, int]] = dict(peers or {})
        if not self.routes:
            raise ProxyError("a FaultProxy needs at least one route")
        self._own_sink: JsonlEventSink | None = None
        if isinstance(events, (str, Path)):
            self._own_sink = JsonlEventSink(events)
            self._sink: EventSink | None = self._own_sink
        else:
            self._sink = events
        self.rewrite = rewrite
        self.advertise_host = advertise_host
        caps = dict(KIO_CAPS)
        if rewrite:
            caps.update({k: min(v, caps.get(k, v)) for k, v in REWRITE_CAPS.items()})
        caps.update(version_caps or {})
        self.version_caps: dict[int, int] = caps
        self.rng = random.Random(seed)
        self.connect_timeout = connect_timeout
        self.listeners = [_Listener(self, r) for r in self.routes]
        self.topic_names: dict[uuid.UUID, str] = {}
        self.conn_ids = itertools.count(1)
        self.events_emitted = 0
        self._states: dict[str, RuleState] = {}
        self._live: tuple[RuleState, ...] = ()
        self._next_check = float("inf")
        self._pacers: dict[tuple[str, str], Pacer] = {}
        self._rule_ids = itertools.count(1)
        self._unmapped: set[tuple[int, str, int]] = set()
        self._expired_reported: set[str] = set()
        self._started_at = 0.0
        self._running = False

    # ----------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        """Bind every listener. Safe to call once."""
        if self._running:
            raise ProxyError("proxy already started")
        self._started_at = self.now()
        try:
            for listener in self.listeners:
                await listener.start(self.advertise_host)
        except OSError as exc:
            await self.stop()
            raise ProxyError(f"cannot listen: {exc}") from exc
        self._running = True
        self.emit(stamp("proxy_start", listeners=self.describe()["listeners"], rewrite=self.rewrite,
                        version_caps={kp.api_name(k): v for k, v in sorted(self.version_caps.items())}))
        for listener in self.listeners:
            log.info("listening on %s -> %s (advertised as %s)", listener.name,
                     format_hostport(*listener.route.upstream), format_hostport(*listener.advertised))

    async def stop(self) -> None:
        """Close listeners and connections; flush and close an owned event file."""
        for listener in self.listeners:
            await listener.stop()
        if self._running:
            self.emit(stamp("proxy_stop", stats=self.stats()))
        self._running = False
        if self._own_sink is not None:
            self._own_sink.close()

    async def __aenter__(self) -> FaultProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    def now(self) -> float:
        """The proxy's clock (the event loop's monotonic seconds)."""
        return time.monotonic()

    @property
    def bootstrap(self) -> str:
        """Comma-separated advertised listener addresses, for ``bootstrap.servers``."""
        return ",".join(format_hostport(*l.advertised) for l in self.listeners)

    def describe(self) -> dict[str, Any]:
        """Listener addresses, for the ready line and `stats`."""
        return {"listeners": [
            {"proxy": l.name, "advertised": format_hostport(*l.advertised),
             "upstream": format_hostport(*l.route.upstream), "broker": l.node_id}
            for l in self.listeners]}

    # ----------------------------------------------------------------- rules

    def add_rule(self, rule: Rule | Mapping[str, Any]) -> str:
        """Validate and install a rule; returns its id (given, or ``r<N>``)."""
        parsed = parse_rule(rule)
        rule_id = parsed.id or f"r{next(self._rule_ids)}"
        if rule_id in self._states:
            raise RuleError(f"a rule with id {rule_id!r} is already installed")
        parsed = dataclasses.replace(parsed, id=rule_id)
        self._states[rule_id] = RuleState(parsed, self.now())
        self._refresh()
        self.emit(stamp("rule_added", rule_id=rule_id, action=parsed.action, rule=parsed.as_json()))
        log.info("rule %s added: %s", rule_id, parsed.as_json())
        return rule_id

    def remove_rule(self, rule_id: str) -> bool:
        """Uninstall a rule; False if no such rule (already expired ones are removed too)."""
        state = self._states.pop(rule_id, None)
        if state is None:
            return False
        self._refresh()
        self.emit(stamp("rule_removed", rule_id=rule_id, action=state.rule.action,
                        fired=state.fired, matched=state.matched))
        log.info("rule %s removed (fired %d times)", rule_id, state.fired)
        return True

    def clear(self) -> int:
        """Uninstall every rule; returns how many there were."""
        ids = list(self._states)
        for rule_id in ids:
            self.remove_rule(rule_id)
        return len(ids)

    def rules(self) -> list[dict[str, Any]]:
        """Installed rules with their state (waiting/active/expired) and counters."""
        now = self.now()
        return [state.as_json(now) for state in self._states.values()]

    def live_rules(self) -> tuple[RuleState, ...]:
        """Rules that may fire now (cheap when nothing changed since the last call)."""
        if not self._states:
            return ()
        now = self.now()
        if now >= self._next_check or any(s.expired for s in self._live):
            self._refresh(now)
        return self._live

    def _refresh(self, now: float | None = None) -> None:
        now = self.now() if now is None else now
        live = []
        next_check = float("inf")
        for state in self._states.values():
            start, end = state.window()
            if state.is_over(now):
                if state.rule.id not in self._expired_reported:
                    self._expired_reported.add(state.rule.id)
                    self.emit(stamp("rule_expired", rule_id=state.rule.id, action=state.rule.action,
                                    fired=state.fired, matched=state.matched))
                continue
            if now < start:
                next_check = min(next_check, start)
            else:
                live.append(state)
                next_check = min(next_check, end)
        self._live = tuple(live)
        self._next_check = next_check

    def pacer(self, rule: Rule, direction: str) -> Pacer:
        """The shared pacer of a bandwidth rule in one direction."""
        key = (rule.id, direction)
        pacer = self._pacers.get(key)
        if pacer is None:
            pacer = self._pacers[key] = Pacer(rule.bytes_per_s or 1.0)
        return pacer

    # ----------------------------------------------------------------- responses with addresses

    def process_special(self, conn: _Connection, header: kp.RequestHeader, frame: bytes) -> bytes | None:
        """Cap ApiVersions / rewrite addresses in a response; returns a new framed response or None."""
        api_key, version = header.api_key, header.api_version
        try:
            if api_key == kp.API_VERSIONS:
                return self._cap_versions(conn, header, frame)
            payload = kp.decode_response(frame, api_key, version)
            if api_key == kp.METADATA:
                self.topic_names.update(kp.metadata_topic_ids(payload))
            new_payload, changes = kp.rewrite_addresses(payload, self._map_address)
            if not changes or not self.rewrite:
                return None
            conn.event("address_rewrite", _Request(header, b"", True),
                       detail={"changes": [c.as_json() for c in changes]})
            return kp.encode_response(new_payload, header.correlation_id)
        except (KafkaProtocolError, UnsupportedVersion) as exc:
            conn.event("decode_failed", _Request(header, b"", True), detail={"error": str(exc)})
            log.warning("passing %s v%d response through unchanged: %s", kp.api_name(api_key), version, exc)
            return None

    def _cap_versions(self, conn: _Connection, header: kp.RequestHeader, frame: bytes) -> bytes | None:
        # error_code leads every ApiVersions version. On an error (UNSUPPORTED_VERSION)
        # the broker answers in v0 format whatever was asked: pass that through untouched,
        # the client retries with a lower version.
        if len(frame) < 6 or int.from_bytes(frame[4:6], "big", signed=True) != 0:
            return None
        payload = kp.decode_response(frame, kp.API_VERSIONS, header.api_version)
        new_payload, changes = kp.cap_api_versions(payload, self.version_caps)
        for api_key, low, high in kp.iter_api_ranges(payload):
            cap = self.version_caps.get(api_key)
            if cap is not None and low > cap:
                log.warning("broker's minimum %s version %d is above what the proxy decodes (%d)",
                            kp.api_name(api_key), low, cap)
        if not changes:
            return None
        conn.event("api_versions_capped", _Request(header, b"", True),
                   detail={"changes": [c.as_json() for c in changes]})
        return kp.encode_response(new_payload, header.correlation_id)

    def _map_address(self, node_id: int, host: str, port: int) -> tuple[str, int] | None:
        """Where clients should reach broker ``node_id`` (advertised at host:port); None: leave as is."""
        for listener in self.listeners:
            if listener.node_id == node_id:
                return listener.advertised if self.rewrite else None
        if node_id in self.peers:
            return self.peers[node_id] if self.rewrite else None
        for listener in self.listeners:
            if listener.node_id is None and (listener.is_upstream(host, port) or (host, port) == listener.advertised):
                listener.node_id = node_id
                self.emit(stamp("broker_learned", proxy=listener.name, broker=node_id,
                                upstream=format_hostport(*listener.route.upstream),
                                detail={"advertised_by_broker": format_hostport(host, port)}))
                return listener.advertised if self.rewrite else None
        if any((host, port) == l.advertised for l in self.listeners) or (host, port) in self.peers.values():
            return None
        key = (node_id, host, port)
        if key not in self._unmapped:
            self._unmapped.add(key)
            self.emit(stamp("unmapped_broker", broker=node_id, detail={"address": format_hostport(host, port)}))
            log.warning("broker %d at %s has no proxy listener; clients will reach it directly",
                        node_id, format_hostport(host, port))
        return None

    # ----------------------------------------------------------------- events and stats

    def emit(self, event: dict[str, Any]) -> None:
        """Send an event to the sink; a failing sink is logged, never fatal."""
        self.events_emitted += 1
        if self._sink is None:
            return
        try:
            self._sink(event)
        except Exception:  # noqa: BLE001 - a broken sink must not take the proxy down
            log.exception("event sink failed on %s event", event.get("event"))

    def stats(self) -> dict[str, Any]:
        """Counters per listener, rules with their state, and events emitted."""
        listeners = []
        for listener, info in zip(self.listeners, self.describe()["listeners"]):
            listeners.append({**info, "connections_open": len(listener.connections),
                              **dataclasses.asdict(listener.stats)})
        return {"listeners": listeners, "rules": self.rules(), "events": self.events_emitted,
                "uptime_s": round(self.now() - self._started_at, 3) if self._started_at else 0.0}
