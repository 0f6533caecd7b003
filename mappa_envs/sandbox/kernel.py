"""The half of every sandbox that runs inside it: a supervisor that forks persistent Python kernels.

Standard library only: it runs as `python3 -c <this file's text> <config json>` inside a bwrap
namespace (local backend) or a Docker container, where the project is not installed. The host side
(`mappa_envs.sandbox.client`) imports `encode` and `FrameReader` from here, so both ends share one
definition of the protocol.

Protocol: each message is a 4-byte big-endian length, then that many bytes of UTF-8 JSON. The
supervisor first sends {"op": "ready", ...}; after that every host request {"id", "op", ...} gets
exactly one reply with the same "id" (and "error" set when the request itself was bad):

    run {kernel, code, timeout}  -> {ok, error, timed_out, restarted, stdout, stderr, truncated, duration_s}
    restart {kernel}             -> {}
    write {path, data}           -> {}            data is base64
    read {path}                  -> {data}
    list {}                      -> {files}
    ping {}                      -> {}

Process model, and why:
- The supervisor imports the data-science stack once and never runs user code; each kernel is a
  `fork()` of it, so a fresh interpreter with pandas and sklearn loaded costs milliseconds.
  The supervisor is single-threaded, which keeps those forks safe.
- A kernel keeps its variables between cells. Its stdout/stderr are pipes the supervisor drains
  continuously into a head+tail buffer, so huge output is cut with a marker and never blocks.
- Time limit: at the deadline the supervisor sends SIGINT (the cell ends with KeyboardInterrupt and
  the kernel keeps its state); if the cell is still running a moment later, the kernel's process
  group is killed and the kernel is forked afresh.
- Kernels are child subreapers: after every cell each kernel kills whatever processes the cell left
  behind, so nothing outlives its cell. The supervisor is one too, for the orphans of a killed kernel.
- Kernels lower their own OOM score, and carry rlimits on address space, CPU time per cell and file
  size; the supervisor holds the process-count rlimit when the backend asks for one.
- Threads a cell starts belong to the interpreter and do keep running after it; if one takes the
  interpreter down between cells, the next cell on that kernel says so (`restarted`).
"""
from __future__ import annotations

import ast
import base64
import builtins
import json
import linecache
import os
import resource
import select
import signal
import struct
import sys
import time
import traceback

HEADER = struct.Struct(">I")
MAX_FRAME = 1 << 30  # a frame longer than this is a protocol error, not data
GRACE_S = 1.0  # after SIGINT at the deadline, how long a cell may take to unwind before SIGKILL
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_CHILD_SUBREAPER = 1, 4, 36


def encode(msg: dict) -> bytes:
    data = json.dumps(msg, separators=(",", ":")).encode()
    return HEADER.pack(len(data)) + data


class FrameReader:
    """Turns a byte stream into messages, however the bytes arrive."""

    def __init__(self) -> None:
        self.buf = bytearray()

    def feed(self, data: bytes) -> list[dict]:
        self.buf += data
        out = []
        while len(self.buf) >= HEADER.size:
            (n,) = HEADER.unpack_from(self.buf)
            if n > MAX_FRAME:
                raise ValueError(f"frame of {n} bytes exceeds the protocol limit")
            if len(self.buf) < HEADER.size + n:
                break
            out.append(json.loads(bytes(self.buf[HEADER.size : HEADER.size + n])))
            del self.buf[: HEADER.size + n]
        return out


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _prctl(option: int, arg: int) -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except (ImportError, OSError, AttributeError):  # not Linux, or no ctypes: lose that hardening only
        pass


def _ppids() -> dict[int, int]:
    """pid -> parent pid for every live (not zombie) process this sandbox can see."""
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
                state, ppid = stat[stat.rindex(b")") + 2 :].split()[:2]
                if state != b"Z":
                    out[int(name)] = int(ppid)
            except (OSError, ValueError, IndexError):  # exited while we looked
                pass
    return out


