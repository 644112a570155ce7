"""The proxy's data path: a Kafka frame parser on a buffered protocol, and an ordered sender.

:class:`FrameProtocol` receives bytes straight into its own buffer and hands
each complete frame to a callback, synchronously: no stream reader copy, no
coroutine switch per frame. A frame larger than :data:`DIRECT_READ_ABOVE` is
received directly into a buffer of its own size (one copy, by the kernel).

:class:`OrderedSender` writes frames to one transport strictly in submission
order, each no earlier than its release time; slots can be reserved first and
filled later, which is how responses keep request order whatever the proxy
does to each of them.

Flow control is the transports' own: when a destination's write buffer fills
(``pause_writing``) or a sender has too many frames waiting, the source
protocol stops reading until there is room again.
"""
from __future__ import annotations

import asyncio
import collections
import socket
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import KafkaProtocolError
from .protocol import MAX_FRAME_BYTES

if TYPE_CHECKING:
    from .rules import Pacer, RuleState

STAGING_BYTES = 256 * 1024
DIRECT_READ_ABOVE = 64 * 1024
COALESCE_BELOW = 16 * 1024
MAX_QUEUED = 1024

SLOT_PENDING, SLOT_READY, SLOT_DROP, SLOT_RESET = range(4)


class FrameProtocol(asyncio.BufferedProtocol):
    """One side of a proxied connection: parses 4-byte length-prefixed frames.

    ``on_frame(head, frame)`` gets the length prefix and the frame (bytes, or a
    bytearray for large frames); ``on_lost(exc)`` is called once when the
    transport closes. Both are set by the owner before data can flow.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.transport: asyncio.Transport | None = None
        self.on_frame: Callable[[bytes, Any], None] | None = None
        self.on_lost: Callable[[Exception | None], None] | None = None
        self.on_made: Callable[[FrameProtocol], None] | None = None
        self.sender: OrderedSender | None = None  # the sender writing *to* this transport
        self.writable = asyncio.Event()
        self.writable.set()
        self.lost = False
        self._buf = bytearray(STAGING_BYTES)
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._body: bytearray | None = None
        self._body_head = b""
        self._filled = 0
        self._pauses: set[str] = set()
        self._parse_scheduled = False

    # ----------------------------------------------------------------- asyncio callbacks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's are not asyncio.Transport subclasses
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        if self.on_made is not None:
            self.on_made(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._body is not None:
            return memoryview(self._body)[self._filled:]
        if self._end == len(self._buf):
            self._compact()
            if self._end == len(self._buf):
                # Only when data arrived while paused: grow rather than refuse it.
                self._buf = bytearray(self._buf) + bytearray(len(self._buf))
                self._view = memoryview(self._buf)
        return self._view[self._end:]

    def buffer_updated(self, nbytes: int) -> None:
        if self._body is not None:
            self._filled += nbytes
            if self._filled == len(self._body):
                body, head = self._body, self._body_head
                self._body, self._body_head, self._filled = None, b"", 0
                self._deliver(head, body)
                if not self._pauses:
                    self._parse()
            return
        self._end += nbytes
        if not self._pauses:
            self._parse()

    def eof_received(self) -> bool:
        return False  # close the transport; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self.writable.set()
        if self.on_lost is not None:
            self.on_lost(exc)

    def pause_writing(self) -> None:
        self.writable.clear()
        if self.sender is not None:
            self.sender.source_pause("write")

    def resume_writing(self) -> None:
        self.writable.set()
        if self.sender is not None:
            self.sender.source_resume("write")

    def detach(self) -> None:
        """Stop delivering anything to the owner (it is closing this side)."""
        self.on_frame = None
        self.on_lost = None
        self.lost = True
        self.writable.set()

    # ----------------------------------------------------------------- reading control

    def pause(self, reason: str) -> None:
        """Stop delivering frames (and reading from the socket) until every reason is resumed."""
        if not self._pauses and self.transport is not None and not self.lost:
            self.transport.pause_reading()
        self._pauses.add(reason)

    def resume(self, reason: str) -> None:
        """Withdraw one pause reason; reading resumes when none is left."""
        if reason not in self._pauses:
            return
        self._pauses.discard(reason)
        if self._pauses or self.lost:
            return
        if self.transport is not None:
            self.transport.resume_reading()
        if not self._parse_scheduled and self._end > self._start:
            # Frames already buffered were held back while paused.
            self._parse_scheduled = True
            asyncio.get_running_loop().call_soon(self._parse_later)

    def resume_all(self) -> None:
        """Withdraw every pause reason (the side's reader is the only one left)."""
        for reason in list(self._pauses):
            self.resume(reason)

    def _parse_later(self) -> None:
        self._parse_scheduled = False
        if not self._pauses and not self.lost:
            self._parse()

    # ----------------------------------------------------------------- parsing

    def _parse(self) -> None:
        buf, view = self._buf, self._view
        while not self._pauses and not self.lost:
            start, end = self._start, self._end
            if end - start < 4:
                break
            size = int.from_bytes(buf[start:start + 4], "big", signed=True)
            if size < 0 or size > MAX_FRAME_BYTES:
                self._fail(KafkaProtocolError(f"frame length {size} is out of range (not Kafka, or TLS?)"))
                return
            available = end - start - 4
            if available >= size:
                head = bytes(view[start:start + 4])
                frame = bytes(view[start + 4:start + 4 + size])
                self._start = start + 4 + size
                self._deliver(head, frame)
                continue
            if size > DIRECT_READ_ABOVE:
                body = bytearray(size)
                body[:available] = view[start + 4:end]
                self._body, self._body_head, self._filled = body, bytes(view[start:start + 4]), available
                self._start = self._end = 0
                return
            break
        if self._start == self._end:
            self._start = self._end = 0
        elif len(self._buf) - self._end < DIRECT_READ_ABOVE + 4:
            self._compact()

    def _compact(self) -> None:
        start, end = self._start, self._end
        if start:
            self._buf[0:end - start] = self._view[start:end]
            self._start, self._end = 0, end - start

    def _deliver(self, head: bytes, frame: Any) -> None:
        if self.on_frame is None:
            return
        try:
            self.on_frame(head, frame)
        except KafkaProtocolError as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        if self.transport is not None:
            self.transport.abort()
        if not self.lost:
            self.lost = True
            if self.on_lost is not None:
                self.on_lost(exc)


def abort_with_rst(transport: asyncio.BaseTransport | None) -> None:
    """Close a TCP transport with a reset (SO_LINGER 0) instead of a FIN."""
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        except OSError:
            pass
    transport.abort()


class Item:
    """One frame (or a slot for a frame) in an ordered sender."""

    __slots__ = ("state", "head", "data", "not_before", "pacers", "budgets", "paced", "ctx")

    def __init__(self, ctx: Any = None) -> None:
        self.state = SLOT_PENDING
        self.head = b""  # a frame's length prefix when kept apart from ``data`` (saves a copy)
        self.data: Any = b""
        self.not_before = 0.0
        self.pacers: tuple[tuple[RuleState, Pacer], ...] = ()
        self.budgets: tuple[tuple[RuleState, list[int]], ...] = ()
        self.paced = False
        self.ctx = ctx

    @property
    def size(self) -> int:
        """Bytes this item writes."""
        return len(self.head) + len(self.data)


class OrderedSender:
    """Writes frames to one transport in submission order, each no earlier than its release time.

    Frames that need no waiting are written synchronously; once a frame must wait
    (latency, bandwidth, a reserved slot not yet filled behind which others
    queue), a task takes over until the queue is empty, so later frames can never
    overtake it. ``owner`` is the connection: it provides ``closed``, ``now()``,
    ``event()``, ``reset()`` and ``count_bytes()``.
    """

    def __init__(self, owner: Any, target: FrameProtocol, source: FrameProtocol | None, direction: str) -> None:
        self._owner = owner
        self._target = target
        self.source = source
        self.direction = direction
        target.sender = self
        self._items: collections.deque[Item] = collections.deque()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        self._out: list[Any] = []
        self._flush_scheduled = False
        self.on_written: Callable[[Item], None] | None = None  # told of each whole frame written that has a ctx

    # ----------------------------------------------------------------- flow control towards the source

    def source_pause(self, reason: str) -> None:
        """Stop reading from the side that feeds this sender."""
        if self.source is not None:
            self.source.pause(reason)

    def source_resume(self, reason: str) -> None:
        """Let the feeding side read again (for this reason)."""
        if self.source is not None:
            self.source.resume(reason)

    # ----------------------------------------------------------------- queueing

    def reserve(self, ctx: Any = None) -> Item:
        """Claim the next position in the stream; complete it later with :meth:`fill`."""
        item = Item(ctx)
        self._items.append(item)
        if len(self._items) > MAX_QUEUED:
            self.source_pause("queue")
        return item

    def push(self, data: Any, not_before: float = 0.0, ctx: Any = None,
             pacers: tuple = (), budgets: tuple = (), head: bytes = b"") -> None:
        """Queue a frame (``head`` + ``data``) behind everything already queued."""
        self.fill(self.reserve(ctx), SLOT_READY, data, not_before, pacers, budgets, head)

    def fill(self, item: Item, state: int, data: Any = b"", not_before: float = 0.0,
             pacers: tuple = (), budgets: tuple = (), head: bytes = b"") -> None:
        """Complete a slot: a frame to write (SLOT_READY), nothing (SLOT_DROP) or a connection reset (SLOT_RESET).

        For SLOT_RESET, ``data`` is the rule state that asked for the reset (the owner reports it).
        """
        item.state, item.head, item.data, item.not_before = state, head, data, not_before
        item.pacers, item.budgets = pacers, budgets
        if self._task is not None:
            self._wake.set()
        else:
            self._pump()

    def _pump(self) -> None:
        now = self._owner.now()
        items = self._items
        while items and not self._owner.closed:
            item = items[0]
            if item.state == SLOT_PENDING:
                return
            if self._wait_for(item, now) > 0 or not self._target.writable.is_set():
                self._task = asyncio.create_task(self._run(), name=f"send-{self.direction}-{self._owner.id}")
                return
            items.popleft()
            self._emit(item)
        self._dequeued()

    def _dequeued(self) -> None:
        if len(self._items) <= MAX_QUEUED:
            self.source_resume("queue")

    def _wait_for(self, item: Item, now: float) -> float:
        if item.pacers and not item.paced:
            item.paced = True
            release = max(now, item.not_before)
            for state, pacer in item.pacers:
                start = pacer.reserve(item.size, release)
                if start > release:
                    self._owner.event("fault", item.ctx, state, phase="throttled",
                                      detail={"direction": self.direction, "bytes": item.size,
                                              "delay_ms": round((start - now) * 1000, 3)})
                release = start
            item.not_before = release
        return item.not_before - now

    async def _run(self) -> None:
        try:
            items = self._items
            while items and not self._owner.closed:
                item = items[0]
                if item.state == SLOT_PENDING:
                    self._wake.clear()
                    await self._wake.wait()
                    continue
                delay = self._wait_for(item, self._owner.now())
                if delay > 0:
                    await asyncio.sleep(delay)
                await self._target.writable.wait()
                items.popleft()
                self._emit(item)
                self._dequeued()
        finally:
            self._task = None

    def _emit(self, item: Item) -> None:
        if item.state == SLOT_READY:
            if not item.budgets:
                self._write(item.data, item.head)
                if self.on_written is not None and item.ctx is not None:
                    self.on_written(item)
                return
            data = item.head + item.data
            for state, remaining in item.budgets:
                if len(data) >= remaining[0] and state.fire():
                    cut = remaining[0]
                    self._write(data[:cut])
                    self._owner.event("fault", item.ctx, state, phase="connection_reset",
                                      detail={"direction": self.direction, "after_bytes": state.rule.after_bytes,
                                              "frame_bytes": len(data), "bytes_written": cut})
                    self._owner.reset(state, "connection_reset", f"reset by rule {state.rule.id}",
                                      torn=item, torn_direction=self.direction)
                    return
                remaining[0] -= len(data)
            self._write(data)
            if self.on_written is not None and item.ctx is not None:
                self.on_written(item)
        elif item.state == SLOT_RESET:
            self._owner.reset(item.data, "response_dropped", "reset by lost_ack rule")

    def _write(self, data: Any, head: bytes = b"") -> None:
        # Small frames written in one event-loop pass (pipelined requests, a burst of
        # responses) go out in one send instead of one syscall each; large frames go
        # out at once, prefix and body as two buffers (one writev with uvloop).
        size = len(head) + len(data)
        self._owner.count_bytes(self.direction, size)
        transport = self._target.transport
        if transport is None or transport.is_closing():
            return
        if size >= COALESCE_BELOW:
            if self._out:
                self.flush()
            if head:
                transport.writelines((head, data))
            else:
                transport.write(data)
            return
        if head:
            self._out.append(head)
        self._out.append(data)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Hand the frames written so far to the transport."""
        self._flush_scheduled = False
        out = self._out
        transport = self._target.transport
        if out and transport is not None and not transport.is_closing():
            transport.write(out[0] if len(out) == 1 else b"".join(out))
        out.clear()

    def queued(self) -> tuple[Item, ...]:
        """The items not written yet, in stream order (filled or still pending)."""
        return tuple(self._items)

    def take_all(self) -> list[Item]:
        """Remove and return every item not written yet (the `hold` rule takes a closed client's stream)."""
        items = list(self._items)
        self._items.clear()
        self._dequeued()
        return items

    def idle(self) -> bool:
        """Whether nothing that can still be written is queued (empty, or waiting on an unfilled slot)."""
        return not self._items or self._items[0].state == SLOT_PENDING

    async def settle(self, timeout: float) -> None:
        """Wait (bounded) until every frame that can still be written has been written."""
        deadline = self._owner.now() + timeout
        while not self.idle() and not self._owner.closed and not self._target.lost \
                and self._owner.now() < deadline:
            await asyncio.sleep(0.01)
        self.flush()

    def cancel(self) -> None:
        """Stop the sender task, if any."""
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()
