"""What every sandbox backend speaks: limits, the result of one cell, and the two Protocols."""
from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Limits:
    """Resource limits for one session. Every backend honours every field it can (see its docstring)."""

    timeout_s: float = 30.0  # wall time per cell, when run() is given no timeout
    memory_mb: int = 2048  # address space / cgroup memory of the interpreter
    cpus: float = 1.0  # CPU share (Docker) / CPU seconds scale (local rlimit: timeout_s * cpus * 2)
    max_processes: int = 64  # pids per session
    max_output_bytes: int = 64_000  # stdout and stderr kept per cell, each; the rest is cut with a marker
    max_file_mb: int = 512  # largest file a cell may write
    workspace_mb: int = 2048  # total workspace size

    def __post_init__(self) -> None:
        for name in ("timeout_s", "memory_mb", "cpus", "max_processes", "max_output_bytes", "max_file_mb", "workspace_mb"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"sandbox limit {name} must be a positive number, got {value!r}")


@dataclass
class ExecResult:
    """The outcome of one `run()` call.

    `ok` is True when the cell finished in time without raising. `error` is a one-line summary
    ("NameError: name 'x' is not defined", "timeout after 5.0 s", "interpreter died: ...") or None.
    """

    stdout: str = ""
    stderr: str = ""
    ok: bool = True
    timed_out: bool = False
    error: str | None = None
    duration_s: float = 0.0
    truncated: bool = False  # output was cut at Limits.max_output_bytes
    interpreter_restarted: bool = False  # the interpreter died or was killed; the next cell gets a fresh one

    def to_dict(self, timings: bool = False) -> dict:
        d = asdict(self)
        if not timings:  # wall-clock figures break seeded determinism checks on infos
            d.pop("duration_s")
        return d


@runtime_checkable
class SandboxSession(Protocol):
    """One workspace directory plus persistent Python interpreters ("kernels") running in it.

    Several kernels may share the workspace (one per agent, say); each keeps its own variables.
    """

    def run(self, code: str, timeout: float | None = None, kernel: str = "main") -> ExecResult: ...
    def restart(self, kernel: str = "main") -> None: ...  # a fresh interpreter, same workspace
    def write_file(self, path: str, data: bytes | str) -> None: ...
    def read_file(self, path: str) -> bytes: ...
    def list_files(self) -> list[str]: ...  # workspace-relative paths, sorted
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


__all__ = ["ExecResult", "Limits", "Sandbox", "SandboxError", "SandboxSession"]
