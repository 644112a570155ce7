"""One client connection through the fault proxy: its two frame protocols, its ordered senders, and the rules'
actions on each request and response (see server.py for the listeners and the proxy as a whole)."""
from __future__ import annotations

import asyncio
import collections
import dataclasses
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

from . import protocol as kp
from .deliveries import FetchDeliveries, FetchSession, PartitionKey, fetch_deliveries, is_consumer_fetch
from .errors import KafkaProtocolError, ProxyError, UnsupportedVersion
from .events import stamp
from . import held as held_
from .rules import BANDWIDTH, BLACKHOLE, BOTH, ERROR, HOLD, LATENCY, LOST_ACK, REQUEST, RESET, RESPONSE, RuleState
from .stream import SLOT_DROP, SLOT_PENDING, SLOT_READY, SLOT_RESET, FrameProtocol, Item, OrderedSender, abort_with_rst

if TYPE_CHECKING:
    from .server import _Listener

log = logging.getLogger("kafkaproof.proxy")

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


_SPECIAL_APIS = frozenset({kp.API_VERSIONS, kp.METADATA, kp.FIND_COORDINATOR, kp.DESCRIBE_CLUSTER})


_SETTLE_TIMEOUT_S = 60.0
# How long the broker connection stays open after a rule reset the client's, for the answers to the
# Produce requests the broker already had (a broker answers within the request's own timeout, 30 s
# by default in both clients).
_AWAIT_AFTER_RESET_S = 30.0


