"""What every sandbox backend speaks: limits, the result of one cell, and the two Protocols."""
from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import Literal, Protocol, get_args, runtime_checkable

from mappa_envs.errors import InputError, MappaError
from mappa_envs.sandbox.inside.files import FileTooLargeError, NotRegularFileError
from mappa_envs.sandbox.text import safe_text

SandboxBackend = Literal["auto", "docker", "local"]
SANDBOX_BACKENDS: tuple[str, ...] = get_args(SandboxBackend)


@dataclass(frozen=True)
class Limits:
    """Resource limits for one session. Every backend honours every field it can (see its docstring)."""

    timeout_s: float = 30.0  # wall time per cell, when run() is given no timeout
    memory_mb: int = 2048  # address space of each kernel; a session's cgroup holds memory_mb + workspace_mb
    cpus: float = 1.0  # CPU share (Docker) / CPU seconds scale (local rlimit: timeout_s * cpus * 2)
    max_processes: int = 64  # pids per session
    max_output_bytes: int = 64_000  # stdout and stderr kept per cell, each; the rest is cut with a marker
    max_file_mb: int = 512  # largest file a cell may write
    workspace_mb: int = 2048  # size of the workspace tmpfs (not enforced by the local backend without bwrap)

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "cpus", "max_processes", "max_output_bytes", "max_file_mb",
                     "workspace_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise InputError(f"sandbox limit {name} must be a positive number, got {value!r}")


@dataclass
class ExecResult:
    """The outcome of one `run()` call.

    `ok` is True when the cell finished in time without raising and without tampering with its
    kernel. `error` is a one-line summary ("NameError: name 'x' is not defined", "timeout after 5 s",
    "interpreter died: ...", "the cell tampered with its kernel (...)") or None. Every text field is
    passed through `safe_text` on construction: valid UTF-8, no control sequences.
    """

    stdout: str = ""
    stderr: str = ""
    ok: bool = True
    timed_out: bool = False
    error: str | None = None
    duration_s: float = 0.0
    truncated: bool = False  # output was cut at Limits.max_output_bytes
    interpreter_restarted: bool = False  # the interpreter died or was killed; the next cell gets a fresh one

    def __post_init__(self) -> None:
        self.stdout, self.stderr = safe_text(self.stdout), safe_text(self.stderr)
        if self.error is not None:
            self.error = safe_text(self.error)

    def to_dict(self, timings: bool = False) -> dict:
        d = asdict(self)
        if not timings:  # wall-clock figures break seeded determinism checks on infos
            d.pop("duration_s")
        return d


@dataclass(frozen=True)
class FileInfo:
    """One entry of a workspace inventory."""

    path: str  # workspace-relative, in the `safe_name` form: printable, reversible; read_file takes it as is
    size: int  # bytes (of the entry itself: a symbolic link's size is its target's length)
    kind: str  # "file", "symlink", "fifo", "socket", "device", "other", or "dir": a directory that was not listed
    owner: str | None  # the kernel whose uid owns it, "host" for write_file's files; None where kernels share one uid
    mtime_ns: int = 0  # last modification, as the sandbox's clock saw it (a cell can set it back: os.utime)
    inode: int = 0  # with ctime_ns: a rewrite in place or a replacement by rename changes one of them
    ctime_ns: int = 0  # last change of content or metadata; no cell can set it back
    sha256: str | None = None  # of the content: only for paths asked for by name (`include`) and small enough


@dataclass(frozen=True)
class Inventory:
    """What the workspace holds: every non-directory, sorted by path. `truncated` when the listing
    stopped at its entry cap or at a directory nested too deep (listed as kind "dir"): a path missing
    from a truncated listing may still exist, unless it is in `included` (looked up by name: a path
    there and not in `files` is absent)."""

    files: tuple[FileInfo, ...]
    truncated: bool = False
    included: tuple[str, ...] = ()

    def by_path(self) -> dict[str, FileInfo]:
        return {f.path: f for f in self.files}


@runtime_checkable
class SandboxSession(Protocol):
    """One workspace directory plus persistent Python interpreters ("kernels") running in it.

    Several kernels may share the workspace (one per agent, say); each keeps its own variables.
    """

    def run(self, code: str, timeout: float | None = None, kernel: str = "main") -> ExecResult: ...
    def restart(self, kernel: str = "main") -> None: ...  # a fresh interpreter, same workspace
    def write_file(self, path: str, data: bytes | str) -> None: ...
    def read_file(self, path: str, max_bytes: int | None = None) -> bytes: ...  # regular files only, capped
    def list_files(self) -> list[str]: ...  # workspace-relative paths (safe_name form) of non-directories, sorted
    def inventory(self, max_entries: int = 10_000, include: Sequence[str] = (),
                  hash_max: int = 0) -> Inventory: ...  # names, sizes, kinds, owners, fingerprints
    def close(self) -> None: ...


@runtime_checkable
class Sandbox(Protocol):
    """A factory of sessions. `name` says which backend it is ("docker", "local")."""

    name: str
    limits: Limits

    def session(self) -> AbstractContextManager[SandboxSession]: ...
    def close(self) -> None: ...


class SandboxError(RuntimeError):
    """A sandbox could not be created or used (no engine, no image, bad limits)."""


class IsolationUnavailableError(MappaError, SandboxError):
    """No isolating backend can run here and nobody opted in to unisolated code; the message says how to fix it."""


__all__ = ["ExecResult", "FileInfo", "FileTooLargeError", "Inventory", "IsolationUnavailableError", "Limits",
           "NotRegularFileError", "Sandbox", "SandboxError", "SandboxSession"]
