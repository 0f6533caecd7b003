"""Processes inside the sandbox: /proc scans, killing what a cell left, pausing kernels, privileges."""
from __future__ import annotations

import os
import signal
import time

PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_CAPBSET_DROP = 1, 4, 24
PR_SET_NO_NEW_PRIVS, PR_SET_CHILD_SUBREAPER = 38, 36
CLONE_NEWUSER = 0x10000000
CAP_SETGID, CAP_SETUID, CAP_KILL = 6, 7, 5
_libc = None


def libc():
    global _libc
    if _libc is None:
        import ctypes

        _libc = ctypes.CDLL(None, use_errno=True)
    return _libc


def prctl(option: int, arg: int) -> bool:
    try:
        return libc().prctl(option, arg, 0, 0, 0) == 0
    except (OSError, AttributeError):  # not Linux: lose that hardening only
        return False


def unshare_user() -> None:
    """Move into a new user namespace (Python 3.11 has no os.unshare)."""
    import ctypes

    if libc().unshare(CLONE_NEWUSER) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"unshare(CLONE_NEWUSER): {os.strerror(err)}")


def limit_caps(keep: set[int]) -> None:
    """Keep only the capabilities in `keep`: drop the rest from the bounding set (where we may) and
    from the effective, permitted and inheritable sets."""
    import ctypes

    for cap in range(64):
        if cap not in keep:
            prctl(PR_CAPBSET_DROP, cap)  # EPERM without CAP_SETPCAP, EINVAL past the last cap: fine

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    mask = sum(1 << c for c in keep)
    data = (Data * 2)(Data(mask & 0xFFFFFFFF, mask & 0xFFFFFFFF, 0), Data(mask >> 32, mask >> 32, 0))
    if libc().capset(ctypes.byref(Header(0x20080522, 0)), data) != 0:  # _LINUX_CAPABILITY_VERSION_3
        err = ctypes.get_errno()
        raise OSError(err, f"capset: {os.strerror(err)}")


def stat(pid: int) -> tuple[str, int] | None:
    """(state letter, parent pid) of a process, None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
        state, ppid = data[data.rindex(b")") + 2 :].split()[:2]  # the name may hold spaces and parentheses
        return state.decode(), int(ppid)
    except (OSError, ValueError, IndexError):
        return None


def quiet(status_fd: int) -> bool:
    """Whether a process (its /proc/<pid>/status, held open) has one thread and no signal handler but
    SIGINT's and libc's own (32, 33): blocked in a read, such a process runs no code until it returns."""
    try:
        status = os.pread(status_fd, 8192, 0)
        threads = status[status.index(b"\nThreads:") + 9 :].split(b"\n", 1)[0]
        handlers = status[status.index(b"\nSigCgt:") + 8 :].split(b"\n", 1)[0]
        return int(threads) == 1 and int(handlers, 16) & ~_QUIET_HANDLERS == 0
    except (OSError, ValueError):
        return False


def open_proc(path: str) -> int:
    """A /proc file held open, to be re-read with os.pread (cheaper than opening it each time); -1 if absent."""
    try:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1


def read_pids(fd: int) -> set[int] | None:
    """The pids in a held-open /proc children file; None if it cannot be read."""
    try:
        return {int(p) for p in os.pread(fd, 1 << 16, 0).split()}
    except (OSError, ValueError):
        return None


_QUIET_HANDLERS = (1 << (signal.SIGINT - 1)) | (1 << 31) | (1 << 32)


def _children(pid: int) -> list[int] | None:
    """Children of a process from /proc/<pid>/task/*/children; None where the kernel lacks that file."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                out += [int(c) for c in f.read().split()]
    except FileNotFoundError as e:
        return [] if e.filename and not e.filename.endswith("children") else None
    except (OSError, ValueError):
        pass
    return out


def descendants(root: int, keep: set[int] = frozenset()) -> list[int]:
    """Every live (not zombie) process below `root`, except the pids in `keep` (their children count)."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        kids = _children(pid)
        if kids is None:
            return _descendants_by_scan(root, keep)
        for kid in kids:
            if kid in keep:  # a kernel: alive or not, its children count
                todo.append(kid)
                continue
            st = stat(kid)
            if st is not None and st[0] != "Z":
                todo.append(kid)
                out.append(kid)
    return out


def _descendants_by_scan(root: int, keep: set[int]) -> list[int]:
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            st = stat(int(name))
            if st is not None and st[0] != "Z":
                children.setdefault(st[1], []).append(int(name))
    out, todo = [], list(children.get(root, []))
    while todo:
        pid = todo.pop()
        if pid not in keep:
            out.append(pid)
        todo.extend(children.get(pid, []))
    return out


def reap(statuses: dict[int, int] | None = None) -> None:
    """Collect every exited child, recording its wait status."""
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if statuses is not None:
            statuses[pid] = status


def kill_below(root: int, keep: set[int], statuses: dict[int, int] | None = None, until=None) -> int:
    """SIGKILL every process below `root` but `keep` until none is left; returns how many were killed.

    `until()` (optional) must also hold before we stop: the caller's check that a paused kernel is
    still paused, so a leftover that woke it up is caught on the next pass. Killed children of ours
    are reaped here, so a fork bomb finds no free process slot to refill while a pass kills it.
    """
    killed: set[int] = set()
    for attempt in range(600):  # a few seconds at most, even against a fork bomb on a loaded machine
        pids = descendants(root, keep)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        if not pids and (until is None or until()):
            return len(killed)
        time.sleep(min(0.005, 2e-5 * 2**attempt))  # a stop signal usually lands within microseconds
        reap(statuses)
    return -1  # could not clear it: the caller takes the kernel down


def death(status: int | None) -> str:
    """How a process died, from its wait status."""
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        why = {signal.SIGKILL: " (out of memory, or killed)", signal.SIGXCPU: " (CPU time limit)"}.get(sig, "")
        return f"killed by {signal.Signals(sig).name}{why}"
    if status is not None and os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)}"
    return "gone"
