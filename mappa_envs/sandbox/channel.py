"""The host's end of the frame protocol: one request at a time to one supervisor, every read bounded."""
from __future__ import annotations

import time
from typing import Protocol

from mappa_envs.sandbox.inside.protocol import CHUNK, FrameReader, ProtocolError, encode
from mappa_envs.sandbox.types import Limits, SandboxError

READY_TIMEOUT_S = 120.0  # importing the data-science stack on a loaded machine
MAX_META = 64 << 20  # the largest JSON part the host accepts (an inventory of many deep paths)


class ChannelClosed(SandboxError):
    """The supervisor went away (it was killed, crashed, or stopped answering)."""


class Transport(Protocol):
    """A byte pipe to one supervisor process."""

    def send(self, data: bytes) -> None: ...
    def recv(self, timeout: float) -> bytes: ...  # some bytes (at most about 1 MiB); b"" at EOF; raises TimeoutError
    def close(self) -> None: ...  # stop the supervisor and everything it started
    def why_closed(self) -> str: ...  # a short reason for an EOF (exit status, crash text)


def max_blob(limits: Limits) -> int:
    """The largest binary part a supervisor sends: a file chunk, or a cell's two capped outputs (plus notes)."""
    return max(CHUNK, 2 * limits.max_output_bytes) + (64 << 10)


class Channel:
    """Request/reply over a transport; one request at a time (callers hold the session lock)."""

    def __init__(self, transport: Transport, limits: Limits, ready_timeout: float = READY_TIMEOUT_S) -> None:
        self.transport, self.next_id = transport, 0
        self.reader = FrameReader(MAX_META, max_blob(limits))
        self.pending: list[tuple[dict, bytes]] = []
        self.ready = self._receive(ready_timeout, "ready")[0]

    def _receive(self, timeout: float, what: str) -> tuple[dict, bytes]:
        deadline = time.monotonic() + timeout
        while not self.pending:
            try:
                data = self.transport.recv(max(deadline - time.monotonic(), 0.0))
            except TimeoutError:
                raise ChannelClosed(f"the sandbox did not answer {what} within {timeout:g} s") from None
            if not data:
                raise ChannelClosed(f"the sandbox process exited ({self.transport.why_closed()})")
            try:
                self.pending += self.reader.feed(data)
            except ProtocolError as e:
                raise ChannelClosed(f"garbled reply from the sandbox: {e}") from e
        return self.pending.pop(0)

    def call(self, op: str, wait: float, blob: bytes = b"", **fields) -> tuple[dict, bytes]:
        """Send one request; wait up to `wait` seconds for its reply (meta, blob)."""
        self.next_id += 1
        self.transport.send(encode({"id": self.next_id, "op": op, **fields}, blob))
        while True:
            meta, data = self._receive(wait, op)
            if meta.get("id") == self.next_id:
                return meta, data

    def close(self) -> None:
        self.transport.close()