@dataclasses.dataclass(slots=True)
class _Request:
    """What the proxy knows of one request while it is in flight."""

    header: kp.RequestHeader
    frame: bytes
    expects_response: bool
    head: bytes = b""
    delayed_by: RuleState | None = None  # the (first) latency rule that held this request or its answer back
    # With the delivery log on, a consumer's Fetch: the fetch offsets its answer starts at, then what the
    # answer hands the client (logged when it is written).
    positions: dict[PartitionKey, int] | None = None
    delivered: FetchDeliveries | None = None
    _targets: tuple[kp.TopicPartitions, ...] | None = None
    _targets_error: str | None = None
    _parsed: bool = False

    def targets(self, topic_names: Mapping[uuid.UUID, str]) -> tuple[kp.TopicPartitions, ...] | None:
        """Topic/partitions of a Produce, Fetch, (Txn)OffsetCommit, AddPartitionsToTxn, ShareFetch or
        ShareAcknowledge request (decoded once, on demand); None if undecodable."""
        if not self._parsed:
            self._parsed = True
            try:
                if self.header.api_key == kp.PRODUCE:
                    self._targets = kp.produce_targets(self.frame, self.header, topic_names)
                elif self.header.api_key in kp.TARGETED_APIS:
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
    alterations: tuple[RuleState, ...] = ()  # rules that may alter the answer (metadata, corrupt, duplicate)


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
    alterations: list = dataclasses.field(default_factory=list)


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
        # After a rule's reset: the Produce requests the broker had, whose answers are awaited
        # (correlation id -> request, rule, caused_by), and the timer that gives up on them.
        self.awaited: dict[int, tuple[_Request, RuleState, str]] = {}
        self._await_timer: asyncio.TimerHandle | None = None
        # Once a lost ack with reset is due: the Produce answers written to the client since (time
        # written, item). The client may not have read them when the reset comes: the Java client reads
        # one answer per poll and, when a write to the broken connection fails first, closes it with
        # the rest unread (and re-sends those requests). The reset reports them.
        self.written: list[tuple[float, Item]] = []
        self.track_written = False
        self.fetch_session = FetchSession()  # with the delivery log on: the fetch offsets of this connection
        # `hold` rules: the requests held on this connection, and whether the broker side stays open for a
        # held request's late delivery after the client's side closed (held.py).
        self.holds: list[held_.Held] = []
        self.keep_upstream = False
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
        elif self.holds and held_.client_gone(self, _lost_reason("client", exc)):
            return  # a held request goes to the broker later, on the proxy's own connection
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

        Every request whose answer the client will now never get is reported, one
        ``response_discarded`` event each: answers that had arrived (with the
        ``results`` of a Produce, i.e. what the broker wrote) at once, in request order;
        a Produce request the broker had but not answered yet when its answer comes,
        the broker connection kept open for it (``_AWAIT_AFTER_RESET_S`` at most), so
        its event says what the broker wrote too; any other request still awaiting its
        answer at once, without results. Not reported: a lost ack's own request (its
        ``response_dropped`` says so), and a request ``torn`` on its way to the broker
        (its ``connection_reset`` says so; it never reached the broker whole). A
        response ``torn`` on its way to the client was discarded too.
        """
        if self.closed:
            return
        if not self.client_side.lost:  # a client already gone lost its answers by leaving, not to the rule
            self._report_discarded(state, caused_by, torn, torn_direction)
        self.close(reason, rst=True)

    def _written(self, item: Item) -> None:
        """A whole answer written to the client (installed only when something needs it)."""
        ctx = item.ctx
        if self.track_written and ctx.header.api_key == kp.PRODUCE:
            self.written.append((self.now(), item))
        if ctx.delivered is not None:
            log_ = self.proxy.deliveries
            if log_ is not None:
                log_.add(self.id, ctx.header.client_id, self.listener.node_id, ctx.delivered)
            ctx.delivered = None

    def _report_unread(self, state: RuleState, caused_by: str) -> None:
        """Report the Produce answers written to the client while the reset was due (a lost ack's request
        forwarded, its answer's turn not come): ``response_discarded`` with ``delivered: true``; the
        client may not have read them."""
        now = self.now()
        for written_at, item in self.written:
            self._discarded(item, state, caused_by, True, {
                "delivered": True, "written_ms_before_reset": round((now - written_at) * 1000, 3)})
        self.written.clear()

    def _report_discarded(self, state: RuleState, caused_by: str, torn: Item | None, torn_direction: str) -> None:
        self._report_unread(state, caused_by)
        items: list[Item] = []
        torn_request = None
        if torn is not None:
            if torn_direction == RESPONSE:
                items.append(torn)
            else:
                torn_request = torn.ctx
        if self.down is not None:
            items.extend(self.down.queued())
        # Requests still queued towards the broker (request latency, bandwidth) never reach it.
        unsent = {id(item.ctx) for item in self.up.queued()} if self.up is not None else set()
        for item in items:
            if item.state == SLOT_READY:
                received = True
            elif item.state == SLOT_PENDING:
                received = False
            else:
                continue  # SLOT_DROP/SLOT_RESET: a lost ack, already reported as response_dropped
            if item.ctx is None or item.ctx is torn_request:
                continue
            if (not received and item.ctx.header.api_key == kp.PRODUCE and id(item.ctx) not in unsent
                    and self.upstream_side is not None and not self.upstream_side.lost):
                self.awaited[item.ctx.header.correlation_id] = (item.ctx, state, caused_by)
                continue
            self._discarded(item, state, caused_by, received)

    def _await_answers(self) -> None:
        """Keep reading the broker connection, the client's reset, until the awaited answers are in."""
        upstream = self.upstream_side
        assert upstream is not None
        upstream.on_frame = self._on_answer_after_reset
        upstream.on_lost = lambda exc: self.stop_awaiting()
        upstream.sender = None
        upstream.resume_all()
        self.listener.awaiting.add(self)
        self._await_timer = asyncio.get_running_loop().call_later(_AWAIT_AFTER_RESET_S, self.stop_awaiting)

    def _on_answer_after_reset(self, head: bytes, frame: bytes) -> None:
        """A broker answer on a connection whose client a rule reset: report it if it was awaited."""
        correlation_id = kp.response_correlation_id(frame)
        while self.pending and self.pending[0].ctx.header.correlation_id != correlation_id:
            self.pending.popleft()  # answers come in request order: one skipped will not come
        if not self.pending:
            self.stop_awaiting()
            return
        self.pending.popleft()
        entry = self.awaited.pop(correlation_id, None)
        if entry is not None:
            ctx, state, caused_by = entry
            detail: dict[str, Any] = {"caused_by": caused_by, "response_received": True, "after_reset": True}
            results = self._produce_results(ctx.header, frame)
            if results is not None:
                detail["results"] = results
            self.event("fault", ctx, state, phase="response_discarded", detail=detail)
        if not self.awaited:
            self.stop_awaiting()

    def stop_awaiting(self) -> None:
        """Close the broker connection kept open after a reset; awaited answers that never came are
        reported without results."""
        if self._await_timer is not None:
            self._await_timer.cancel()
            self._await_timer = None
        if self.holds:
            held_.stop(self)
        awaited, self.awaited = self.awaited, {}
        for ctx, state, caused_by in awaited.values():
            self.event("fault", ctx, state, phase="response_discarded",
                       detail={"caused_by": caused_by, "response_received": False})
        self.listener.awaiting.discard(self)
        upstream = self.upstream_side
        if upstream is not None and upstream.on_frame == self._on_answer_after_reset:
            upstream.detach()
            abort_with_rst(upstream.transport)

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

    def _discarded(self, item: Item, state: RuleState, caused_by: str, received: bool,
                   more: Mapping[str, Any] | None = None) -> None:
        """One ``response_discarded`` event: with what the broker wrote, when its Produce answer had arrived."""
        detail: dict[str, Any] = {"caused_by": caused_by, "response_received": received, **(more or {})}
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
        if self.holds and not self.keep_upstream:
            held_.stop(self, f"connection closed: {reason}")
        for sender in (self.up, self.down):
            if sender is not None:
                sender.flush()
                sender.cancel()
        for side in (self.client_side, self.upstream_side):
            if side is None:
                continue
            if side is self.upstream_side and (self.awaited or self.keep_upstream):
                continue  # kept open for the answers a reset still awaits, or a held request's late delivery
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
        if self.awaited:
            self._await_answers()

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
        if header.api_key == kp.FETCH and self.proxy.recording_deliveries():
            self._fetch_positions(ctx)
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

    def _fetch_positions(self, ctx: _Request) -> None:
        """The delivery log: where a consumer's Fetch answer starts in each partition (this connection's
        fetch session applied); a request the proxy cannot decode is counted and not logged."""
        try:
            request = kp.decode_request(ctx.frame, ctx.header)
        except (KafkaProtocolError, UnsupportedVersion):
            assert self.proxy.deliveries is not None
            self.proxy.deliveries.undecodable += 1
            return
        if is_consumer_fetch(request):
            ctx.positions = self.fetch_session.update(request, self.proxy.topic_names)

    def _log_deliveries(self, ctx: _Request, frame: bytes) -> None:
        """The delivery log: what this Fetch answer (as it goes to the client) hands over, logged once written."""
        log_ = self.proxy.deliveries
        if log_ is None or not log_.on or ctx.positions is None:
            return
        try:
            payload = kp.decode_response(frame, kp.FETCH, ctx.header.api_version)
        except (KafkaProtocolError, UnsupportedVersion):
            log_.undecodable += 1
            return
        ctx.delivered = fetch_deliveries(payload, ctx.positions, self.proxy.topic_names, log_.topics)
        assert self.down is not None
        self.down.on_written = self._written

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
                inflight.alterations = tuple(plan.alterations)
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
            if rule.alters_response:
                plan.alterations.append(state)  # its filters and draw apply to the answer, when it comes
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
                if rule.action == HOLD and rule.transactional and not held_.is_transactional(ctx):
                    continue
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
                assert self.down is not None
                self.track_written = True
                self.down.on_written = self._written
            return True
        if rule.action == ERROR:
            return self._inject_error(ctx, plan, state)
        if rule.action == HOLD:
            return held_.hold(self, ctx, plan, state)
        return False

    def _inject_error(self, ctx: _Request, plan: _Plan, state: RuleState) -> bool:
        rule = state.rule
        header = ctx.header
        targets = ctx.targets(self.proxy.topic_names)
        try:
            if targets is None:
                raise UnsupportedVersion(ctx._targets_error or "request body not decodable")
            request = (kp.decode_request(ctx.frame, header) if header.api_key in kp.REQUEST_ANSWERED_APIS else None)
            reply = kp.encode_error_response(header.api_key, header.api_version, targets,
                                             rule.error or 0, header.correlation_id, request)
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
        # An answer a rule drops or replaces is not worth altering.
        alterations = inflight.alterations if inflight.fault is None else ()
        rewritten = None
        if inflight.special:
            rewritten = self.proxy.process_special(self, inflight.ctx.header, frame, alterations)
        elif alterations:
            rewritten = self.proxy.alter_answer(self, inflight.ctx, frame, alterations)
        if rewritten is not None:
            head, data = b"", rewritten
        state = inflight.fault
        not_before = self.proxy.now() + inflight.response_delay if inflight.response_delay else 0.0
        if state is None:
            if inflight.ctx.positions is not None:
                self._log_deliveries(inflight.ctx, frame if rewritten is None else rewritten[4:])
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
            if header.api_key in kp.TARGETED_APIS:
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


def _directions(direction: str) -> tuple[str, ...]:
    return (REQUEST, RESPONSE) if direction == BOTH else (direction,)


def _error_name(code: int | None) -> str:
    try:
        return kp.error_code_of(code or 0).name.upper()
    except ValueError:
        return f"UNKNOWN_{code}"


def _lost_reason(side: str, exc: Exception | None) -> str:
    return f"{side} closed" if exc is None else f"{side} connection failed: {exc!r}"
