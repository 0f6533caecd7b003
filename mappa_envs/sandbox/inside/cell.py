"""What the supervisor keeps per kernel and per running cell: bounded captures, the cell's token, the claim."""
from __future__ import annotations

import secrets
import time

from . import procs
from .protocol import HEADER, FrameReader

RESULT_MAX = 64 << 10  # a kernel's result frame is a few hundred bytes; more is tampering


class Capture:
    """Keeps the first 3/4 and the last 1/4 of `limit` bytes of a stream; counts what it dropped."""

    def __init__(self, limit: int) -> None:
        self.head_max, self.tail_max = limit - limit // 4, limit // 4
        self.head, self.tail, self.dropped = bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            over = len(self.tail) - self.tail_max
            if over > 0:
                del self.tail[:over]
                self.dropped += over

    def data(self) -> bytes:
        marker = f"\n[... {self.dropped} bytes of output truncated by the sandbox ...]\n" if self.dropped else ""
        return bytes(self.head) + marker.encode() + bytes(self.tail)


class Kernel:
    def __init__(self, name: str, index: int, pid: int, fds: tuple[int, int, int, int]) -> None:
        self.name, self.index, self.pid = name, index, pid
        self.cells_w, self.results_r, self.out_r, self.err_r = fds
        self.reader = FrameReader(RESULT_MAX)
        self.status_fd = procs.open_proc(f"/proc/{pid}/status")
        self.children_fd = procs.open_proc(f"/proc/{pid}/task/{pid}/children")  # its main thread's children
        self.note: str | None = None  # why the previous kernel of this name died between cells
        self.threads = 0  # Python threads besides the main one, as the kernel last said


class Cell:
    def __init__(self, req: dict, k: Kernel, code: bytes, limit: int, cpus: float) -> None:
        self.id, self.kernel, self.timeout = req["id"], k, float(req["timeout"])
        self.token = secrets.token_hex(16)
        meta = f"{self.token} {self.timeout * cpus * 2:.3f}".encode()
        self.pending = HEADER.pack(len(meta), len(code)) + meta + code  # written as the kernel reads it
        self.out, self.err = Capture(limit), Capture(limit)
        self.start = time.monotonic()
        self.deadline, self.sigint_at = self.start + self.timeout, None
        self.claim: dict | None = None
        self.eof: set[int] = set()
        self.evidence: str | None = None  # the supervisor's own finding of tampering


def claimed_tampering(claim: dict | None) -> str | None:
    """What the kernel says the cell changed, or why its frame cannot be believed."""
    if claim is None:
        return None
    changed = claim.get("tampered")
    well_formed = isinstance(changed, list) and all(isinstance(c, str) for c in changed)
    if not well_formed or not isinstance(claim.get("ok"), bool):
        return "its result frame was malformed"
    return "; ".join(changed)[:500] or None
