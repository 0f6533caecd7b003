"""Reading, writing, listing and deleting workspace files as code the cells do not control must.

Every path is walked one component at a time from an open workspace directory with O_NOFOLLOW, so no
symbolic link is followed, anywhere in the path; files are opened O_NONBLOCK and checked with fstat to
be regular before a byte is read, so a FIFO or a device never blocks or feeds us; sizes are checked
against the caller's cap before reading; walks keep their own stack (no recursion limit) and hold one
descriptor per level of the current path only. Names are bytes throughout: any name round-trips.
"""
from __future__ import annotations

import errno
import os
import stat

O_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
O_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
KINDS = ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISLNK, "symlink"), (stat.S_ISFIFO, "fifo"),
         (stat.S_ISSOCK, "socket"), (stat.S_ISCHR, "device"), (stat.S_ISBLK, "device"))


class FileTooLargeError(ValueError):
    """A workspace file is larger than the cap the caller read it with."""


class NotRegularFileError(ValueError):
    """A workspace path names a symbolic link, FIFO, socket or device, which the sandbox does not read."""


def kind(mode: int) -> str:
    return next((name for test, name in KINDS if test(mode)), "other")


def parts(rel: bytes) -> list[bytes]:
    """The components of a workspace-relative path; refuses anything that could leave the workspace."""
    comps = rel.split(b"/")
    if not rel or rel.startswith(b"/") or b"\0" in rel or any(c in (b"", b".", b"..") for c in comps):
        raise ValueError(f"path {os.fsdecode(rel)!r} is not inside the workspace; use a relative path "
                         "like 'data/train.csv' (no '..', no leading '/')")
    return comps


def _open_dir(parent: int, name: bytes, create: bool) -> int:
    try:
        return os.open(name, O_DIR, dir_fd=parent)
    except FileNotFoundError:
        if not create:
            raise
        try:
            os.mkdir(name, 0o2775, dir_fd=parent)
        except FileExistsError:
            pass
        return os.open(name, O_DIR, dir_fd=parent)
    except OSError as e:
        if e.errno in (errno.ELOOP, errno.ENOTDIR):
            _refuse(parent, name)
        raise


def _refuse(parent: int, name: bytes) -> None:
    """Raise the error that says what `name` is, when it is not what we may open."""
    try:
        what = kind(os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode)
    except OSError:
        what = "gone"
    if what == "file":
        raise NotADirectoryError(errno.ENOTDIR, f"{os.fsdecode(name)!r} is a file, not a directory")
    what = {"symlink": "symbolic link", "fifo": "FIFO", "gone": "file that vanished"}.get(what, what)
    raise NotRegularFileError(f"{os.fsdecode(name)!r} is not a regular file (it is a {what}); the sandbox reads only "
                              "regular files inside the workspace and follows no links")


def open_parent(root: int, comps: list[bytes], create: bool = False) -> int:
    """A descriptor of the directory holding the last component (the caller closes it)."""
    fd = os.dup(root)
    try:
        for name in comps[:-1]:
            nxt = _open_dir(fd, name, create)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(root: int, rel: bytes, flags: int = O_READ, mode: int = 0o664, create: bool = False) -> int:
    """Open a regular file below `root` without following links or blocking; any other kind raises."""
    comps = parts(rel)
    parent = open_parent(root, comps, create)
    try:
        try:
            fd = os.open(comps[-1], flags, mode, dir_fd=parent)
        except OSError as e:
            if e.errno in (errno.ELOOP, errno.ENXIO, errno.ENODEV, errno.ENOTDIR, errno.ENOTSUP):
                _refuse(parent, comps[-1])
            raise
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError(errno.EISDIR, f"{os.fsdecode(rel)!r} is a directory")
            _refuse(parent, comps[-1])
        return fd
    finally:
        os.close(parent)


def read(root: int, rel: bytes, offset: int, length: int, max_bytes: int) -> tuple[int, bytes]:
    """(size of the file, up to `length` bytes from `offset`); FileTooLargeError past `max_bytes`."""
    fd = open_regular(root, rel)
    try:
        size = os.fstat(fd).st_size
        if size > max_bytes:
            raise FileTooLargeError(f"{os.fsdecode(rel)!r} is {size} bytes, more than the {max_bytes} bytes "
                                    "this read allows; pass a larger max_bytes if you mean it")
        return size, os.pread(fd, max(0, min(length, size - offset)), offset)
    finally:
        os.close(fd)


def write(root: int, rel: bytes, data: bytes, append: bool) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | (os.O_APPEND if append else 0)
    fd = open_regular(root, rel, flags, create=True)
    try:
        if not append:
            os.ftruncate(fd, 0)  # after the regular-file check: O_TRUNC would act before it
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def row(path: str, st: os.stat_result) -> list:
    """One inventory entry: [path, size, kind, uid, mtime_ns, inode, ctime_ns]. The inode and the ctime (which
    no cell can set back, unlike the mtime) make the fingerprint change on any rewrite, even in place."""
    return [path, st.st_size, kind(st.st_mode), st.st_uid, st.st_mtime_ns, st.st_ino, st.st_ctime_ns]


