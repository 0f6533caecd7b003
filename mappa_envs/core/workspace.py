"""Host-side reads of a session's workspace that an agent cannot turn against the env.

`read_file` and `inventory` are what the scenarios use to read back what agents wrote. The sandbox
session does the hard part (no link followed, no FIFO or device read, a size cap, any depth without
recursion, any file name; see docs/sandbox.md); here every failure of it becomes one
`WorkspaceFileError` with a one-line reason, so a hostile workspace is a failed check, never a crash.
"""
from __future__ import annotations

from mappa_envs.core.untrusted import one_line

MAX_ENTRIES = 10_000  # an inventory lists at most this many workspace entries


class WorkspaceFileError(Exception):
    """A workspace file could not be read safely; the message says which and why, on one line."""


def read_file(session, path: str, max_bytes: int) -> bytes:
    """The bytes of the regular file `path` (workspace-relative), at most `max_bytes` of them."""
    try:
        return session.read_file(path, max_bytes=max_bytes)
    except Exception as e:  # any failure of the session is the file's verdict, not the env's crash
        raise WorkspaceFileError(f"{one_line(path)} could not be read: {_brief(e)}") from None


def inventory(session, max_entries: int = MAX_ENTRIES) -> dict[str, tuple]:
    """Workspace path -> (kind, size, mtime_ns), a fingerprint that changes when the entry is rewritten,
    for every non-directory entry (files, links, FIFOs). Raises WorkspaceFileError."""
    try:
        listing = session.inventory(max_entries=max_entries)
    except Exception as e:
        raise WorkspaceFileError(f"the workspace could not be listed: {_brief(e)}") from None
    return {f.path: (f.kind, f.size, f.mtime_ns) for f in listing.files if f.kind != "dir"}


def _brief(e: BaseException) -> str:
    return f"{type(e).__name__}: {one_line(str(e))}"[:400]


__all__ = ["WorkspaceFileError", "inventory", "read_file"]
