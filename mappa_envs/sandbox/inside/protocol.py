"""The frame format of every sandbox pipe, bounded on the reading side.

A frame is an 8-byte header (two big-endian lengths: a JSON object, then raw bytes), the UTF-8 JSON,
then the bytes. The reader checks both lengths against its bounds as soon as the header is in, before
it buffers the body, so a hostile writer costs the reader at most its bounds plus one read.
"""
from __future__ import annotations

import json
import os
import struct

HEADER = struct.Struct(">II")  # length of the JSON part, length of the binary part
CHUNK = 1 << 20  # file data travels in pieces of at most this many bytes


class ProtocolError(ValueError):
    """Bytes that are not a frame within the reader's bounds (too long, not JSON, not an object)."""


def encode(meta: dict, blob: bytes = b"") -> bytes:
    data = json.dumps(meta, separators=(",", ":")).encode()
    return HEADER.pack(len(data), len(blob)) + data + blob


class FrameReader:
    """Turns a byte stream into (meta, blob) frames, however the bytes arrive."""

    def __init__(self, max_meta: int, max_blob: int = 0) -> None:
        self.max_meta, self.max_blob = max_meta, max_blob
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[dict, bytes]]:
        self.buf += data
        out = []
        while len(self.buf) >= HEADER.size:
            n_meta, n_blob = HEADER.unpack_from(self.buf)
            if n_meta > self.max_meta or n_blob > self.max_blob:
                raise ProtocolError(f"a frame of {n_meta} + {n_blob} bytes is over this pipe's bounds "
                                    f"({self.max_meta} + {self.max_blob})")
            end = HEADER.size + n_meta + n_blob
            if len(self.buf) < end:
                break
            try:
                meta = json.loads(bytes(self.buf[HEADER.size : HEADER.size + n_meta]))
            except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
                raise ProtocolError(f"a frame is not JSON ({type(e).__name__})") from None
            if not isinstance(meta, dict):
                raise ProtocolError("a frame is not a JSON object")
            out.append((meta, bytes(self.buf[HEADER.size + n_meta : end])))
            del self.buf[:end]
        return out

    def reset(self) -> None:
        self.buf.clear()


def write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
