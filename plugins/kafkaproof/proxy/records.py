"""Record batches (Kafka's v2 format, magic 2) as bytes: find them in a record set, flip bytes in their values,
copy one to other offsets. Used by the `corrupt` and `duplicate` rules on Fetch responses (docs/proxy.md).

A batch: baseOffset int64, batchLength int32, partitionLeaderEpoch int32, magic int8, crc uint32,
attributes int16, lastOffsetDelta int32, baseTimestamp int64, maxTimestamp int64, producerId int64,
producerEpoch int16, baseSequence int32, then the record count int32 and the records. The CRC
(CRC-32C) covers everything from the attributes on, so neither the base offset nor the leader
epoch is part of it.
"""
from __future__ import annotations

import dataclasses
import struct

from .errors import KafkaProtocolError
from .protocol import read_uvarint

_HEAD = struct.Struct(">qi")  # baseOffset, batchLength
_BASE_OFFSET = struct.Struct(">q")
_HEAD_BYTES = 12              # baseOffset + batchLength: batchLength counts the bytes after them
_MAGIC_AT = 16
_ATTRIBUTES_AT = 21
_LAST_DELTA_AT = 23
_BASE_TIMESTAMP_AT = 27
_COUNT_AT = 57
_RECORDS_AT = 61              # the first record of an uncompressed batch
_COMPRESSION_MASK = 0x07
_CONTROL = 0x20
COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")


@dataclasses.dataclass(frozen=True, slots=True)
class Batch:
    """Where one complete v2 batch sits in a record set, and its header fields the rules read."""

    start: int
    end: int
    base_offset: int
    last_offset_delta: int
    attributes: int

    @property
    def next_offset(self) -> int:
        """The offset after the batch's last one."""
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> str:
        """The batch's compression codec (``none`` when its records are plain)."""
        codec = self.attributes & _COMPRESSION_MASK
        return COMPRESSION_NAMES[codec] if codec < len(COMPRESSION_NAMES) else f"codec_{codec}"

    @property
    def is_control(self) -> bool:
        """Whether the batch holds a transaction marker rather than records of the application."""
        return bool(self.attributes & _CONTROL)


def split_batches(records: bytes) -> tuple[list[Batch], int]:
    """The complete v2 batches of a record set and where the complete part ends.

    A Fetch response may end in a batch cut short by the size limits; that tail is not a batch
    (clients skip it and fetch it again). Raises KafkaProtocolError on a legacy message set
    (magic 0 or 1), which the rules leave alone.
    """
    batches: list[Batch] = []
    pos = 0
    while pos + _RECORDS_AT <= len(records):
        base_offset, length = _HEAD.unpack_from(records, pos)
        end = pos + _HEAD_BYTES + length
        if records[pos + _MAGIC_AT] != 2:
            raise KafkaProtocolError(f"record batch at byte {pos} has magic {records[pos + _MAGIC_AT]}, not 2")
        if length < _RECORDS_AT - _HEAD_BYTES or end > len(records):
            break
        attributes = struct.unpack_from(">h", records, pos + _ATTRIBUTES_AT)[0]
        last_delta = struct.unpack_from(">i", records, pos + _LAST_DELTA_AT)[0]
        batches.append(Batch(pos, end, base_offset, last_delta, attributes))
        pos = end
    return batches, pos


def _varint(buf: bytes | bytearray, pos: int) -> tuple[int, int]:
    """A zigzag-encoded signed varint at ``pos`` (a record's fields): (value, position after it)."""
    raw, pos = read_uvarint(buf, pos)
    return (raw >> 1) ^ -(raw & 1), pos


@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One record of an uncompressed batch, as a client reads it: where its key and value sit in the batch
    (None: null), its deltas, and where its headers start."""

    offset_delta: int
    timestamp_delta: int
    key: tuple[int, int] | None
    value: tuple[int, int] | None
    headers_at: int
    end: int


def records_of(batch: bytes) -> list[Record]:
    """Every record of an uncompressed batch (positions in ``batch``).

    A record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
    keyLength varint, key, valueLength varint, value, headers. Raises KafkaProtocolError on a record
    that runs past its batch.
    """
    (count,) = struct.unpack_from(">i", batch, _COUNT_AT)
    out, pos = [], _RECORDS_AT
    for _ in range(max(count, 0)):
        length, pos = _varint(batch, pos)
        record_end = pos + length
        pos += 1  # attributes
        timestamp_delta, pos = _varint(batch, pos)
        offset_delta, pos = _varint(batch, pos)
        key_length, pos = _varint(batch, pos)
        key = (pos, pos + key_length) if key_length >= 0 else None
        pos += max(key_length, 0)
        value_length, pos = _varint(batch, pos)
        value = (pos, pos + value_length) if value_length >= 0 else None
        if record_end > len(batch) or pos + max(value_length, 0) > record_end:
            raise KafkaProtocolError("a record runs past its batch")
        out.append(Record(offset_delta, timestamp_delta, key, value, pos + max(value_length, 0), record_end))
        pos = record_end
    return out


def value_spans(batch: bytes) -> list[tuple[int, int]]:
    """(start, end) in ``batch`` of each record's non-empty value (a null or empty value has none) of an
    uncompressed batch."""
    return [r.value for r in records_of(batch) if r.value is not None and r.value[1] > r.value[0]]


def headers_of(batch: bytes, record: Record) -> tuple[tuple[str, bytes | None], ...]:
    """A record's headers: (name, value or None), in order; a name that is not UTF-8 is decoded with
    replacement (header names are strings in Kafka)."""
    count, pos = _varint(batch, record.headers_at)
    out = []
    for _ in range(max(count, 0)):
        name_length, pos = _varint(batch, pos)
        name = bytes(batch[pos:pos + max(name_length, 0)]).decode("utf-8", "replace")
        pos += max(name_length, 0)
        value_length, pos = _varint(batch, pos)
        value = bytes(batch[pos:pos + value_length]) if value_length >= 0 else None
        pos += max(value_length, 0)
        if pos > record.end:
            raise KafkaProtocolError("a record's headers run past the record")
        out.append((name, value))
    return tuple(out)


def base_timestamp(batch: bytes) -> int:
    """The batch's base timestamp (epoch ms): a record's timestamp is it plus the record's delta."""
    return int(struct.unpack_from(">q", batch, _BASE_TIMESTAMP_AT)[0])


def corrupt_values(batch: bytes) -> tuple[bytes, int]:
    """The batch with the first byte of every non-empty record value inverted, and how many values that changed.

    The CRC is left as it was: the batch is corrupt the way a bad disk or wire would leave it, and a
    client that checks CRCs (librdkafka's ``check.crcs``, off by default; Java's, on) can tell. Only
    for uncompressed data batches (see :attr:`Batch.compression`).
    """
    data = bytearray(batch)
    spans = value_spans(batch)
    for start, _end in spans:
        data[start] ^= 0xFF
    return bytes(data), len(spans)


def relocated(batch: bytes, base_offset: int) -> bytes:
    """A copy of the batch whose records sit at ``base_offset`` on (the CRC does not cover the base offset)."""
    return _BASE_OFFSET.pack(base_offset) + batch[8:]
