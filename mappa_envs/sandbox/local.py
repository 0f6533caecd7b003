"""The local backend: kernels in a subprocess on this machine, inside bubblewrap when it is installed.

What it isolates, with `bwrap` available (Linux; `apt-get install bubblewrap`):
- new PID, network, IPC, UTS and (where possible) cgroup namespaces: no network at all (not even
  the host's loopback), no view of or signals to host processes;
- a file system built from read-only binds of /usr, /etc, the /bin-/lib links and the Python
  installation; a private /tmp; the session's workspace, mounted at /workspace, is the only
  writable host directory. Home directories and the project's own files are not visible;
- when started as root, code runs as a fresh unprivileged uid per session with no capabilities,
  which also gives each session its own process-count limit; otherwise as the calling user in a
  new user namespace;
- rlimits: address space (`memory_mb`, per process), CPU seconds per cell, file size
  (`max_file_mb`), processes (`max_processes`); wall time per cell by the supervisor; no process
  outlives its cell.

What it does not isolate: the kernel is shared with the host (no seccomp filter, so a kernel
exploit escapes); memory is limited per process, not in total, and `workspace_mb` is not enforced
(the workspace is an ordinary directory; only single files are capped); CPU share is not limited
(`cpus` sets BLAS thread counts only); world-readable files under /usr and /etc are readable.
Use the Docker backend for cgroup limits on memory, CPU and processes.

Without bwrap it runs a plain subprocess with the rlimits above and warns that code runs
unisolated: it can read and write whatever the calling user can, and reach the network.
"""
from __future__ import annotations

import glob
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import warnings
from contextlib import AbstractContextManager
from pathlib import PurePosixPath

from mappa_envs.sandbox.client import (
    DEFAULT_PREIMPORT,
    Channel,
    PipeTransport,
    Session,
    Slot,
    WarmPool,
    process_start,
    sandbox_env,
    supervisor_argv,
    supervisor_config,
)
from mappa_envs.sandbox.types import Limits, SandboxError

_UID_BASE, _UID_SPAN = 3_000_000, 1_000_000  # per-session uids, far above any real account


def bwrap_path() -> str | None:
    return shutil.which("bwrap") if sys.platform.startswith("linux") else None