def stat_paths(root: int, rels: list[bytes], hash_max: int) -> list[list]:
    """An inventory entry plus the sha256 of the content (None past `hash_max` bytes or for non-files) for
    each of `rels` that exists; a path that is absent (or not reachable without a link) is left out."""
    import hashlib

    out = []
    for rel in rels:
        try:
            comps = parts(rel)
            parent = open_parent(root, comps)
            try:
                st = os.stat(comps[-1], dir_fd=parent, follow_symlinks=False)
            finally:
                os.close(parent)
            digest = None
            if stat.S_ISREG(st.st_mode) and st.st_size <= hash_max:
                fd = open_regular(root, rel)
                try:
                    data = os.pread(fd, hash_max + 1, 0)
                    if len(data) == os.fstat(fd).st_size:
                        digest = hashlib.sha256(data).hexdigest()
                finally:
                    os.close(fd)
        except (OSError, ValueError):
            continue
        out.append([*row(os.fsdecode(rel), st), digest])
    return out


def inventory(root: int, max_entries: int, max_depth: int) -> tuple[list[list], bool]:
    """Every non-directory below `root`, and every directory that could not be listed, as
    `row`s (path: the str form, os.fsdecode, of the raw name), sorted.
    Returns (entries, truncated): the walk stops after `max_entries` names (directories included)
    and does not enter directories nested deeper than `max_depth`; both set truncated."""
    out: list[list] = []
    seen, truncated, full = 0, False, False
    stack: list[tuple[int, bytes, list[bytes]]] = []  # (dir fd, its path prefix, subdirectories still to visit)
    fd, prefix = os.dup(root), b""
    while fd >= 0:
        subdirs = []
        try:
            with os.scandir(fd) as it:
                for entry in it:
                    seen += 1
                    if seen > max_entries:
                        truncated = full = True
                        break
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue  # gone since the listing
                    name = os.fsencode(entry.name)
                    if stat.S_ISDIR(st.st_mode):
                        subdirs.append(name)
                    else:
                        path = os.fsdecode(prefix + name)
                        out.append(row(path, st))
        except OSError:
            pass
        stack.append((fd, prefix, subdirs[::-1]))
        fd = -1
        while stack and fd < 0 and not full:
            parent, base, todo = stack[-1]
            if not todo:
                os.close(stack.pop()[0])
                continue
            name = todo.pop()
            try:
                if len(stack) >= max_depth:
                    truncated = True
                    raise OSError(errno.EMLINK, "too deep")
                fd, prefix = os.open(name, O_DIR, dir_fd=parent), base + name + b"/"
            except OSError:  # unreadable (chmod 000) or too deep: the directory itself is the entry
                try:
                    st = os.stat(name, dir_fd=parent, follow_symlinks=False)
                except OSError:
                    continue
                out.append(row(os.fsdecode(base + name), st))
                out[-1][2] = "dir"  # whatever it is now: it is where the walk stopped
    for parent, _, _ in stack:
        os.close(parent)
    out.sort(key=lambda e: os.fsencode(e[0]))
    return out, truncated


def remove_tree(path: str) -> None:
    """Delete a directory tree whatever a cell did to it: modes of 000, any depth, any names, and the
    immutable / append-only flags where we may clear them. Iterative; never follows links."""
    try:
        top = os.open(path, O_DIR)
    except FileNotFoundError:
        return
    stack: list[tuple[int, set[str], str]] = [(top, set(), "")]  # (dir fd, names given up on, its name in the parent)
    while stack:
        fd, skip, _ = stack[-1]
        _unlock(fd)
        try:
            names = [n for n in os.listdir(fd) if n not in skip]
        except OSError:
            names = []
        child = None
        for name in names:
            if _unlink(fd, name):
                continue
            try:
                os.rmdir(name, dir_fd=fd)
                continue
            except OSError:
                pass
            skip.add(name)  # descend once; if it still cannot go after that, leave it
            try:
                child = os.open(name, O_DIR, dir_fd=fd)
            except OSError:
                continue
            stack.append((child, set(), name))
            break
        if child is not None:
            continue
        os.close(fd)
        _, _, name = stack.pop()
        if stack:
            try:
                os.rmdir(name, dir_fd=stack[-1][0])
            except OSError:
                pass
    os.rmdir(path)


def _unlink(parent: int, name: str) -> bool:
    """Remove a non-directory (True), or say that `name` is a directory (False)."""
    for _ in range(2):
        try:
            os.unlink(name, dir_fd=parent)
            return True
        except FileNotFoundError:
            return True
        except IsADirectoryError:
            return False
        except PermissionError:  # an immutable or append-only file: clear its flags once, where we may
            _clear_flags_at(parent, name)
        except OSError:
            break
    return False


def _unlock(fd: int) -> None:
    """Make a directory writable for us again: its mode (we own it) and its flags (where we may)."""
    try:
        os.fchmod(fd, 0o700)
    except OSError:
        pass
    _clear_flags(fd)


_FS_IOC_GETFLAGS, _FS_IOC_SETFLAGS, _LOCK_FLAGS = 0x80086601, 0x40086602, 0x10 | 0x20  # immutable, append-only


def _clear_flags(fd: int) -> None:
    import array
    import fcntl

    try:
        flags = array.array("l", [0])
        fcntl.ioctl(fd, _FS_IOC_GETFLAGS, flags, True)
        if flags[0] & _LOCK_FLAGS:
            flags[0] &= ~_LOCK_FLAGS
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, flags, True)
    except OSError:  # not supported here, or not permitted (then unlink reports it)
        pass


def _clear_flags_at(parent: int, name: bytes | str) -> None:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=parent)
    except OSError:
        return
    try:
        _clear_flags(fd)
    finally:
        os.close(fd)
