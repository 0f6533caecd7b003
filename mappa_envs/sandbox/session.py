"""`Session`: the `SandboxSession` every backend hands out, over a `Slot` (a workspace with a supervisor)."""
from __future__ import annotations

import io
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mappa_envs.errors import InputError
from mappa_envs.sandbox.channel import Channel, ChannelClosed
from mappa_envs.sandbox.inside.files import FileTooLargeError, NotRegularFileError, parts
from mappa_envs.sandbox.inside.protocol import CHUNK
from mappa_envs.sandbox.inside.supervisor import GRACE_S, MAX_KERNELS
from mappa_envs.sandbox.launch import MAX_CODE_BYTES
from mappa_envs.sandbox.text import raw_name, safe_name, safe_text
from mappa_envs.sandbox.types import ExecResult, FileInfo, Inventory, Limits, SandboxError

HOST_SLACK_S = 10.0  # beyond a cell's own deadline and grace, how long before the host gives up on a silent supervisor
FILE_TIMEOUT_S = 120.0
_ERRORS = {e.__name__: e for e in (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError,
                                    PermissionError, ValueError, FileTooLargeError, NotRegularFileError, OSError)}


@dataclass
class Slot:
    """One workspace with a supervisor running on it, as a backend hands it out."""

    channel: Channel
    restart: Callable[[], tuple[Channel, bool]]  # a new supervisor (the old one killed); True: the workspace was kept
    dispose: Callable[[], None]  # stop everything and delete the workspace
    workspace: str | None = None  # host path of the workspace, where the backend has one
    kernel_uid: int | None = None  # uid of kernel 0 as the supervisor sees it; None where kernels share one uid


def _wire_path(path: str | bytes) -> str:
    """A workspace path as the supervisor takes it: the raw name, in os.fsdecode form."""
    if isinstance(path, str):
        raw = raw_name(path)
    elif isinstance(path, bytes):
        raw = path
    else:
        raise TypeError(f"a workspace path is a str (or raw bytes), got {type(path).__name__}")
    parts(raw)  # the same refusal the supervisor makes, before anything is sent
    return os.fsdecode(raw)


