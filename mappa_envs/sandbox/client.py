"""Host side of the kernel protocol, shared by every backend.

A backend only knows how to start a supervisor (`kernel.py`) on a workspace and how to throw the
workspace away; that is a `Slot`. Everything else lives here: the `Channel` that speaks frames to
one supervisor, the `Session` users hold, and the `WarmPool` that keeps slots started ahead of time.
"""
from __future__ import annotations

import atexit
import base64
import logging
import os
import select
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Protocol

from mappa_envs.sandbox.kernel import GRACE_S, FrameReader, encode
from mappa_envs.sandbox.types import ExecResult, Limits, SandboxError

log = logging.getLogger(__name__)
READY_TIMEOUT_S = 120.0  # importing the data-science stack on a loaded machine
HOST_SLACK_S = 10.0  # beyond a cell's own deadline and grace, how long before the host gives up on a silent supervisor
FILE_TIMEOUT_S = 120.0


class ChannelClosed(SandboxError):
    """The supervisor went away (it was killed, crashed, or stopped answering)."""


class Transport(Protocol):
    """A byte pipe to one supervisor process."""

    def send(self, data: bytes) -> None: ...
    def recv(self, timeout: float) -> bytes: ...  # some bytes; b"" at EOF; raises TimeoutError
    def close(self) -> None: ...  # stop the supervisor and everything it started
    def why_closed(self) -> str: ...  # a short reason for an EOF (exit status, crash text)


