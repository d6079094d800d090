"""Segment frames: the binary layout of a batch of records, compressed when it pays.

A record is (ts_ms, id, key, headers, payload). Frame layout, little-endian:
    ts_ms:i64  id_len:u16  key_len:u16 (0xFFFF = no key)  headers_len:u32 (0xFFFFFFFF = none)
    payload_len:u32  id  key  headers  payload
`ts_ms` 0 means "the segment's commit time".
"""

from __future__ import annotations

import hashlib
import struct
import threading
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    import zstandard

_HEADER = struct.Struct("<qHHII")
_NO_KEY = 0xFFFF
_NO_HEADERS = 0xFFFFFFFF
COMPRESS_ABOVE = 512  # bytes of raw frames; below this zstd's framing costs more than it saves
RAW, ZSTD = 0, 1

# zstd contexts are not thread-safe (two threads in one context corrupt data), and the local
# gateway and the dispatchers run many threads: one context of each kind per thread.
_codecs = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    found = getattr(_codecs, "compressor", None)
    if found is None:
        # Imported by the first batch that may compress (0.2 % of a minimal handler's cold import),
        # which a function that writes small batches and reads them back never needs.
        import zstandard

        found = _codecs.compressor = zstandard.ZstdCompressor(level=1)
    return found


def _decompressor() -> zstandard.ZstdDecompressor:
    found = getattr(_codecs, "decompressor", None)
    if found is None:
        import zstandard  # the first compressed segment read (see `_compressor`)

        found = _codecs.decompressor = zstandard.ZstdDecompressor()
    return found


class Record(NamedTuple):
    payload: bytes
    id: str = ""
    key: str | None = None
    headers: bytes | None = None
    ts_ms: int = 0


class Entry(NamedTuple):
    """A record read back, with its offset and (resolved) timestamp."""

    offset: int
    ts_ms: int
    id: str
    key: str | None
    headers: bytes | None
    payload: bytes


def encode(records: list[Record]) -> bytes:
    parts: list[bytes] = []
    for r in records:
        rid = r.id.encode()
        key = r.key.encode() if r.key is not None else b""
        headers = r.headers if r.headers is not None else b""
        if len(rid) >= 0xFFFF or len(key) >= _NO_KEY:
            raise ValueError("record id and key must be shorter than 65535 bytes")
        parts.append(_HEADER.pack(
            r.ts_ms, len(rid), _NO_KEY if r.key is None else len(key),
            _NO_HEADERS if r.headers is None else len(headers), len(r.payload),
        ))
        parts += (rid, key, headers, r.payload)
    return b"".join(parts)


def decode(raw: bytes, first_offset: int, segment_ts_ms: int) -> list[Entry]:
    out: list[Entry] = []
    pos, offset, size, view = 0, first_offset, _HEADER.size, memoryview(raw)
    while pos < len(raw):
        ts, id_len, key_len, headers_len, payload_len = _HEADER.unpack_from(raw, pos)
        pos += size
        rid = bytes(view[pos : pos + id_len]).decode()
        pos += id_len
        key = None
        if key_len != _NO_KEY:
            key = bytes(view[pos : pos + key_len]).decode()
            pos += key_len
        headers = None
        if headers_len != _NO_HEADERS:
            headers = bytes(view[pos : pos + headers_len])
            pos += headers_len
        payload = bytes(view[pos : pos + payload_len])
        pos += payload_len
        out.append(Entry(offset, ts or segment_ts_ms, rid, key, headers, payload))
        offset += 1
    return out


def pack(records: list[Record]) -> tuple[int, bytes, int]:
    """(codec, stored bytes, raw size) for a batch: zstd above COMPRESS_ABOVE when it is smaller."""
    raw = encode(records)
    codec, stored = compress(raw)
    return codec, stored, len(raw)


def compress(raw: bytes) -> tuple[int, bytes]:
    """(codec, stored bytes) for encoded frames: zstd above COMPRESS_ABOVE when it is smaller."""
    if len(raw) > COMPRESS_ABOVE:
        packed = _compressor().compress(raw)
        if len(packed) < len(raw):
            return ZSTD, packed
    return RAW, raw


def frame_each(records: list[Record]) -> list[bytes]:
    """Each record's frame on its own: frames concatenate, so any subset of them, joined in order,
    is a segment's raw frames (a caller that learns which records to keep only once in SQL)."""
    return [encode([r]) for r in records]


def unpack(codec: int, stored: bytes) -> bytes:
    return _decompressor().decompress(stored) if codec == ZSTD else bytes(stored)


def id_hash(record_id: str) -> bytes:
    """The per-message hash deduplication keys on (16 bytes of BLAKE2b)."""
    return hashlib.blake2b(record_id.encode(), digest_size=16).digest()