def _python_roots(python: str) -> list[str]:
    """Directories the interpreter needs (its prefix, base prefix and real location), outside /usr."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    else:
        out = subprocess.run([python, "-c", "import sys; print(sys.prefix); print(sys.base_prefix)"],
                             capture_output=True, text=True, check=True).stdout
        prefixes = set(out.split())
    prefixes.add(os.path.dirname(os.path.dirname(os.path.realpath(python))))
    roots = sorted({os.path.realpath(p) for p in prefixes} | {os.path.abspath(p) for p in prefixes})
    keep = []
    for r in roots:  # drop system dirs (bound anyway) and paths nested in another root
        if r in ("/", "/usr", "/usr/local") or any(r.startswith(k + "/") for k in keep):
            continue
        keep.append(r)
    return keep


def _owner_prefix(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"mappa-ws-{pid}.{process_start(pid)}-"


def reap_workspaces(root: str | None = None) -> int:
    """Delete workspaces whose owning process is gone (it crashed or was killed before closing)."""
    removed = 0
    if not os.path.isdir("/proc"):  # no way to tell live owners from dead ones
        return 0
    for path in glob.glob(os.path.join(root or tempfile.gettempdir(), "mappa-ws-*.*-*")):
        pid = os.path.basename(path)[len("mappa-ws-") :].split(".", 1)[0]
        if pid.isdigit() and not os.path.basename(path).startswith(_owner_prefix(int(pid))):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def _probe(bwrap_argv: list[str]) -> str | None:
    """Why bwrap cannot run here (None if it can): try it once with the sandbox's own arguments."""
    try:
        out = subprocess.run([*bwrap_argv, "--", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap failed to start: {e}"
    return None if out.returncode == 0 else f"bwrap failed: {out.stderr.strip()[-300:]}"


class LocalSandbox:
    __doc__ = __doc__

    name = "local"

    def __init__(self, limits: Limits = Limits(), *, pool_size: int = 1, preimport: tuple[str, ...] = DEFAULT_PREIMPORT,
                 python: str | None = None, isolation: str = "auto", workspace_root: str | None = None) -> None:
        if isolation not in ("auto", "bwrap", "none"):
            raise ValueError(f"isolation must be 'auto', 'bwrap' or 'none', got {isolation!r}")
        self.limits, self.preimport = limits, tuple(preimport)
        self.python = python or sys.executable
        self.workspace_root = workspace_root
        bwrap, why = bwrap_path(), "bubblewrap is not installed (apt-get install bubblewrap; Linux only)"
        self._bwrap_base = None
        if bwrap and isolation != "none":
            self._bwrap_base = self._bwrap_argv(bwrap)
            why = _probe(self._bwrap_base)  # e.g. user namespaces disabled for unprivileged users
        if isolation == "bwrap" and why:
            raise SandboxError(f"isolation='bwrap' is not possible here: {why}")
        self.isolation = "bwrap" if self._bwrap_base and not why else "none"
        if self.isolation == "none":
            self._bwrap_base = None
            reason = "isolation='none' was asked for" if isolation == "none" else why
            warnings.warn(f"local sandbox without bwrap ({reason}): agent code runs UNISOLATED with your user's "
                          "rights (files, network); install bubblewrap or use the docker backend",
                          RuntimeWarning, stacklevel=3)
        reap_workspaces(workspace_root)
        self._pool = WarmPool(self._make_slot, pool_size, limits, "local")

    def _bwrap_argv(self, bwrap: str) -> list[str]:
        argv = [bwrap, "--die-with-parent", "--new-session", "--unshare-pid", "--unshare-net", "--unshare-ipc",
                "--unshare-uts", "--unshare-cgroup-try"]
        if os.geteuid() == 0:  # stay in the host user namespace; the supervisor drops to a fresh uid itself
            argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
        else:
            argv += ["--unshare-user"]
        argv += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                argv += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                argv += ["--ro-bind", top, top]
        # /tmp first: a Python installed under /tmp (a CI checkout's venv) is then bound over the tmpfs.
        tmp_size = str(self.limits.workspace_mb << 20)
        argv += ["--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--size", tmp_size, "--tmpfs", "/tmp"]
        made: set[str] = set()
        for root in _python_roots(self.python):
            parents = [str(p) for p in reversed(PurePosixPath(root).parents) if str(p) != "/"]
            for parent in parents:  # bwrap would make missing parents 0700: the sandbox user could not pass
                if parent not in made and not parent.startswith("/usr"):
                    argv += ["--perms", "0755", "--dir", parent]
                    made.add(parent)
            argv += ["--ro-bind", root, root]
        return argv

    def _make_slot(self) -> Slot:
        host_ws = tempfile.mkdtemp(prefix=_owner_prefix(), dir=self.workspace_root)
        extra: dict = {}
        if self.isolation == "bwrap":
            inner_ws = "/workspace"
            extra["max_processes"] = self.limits.max_processes
            if os.geteuid() == 0:
                uid = _UID_BASE + secrets.randbelow(_UID_SPAN)
                os.chown(host_ws, uid, uid)
                extra.update(uid=uid, gid=uid)
            argv = self._bwrap_base + ["--bind", host_ws, inner_ws, "--chdir", inner_ws, "--"]
        else:
            inner_ws, argv = host_ws, []
        config = supervisor_config(self.limits, inner_ws, self.preimport, **extra)
        argv += supervisor_argv(self.python, config)
        env = sandbox_env(self.limits, inner_ws)

        def start() -> Channel:
            return Channel(PipeTransport(argv, env, cwd=host_ws))

        try:
            channel = start()
        except BaseException:
            shutil.rmtree(host_ws, ignore_errors=True)
            raise

        def dispose() -> None:
            slot.channel.close()
            shutil.rmtree(host_ws, ignore_errors=True)

        slot = Slot(channel=channel, start=start, dispose=dispose, workspace=host_ws)
        return slot

    def session(self) -> AbstractContextManager[Session]:
        """One workspace and its kernels, closed (and thrown away) when the `with` block ends."""
        return self._pool.session()

    def open(self) -> Session:
        """A session the caller closes (`session()` is the context-manager form)."""
        return self._pool.open()

    def wait_warm(self, timeout: float = 120.0) -> bool:
        """Block until the warm pool is full, e.g. before timing anything; False on timeout."""
        return self._pool.wait_full(timeout)

    def close(self) -> None:
        self._pool.close()

    def __enter__(self) -> "LocalSandbox":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalSandbox(isolation={self.isolation!r}, limits={self.limits})"
