"""How the sandbox starts: the keeper (local backend) and the supervisor's own start-up.

`main(cfg)` is what the launcher's command line calls. cfg["role"] is
- "supervisor" (Docker): stdin/stdout are the host's channel; run the supervisor on them.
- "keeper" (local): pid 1 of the bwrap namespaces (or a plain child, without bwrap). It holds the
  namespaces, and with them the workspace tmpfs, for the whole session; the host sends it, over a
  Unix socket, the pipe ends of each supervisor to start (b"S" + 2 fds) or a request to kill the
  current one (b"K"), and hears b"D<why>" when a supervisor died and everything it left is gone.
  So a supervisor that dies, or one the host kills for not answering, is replaced without losing
  the workspace. As pid 1 of its pid namespace it cannot be signalled from inside; it runs no user
  code. Where the sandbox was started as root it gives each supervisor a user namespace of its own
  (uid 0 there is an unprivileged uid on the host; kernels get uids 1000 + index there).
"""
from __future__ import annotations

import os
import resource
import select
import signal
import socket
import sys

from . import procs
from .protocol import encode, write_all
from .supervisor import MAX_KERNELS, Supervisor


def main(cfg: dict) -> None:
    if cfg["role"] == "keeper":
        keeper(cfg)
    else:
        host_in, host_out = os.dup(0), os.dup(1)
        run_supervisor(cfg, host_in, host_out)


def run_supervisor(cfg: dict, host_in: int, host_out: int) -> None:
    procs.prctl(procs.PR_SET_DUMPABLE, 0)  # kernels may not trace us or open our fds, even sharing our uid
    procs.prctl(procs.PR_SET_CHILD_SUBREAPER, 1)  # whatever cells leave behind stays below us, to be killed
    if cfg.get("kernel_uid") is not None:
        os.setgroups([cfg["kernel_gid"]])  # the workspace group: we read what kernels write
        try:  # ours, group-writable, new entries in the kernels' group (Docker copies the image dir's mode up)
            os.chmod(cfg["workspace"], 0o2775)
        except OSError:
            pass
        if cfg.get("userns"):
            try:  # no nested user namespaces for kernels: less kernel surface
                with open("/proc/sys/user/max_user_namespaces", "w") as f:
                    f.write("0")
            except OSError:
                pass
        procs.limit_caps({procs.CAP_SETUID, procs.CAP_SETGID, procs.CAP_KILL})
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = 1 << 16 if hard == resource.RLIM_INFINITY else min(hard, 1 << 16)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, target), hard))  # a walk holds one fd per level
    os.umask(0o002)
    os.chdir(cfg["workspace"])
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):  # the channel owns its own fds; stray prints go nowhere
        if fd not in (host_in, host_out):
            os.dup2(devnull, fd)
    imported = []
    for name in cfg.get("preimport", []):
        try:
            __import__(name)
            imported.append(name)
        except Exception:  # a missing package is not an error: the kernel just lacks it
            pass
    write_all(host_out, encode({"op": "ready", "pid": os.getpid(), "uid": os.getuid(),
                                "python": sys.version.split()[0], "imported": imported}))
    Supervisor(cfg, host_in, host_out).serve()


def keeper(cfg: dict) -> None:
    ctl = socket.socket(fileno=cfg["ctl_fd"])
    procs.prctl(procs.PR_SET_DUMPABLE, 0)
    procs.prctl(procs.PR_SET_CHILD_SUBREAPER, 1)
    if cfg.get("userns"):  # the workspace belongs to the supervisor's uid 0 and the kernels' group
        os.chmod(cfg["workspace"], 0o2775)
        os.chown(cfg["workspace"], cfg["host_uid"], cfg["host_uid"] + cfg["kernel_gid"])
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    supervisor = None
    while True:
        try:
            ready = select.select([ctl, wake_r], [], [])[0]
        except InterruptedError:
            continue
        if wake_r in ready:
            os.read(wake_r, 4096)
        if supervisor is not None:
            try:
                pid, status = os.waitpid(supervisor, os.WNOHANG)
            except ChildProcessError:
                pid, status = supervisor, None
            if pid == supervisor:
                procs.kill_below(os.getpid(), set())
                supervisor = None
                ctl.sendall(b"D" + procs.death(status).encode() + b"\n")
        procs.reap()
        if ctl not in ready:
            continue
        msg, fds, _, _ = socket.recv_fds(ctl, 16, 2)
        if not msg:  # the host is gone: so is everything here
            procs.kill_below(os.getpid(), set())
            os._exit(0)
        if msg.startswith(b"K") and supervisor is not None:
            os.kill(supervisor, signal.SIGKILL)
        if msg.startswith(b"S") and len(fds) == 2:
            if supervisor is None:
                supervisor = _start_supervisor(cfg, ctl, *fds)
            for fd in fds:
                os.close(fd)


def _start_supervisor(cfg: dict, ctl: socket.socket, host_in: int, host_out: int) -> int:
    go_r, go_w = os.pipe()
    mapped_r, mapped_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            ctl.close()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            os.close(go_r)
            os.close(mapped_w)
            if cfg.get("userns"):
                procs.unshare_user()
                os.write(go_w, b"u")
                if os.read(mapped_r, 1) != b"m":
                    os._exit(75)
                os.setresgid(0, 0, 0)
                os.setresuid(0, 0, 0)
            run_supervisor(cfg, host_in, host_out)
        finally:
            os._exit(70)
    os.close(go_w)
    os.close(mapped_r)
    if cfg.get("userns") and os.read(go_r, 1) == b"u":
        base, uid, gid = cfg["host_uid"], cfg["kernel_uid"], cfg["kernel_gid"]
        try:  # inside: 0 is the supervisor, kernel_uid + i kernel i, kernel_gid their group; all unprivileged outside
            with open(f"/proc/{pid}/uid_map", "w") as f:
                f.write(f"0 {base} 1\n{uid} {base + uid} {MAX_KERNELS}\n")
            with open(f"/proc/{pid}/gid_map", "w") as f:
                f.write(f"0 {base} 1\n{gid} {base + gid} 1\n")
            os.write(mapped_w, b"m")
        except OSError:  # the child sees EOF and exits; the host hears why from the exit status
            pass
    os.close(go_r)
    os.close(mapped_w)
    return pid
