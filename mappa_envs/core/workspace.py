"""Host-side reads of a session's workspace that an agent cannot turn against the env.

`read_file` and `inventory` are what the scenarios use to read back what agents wrote. The sandbox
session does the hard part (no link followed, no FIFO or device read, a size cap, any depth without
recursion, any file name; see docs/sandbox.md); here every failure of it becomes one
`WorkspaceFileError` with a one-line reason, so a hostile workspace is a failed check, never a crash.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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


@dataclass(frozen=True)
class Listing:
    """What `inventory` saw. `files`: path -> fingerprint. A path absent from `files` is known to be absent
    only when `complete` or when it is in `looked_up` (stat'ed by name); otherwise it was not looked at."""

    files: dict[str, tuple]
    complete: bool
    looked_up: frozenset[str]

    def known_absent(self, path: str) -> bool:
        return path not in self.files and (self.complete or path in self.looked_up)


def inventory(session, max_entries: int = MAX_ENTRIES, include: Sequence[str] = (), hash_max: int = 0) -> Listing:
    """Every non-directory entry (files, links, FIFOs) as path -> (kind, size, mtime_ns, inode, ctime_ns, sha256):
    a fingerprint that changes when the entry is rewritten, in place or not, whatever mtime a cell sets (the
    ctime and inode cannot be set back; the hash, for the `include` paths of at most `hash_max` bytes, sees
    the content). The `include` paths are looked up by name past the entry cap. Raises WorkspaceFileError."""
    try:
        listing = session.inventory(max_entries=max_entries, include=tuple(include), hash_max=hash_max)
    except Exception as e:
        raise WorkspaceFileError(f"the workspace could not be listed: {_brief(e)}") from None
    files = {f.path: (f.kind, f.size, f.mtime_ns, f.inode, f.ctime_ns, f.sha256) for f in listing.files
             if f.kind != "dir"}
    return Listing(files, complete=not listing.truncated, looked_up=frozenset(listing.included))


def _brief(e: BaseException) -> str:
    return f"{type(e).__name__}: {one_line(str(e))}"[:400]


__all__ = ["Listing", "WorkspaceFileError", "inventory", "read_file"]