def _descendants(root: int, spare: set[int] = frozenset()) -> list[int]:
    """Every process below `root`, skipping the subtrees rooted at `spare` pids."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _ppids().items():
        children.setdefault(ppid, []).append(pid)
    out, todo = [], [p for p in children.get(root, []) if p not in spare]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo.extend(p for p in children.get(pid, []) if p not in spare)
    return out


def _reap(statuses: dict[int, int] | None = None) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if statuses is not None:
            statuses[pid] = status


def _kill_tree(root: int, spare: set[int] = frozenset(), statuses: dict[int, int] | None = None) -> int:
    """SIGKILL every descendant of `root` (not `spare` subtrees) until none is left; returns how many.

    Killed processes stay zombies, still counted against the process limit, until reaped here, so a
    fork bomb has no free slot to refill while one pass kills it.
    """
    killed: set[int] = set()
    for _ in range(50):
        pids = _descendants(root, spare)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
                killed.add(pid)
            except OSError:
                pass
        time.sleep(0.001)
        _reap(statuses)
    return len(killed)


def _has_children() -> bool:
    """Cheap check before a /proc scan: reaps finished children, says whether any is left."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True


# ----------------------------------------------------------------------------- kernel (child side)

_in_cell = False
_cells = 0


def _on_sigint(signum, frame):
    if _in_cell:  # outside a cell a late SIGINT from the supervisor is ignored
        raise KeyboardInterrupt


def _one_line(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}".splitlines()[0] if str(exc) else type(exc).__name__
    return text[:300]


def _exec_cell(code: str, ns: dict) -> dict:
    """Run one cell like a notebook does: statements, then the value of a final expression."""
    global _in_cell, _cells
    _cells += 1
    name = f"<cell {_cells}>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)  # source lines in tracebacks
    try:
        tree = ast.parse(code, name, "exec")
    except (SyntaxError, ValueError) as e:
        traceback.print_exception(type(e), e, None)
        return {"ok": False, "error": _one_line(e)}
    last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    try:
        _in_cell = True
        try:
            exec(compile(tree, name, "exec"), ns)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), name, "eval"), ns)
                if value is not None:
                    print(repr(value))
        finally:
            _in_cell = False
    except SystemExit as e:
        if e.code in (None, 0):
            return {"ok": True, "error": None}
        return {"ok": False, "error": f"SystemExit: {e.code}"}
    except BaseException as e:  # the cell's own error, KeyboardInterrupt from the deadline included
        report = traceback.TracebackException.from_exception(e)
        own = _exec_cell.__code__.co_filename  # frames of this file (this function, the SIGINT handler)
        report.stack = traceback.StackSummary.from_list([f for f in report.stack if f.filename != own])
        sys.stderr.write("".join(report.format()))
        return {"ok": False, "error": _one_line(e)}
    return {"ok": True, "error": None}