class PipeTransport:
    """A supervisor that is a local subprocess (bwrap or bare Python), talking over its stdin/stdout."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str | None = None) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=env, cwd=cwd, start_new_session=True,  # its own process group, so close() reaches all of it
        )

    def send(self, data: bytes) -> None:
        try:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()
        except (BrokenPipeError, ValueError) as e:
            raise ChannelClosed(f"the sandbox process is gone ({self.why_closed()})") from e

    def recv(self, timeout: float) -> bytes:
        fd = self.proc.stdout.fileno()
        if not select.select([fd], [], [], timeout)[0]:
            raise TimeoutError
        return os.read(fd, 1 << 20)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except OSError:
                pass

    def why_closed(self) -> str:
        code = self.proc.poll()
        err = ""
        if code is not None and not self.proc.stderr.closed:
            os.set_blocking(self.proc.stderr.fileno(), False)
            try:
                lines = (os.read(self.proc.stderr.fileno(), 1 << 16) or b"").decode(errors="replace").strip().splitlines()
            except BlockingIOError:
                lines = []
            err = f": {lines[-1]}" if lines else ""
        return f"exit status {code}{err}" if code is not None else "no answer"


class Channel:
    """Request/reply over a transport; one request at a time (callers hold the session lock)."""

    def __init__(self, transport: Transport, ready_timeout: float = READY_TIMEOUT_S) -> None:
        self.transport, self.reader, self.next_id = transport, FrameReader(), 0
        self.pending: list[dict] = []
        self.ready = self._receive(ready_timeout, "ready")

    def _receive(self, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while not self.pending:
            left = deadline - time.monotonic()
            try:
                data = self.transport.recv(max(left, 0.0))
            except TimeoutError:
                self.close()
                raise ChannelClosed(f"the sandbox did not answer {what} within {timeout:g} s") from None
            if not data:
                why = self.transport.why_closed()
                self.close()
                raise ChannelClosed(f"the sandbox process exited ({why})")
            try:
                self.pending += self.reader.feed(data)
            except ValueError as e:
                self.close()
                raise ChannelClosed(f"garbled reply from the sandbox: {e}") from e
        return self.pending.pop(0)

    def call(self, op: str, wait: float, **fields) -> dict:
        """Send one request; wait up to `wait` seconds for its reply."""
        self.next_id += 1
        self.transport.send(encode({"id": self.next_id, "op": op, **fields}))
        while True:
            reply = self._receive(wait, op)
            if reply.get("id") == self.next_id:
                return reply

    def close(self) -> None:
        self.transport.close()


@dataclass
class Slot:
    """One workspace with a supervisor running on it, as a backend hands it out."""

    channel: Channel
    start: Callable[[], Channel]  # a new supervisor on the same workspace, after the old one died
    dispose: Callable[[], None]  # stop everything and delete the workspace
    workspace: str | None = None  # host path of the workspace, where the backend has one


_FILE_ERRORS = {"FileNotFoundError": FileNotFoundError, "IsADirectoryError": IsADirectoryError,
                "NotADirectoryError": NotADirectoryError, "ValueError": ValueError}


def _check_path(path: str) -> str:
    if not isinstance(path, str) or not path or PurePosixPath(path).is_absolute() or ".." in PurePosixPath(path).parts:
        raise ValueError(f"workspace paths are relative and stay inside the workspace, e.g. 'data/train.csv'; got {path!r}")
    return path


class Session:
    """A `SandboxSession`: one workspace, persistent kernels by name, files in and out.

    Calls are serialized per session (a lock), so several agents may share one session from
    different threads; their cells run one after another.
    """

    def __init__(self, slot: Slot, limits: Limits, on_close: Callable[["Session"], None] = lambda s: None) -> None:
        self.limits, self.workspace = limits, slot.workspace
        self._slot, self._channel, self._on_close = slot, slot.channel, on_close
        self._lock = threading.Lock()
        self._closed = False

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, op: str, wait: float, **fields) -> dict:
        if self._closed:
            raise SandboxError("this sandbox session is closed; open a new one with sandbox.session()")
        try:
            reply = self._channel.call(op, wait, **fields)
        except ChannelClosed:
            self._respawn()
            if op == "run":  # the caller reports the lost cell
                raise
            reply = self._channel.call(op, wait, **fields)  # file ops and restart are idempotent: once more
        if reply.get("error") and "ok" not in reply:
            kind = reply["error"].split(":", 1)[0]
            raise _FILE_ERRORS.get(kind, SandboxError)(reply["error"])
        return reply

    def _respawn(self) -> None:
        self._channel.close()
        self._channel = self._slot.channel = self._slot.start()

    def run(self, code: str, timeout: float | None = None, kernel: str = "main") -> ExecResult:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str of Python source, got {type(code).__name__}")
        if not isinstance(kernel, str) or not kernel:
            raise ValueError(f"kernel must be a non-empty name, got {kernel!r}")
        timeout = self.limits.timeout_s if timeout is None else float(timeout)
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        with self._lock:
            start = time.monotonic()
            try:
                r = self._call("run", timeout + GRACE_S + HOST_SLACK_S, kernel=kernel, code=code, timeout=timeout)
            except ChannelClosed as e:  # the supervisor died with the cell; _call started a new one
                silent = "did not answer" in str(e)
                return ExecResult(
                    ok=False, timed_out=silent, interpreter_restarted=True, duration_s=time.monotonic() - start,
                    error=f"interpreter died: {e}; every kernel of this session was restarted, the workspace is kept",
                )
        return ExecResult(
            stdout=r["stdout"], stderr=r["stderr"], ok=r["ok"], timed_out=r["timed_out"], error=r["error"],
            duration_s=r["duration_s"], truncated=r["truncated"], interpreter_restarted=r["restarted"],
        )

    def restart(self, kernel: str = "main") -> None:
        with self._lock:
            self._call("restart", FILE_TIMEOUT_S, kernel=kernel)

    def write_file(self, path: str, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode()
        with self._lock:
            self._call("write", FILE_TIMEOUT_S, path=_check_path(path), data=base64.b64encode(data).decode())

    def read_file(self, path: str) -> bytes:
        with self._lock:
            return base64.b64decode(self._call("read", FILE_TIMEOUT_S, path=_check_path(path))["data"])

    def list_files(self) -> list[str]:
        with self._lock:
            return self._call("list", FILE_TIMEOUT_S)["files"]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._on_close(self)
        self._slot.dispose()


_POOLS: "weakref.WeakSet[WarmPool]" = weakref.WeakSet()


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
            raise ValueError(f"pool_size must be >= 0, got {size}")
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


DEFAULT_PREIMPORT = ("numpy", "pandas", "scipy", "sklearn", "sklearn.ensemble", "sklearn.linear_model", "sklearn.model_selection")


def supervisor_config(limits: Limits, workspace: str, preimport: tuple[str, ...], **extra) -> dict:
    """The JSON `kernel.main` reads: where the workspace is, what to import, which limits to enforce."""
    return {
        "workspace": workspace, "preimport": list(preimport), "memory_mb": limits.memory_mb,
        "max_file_mb": limits.max_file_mb, "max_output_bytes": limits.max_output_bytes, "cpus": limits.cpus,
        **extra,
    }


def supervisor_argv(python: str, config: dict) -> list[str]:
    """Run the kernel module's source directly: the sandbox has Python, not this project.

    `-I` keeps the workspace off sys.path while the supervisor starts: under a root-started bwrap
    it runs as root until it drops to the sandbox uid, and must not import a module a cell planted.
    """
    import json

    from mappa_envs.sandbox import kernel

    with open(kernel.__file__, encoding="utf-8") as f:
        source = f.read()
    return [python, "-I", "-c", source, json.dumps(config)]


def sandbox_env(limits: Limits, home: str) -> dict[str, str]:
    """A clean environment: nothing of the host's (API keys!) leaks in; BLAS threads match the CPU limit."""
    threads = str(max(1, int(limits.cpus)))
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": home, "TMPDIR": "/tmp", "LANG": "C.UTF-8",
        "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1", "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp",
        "OMP_NUM_THREADS": threads, "OPENBLAS_NUM_THREADS": threads, "MKL_NUM_THREADS": threads,
    }


def process_start(pid: int) -> str | None:
    """The process's start time (clock ticks since boot): with its pid, this names a process uniquely.
    None when no such process exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
        return stat[stat.rindex(b")") + 2 :].split()[19].decode()
    except (OSError, IndexError):
        return None
