"""What the supervisor keeps of a stream: bounded while it is read, whatever the writer does."""
from __future__ import annotations


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