def _kernel_loop(cfg: dict) -> None:
    """fds 3/4 carry cells in and results out; fd 1/2 are the output pipes. Never returns."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)  # no kernel outlives its supervisor
    try:
        with open("/proc/self/oom_score_adj", "w") as f:  # under memory pressure, die before the supervisor
            f.write("1000")
    except OSError:
        pass
    if cfg.get("memory_mb"):
        limit = cfg["memory_mb"] << 20
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    signal.signal(signal.SIGINT, _on_sigint)
    ns = {"__name__": "__main__", "__builtins__": builtins}
    reader, cpu_hard = FrameReader(), resource.getrlimit(resource.RLIMIT_CPU)[1]
    while True:
        msgs: list[dict] = []
        while not msgs:
            data = os.read(3, 1 << 16)
            if not data:
                os._exit(0)
            msgs = reader.feed(data)
        cell = msgs[0]
        if cell.get("cpu_s"):  # a CPU budget for this cell on top of what the kernel has used so far
            used = resource.getrusage(resource.RUSAGE_SELF)
            soft = int(used.ru_utime + used.ru_stime + cell["cpu_s"]) + 1
            resource.setrlimit(resource.RLIMIT_CPU, (soft if cpu_hard == resource.RLIM_INFINITY else min(soft, cpu_hard), cpu_hard))
        try:
            result = _exec_cell(cell["code"], ns)
            for stream in (sys.stdout, sys.stderr):
                try:
                    stream.flush()
                except Exception:  # a cell may have closed or replaced them
                    pass
        except KeyboardInterrupt:  # the deadline's SIGINT landed between the cell and here
            result = {"ok": False, "error": "KeyboardInterrupt"}
        result["killed"] = _kill_tree(os.getpid()) if _has_children() else 0
        _write_all(4, encode(result))


def _become_kernel(cfg: dict, fds: list[int]) -> None:
    """In the forked child: wire fds 0-4 (devnull, stdout, stderr, cells in, results out) and serve."""
    high = [os.dup(fd) for fd in fds]  # move out of the way first: the targets may overlap 0-4
    for target, fd in enumerate(high):
        os.dup2(fd, target)
    os.closerange(5, 1 << 20)
    os.setpgid(0, 0)
    sys.path.insert(0, "")  # like `python -c`: cells import modules from the working directory
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False)
    _kernel_loop(cfg)


# ----------------------------------------------------------------------------- supervisor


class Capture:
    """Keeps the first 3/4 and the last 1/4 of `limit` bytes of a stream; counts what it dropped."""

    def __init__(self, limit: int) -> None:
        self.head_max, self.tail_max = limit - limit // 4, limit // 4
        self.head, self.tail, self.dropped = bytearray(), bytearray(), 0

    def add(self, data: bytes) -> None:
        room = self.head_max - len(self.head)
        if room > 0:
            self.head += data[:room]
            data = data[room:]
        if data:
            self.tail += data
            over = len(self.tail) - self.tail_max
            if over > 0:
                del self.tail[:over]
                self.dropped += over

    def text(self) -> str:
        marker = f"\n[... {self.dropped} bytes of output truncated by the sandbox ...]\n" if self.dropped else ""
        return self.head.decode(errors="replace") + marker + self.tail.decode(errors="replace")


class Kernel:
    def __init__(self, name: str, pid: int, cells_w: int, results_r: int, out_r: int, err_r: int) -> None:
        self.name, self.pid = name, pid
        self.cells_w, self.results_r, self.out_r, self.err_r = cells_w, results_r, out_r, err_r
        self.reader = FrameReader()
        self.cell: dict | None = None  # the request being run, with its captures and deadline
        self.note: str | None = None  # why the previous kernel of this name died while idle

    def fds(self) -> list[int]:
        return [self.results_r, self.out_r, self.err_r]


class Supervisor:
    def __init__(self, cfg: dict, host_in: int, host_out: int) -> None:
        self.cfg, self.host_in, self.host_out = cfg, host_in, host_out
        self.workspace = os.path.realpath(cfg["workspace"])
        self.kernels: dict[str, Kernel] = {}
        self.by_fd: dict[int, Kernel] = {}
        self.statuses: dict[int, int] = {}

    # -- kernels
    def fork_kernel(self, name: str) -> Kernel:
        cells_r, cells_w = os.pipe()
        results_r, results_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        devnull = os.open(os.devnull, os.O_RDONLY)
        pid = os.fork()
        if pid == 0:
            try:
                _become_kernel(self.cfg, [devnull, out_w, err_w, cells_r, results_w])
            finally:
                os._exit(70)
        for fd in (cells_r, results_w, out_w, err_w, devnull):
            os.close(fd)
        for fd in (results_r, out_r, err_r):
            os.set_blocking(fd, False)
        k = Kernel(name, pid, cells_w, results_r, out_r, err_r)
        self.kernels[name] = k
        for fd in k.fds():
            self.by_fd[fd] = k
        return k

    def drop_kernel(self, k: Kernel) -> int | None:
        """Kill a kernel, its process group and anything it left behind; returns its wait status."""
        try:
            os.killpg(k.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            os.kill(k.pid, signal.SIGKILL)
        except OSError:
            pass
        if k.pid not in self.statuses:
            try:
                self.statuses[k.pid] = os.waitpid(k.pid, 0)[1]
            except ChildProcessError:
                pass
        for fd in [k.cells_w, *k.fds()]:
            self.by_fd.pop(fd, None)
            os.close(fd)
        del self.kernels[k.name]
        live = {other.pid for other in self.kernels.values()}
        _kill_tree(os.getpid(), spare=live, statuses=self.statuses)  # the orphans, reparented to us
        return self.statuses.pop(k.pid, None)

    # -- requests
    def reply(self, msg: dict) -> None:
        _write_all(self.host_out, encode(msg))

    def path(self, rel: str) -> str:
        full = os.path.realpath(os.path.join(self.workspace, rel))
        if not rel or os.path.isabs(rel) or not (full + os.sep).startswith(self.workspace + os.sep):
            raise ValueError(f"path {rel!r} is not inside the workspace; use a relative path like 'data/train.csv'")
        return full

    def handle(self, req: dict) -> None:
        op, rid = req.get("op"), req.get("id")
        try:
            if op == "run":
                self.start_cell(req)
                return
            if op == "restart":
                k = self.kernels.get(req["kernel"])
                if k is not None:
                    self.drop_kernel(k)
                self.fork_kernel(req["kernel"])
                self.reply({"id": rid})
            elif op == "write":
                full = self.path(req["path"])
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "wb") as f:
                    f.write(base64.b64decode(req["data"]))
                self.reply({"id": rid})
            elif op == "read":
                with open(self.path(req["path"]), "rb") as f:
                    self.reply({"id": rid, "data": base64.b64encode(f.read()).decode()})
            elif op == "list":
                files = []
                for root, _, names in os.walk(self.workspace):
                    files += [os.path.relpath(os.path.join(root, n), self.workspace) for n in names]
                self.reply({"id": rid, "files": sorted(files)})
            elif op == "ping":
                self.reply({"id": rid})
            else:
                self.reply({"id": rid, "error": f"unknown op {op!r}"})
        except (OSError, ValueError, KeyError) as e:
            self.reply({"id": rid, "error": _one_line(e)})

    def start_cell(self, req: dict) -> None:
        k = self.kernels.get(req["kernel"]) or self.fork_kernel(req["kernel"])
        if k.cell is not None:
            self.reply({"id": req["id"], "error": f"kernel {k.name!r} is busy with another cell"})
            return
        limit = self.cfg["max_output_bytes"]
        now = time.monotonic()
        k.cell = dict(req, out=Capture(limit), err=Capture(limit), start=now, deadline=now + req["timeout"], sigint_at=None)
        cpu_s = req["timeout"] * self.cfg.get("cpus", 1.0) * 2
        try:
            _write_all(k.cells_w, encode({"code": req["code"], "cpu_s": cpu_s}))
        except BrokenPipeError:  # it died while idle and we had not noticed yet: run on a fresh one
            k.cell = None
            self.kernel_died(k)
            self.start_cell(req)

    def finish_cell(self, k: Kernel, result: dict | None, status: int | None) -> None:
        """Reply for the cell `k` was running: `result` from the kernel, or None when it died."""
        cell, k.cell = k.cell, None
        timed_out = cell["sigint_at"] is not None
        msg = {
            "id": cell["id"],
            "stdout": cell["out"].text(),
            "stderr": cell["err"].text(),
            "truncated": bool(cell["out"].dropped or cell["err"].dropped),
            "duration_s": time.monotonic() - cell["start"],
            "timed_out": timed_out,
            "restarted": result is None,
            "ok": result is not None and result["ok"] and not timed_out,
        }
        if timed_out:
            msg["error"] = f"timeout after {cell['timeout']:g} s"
        else:
            msg["error"] = result["error"] if result is not None else f"interpreter died: {_death(status)}; restarted with a fresh one"
        if result is not None and result.get("killed"):
            msg["stderr"] += f"\n[sandbox: killed {result['killed']} process(es) the cell left running]\n"
        if k.note:  # a thread left by an earlier cell took the interpreter down after that cell ended
            msg["restarted"] = True
            msg["stderr"] = f"[sandbox: the interpreter died between cells ({k.note}); this cell ran in a fresh one]\n" + msg["stderr"]
            k.note = None
        self.reply(msg)

    def drain(self, k: Kernel) -> None:
        """Read what is already in a kernel's output pipes (all of it, once the kernel has flushed)."""
        for fd, key in ((k.out_r, "out"), (k.err_r, "err")):
            while True:
                try:
                    data = os.read(fd, 1 << 16)
                except BlockingIOError:
                    break
                if not data:
                    break
                if k.cell:
                    k.cell[key].add(data)

    def kernel_died(self, k: Kernel) -> None:
        """Report the cell it was running (if any) and replace it with a fresh fork."""
        self.drain(k)
        status = self.drop_kernel(k)
        fresh = self.fork_kernel(k.name)
        if k.cell is not None:
            self.finish_cell(k, None, status)
        else:
            fresh.note = _death(status)

    def on_readable(self, fd: int) -> None:
        k = self.by_fd.get(fd)
        if k is None:
            return
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        if fd != k.results_r:
            if not data:  # the cell closed its stdout or stderr; stop watching it
                self.by_fd.pop(fd, None)
            elif k.cell:
                k.cell["out" if fd == k.out_r else "err"].add(data)
            return
        try:
            results = k.reader.feed(data) if data else None
        except ValueError:  # garbage on the results pipe: the cell wrote to fd 4
            results = None
        if results is None:  # EOF: the kernel is gone
            self.kernel_died(k)
        elif results and k.cell is not None:
            self.drain(k)
            self.finish_cell(k, results[0], None)

    def check_deadlines(self) -> float | None:
        """Interrupt or kill overdue cells; returns seconds until the next deadline (None: none)."""
        now, wait = time.monotonic(), None
        for k in list(self.kernels.values()):
            cell = k.cell
            if cell is None:
                continue
            if cell["sigint_at"] is None and now >= cell["deadline"]:
                cell["sigint_at"] = now
                try:
                    os.kill(k.pid, signal.SIGINT)
                except OSError:
                    pass
            if cell["sigint_at"] is not None and now >= cell["sigint_at"] + GRACE_S:
                self.kernel_died(k)
                continue
            due = cell["deadline"] if cell["sigint_at"] is None else cell["sigint_at"] + GRACE_S
            wait = due - now if wait is None else min(wait, due - now)
        return None if wait is None else max(wait, 0.0)

    def serve(self) -> None:
        reader = FrameReader()
        self.fork_kernel("main")
        while True:
            wait = self.check_deadlines()
            fds = [self.host_in, *self.by_fd]
            try:
                ready, _, _ = select.select(fds, [], [], wait)
            except InterruptedError:
                continue
            for fd in ready:
                if fd == self.host_in:
                    data = os.read(fd, 1 << 20)
                    if not data:  # the host hung up: take every kernel down with us
                        for k in list(self.kernels.values()):
                            self.drop_kernel(k)
                        return
                    for req in reader.feed(data):
                        self.handle(req)
                else:
                    self.on_readable(fd)
            _reap(self.statuses)


