"""The `hold` rule: a transactional Produce delivered to the broker after its client gave up on it.

Jepsen's delayed Produce (docs/proxy.md "hold"): the proxy holds one Produce request back for `ms`. The
connection's later requests queue behind it (a TCP stream is never reordered), so the client's request
timeout fires: it closes the connection, aborts its transaction and begins the next one on a new
connection. The held request is then taken out of the closed connection's stream, every request queued
behind it is dropped (never reached the broker), and the proxy keeps its *own* upstream connection to the
broker open: at the release time it writes the held request there, reads the broker's answer and reports
it (``held_answered`` with each partition's error and base offset: ``INVALID_PRODUCER_EPOCH`` when the
epoch bump fenced the late write, ``NONE`` when it landed). A client that is still connected at the release
time gets the request forwarded in its stream and its answer as usual (``held_released``).

Events (phase of a ``fault`` event): ``held`` (when held: the transactional id, and per partition the
batch's producer id, epoch and base sequence), ``held_client_gone`` (the client closed; requests dropped
behind the held one), ``held_delivered`` (written to the broker on the proxy's connection), ``held_answered``
(the broker's answer), ``held_unanswered`` (no answer within the wait, or the broker connection failed),
``held_released`` (the client was still there at the release time).
"""
from __future__ import annotations

import asyncio
import dataclasses
import struct
from typing import TYPE_CHECKING, Any

from . import protocol as kp
from .errors import KafkaProtocolError, UnsupportedVersion
from .rules import RuleState
from .stream import Item, abort_with_rst

if TYPE_CHECKING:
    from .connection import _Connection, _Plan, _Request

# How long the proxy's own broker connection waits for the answer to a held request once written.
ANSWER_WAIT_S = 30.0
_BATCH_PRODUCER = struct.Struct(">qhi")  # producerId int64, producerEpoch int16, baseSequence int32
_PRODUCER_AT = 43                        # in a v2 record batch (see records.py)


@dataclasses.dataclass(slots=True)
class Held:
    """One held request on its connection."""

    ctx: _Request
    state: RuleState
    held_at: float
    release_at: float
    item: Item | None = None
    released: bool = False      # written to the broker (in the stream or on the proxy's own connection)
    client_gone_at: float | None = None
    done: bool = False
    timer: asyncio.TimerHandle | None = None


def produce_evidence(ctx: _Request) -> dict[str, Any]:
    """Pure-ish: the held Produce's transactional id and, per partition, its first batch's producer id,
    epoch and base sequence (from the record batch header); ``{"decode_error": ...}`` when undecodable."""
    try:
        request = kp.decode_request(ctx.frame, ctx.header)
    except (KafkaProtocolError, UnsupportedVersion) as exc:
        return {"decode_error": str(exc)}
    batches = []
    for topic in request.topic_data:
        name = getattr(topic, "name", None) or str(getattr(topic, "topic_id", ""))
        for part in topic.partition_data:
            entry: dict[str, Any] = {"topic": name, "partition": int(part.index)}
            records = part.records or b""
            if len(records) >= _PRODUCER_AT + _BATCH_PRODUCER.size:
                pid, epoch, seq = _BATCH_PRODUCER.unpack_from(records, _PRODUCER_AT)
                entry.update(producer_id=pid, producer_epoch=epoch, base_sequence=seq)
            batches.append(entry)
    return {"transactional_id": request.transactional_id, "batches": batches}


def is_transactional(ctx: _Request) -> bool:
    """Whether a Produce request carries a transactional id (read without decoding the records)."""
    try:
        request = kp.decode_request(ctx.frame, ctx.header)
    except (KafkaProtocolError, UnsupportedVersion):
        return False
    return bool(getattr(request, "transactional_id", None))


def hold(conn: _Connection, ctx: _Request, plan: _Plan, state: RuleState) -> bool:
    """Hold ``ctx`` (a Produce a `hold` rule picked) for the rule's ``ms``: forward it into the stream with
    that delay, so everything behind it waits too, and watch for the client to give up. Returns True."""
    assert state.rule.hold_ms is not None and conn.up is not None
    now = conn.now()
    held = Held(ctx, state, now, now + state.rule.hold_ms / 1000.0)
    conn.event("fault", ctx, state, phase="held", detail={"hold_ms": state.rule.hold_ms, **produce_evidence(ctx)})
    plan.request_delay += state.rule.hold_ms / 1000.0
    conn._forward(ctx, plan)
    held.item = conn.up.queued()[-1]
    conn.holds.append(held)
    conn.up.on_written = lambda item: _written_in_stream(conn, item)
    return True


