"""A cgroup per local session, where this process may create one: one memory limit on the whole
sandbox (keeper, supervisor, every kernel and the tmpfs files they write) and one process limit.

cgroup v2 is used when the unified hierarchy offers the memory controller below our own cgroup,
else cgroup v1's memory and pids hierarchies. Where neither is writable (an unprivileged user
without a delegated subtree, most containers) there is none, and `reason` says why: memory is then
limited per process only (RLIMIT_AS), as the local backend's docstring says.
"""
from __future__ import annotations

import os
import signal
import time

ROOT = "/sys/fs/cgroup"


def _own_paths() -> dict[str, str]:
    """controller ('' for v2) -> our cgroup path, from /proc/self/cgroup."""
    out = {}
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for c in controllers.split(",") if controllers else [""]:
                    out[c] = path
    except (OSError, ValueError):
        pass
    return out


def _v1_mount(controller: str) -> str | None:
    try:
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            for line in f:
                fields = line.split()
                sep = fields.index("-")
                if fields[sep + 1] == "cgroup" and controller in fields[sep + 3].split(","):
                    return fields[4]
    except (OSError, ValueError):
        pass
    return None


def _v2_mount() -> str | None:
    for path in (ROOT, f"{ROOT}/unified"):
        if os.path.exists(f"{path}/cgroup.controllers"):
            return path
    return None


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(value)


class SessionCgroup:
    """The cgroup directories of one session; `procs_files` are what its first process writes itself into."""

    def __init__(self, dirs: list[str], version: int) -> None:
        self.dirs, self.version = dirs, version
        self.procs_files = [f"{d}/cgroup.procs" for d in dirs]

    def join_argv(self, argv: list[str]) -> list[str]:
        """`argv`, run by a shell that first moves itself (and so everything it execs) into the cgroup."""
        script = 'for f do [ "$f" = -- ] && break; echo $$ > "$f" || exit 97; shift; done; shift; exec "$@"'
        return ["/bin/sh", "-c", script, "sh", *self.procs_files, "--", *argv]

    def remove(self) -> None:
        """Kill anything still inside, then delete the directories (the session is over)."""
        for d in self.dirs:
            for _ in range(100):
                try:
                    os.rmdir(d)
                    break
                except FileNotFoundError:
                    break
                except OSError:  # still populated: processes of a sandbox that was not stopped, or exiting ones
                    _kill_members(d)
                    time.sleep(0.01)


def _kill_members(d: str) -> None:
    try:
        with open(f"{d}/cgroup.procs", encoding="utf-8") as f:
            pids = [int(p) for p in f.read().split()]
    except (OSError, ValueError):
        return
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def create(name: str, memory_bytes: int, max_processes: int) -> tuple[SessionCgroup | None, str]:
    """(the session's cgroup, a description) or (None, why there is none)."""
    own = _own_paths()
    v2 = _v2_mount()
    if v2 and "" in own:
        parent = os.path.join(v2, own[""].lstrip("/"))
        try:
            with open(f"{parent}/cgroup.subtree_control", encoding="utf-8") as f:
                enabled = f.read().split()
            if "memory" in enabled:
                d = os.path.join(parent, name)
                os.mkdir(d)
                try:
                    _write(f"{d}/memory.max", str(memory_bytes))
                    if os.path.exists(f"{d}/memory.swap.max"):
                        _write(f"{d}/memory.swap.max", "0")
                    if "pids" in enabled:
                        _write(f"{d}/pids.max", str(max_processes))
                except OSError:
                    os.rmdir(d)
                    raise
                return SessionCgroup([d], 2), f"cgroup v2 {d}: memory.max {memory_bytes >> 20} MB"
        except OSError:
            pass
    dirs = []
    try:
        wanted = (("memory", {"memory.limit_in_bytes": memory_bytes}), ("pids", {"pids.max": max_processes}))
        for controller, files in wanted:
            mount = _v1_mount(controller)
            if mount is None or controller not in own:
                if controller == "memory":
                    return None, "no writable cgroup with a memory controller (neither v2 nor v1)"
                continue
            d = os.path.join(mount, own[controller].lstrip("/"), name)
            os.mkdir(d)
            dirs.append(d)
            for file, value in files.items():
                _write(f"{d}/{file}", str(value))
            if controller == "memory" and os.path.exists(f"{d}/memory.memsw.limit_in_bytes"):
                _write(f"{d}/memory.memsw.limit_in_bytes", str(memory_bytes))  # no swap to escape into
    except OSError as e:
        SessionCgroup(dirs, 1).remove()
        return None, f"cgroups are not writable here ({e.strerror}: {e.filename})"
    return SessionCgroup(dirs, 1), f"cgroup v1 {dirs[0]}: memory.limit_in_bytes {memory_bytes >> 20} MB"


def reap(prefix: str, alive) -> int:
    """Remove session cgroups named `prefix<owner>-*` whose owner is gone (`alive(owner)` is False)."""
    own, removed = _own_paths(), 0
    parents = set()
    v2 = _v2_mount()
    if v2 and "" in own:
        parents.add(os.path.join(v2, own[""].lstrip("/")))
    for controller in ("memory", "pids"):
        mount = _v1_mount(controller)
        if mount and controller in own:
            parents.add(os.path.join(mount, own[controller].lstrip("/")))
    for parent in parents:
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for n in names:
            if n.startswith(prefix) and not alive(n[len(prefix) :].rsplit("-", 1)[0]):
                SessionCgroup([os.path.join(parent, n)], 0).remove()
                removed += 1
    return removed
