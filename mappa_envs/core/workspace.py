"""Host-side reads of a session's workspace that an agent cannot turn against the env.

`read_file` and `inventory` are what the scenarios use to read back what agents wrote. Whatever a
cell left in the workspace (a symlink out of it or in a loop, a FIFO, a device, a file it made
unreadable, a huge or deep tree), they return or raise `WorkspaceFileError` with a one-line reason,
read at most a cap, never follow a link, never block and never recurse.

Where the session has a host directory (`session.workspace`, the local backend), they work on it
directly with no-follow, non-blocking opens. Elsewhere (Docker) they go through the session's own
`read_file` / `list_files` and turn any failure of theirs into `WorkspaceFileError`; the size cap is
then checked after the read.
"""
from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath

from mappa_envs.core.untrusted import one_line

MAX_ENTRIES = 10_000  # an inventory lists at most this many workspace entries


class WorkspaceFileError(Exception):
    """A workspace file could not be read safely; the message says which and why, on one line."""


def _host_root(session) -> str | None:
    root = getattr(session, "workspace", None)
    return root if isinstance(root, str) and os.path.isdir(root) else None


def read_file(session, path: str, max_bytes: int) -> bytes:
    """The bytes of the regular file `path` (workspace-relative), at most `max_bytes` of them."""
    root = _host_root(session)
    if root is None:
        try:
            data = session.read_file(path)
        except Exception as e:  # any failure of the session is the file's verdict, not the env's crash
            raise WorkspaceFileError(f"{one_line(path)} could not be read: {_brief(e)}") from None
        if len(data) > max_bytes:
            raise WorkspaceFileError(f"{one_line(path)} is {len(data)} bytes, over the {max_bytes}-byte read cap")
        return data
    return _host_read(root, path, max_bytes)


def _host_read(root: str, path: str, max_bytes: int) -> bytes:
    parts = PurePosixPath(path).parts
    name = one_line(path)
    if not parts or PurePosixPath(path).is_absolute() or ".." in parts:
        raise WorkspaceFileError(f"{name} is not a path inside the workspace")
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:  # walk down without following any link
            sub = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = sub
        file_fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)
    except OSError as e:
        raise WorkspaceFileError(f"{name} could not be opened: {_why(e)}") from None
    finally:
        os.close(fd)
    try:
        st = os.fstat(file_fd)
        if not stat.S_ISREG(st.st_mode):
            raise WorkspaceFileError(f"{name} is not a regular file (it is a {_kind(st.st_mode)})")
        if st.st_size > max_bytes:
            raise WorkspaceFileError(f"{name} is {st.st_size} bytes, over the {max_bytes}-byte read cap")
        chunks, size = [], 0
        while size <= max_bytes:
            chunk = os.read(file_fd, min(1 << 20, max_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > max_bytes:  # it grew while being read
            raise WorkspaceFileError(f"{name} is over the {max_bytes}-byte read cap")
        return b"".join(chunks)
    except OSError as e:
        raise WorkspaceFileError(f"{name} could not be read: {_why(e)}") from None
    finally:
        os.close(file_fd)


def inventory(session, max_entries: int = MAX_ENTRIES) -> dict[str, tuple | None]:
    """Workspace path -> a fingerprint that changes when the file is rewritten, for every non-directory
    entry (files, links, FIFOs); None where the backend only gives names. Raises WorkspaceFileError."""
    root = _host_root(session)
    if root is None:
        try:
            return {str(p): None for p in session.list_files()[:max_entries]}
        except Exception as e:
            raise WorkspaceFileError(f"the workspace could not be listed: {_brief(e)}") from None
    found: dict[str, tuple | None] = {}
    pending = [""]
    while pending and len(found) < max_entries:  # a stack, not recursion: any depth is fine
        rel = pending.pop()
        try:
            with os.scandir(os.path.join(root, rel) if rel else root) as entries:
                for entry in entries:
                    path = f"{rel}/{entry.name}" if rel else entry.name
                    st = entry.stat(follow_symlinks=False)
                    if stat.S_ISDIR(st.st_mode):
                        pending.append(path)
                    else:
                        found[path] = (_kind(st.st_mode), st.st_size, st.st_mtime_ns, st.st_ino)
        except OSError:  # a directory it may not enter, or a path too long: what it holds stays unlisted
            continue
    return found


def _brief(e: BaseException) -> str:
    return f"{type(e).__name__}: {one_line(e)}"[:400]


def _kind(mode: int) -> str:
    for test, kind in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "directory"), (stat.S_ISLNK, "symbolic link"),
                       (stat.S_ISFIFO, "FIFO"), (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "character device"),
                       (stat.S_ISBLK, "block device")):
        if test(mode):
            return kind
    return "special file"


def _why(e: OSError) -> str:
    import errno

    if e.errno == errno.ELOOP:
        return "it is a symbolic link (links are not followed)"
    if e.errno in (errno.EACCES, errno.EPERM):
        return "permission denied (was it chmod-ed?)"
    if e.errno == errno.ENOENT:
        return "no such file"
    if e.errno == errno.ENOTDIR:
        return "a parent is not a directory (or is a link)"
    return f"{type(e).__name__}: {e.strerror or e}"


__all__ = ["WorkspaceFileError", "inventory", "read_file"]