def _written_in_stream(conn: _Connection, item: Item) -> None:
    """The up sender wrote a frame: a held one still in its client's stream was released there."""
    for held in conn.holds:
        if held.item is item and not held.released:
            held.released = True
            held.done = True
            conn.event("fault", held.ctx, held.state, phase="held_released",
                       detail={"client_connected": True, "held_ms": _ms(conn.now() - held.held_at)})


def client_gone(conn: _Connection, reason: str) -> bool:
    """The client closed its side: take the (first) unreleased held request out of the stream, drop the
    requests queued behind it, close the client side and keep the broker connection for the late delivery.
    False when nothing is held (the caller closes as usual)."""
    held = next((h for h in conn.holds if not h.released), None)
    if held is None or conn.up is None or conn.upstream_side is None or conn.upstream_side.lost:
        return False
    now = conn.now()
    held.client_gone_at = now
    dropped = conn.up.take_all()
    behind = [i for i in dropped if i is not held.item and i.ctx is not None]
    conn.event("fault", held.ctx, held.state, phase="held_client_gone", detail={
        "after_ms": _ms(now - held.held_at), "release_in_ms": _ms(max(held.release_at - now, 0.0)),
        "requests_dropped": len(behind),
        "dropped": [{"api": kp.api_name(i.ctx.header.api_key), "correlation_id": i.ctx.header.correlation_id}
                    for i in behind]})
    for other in conn.holds:
        if other is not held and not other.released:
            _finish(conn, other, "held_unanswered", {"reason": "dropped: queued behind another held request"},
                    close_upstream=False)
    conn.keep_upstream = True
    conn.close(reason)
    upstream = conn.upstream_side
    upstream.on_frame = lambda head, frame: _on_answer(conn, held, frame)
    upstream.on_lost = lambda exc: _finish(conn, held, "held_unanswered",
                                           {"reason": f"broker connection lost: {exc!r}" if exc else "broker closed"})
    upstream.sender = None
    upstream.resume_all()
    conn.listener.awaiting.add(conn)
    loop = asyncio.get_running_loop()
    held.timer = loop.call_later(max(held.release_at - now, 0.0), _deliver, conn, held)
    return True


def _deliver(conn: _Connection, held: Held) -> None:
    """Write the held request to the broker on the proxy's own connection."""
    upstream = conn.upstream_side
    if held.done or upstream is None or upstream.transport is None or upstream.transport.is_closing():
        _finish(conn, held, "held_unanswered", {"reason": "the broker connection closed before the release"})
        return
    item = held.item
    assert item is not None
    upstream.transport.write(item.head + item.data if item.head else kp.with_length(item.data))
    held.released = True
    now = conn.now()
    conn.event("fault", held.ctx, held.state, phase="held_delivered", detail={
        "held_ms": _ms(now - held.held_at), "client_gone_ms_before": _ms(now - (held.client_gone_at or now)),
        "own_connection": True})
    held.timer = asyncio.get_running_loop().call_later(
        ANSWER_WAIT_S, lambda: _finish(conn, held, "held_unanswered", {"reason": f"no answer in {ANSWER_WAIT_S:g} s"}))


def _on_answer(conn: _Connection, held: Held, frame: bytes) -> None:
    """A broker answer on the proxy's own connection: the held request's, or an earlier request's (ignored)."""
    if kp.response_correlation_id(frame) != held.ctx.header.correlation_id:
        return
    detail: dict[str, Any] = {}
    results = conn._produce_results(held.ctx.header, frame)
    if results is not None:
        detail["results"] = results
        detail["errors"] = sorted({r["error"] for r in results})
    _finish(conn, held, "held_answered", detail)


def _finish(conn: _Connection, held: Held, phase: str, detail: dict[str, Any], close_upstream: bool = True) -> None:
    """Report the late delivery's end once and close the proxy's broker connection."""
    if held.done:
        return
    held.done = True
    if held.timer is not None:
        held.timer.cancel()
        held.timer = None
    conn.event("fault", held.ctx, held.state, phase=phase,
               detail={"held_ms": _ms(conn.now() - held.held_at), **detail})
    if not close_upstream:
        return
    conn.listener.awaiting.discard(conn)
    upstream = conn.upstream_side
    if upstream is not None:
        upstream.detach()
        abort_with_rst(upstream.transport)


def stop(conn: _Connection, reason: str = "proxy stopping") -> None:
    """The proxy stops, or the connection closes without a late delivery to make (the broker side went, or
    the proxy closed it): a held request not delivered yet never will be."""
    for held in conn.holds:
        if not held.done:
            _finish(conn, held, "held_unanswered", {"reason": reason}, close_upstream=conn.keep_upstream)


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)