def _death(status: int | None) -> str:
    """How a kernel died, from its wait status."""
    if status is not None and os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        why = {signal.SIGKILL: " (out of memory, or killed)", signal.SIGXCPU: " (CPU time limit)"}.get(sig, "")
        return f"killed by {signal.Signals(sig).name}{why}"
    if status is not None and os.WIFEXITED(status):
        return f"exited with status {os.WEXITSTATUS(status)}"
    return "gone"


def main(cfg: dict) -> None:
    if cfg.get("uid") is not None:  # started as root inside bwrap: become the sandbox's own user
        os.setgroups([])
        os.setgid(cfg["gid"])
        os.setuid(cfg["uid"])
    _prctl(_PR_SET_DUMPABLE, 0)  # sandboxed code of the same uid may not ptrace us or open our fds
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    host_in, host_out = os.dup(0), os.dup(1)  # the protocol owns these; stray prints go nowhere
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    if cfg.get("max_processes"):
        resource.setrlimit(resource.RLIMIT_NPROC, (cfg["max_processes"], cfg["max_processes"]))
    if cfg.get("max_file_mb"):
        size = cfg["max_file_mb"] << 20
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    os.chdir(cfg["workspace"])
    imported = []
    for name in cfg.get("preimport", []):
        try:
            __import__(name)
            imported.append(name)
        except Exception:  # a missing package is not an error: the kernel just lacks it
            pass
    _write_all(host_out, encode({"op": "ready", "pid": os.getpid(), "python": sys.version.split()[0], "imported": imported}))
    Supervisor(cfg, host_in, host_out).serve()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
