"""The supervisor: the sandbox's trusted process. It runs no user code; it forks kernels, runs one cell
at a time, and decides everything the host is told about a cell from what it measures itself.

Requests from the host (each gets exactly one reply with the same "id", "error" set when it failed):

    run {kernel, index, timeout} + code  -> {ok, error, timed_out, restarted, truncated, duration_s, n_out}
                                            + stdout bytes + stderr bytes
    restart {kernel, index}              -> {}
    write {path, append} + data          -> {}
    read {path, offset, length, max_bytes} -> {size} + data
    inventory {max_entries, include?, hash_max?} -> {files: [[path, size, kind, uid, mtime_ns, ino, ctime_ns], ...],
                                            truncated, included: [[...the same, sha256 or None], ...]}
    ping {}                              -> {}

A cell's turn, and who decides what:
- Only the kernel running the cell is awake: every other kernel is stopped (SIGSTOP), or blocked in
  its next read with one thread and no signal handler of a cell's (it can run nothing until then),
  and nothing else the cells started is alive, so nothing runs during another agent's turn.
- The supervisor's own clock sets the deadline (SIGINT, then SIGKILL after GRACE_S); its own pipes
  carry the output, cut at the cap while they are read; bytes are read only from the kernel whose
  cell runs, and whatever sat in its pipes before the cell started is thrown away.
- The kernel's claim (did the cell raise) counts only in a frame with this cell's random token,
  bounded in size, once; anything else on its result pipe is tampering, and so is a claim that the
  kernel was changed. Tampering, death and a deadline kill give a fresh kernel.
- When the claim is in, the kernel is stopped and every other process the cell left (a daemon, a
  double fork, whatever a leftover thread started) is killed before the reply goes out.
"""
from __future__ import annotations

import os
import resource
import secrets
import select
import signal
import time

from . import files, kernel, procs
from .cell import Cell, Kernel, claimed_tampering
from .protocol import CHUNK, FrameReader, ProtocolError, encode, write_all

GRACE_S = 1.0  # after SIGINT at the deadline, how long a cell may take to unwind before SIGKILL
MAX_KERNELS = 64  # kernel uids per session, where kernels get their own uids
MAX_DEPTH = 8192  # directories nested deeper are listed as one entry, marked truncated
MAX_INCLUDE, MAX_HASH = 64, 16 << 20  # paths an inventory stats by name, and the most bytes it hashes for each


