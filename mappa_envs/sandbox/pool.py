"""`WarmPool`: keeps slots (a workspace with a supervisor) started ahead of time, and hands out sessions."""
from __future__ import annotations

import atexit
import logging
import threading
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from mappa_envs.errors import InputError
from mappa_envs.sandbox.channel import READY_TIMEOUT_S, ChannelClosed
from mappa_envs.sandbox.session import Session, Slot
from mappa_envs.sandbox.types import Limits, SandboxError

log = logging.getLogger(__name__)


_POOLS: weakref.WeakSet[WarmPool] = weakref.WeakSet()


@atexit.register
def _close_pools() -> None:
    """At interpreter exit, stop every supervisor and remove every workspace or container still held."""
    for pool in list(_POOLS):
        pool.close()


class WarmPool:
    """Hands out sessions: keeps `size` slots started in a background thread, so opening a session
    costs no start-up, and tracks open sessions so that `close()` reaches every one of them."""

    def __init__(self, make: Callable[[], Slot], size: int, limits: Limits, name: str) -> None:
        if size < 0:
            raise InputError(f"pool_size must be >= 0, got {size}")
        self._make, self._size, self.limits = make, size, limits
        self._ready: list[Slot] = []
        self._sessions: set[Session] = set()
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._fill, name=f"mappa-{name}-pool", daemon=True)
        if size > 0:
            self._thread.start()
        _POOLS.add(self)

    def _fill(self) -> None:
        backoff = 1.0
        while True:
            with self._cond:
                while not self._closed and len(self._ready) >= self._size:
                    self._cond.wait()
                if self._closed:
                    return
            try:
                slot = self._make()
                backoff = 1.0
            except Exception as e:  # keep trying: the next open() starts one itself and raises the real error
                log.warning("sandbox pool could not start a slot (retrying in %.0f s): %s", backoff, e)
                with self._cond:
                    self._cond.wait(backoff)  # close() wakes us
                backoff = min(backoff * 2, 60.0)
                continue
            with self._cond:
                if self._closed:
                    slot.dispose()
                    return
                self._ready.append(slot)
                self._cond.notify_all()

    def wait_full(self, timeout: float) -> bool:
        """Block until `size` slots are ready (False if `timeout` passes first)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._closed or len(self._ready) >= self._size, timeout)

    def _get(self) -> Slot:
        """A started slot: from the pool when one is ready (checked alive), else started now."""
        while True:
            with self._cond:
                if self._closed:
                    raise SandboxError("this sandbox is closed")
                slot = self._ready.pop(0) if self._ready else None
                self._cond.notify_all()
            if slot is None:
                return self._make()
            try:
                slot.channel.call("ping", 10.0)
                return slot
            except ChannelClosed:  # died while it waited (killed from outside, say): drop it
                slot.dispose()

    def open(self) -> Session:
        s = Session(self._get(), self.limits, on_close=self._forget)
        with self._cond:
            self._sessions.add(s)
        return s

    @contextmanager
    def session(self) -> Iterator[Session]:
        s = self.open()
        try:
            yield s
        finally:
            s.close()

    def _forget(self, s: Session) -> None:
        with self._cond:
            self._sessions.discard(s)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            slots, self._ready = self._ready, []
            sessions = list(self._sessions)
            self._cond.notify_all()
        for s in sessions:
            s.close()
        for slot in slots:
            slot.dispose()
        if self._thread.is_alive():  # let a slot being started land (and be disposed) rather than leak
            self._thread.join(timeout=READY_TIMEOUT_S)
