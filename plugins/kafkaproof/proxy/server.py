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
from . import responses
from .deliveries import DeliveryLog
from .errors import KafkaProtocolError, ProxyError, RuleError, UnsupportedVersion
from .events import EventSink, JsonlEventSink, stamp
from .connection import _Connection, _Request, format_hostport, parse_hostport  # noqa: F401 (re-exported)
from .responses import STALE
from .rules import CORRUPT, DUPLICATE, METADATA_FAULT, Pacer, Rule, RuleState, parse_rule
from .stream import FrameProtocol

log = logging.getLogger("kafkaproof.proxy")

#: Max versions the proxy lets through ApiVersions: what kio can decode for the APIs it decodes.
KIO_CAPS: Mapping[int, int] = {
    api: kp.max_supported_version(api)
    for api in (kp.PRODUCE, kp.FETCH, kp.METADATA, kp.FIND_COORDINATOR, kp.DESCRIBE_CLUSTER, kp.SHARE_FETCH,
                kp.SHARE_ACKNOWLEDGE, kp.SHARE_GROUP_HEARTBEAT)
}
#: Extra caps when rewriting addresses: Produce v10+ and Fetch v16+ responses may carry
#: broker endpoints (KIP-951) that would send the client around the proxy.
REWRITE_CAPS: Mapping[int, int] = {kp.PRODUCE: 9, kp.FETCH: 15}


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
        self.awaiting: set[_Connection] = set()  # closed by a rule's reset, still reading answers from the broker
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
        for conn in list(self.awaiting):
            conn.stop_awaiting()
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
        self.deliveries: DeliveryLog | None = None  # the delivery log, once turned on (deliveries.py)

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

    def remove_rule(self, rule_id: str) -> dict[str, Any] | None:
        """Uninstall a rule; returns it with its final counters, None if no such rule (already expired
        ones are removed too). The counters are read in the same step as the removal, so no firing is missed."""
        state = self._states.pop(rule_id, None)
        if state is None:
            return None
        final = state.as_json(self.now())
        self._refresh()
        self.emit(stamp("rule_removed", rule_id=rule_id, action=state.rule.action,
                        fired=state.fired, matched=state.matched))
        log.info("rule %s removed (fired %d times)", rule_id, state.fired)
        return final

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

    def process_special(self, conn: _Connection, header: kp.RequestHeader, frame: bytes,
                        alterations: Iterable[RuleState] = ()) -> bytes | None:
        """Cap ApiVersions / rewrite addresses in a response / apply `metadata` rules; returns a new framed
        response or None."""
        api_key, version = header.api_key, header.api_version
        try:
            if api_key == kp.API_VERSIONS:
                return self._cap_versions(conn, header, frame)
            payload = kp.decode_response(frame, api_key, version)
            if api_key == kp.METADATA:
                self.topic_names.update(kp.metadata_topic_ids(payload))
            new_payload, changes = kp.rewrite_addresses(payload, self._map_address)
            if changes and self.rewrite:
                conn.event("address_rewrite", _Request(header, b"", True),
                           detail={"changes": [c.as_json() for c in changes]})
            else:
                new_payload, changes = payload, []
            misstated = self._misstate_leaders(conn, _Request(header, b"", True), new_payload, alterations)
            if misstated is None and not changes:
                return None
            return kp.encode_response(new_payload if misstated is None else misstated, header.correlation_id)
        except (KafkaProtocolError, UnsupportedVersion) as exc:
            conn.event("decode_failed", _Request(header, b"", True), detail={"error": str(exc)})
            log.warning("passing %s v%d response through unchanged: %s", kp.api_name(api_key), version, exc)
            return None

    def is_live(self, state: RuleState) -> bool:
        """Whether a rule picked for a request may still act when its answer comes (not removed, healed or used up)."""
        return self._states.get(state.rule.id) is state and state.active(self.now())

    def _misstate_leaders(self, conn: _Connection, ctx: _Request, payload: Any,
                          alterations: Iterable[RuleState]) -> Any | None:
        """A Metadata answer with the `metadata` rules applied (each fires once per answer it alters), or None."""
        altered = None
        for state in alterations:
            rule = state.rule
            if rule.action != METADATA_FAULT or not self.is_live(state):
                continue
            candidate, changes = responses.misstate_leaders(altered or payload, rule.mode or "", rule.matches_partition,
                                                            self.topic_names)
            if not changes or not (state.roll(self.rng) and state.fire()):
                continue
            altered = candidate
            conn.event("fault", ctx, state, phase="metadata_misstated", topics=_changed_topics(changes),
                       detail={"mode": rule.mode, "changes": [c.as_json() for c in changes]})
        return altered

    def alter_answer(self, conn: _Connection, ctx: _Request, frame: bytes,
                     alterations: Iterable[RuleState]) -> bytes | None:
        """A Produce or Fetch answer with the rules applied, framed; None when nothing changed. `corrupt` and
        `duplicate` fire once per batch they alter; a `stale` metadata rule hides the leader hints of the
        partitions it misstates (without firing: its answers are Metadata)."""
        header = ctx.header
        states = [s for s in alterations if self.is_live(s)
                  and (s.rule.mode == STALE or (s.rule.action in (CORRUPT, DUPLICATE) and header.api_key == kp.FETCH))]
        if not states:
            return None
        try:
            payload = kp.decode_response(frame, header.api_key, header.api_version)
        except (KafkaProtocolError, UnsupportedVersion) as exc:
            conn.event("decode_failed", ctx, detail={"error": str(exc)})
            log.warning("%s v%d response passed through unaltered: %s", kp.api_name(header.api_key),
                        header.api_version, exc)
            return None
        altered = False
        for state in states:
            if state.rule.action == METADATA_FAULT:
                payload, hidden = responses.hide_leader_hints(payload, state.rule.matches_partition, self.topic_names)
                if hidden:
                    altered = True
                    conn.event("fault", ctx, state, phase="leader_hint_hidden", topics=_changed_topics(hidden),
                               detail={"hints": [h.as_json() for h in hidden]})
                continue
            payload, changes = responses.alter_batches(payload, state.rule.action, self._batch_decider(state),
                                                       self.topic_names)
            if changes:
                altered = True
                phase = "records_corrupted" if state.rule.action == CORRUPT else "batch_duplicated"
                conn.event("fault", ctx, state, phase=phase, topics=_changed_topics(changes),
                           detail={"batches": [c.as_json() for c in changes]})
        return kp.encode_response(payload, header.correlation_id) if altered else None

    def _batch_decider(self, state: RuleState) -> responses.Decide:
        """Whether one batch is altered: the rule's topic/partition filter, its draw, its count."""
        def decide(topic: str | None, topic_id: uuid.UUID | None, partition: int) -> bool:
            return (state.rule.matches_partition(topic, topic_id, partition) and not state.expired
                    and state.roll(self.rng) and state.fire())
        return decide

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

    # ----------------------------------------------------------------- the delivery log

    def start_deliveries(self, limit: Any = None, max_bytes: Any = None, topics: Any = None) -> dict[str, Any]:
        """Turn the delivery log on (a new, empty one: what an earlier one held is gone); returns its summary."""
        self.deliveries = DeliveryLog(limit, max_bytes, topics)
        self.emit(stamp("deliveries_started", detail=self.deliveries.summary()))
        return self.deliveries.summary()

    def stop_deliveries(self, clear: bool = False) -> dict[str, Any]:
        """Stop recording; the log stays readable unless ``clear``. Returns its summary."""
        log_ = self._delivery_log()
        log_.stop()
        summary = log_.summary()
        self.emit(stamp("deliveries_stopped", detail=summary))
        if clear:
            self.deliveries = None
        return summary

    def read_deliveries(self, start: Any = 0, size: Any = None) -> dict[str, Any]:
        """One page of the delivery log (`DeliveryLog.page`)."""
        return self._delivery_log().page(start, size)

    def recording_deliveries(self) -> bool:
        """Whether Fetch answers are being logged now."""
        return self.deliveries is not None and self.deliveries.on

    def _delivery_log(self) -> DeliveryLog:
        if self.deliveries is None:
            raise ProxyError("the delivery log is off: turn it on with deliveries_start")
        return self.deliveries

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


def _changed_topics(changes: Iterable[Any]) -> list[dict[str, Any]]:
    """The ``topics`` of a fault event: the partitions an altered answer changed, per topic."""
    by_topic: dict[str, list[int]] = {}
    for change in changes:
        parts = by_topic.setdefault(change.topic or "", [])
        if change.partition not in parts:
            parts.append(change.partition)
    return [{"topic": topic, "partitions": parts} for topic, parts in by_topic.items()]