class Supervisor:
    def __init__(self, cfg: dict, host_in: int, host_out: int) -> None:
        self.cfg, self.host_in, self.host_out = cfg, host_in, host_out
        self.root = os.open(cfg["workspace"], files.O_DIR)
        self.kernels: dict[str, Kernel] = {}
        self.statuses: dict[int, int] = {}
        self.cell: Cell | None = None
        self.host_reader = FrameReader(1 << 20, CHUNK + cfg.get("max_code", kernel.MAX_CODE))
        self.children_fd = procs.open_proc(f"/proc/self/task/{os.getpid()}/children")
        self.wake_r, wake_w = os.pipe()
        for fd in (self.wake_r, wake_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(wake_w)  # a child's death (SIGCHLD) wakes the select loop
        signal.signal(signal.SIGCHLD, lambda *_: None)

    # -- kernels
    def ident(self, index: int) -> dict | None:
        if self.cfg.get("kernel_uid") is None:
            return None  # kernels share the supervisor's uid (unprivileged bwrap, no bwrap)
        if not 0 <= index < MAX_KERNELS:
            raise ValueError(f"a session has at most {MAX_KERNELS} kernels")
        return {"uid": self.cfg["kernel_uid"] + index, "gid": self.cfg["kernel_gid"]}

    def fork_kernel(self, name: str, index: int) -> Kernel:
        ident = self.ident(index)
        cells_r, cells_w = os.pipe()
        results_r, results_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
        me = os.getpid()
        try:
            pid = os.fork()
        except OSError:
            for fd in (cells_r, cells_w, results_r, results_w, out_r, out_w, err_r, err_w, devnull):
                os.close(fd)
            raise
        if pid == 0:
            try:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                kernel.become(self.cfg, ident, [devnull, out_w, err_w, cells_r, results_w], me)
            finally:
                os._exit(70)
        for fd in (cells_r, results_w, out_w, err_w, devnull):
            os.close(fd)
        for fd in (cells_w, results_r, out_r, err_r):
            os.set_blocking(fd, False)
        k = Kernel(name, index, pid, (cells_w, results_r, out_r, err_r))
        self.kernels[name] = k
        return k

    def drop_kernel(self, k: Kernel) -> int | None:
        """Kill a kernel and anything its cells left; returns its wait status."""
        try:
            os.kill(k.pid, signal.SIGKILL)
        except OSError:
            pass
        if k.pid not in self.statuses:
            try:
                self.statuses[k.pid] = os.waitpid(k.pid, 0)[1]
            except ChildProcessError:
                pass
        for fd in (k.cells_w, k.results_r, k.out_r, k.err_r, k.status_fd, k.children_fd):
            if fd >= 0:
                os.close(fd)
        del self.kernels[k.name]
        procs.kill_below(os.getpid(), self.kernel_pids(), self.statuses)
        return self.statuses.pop(k.pid, None)

    def replace_kernel(self, k: Kernel) -> Kernel:
        """A fresh kernel of the same name; returns it, with the old one's death noted."""
        status = self.drop_kernel(k)
        fresh = self.fork_kernel(k.name, k.index)
        fresh.note = procs.death(status)
        return fresh

    def kernel_pids(self) -> set[int]:
        return {k.pid for k in self.kernels.values()}

    def pause(self, k: Kernel) -> int:
        """Stop the kernel and kill every other process its cell left; returns how many (-1: it failed).

        A quiet kernel (only the loop's thread, no handler of the cell's) that has sent its frame blocks
        in its next read and runs nothing until then, so it needs no stop; the sweep still runs."""
        if procs.quiet(k.status_fd):
            return 0 if self.alone(k) else procs.kill_below(os.getpid(), self.kernel_pids(), self.statuses)

        def stopped() -> bool:  # and stop it again if one of its leftovers sent it SIGCONT
            st = procs.stat(k.pid)
            if st is None or st[0] in "TtZX":
                return True
            try:
                os.kill(k.pid, signal.SIGSTOP)
            except OSError:
                pass
            return False

        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        try:  # until the stop lands, a thread or a signal handler the cell left could still start things
            os.kill(k.pid, signal.SIGSTOP)
            deadline = time.monotonic() + 0.5
            while not stopped() and time.monotonic() < deadline:
                signal.sigtimedwait({signal.SIGCHLD}, max(deadline - time.monotonic(), 0.0))
        except OSError:
            pass
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})
        return procs.kill_below(os.getpid(), self.kernel_pids(), self.statuses, until=stopped)

    def alone(self, k: Kernel) -> bool:
        """Whether a single-threaded kernel's cell left no process: we have no children but kernels, it has
        none. (Anything a cell starts stays below us: orphans come to us, the subreaper.)"""
        ours, its = procs.read_pids(self.children_fd), procs.read_pids(k.children_fd)
        return ours is not None and its is not None and not its and ours <= self.kernel_pids()

    def drain(self, k: Kernel, cell: Cell | None) -> None:
        """Read what is in a kernel's output pipes: into the cell's captures, or away (cell None)."""
        for fd, capture in ((k.out_r, cell and cell.out), (k.err_r, cell and cell.err)):
            while True:
                try:
                    data = os.read(fd, 1 << 16)
                except (BlockingIOError, OSError):
                    break
                if not data:
                    break
                if capture:
                    capture.add(data)

    # -- requests
    def reply(self, meta: dict, blob: bytes = b"") -> None:
        write_all(self.host_out, encode(meta, blob))

    def handle(self, req: dict, blob: bytes) -> None:
        op, rid = req.get("op"), req.get("id")
        try:
            if op == "run":
                self.start_cell(req, blob)
                return
            if op == "restart":
                k = self.kernels.get(req["kernel"])
                if k is not None:
                    self.drop_kernel(k)
                self.fork_kernel(req["kernel"], int(req["index"]))
                self.reply({"id": rid})
            elif op == "write":
                files.write(self.root, os.fsencode(req["path"]), blob, bool(req.get("append")))
                self.reply({"id": rid})
            elif op == "read":
                size, data = files.read(self.root, os.fsencode(req["path"]), int(req["offset"]),
                                        min(int(req["length"]), CHUNK), int(req["max_bytes"]))
                self.reply({"id": rid, "size": size}, data)
            elif op == "inventory":  # one descriptor per level: stay well inside the descriptor limit
                depth = min(MAX_DEPTH, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 64)
                found, truncated = files.inventory(self.root, int(req["max_entries"]), depth)
                include = [os.fsencode(p) for p in req.get("include", ())[:MAX_INCLUDE]]
                included = files.stat_paths(self.root, include, min(int(req.get("hash_max", 0)), MAX_HASH))
                self.reply({"id": rid, "files": found, "truncated": truncated, "included": included})
            elif op == "ping":
                self.reply({"id": rid})
            else:
                self.reply({"id": rid, "error": f"ValueError: unknown op {op!r}"})
        except (OSError, ValueError, KeyError, TypeError) as e:
            self.reply({"id": rid, "error": f"{type(e).__name__}: {e}"[:2000]})

    def start_cell(self, req: dict, code: bytes) -> None:
        if self.cell is not None:
            self.reply({"id": req["id"], "error": "SandboxError: a cell is already running in this session"})
            return
        k = self.kernels.get(req["kernel"])
        try:
            if k is not None and k.pid in self.statuses:  # it died between cells (killed from outside, OOM)
                k = self.replace_kernel(k)
            elif k is None:
                k = self.fork_kernel(req["kernel"], int(req["index"]))
        except BlockingIOError:  # fork: the session's process limit is reached (every kernel is a process)
            self.reply({"id": req["id"], "ok": False, "timed_out": False, "restarted": False, "truncated": False,
                        "duration_s": 0.0, "n_out": 0, "error": f"cannot start kernel {req['kernel']!r}: the session "
                        f"is at its process limit (max_processes); use fewer kernels or raise the limit"})
            return
        self.drain(k, None)  # bytes from before this turn are nobody's output
        try:
            while os.read(k.results_r, 1 << 16):
                pass
        except (BlockingIOError, OSError):
            pass
        k.reader.reset()
        self.cell = cell = Cell(req, k, code, self.cfg["max_output_bytes"], self.cfg.get("cpus", 1.0))
        try:
            os.kill(k.pid, signal.SIGCONT)
            cell.pending = cell.pending[os.write(k.cells_w, cell.pending[:1 << 16]) :]
        except (BlockingIOError, ProcessLookupError):
            pass
        except OSError:  # its input is closed: it died; the loop sees it
            cell.pending = b""

    def finish_cell(self, died: bool = False) -> None:
        """Reply for the running cell: stop its kernel, clear its leftovers, decide what happened."""
        cell, k = self.cell, self.cell.kernel
        self.cell, note = None, k.note
        killed = 0 if died else self.pause(k)
        if killed < 0:
            cell.evidence = cell.evidence or "the kernel could not be paused after the cell"
        self.drain(k, cell)
        tampered = cell.evidence or claimed_tampering(cell.claim)
        restarted = died or k.pid in self.statuses or bool(tampered) or cell.claim is None
        notes = [f"killed {killed} process(es) the cell left running"] if killed > 0 else []
        if restarted:
            status = self.drop_kernel(k)
            self.fork_kernel(k.name, k.index)
            if tampered:
                error = f"the cell tampered with its kernel ({tampered}); the kernel was restarted, so later cells " \
                        "run in a fresh one"
            else:
                error = f"interpreter died: {procs.death(status)}; restarted with a fresh one"
        else:
            error = cell.claim.get("error") if isinstance(cell.claim.get("error"), str) else None
            threads = cell.claim.get("threads")
            if isinstance(threads, int) and threads > k.threads:
                notes.append(f"{threads} thread(s) started by this kernel's cells are still alive; the sandbox "
                             "pauses them between this kernel's cells")
            k.threads = threads if isinstance(threads, int) else k.threads
        timed_out = cell.sigint_at is not None
        if timed_out:
            error = f"timeout after {cell.timeout:g} s"
        err = cell.err.data() + b"".join(f"\n[sandbox: {n}]\n".encode() for n in notes)
        if note:  # the previous kernel of this name died between cells (killed from outside, out of memory)
            err = f"[sandbox: the interpreter died between cells ({note}); this cell ran in a fresh one]\n".encode() \
                + err
        out = cell.out.data()
        ok = not (restarted or timed_out) and cell.claim.get("ok") is True
        self.reply({"id": cell.id, "ok": ok, "error": error, "timed_out": timed_out,
                    "restarted": restarted or bool(note), "truncated": bool(cell.out.dropped or cell.err.dropped),
                    "duration_s": time.monotonic() - cell.start, "n_out": len(out)}, out + err)

    def on_result(self, k: Kernel) -> None:
        try:
            data = os.read(k.results_r, 1 << 16)
        except (BlockingIOError, OSError):
            return
        cell = self.cell if self.cell is not None and self.cell.kernel is k else None
        if cell is None:
            if not data:  # an idle kernel's result pipe closed: it died; the next cell of its name says so
                self.replace_kernel(k)
            return  # bytes from a kernel with no cell: nobody asked, nobody gets them
        if not data:  # the kernel is exiting, or the cell closed fd 4 and runs on
            if self.exited(k, 0.2):
                self.finish_cell(died=True)
                return
            cell.evidence = "the cell closed the kernel's result output"
        else:
            try:
                frames = k.reader.feed(data)
            except ProtocolError as e:
                cell.evidence = f"garbage on the kernel's result output: {e}"
                frames = []
            for meta, _ in frames:
                token = meta.get("token")
                if cell.claim is None and isinstance(token, str) and secrets.compare_digest(token, cell.token):
                    cell.claim = meta
                else:
                    cell.evidence = "a result frame this cell's kernel was not asked for"
        if cell.evidence or cell.claim is not None:
            if cell.evidence:
                self.kill_now(k)
            self.finish_cell(died=False)

    def exited(self, k: Kernel, timeout: float) -> bool:
        """Whether the kernel exits within `timeout` seconds (its wait status is then in self.statuses)."""
        deadline = time.monotonic() + timeout
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
        try:
            while True:
                try:
                    pid, status = os.waitpid(k.pid, os.WNOHANG)
                except ChildProcessError:
                    return True
                if pid:
                    self.statuses[pid] = status
                    return True
                if time.monotonic() >= deadline:
                    return False
                signal.sigtimedwait({signal.SIGCHLD}, max(deadline - time.monotonic(), 0.0))
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGCHLD})

    def kill_now(self, k: Kernel) -> None:
        try:
            os.kill(k.pid, signal.SIGKILL)
        except OSError:
            pass

    def check_deadline(self) -> float | None:
        """Interrupt or kill an overdue cell; returns seconds until its next deadline (None: no cell)."""
        cell = self.cell
        if cell is None:
            return None
        now = time.monotonic()
        if cell.sigint_at is None and now >= cell.deadline:
            cell.sigint_at = now
            try:
                os.kill(cell.kernel.pid, signal.SIGINT)
            except OSError:
                pass
        if cell.sigint_at is not None and now >= cell.sigint_at + GRACE_S:
            self.kill_now(cell.kernel)
            self.reap_and_finish(wait=True)
            return None if self.cell is None else 0.0
        due = cell.deadline if cell.sigint_at is None else cell.sigint_at + GRACE_S
        return max(due - now, 0.0)

    def reap_and_finish(self, wait: bool = False) -> None:
        """Collect dead children; finish the running cell if its kernel is one of them."""
        if wait and self.cell is not None:
            try:
                self.statuses[self.cell.kernel.pid] = os.waitpid(self.cell.kernel.pid, 0)[1]
            except ChildProcessError:
                pass
        procs.reap(self.statuses)
        live = self.kernel_pids()
        for pid in [p for p in self.statuses if p not in live]:  # orphans we reaped; their pids get reused
            del self.statuses[pid]
        if self.cell is not None and self.cell.kernel.pid in self.statuses:
            self.drain(self.cell.kernel, self.cell)
            self.finish_cell(died=True)

    def serve(self) -> None:
        self.fork_kernel("main", 0)
        while True:
            wait = self.check_deadline()
            cell = self.cell
            rfds = [self.host_in, self.wake_r, *(k.results_r for k in self.kernels.values())]
            if cell is not None:
                rfds += [fd for fd in (cell.kernel.out_r, cell.kernel.err_r) if fd not in cell.eof]
            wfds = [cell.kernel.cells_w] if cell is not None and cell.pending else []
            try:
                ready, writable, _ = select.select(rfds, wfds, [], wait)
            except InterruptedError:
                continue
            if writable:
                try:
                    cell.pending = cell.pending[os.write(cell.kernel.cells_w, cell.pending[:1 << 16]) :]
                except BlockingIOError:
                    pass
                except OSError:  # the kernel closed its input: it is dead or dying
                    cell.pending = b""
            for fd in ready:
                if fd == self.host_in:
                    data = os.read(fd, 1 << 20)
                    if not data:  # the host hung up: take every kernel down with us
                        for k in list(self.kernels.values()):
                            self.drop_kernel(k)
                        return
                    try:
                        requests = self.host_reader.feed(data)
                    except ProtocolError as e:  # the host broke the protocol: nothing sensible is left to do
                        raise SystemExit(f"sandbox supervisor: {e}") from None
                    for req, blob in requests:
                        self.handle(req, blob)
                elif fd == self.wake_r:
                    try:
                        os.read(fd, 4096)
                    except BlockingIOError:
                        pass
                    self.reap_and_finish()
                elif self.cell is not None and fd in (self.cell.kernel.out_r, self.cell.kernel.err_r):
                    self.read_output(fd)
                else:
                    k = next((k for k in self.kernels.values() if k.results_r == fd), None)
                    if k is not None:
                        self.on_result(k)
            self.reap_and_finish()

    def read_output(self, fd: int) -> None:
        cell = self.cell
        try:
            data = os.read(fd, 1 << 16)
        except (BlockingIOError, OSError):
            return
        if data:
            (cell.out if fd == cell.kernel.out_r else cell.err).add(data)
        else:  # the cell closed its stdout or stderr (and every copy): stop watching it
            cell.eof.add(fd)