class Session:
    """A `SandboxSession`: one workspace, persistent kernels by name, files in and out.

    Calls are serialized per session (a lock), so several agents may share one session from
    different threads; their cells run one after another, and only the kernel running a cell is awake.
    Paths are workspace-relative, in the form `list_files` returns (`safe_name`: non-UTF-8 bytes,
    controls and backslashes escaped), or raw bytes.
    """

    def __init__(self, slot: Slot, limits: Limits, on_close: Callable[[Session], None] = lambda s: None) -> None:
        self.limits, self.workspace = limits, slot.workspace
        self._slot, self._channel, self._on_close = slot, slot.channel, on_close
        self._lock = threading.Lock()
        self._closed = False
        self.workspace_lost = False  # set when a dead sandbox could only be replaced with an empty workspace
        self._kernels: dict[str, int] = {"main": 0}  # name -> index (its uid offset), kept across supervisor restarts

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, op: str, wait: float, blob: bytes = b"", **fields) -> tuple[dict, bytes]:
        if self._closed:
            raise SandboxError("this sandbox session is closed; open a new one with sandbox.session()")
        try:
            meta, data = self._channel.call(op, wait, blob, **fields)
        except ChannelClosed:
            kept = self._respawn()
            if op == "run" or not kept:  # the caller reports the lost cell; a lost workspace has no files to retry on
                raise
            meta, data = self._channel.call(op, wait, blob, **fields)  # file ops and restart are idempotent: once more
        if meta.get("error") and "ok" not in meta:
            kind, _, message = meta["error"].partition(": ")
            raise _ERRORS.get(kind, SandboxError)(safe_text(message if kind in _ERRORS else meta["error"]))
        return meta, data

    def _respawn(self) -> bool:
        """A new supervisor after the old one died or went silent; True if the workspace was kept."""
        self._channel, kept = self._slot.restart()
        self._slot.channel = self._channel
        self.workspace_lost = not kept
        return kept

    def _index(self, kernel: str) -> int:
        if not isinstance(kernel, str) or not kernel or len(kernel) > 200:
            raise InputError(f"kernel must be a non-empty name of at most 200 characters, got {repr(kernel)[:60]}")
        if kernel not in self._kernels:
            if len(self._kernels) >= MAX_KERNELS:
                raise InputError(f"a session has at most {MAX_KERNELS} kernels; reuse a kernel name")
            self._kernels[kernel] = len(self._kernels)
        return self._kernels[kernel]

    def run(self, code: str, timeout: float | None = None, kernel: str = "main") -> ExecResult:
        if not isinstance(code, str):
            raise TypeError(f"code must be a str of Python source, got {type(code).__name__}")
        source = code.encode("utf-8", "surrogatepass")  # the kernel reports a lone surrogate as a SyntaxError
        if len(source) > MAX_CODE_BYTES:
            raise InputError(f"a cell of {len(source)} bytes is over the sandbox's {MAX_CODE_BYTES} bytes; split it")
        timeout = self.limits.timeout_s if timeout is None else float(timeout)
        if not timeout > 0:
            raise InputError(f"timeout must be > 0 seconds, got {timeout}")
        with self._lock:
            index = self._index(kernel)
            start = time.monotonic()
            try:
                r, data = self._call("run", timeout + GRACE_S + HOST_SLACK_S, source, kernel=kernel, index=index,
                                     timeout=timeout)
            except ChannelClosed as e:  # the supervisor died with the cell; _call started a new one
                silent = "did not answer" in str(e)
                kept = "the workspace was LOST" if self.workspace_lost else "the workspace is kept"
                return ExecResult(ok=False, timed_out=silent, interpreter_restarted=True,
                                  duration_s=time.monotonic() - start,
                                  error=f"interpreter died: {e}; every kernel of this session was restarted, {kept}")
        n = int(r.get("n_out", 0))
        return ExecResult(
            stdout=safe_text(data[:n]), stderr=safe_text(data[n:]), ok=r.get("ok") is True,
            timed_out=bool(r.get("timed_out")),
            error=r.get("error"), duration_s=float(r.get("duration_s", 0.0)), truncated=bool(r.get("truncated")),
            interpreter_restarted=bool(r.get("restarted")),
        )

    def restart(self, kernel: str = "main") -> None:
        with self._lock:
            self._call("restart", FILE_TIMEOUT_S, kernel=kernel, index=self._index(kernel))

    def write_file(self, path: str | bytes, data: bytes | str) -> None:
        if isinstance(data, str):
            data = data.encode()
        if len(data) > self.limits.max_file_mb << 20:
            raise InputError(f"{len(data)} bytes is over max_file_mb={self.limits.max_file_mb}; "
                             "raise the limit to write it")
        wire = _wire_path(path)
        view = memoryview(data)
        with self._lock:
            for start in range(0, max(len(view), 1), CHUNK):  # one request per chunk: no frame is ever large
                self._call("write", FILE_TIMEOUT_S, bytes(view[start : start + CHUNK]), path=wire, append=start > 0)

    def read_file(self, path: str | bytes, max_bytes: int | None = None) -> bytes:
        """The bytes of a regular workspace file. Never follows a link, never blocks on a FIFO or device
        (NotRegularFileError), never reads past `max_bytes` (default: max_file_mb; FileTooLargeError).
        Streams in chunks: a 128 MB file costs the host about 128 MB."""
        cap = (self.limits.max_file_mb << 20) if max_bytes is None else int(max_bytes)
        wire = _wire_path(path)
        buf, size, offset = io.BytesIO(), None, 0
        with self._lock:
            while size is None or offset < size:
                meta, data = self._call("read", FILE_TIMEOUT_S, path=wire, offset=offset, length=CHUNK, max_bytes=cap)
                if size is None:
                    size = int(meta["size"])
                    if size:  # one allocation of the final size, which getvalue() then hands out without a copy
                        buf.seek(size - 1)
                        buf.write(b"\0")
                        buf.seek(0)
                elif int(meta["size"]) != size or not data:
                    raise SandboxError(f"{path!r} changed while it was read; read it again")
                buf.write(data)
                offset += len(data)
        return buf.getvalue()

    def inventory(self, max_entries: int = 10_000, include: Sequence[str] = (), hash_max: int = 0) -> Inventory:
        """Every non-directory of the workspace (and directories that could not be listed) with size,
        kind, owning kernel and fingerprint; at most `max_entries` names are looked at. The paths in
        `include` (at most 64, in `safe_name` form) are looked up by name whatever the cap: each is listed
        if it exists, with the sha256 of its content when it is a regular file of at most `hash_max` bytes."""
        wanted = [os.fsdecode(raw_name(p)) for p in include]
        with self._lock:
            meta, _ = self._call("inventory", FILE_TIMEOUT_S, max_entries=int(max_entries), include=wanted,
                                 hash_max=int(hash_max))
            uid0, names = self._slot.kernel_uid, {i: n for n, i in self._kernels.items()}
            host_uid = self._channel.ready.get("uid")

        def info(path, size, kind, uid, mtime_ns, ino=0, ctime_ns=0, sha256=None) -> FileInfo:
            owner = None
            if uid0 is not None:
                owner = "host" if uid == host_uid else names.get(uid - uid0)
            return FileInfo(path=safe_name(os.fsencode(path)), size=int(size), kind=str(kind), owner=owner,
                            mtime_ns=int(mtime_ns), inode=int(ino), ctime_ns=int(ctime_ns),
                            sha256=None if sha256 is None else str(sha256))

        found = {f.path: f for f in (info(*entry) for entry in meta["files"])}
        found.update((f.path, f) for f in (info(*entry) for entry in meta.get("included", ())))
        return Inventory(files=tuple(found[p] for p in sorted(found, key=lambda p: raw_name(p))),
                         truncated=bool(meta["truncated"]), included=tuple(safe_name(os.fsencode(p)) for p in wanted))

    def list_files(self) -> list[str]:
        """Workspace-relative paths of every non-directory, sorted, in `safe_name` form."""
        return [f.path for f in self.inventory().files if f.kind != "dir"]

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._on_close(self)
        self._slot.dispose()
