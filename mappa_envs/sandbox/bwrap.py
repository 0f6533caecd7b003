"""The local backend's plumbing: the bwrap command line, and the transport to the keeper inside it."""
from __future__ import annotations

import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import PurePosixPath

from mappa_envs.sandbox.channel import ChannelClosed
from mappa_envs.sandbox.hidden import hide_argv
from mappa_envs.sandbox.types import Limits

SEND_TIMEOUT_S = 120.0  # a supervisor that does not read its input for this long is stuck
ROOT_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_KILL")  # the keeper's: map uids, own the workspace, clean up


def bwrap_path() -> str | None:
    return shutil.which("bwrap") if sys.platform.startswith("linux") else None


def _python_roots(python: str) -> list[str]:
    """Directories the interpreter needs (its prefix, base prefix and real location), outside /usr."""
    # the same spelling, not the same file: a venv's python is a link to the base one, with other prefixes
    if os.path.abspath(python) == os.path.abspath(sys.executable):
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


def bwrap_argv(bwrap: str, limits: Limits, python: str, root: bool, hide: tuple[str, ...] = ()) -> list[str]:
    """bwrap's options for one sandbox (the command to run follows a "--"); `hide`: paths masked (`hidden`)."""
    argv = [bwrap, "--die-with-parent", "--new-session", "--as-pid-1", "--unshare-pid", "--unshare-net",
            "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try", "--hostname", "sandbox"]
    if root:  # no user namespace of bwrap's: the keeper maps one per supervisor itself
        argv += ["--cap-drop", "ALL"] + [a for cap in ROOT_CAPS for a in ("--cap-add", cap)]
    else:
        argv += ["--unshare-user", "--disable-userns"]
    argv += ["--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    small = str(min(256, limits.workspace_mb) << 20)
    argv += ["--dev", "/dev", "--size", small, "--perms", "1777", "--tmpfs", "/dev/shm", "--remount-ro", "/dev",
             "--proc", "/proc",
             "--size", small, "--perms", "1777", "--tmpfs", "/tmp",  # before the Python binds: a venv in /tmp goes over
             "--size", str(limits.workspace_mb << 20), "--perms", "0755", "--tmpfs", "/workspace"]
    made: set[str] = set()
    roots = _python_roots(python)
    for r in roots:
        for parent in [str(p) for p in reversed(PurePosixPath(r).parents) if str(p) != "/"]:
            if parent not in made and not parent.startswith("/usr"):  # bwrap makes missing parents 0700: unpassable
                argv += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        argv += ["--ro-bind", r, r]
    return argv + hide_argv(hide, roots) + ["--remount-ro", "/", "--chdir", "/workspace"]


def probe(argv: list[str]) -> str | None:
    """Why bwrap cannot run here (None if it can): try it once with the sandbox's own options."""
    try:
        out = subprocess.run([*argv, "--", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"bwrap failed to start: {e}"
    return None if out.returncode == 0 else f"bwrap failed: {out.stderr.strip()[-300:]}"


class KeeperTransport:
    """The keeper process (bwrap's pid 1, or a plain subprocess) and the pipes of its current supervisor.

    The keeper's stdin is a Unix socket to us: we send it the pipe ends of each new supervisor and
    hear from it when one died.
    """

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str) -> None:
        self.ctl, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        self.stderr = tempfile.TemporaryFile()  # a file, not a pipe: a crash report can never block the sandbox
        try:
            self.proc = subprocess.Popen(argv, stdin=theirs, stdout=subprocess.DEVNULL, stderr=self.stderr,
                                         env=env, cwd=cwd, start_new_session=True)  # one group: close() reaches all
        finally:
            theirs.close()
        self.in_w = self.out_r = -1
        self.up = False  # a supervisor was started and the keeper has not told us it died
        self.notices = b""
        self.last_death = "no answer"

    def start_supervisor(self) -> KeeperTransport:
        self._close_pipes()
        in_r, self.in_w = os.pipe()
        self.out_r, out_w = os.pipe()
        try:
            socket.send_fds(self.ctl, [b"S"], [in_r, out_w])
        except OSError as e:
            raise ChannelClosed(f"the sandbox is gone ({self.why_closed()})") from e
        finally:
            os.close(in_r)
            os.close(out_w)
        os.set_blocking(self.in_w, False)
        self.up = True
        return self

    def stop_supervisor(self) -> bool:
        """Have the keeper kill the current supervisor and clear what it left; False if the keeper is stuck."""
        if self.up:
            try:
                self.ctl.sendall(b"K")
            except OSError:
                return False
            if not self._death_notice(10.0):
                return False
        return True

    def _death_notice(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while b"\n" not in self.notices:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.ctl], [], [], left)[0]:
                return False
            data = self.ctl.recv(4096)
            if not data:
                return False
            self.notices += data
        line, _, self.notices = self.notices.partition(b"\n")
        self.last_death, self.up = line[1:].decode(errors="replace"), False
        return True

    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, data: bytes) -> None:
        view, deadline = memoryview(data), time.monotonic() + SEND_TIMEOUT_S
        while view:
            try:
                view = view[os.write(self.in_w, view) :]
                continue
            except BlockingIOError:  # the pipe is full: wait until the supervisor reads, within a bound
                pass
            except OSError as e:
                raise ChannelClosed(f"the sandbox process is gone ({self.why_closed()})") from e
            if not select.select([], [self.in_w], [], max(deadline - time.monotonic(), 0))[1]:
                raise ChannelClosed(f"the sandbox did not read its input for {SEND_TIMEOUT_S:g} s")

    def recv(self, timeout: float) -> bytes:
        if not select.select([self.out_r], [], [], timeout)[0]:
            raise TimeoutError
        return os.read(self.out_r, 1 << 20)

    def why_closed(self) -> str:
        if self.up and self.alive():
            self._death_notice(2.0)
        if self.alive():
            return f"the supervisor {self.last_death}"
        size = os.fstat(self.stderr.fileno()).st_size
        lines = os.pread(self.stderr.fileno(), 2000, max(0, size - 2000)).decode(errors="replace").strip().splitlines()
        return f"the sandbox exited with status {self.proc.poll()}" + (f": {lines[-1]}" if lines else "")

    def _close_pipes(self) -> None:
        for fd in (self.in_w, self.out_r):
            if fd >= 0:
                os.close(fd)
        self.in_w = self.out_r = -1

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        self.proc.wait()
        self._close_pipes()
        self.ctl.close()
        self.stderr.close()
