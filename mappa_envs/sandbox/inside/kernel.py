"""A kernel: a forked copy of the supervisor that runs cells one at a time and keeps their variables.

It reads cells on fd 3 and answers on fd 4; fds 1 and 2 are pipes the supervisor drains. Everything
the host trusts about a cell (did it time out, what it printed, which cell printed it, did the
interpreter die) the supervisor measures itself. The kernel only adds its own claim: did the cell
raise, and did the cell tamper with the kernel. That claim carries the supervisor's per-cell token,
and the loop that makes it is built so that a cell which rebinds module attributes, replaces
builtins or sys.stdout, closes or replaces fds 0-4, or leaves a trace function cannot make the next
cell's claim false: the loop holds its own references, restores what is benign to restore, and
reports the rest as tampering, for which the supervisor restarts the kernel.

What it cannot stop (the process is the cell's): code that rewrites the loop's frame or memory
(ctypes, a tracer that removes itself) can make this kernel misreport its own cells, as
`try/except` could; it cannot change the supervisor's measurements or any other kernel.
"""
from __future__ import annotations

import _json
import ast
import builtins
import gc
import itertools
import linecache
import operator
import os
import resource
import signal
import struct
import sys
import threading
import traceback
import types

from . import procs

HEADER = struct.Struct(">II")  # the frame header of protocol.py
MAX_CODE = 64 << 20
FD_NAMES = ("stdin", "stdout", "stderr", "the cell input", "the result output")
OWN_FILES = "<sandbox "  # the file names the launcher gives the sandbox's own modules
_MISSING = object()
_in_cell = False


def _on_sigint(signum, frame):
    if _in_cell:  # outside a cell a late SIGINT from the supervisor is ignored
        raise KeyboardInterrupt


def become(cfg: dict, ident: dict | None, fds: list[int], parent: int) -> None:
    """In the forked child: wire fds 0-4 (devnull, stdout, stderr, cells in, results out), take the
    kernel's uid and limits, and serve cells. Never returns."""
    high = [os.dup(fd) for fd in fds]  # out of the way first: the targets may overlap 0-4
    for target, fd in enumerate(high):
        os.dup2(fd, target, inheritable=target < 3)  # programs a cell starts get its output pipes, not 3 and 4
    os.closerange(5, 1 << 20)
    if ident is not None:  # its own uid: no signals, traces or /proc peeks at other kernels
        os.setgroups([])
        os.setresgid(ident["gid"], ident["gid"], ident["gid"])
        os.setresuid(ident["uid"], ident["uid"], ident["uid"])
    procs.prctl(procs.PR_SET_PDEATHSIG, signal.SIGKILL)  # after setuid, which clears it
    if os.getppid() != parent:  # the supervisor died before that took effect
        os._exit(0)
    procs.prctl(procs.PR_SET_DUMPABLE, 0)
    procs.prctl(procs.PR_SET_NO_NEW_PRIVS, 1)
    os.setsid()  # a session of its own: SIGCONT, which any process of a session may send, stays out of reach
    try:
        with open("/proc/self/oom_score_adj", "w") as f:  # under memory pressure, die before the supervisor
            f.write("1000")
    except OSError:
        pass
    limits = {resource.RLIMIT_AS: cfg["memory_mb"] << 20, resource.RLIMIT_FSIZE: cfg["max_file_mb"] << 20,
              resource.RLIMIT_CORE: 0}
    if cfg.get("max_processes"):  # per uid: where kernels have their own uids, per kernel
        limits[resource.RLIMIT_NPROC] = cfg["max_processes"]
    for limit, value in limits.items():
        resource.setrlimit(limit, (value, value))
    os.umask(0o002)  # files stay writable by the session's other kernels (one group)
    sys.path.insert(0, "")  # like `python -c`: cells import modules from the working directory
    _serve()


def _fd_id(fd: int, fstat=os.fstat):
    try:
        st = fstat(fd)
        return st.st_dev, st.st_ino
    except OSError:
        return None


def _snapshot() -> tuple:
    """What the loop and later cells rely on, as (namespace, names, objects) groups: every builtin, this
    module's globals, the few module attributes the cell runner calls; and its functions' code."""
    groups = [(builtins.__dict__, tuple(vars(builtins))), (globals(), tuple(globals()))]
    for module, attrs in ((ast, ("parse", "Expr", "Expression")), (linecache, ("cache",)), (os, ("fstat",)),
                          (sys, ("gettrace", "getprofile", "settrace", "setprofile")),
                          (traceback, ("print_exception", "TracebackException", "StackSummary"))):
        groups.append((module.__dict__, attrs))
    functions = (_run_cell, _one_line, _tampering, _print_error, _on_sigint, _fd_id)
    return (tuple((space, keys, tuple(space[k] for k in keys)) for space, keys in groups),
            tuple((f, f.__code__, f.__defaults__) for f in functions))


def _tampering(fds_seen: tuple, seen: tuple, traced: bool, all=all, map=map, zip=zip, enumerate=enumerate,
               repeat=itertools.repeat, is_=operator.is_) -> list[str]:
    """What the cell changed that the loop or later cells rely on. The builtins it calls are bound here,
    at import: the ones in builtins may be the cell's fakes by now."""
    out = []
    for fd, was in enumerate(fds_seen):
        if _fd_id(fd) != was:
            out.append(f"fd {fd} ({FD_NAMES[fd]}) was closed or replaced")
    groups, functions = seen
    for space, keys, values in groups:
        if not all(map(is_, map(space.get, keys, repeat(_MISSING)), values)):  # at C speed, the common case
            changed = [k for k, v in zip(keys, values) if space.get(k, _MISSING) is not v]
            out.append(f"it replaced {', '.join(changed[:4])}")
    for f, code, defaults in functions:
        if f.__code__ is not code or f.__defaults__ is not defaults:
            out.append(f"it replaced the kernel's {f.__name__}")
    if traced:
        out.append("it left a trace or profile function installed")
    return out


def _one_line(exc: BaseException) -> str:
    try:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        return (text.splitlines() or [type(exc).__name__])[0][:300]
    except BaseException:  # a hostile __str__
        return "error (its message could not be shown)"


def _print_error(exc: BaseException) -> None:
    """The traceback without the sandbox's own frames."""
    report = traceback.TracebackException.from_exception(exc)
    report.stack = traceback.StackSummary.from_list([f for f in report.stack if not f.filename.startswith(OWN_FILES)])
    sys.stderr.write("".join(report.format()))


def _run_cell(code: str, ns: dict, number: int) -> tuple[bool, str | None, bool]:
    """Run one cell like a notebook: statements, then the value of a final expression, shown.
    Returns (ok, error line, whether a trace or profile function was left installed)."""
    global _in_cell
    name = f"<cell {number}>"
    linecache.cache[name] = (len(code), None, code.splitlines(True), name)  # source lines in tracebacks
    ok, error = True, None
    _in_cell = True
    try:
        try:
            tree = ast.parse(code, name, "exec")
        except (SyntaxError, ValueError) as e:
            traceback.print_exception(type(e), e, None)
            return False, _one_line(e), False
        last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        try:
            exec(compile(tree, name, "exec"), ns)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), name, "eval"), ns)
                if value is not None:
                    print(repr(value))
        except SystemExit as e:
            if e.code not in (None, 0):
                ok, error = False, f"SystemExit: {e.code}"[:300]
        except BaseException as e:  # the cell's own error, KeyboardInterrupt from the deadline included
            ok, error = False, _one_line(e)
            _print_error(e)
    except BaseException as e:  # the deadline landed while we formatted the error
        ok, error = False, _one_line(e)
    finally:
        _in_cell = False
        traced = sys.gettrace() is not None or sys.getprofile() is not None
        sys.settrace(None)
        sys.setprofile(None)
    return ok, error, traced


def _serve() -> None:
    """The loop. It keeps every function and object it needs in its own locals, bound before any cell
    runs, so that rebinding names in modules, classes or builtins does not reach it."""
    read, write, unpack, pack, exit_, nohang = os.read, os.write, HEADER.unpack, HEADER.pack, os._exit, os.WNOHANG
    quote, waitpid = _json.encode_basestring_ascii, os.waitpid
    getrusage, setrlimit, set_handler = resource.getrusage, resource.setrlimit, signal.signal
    run_cell, tampering, settrace, setprofile = _run_cell, _tampering, sys.settrace, sys.setprofile
    active_count, gc_enable, gc_disable, gc_enabled = threading.active_count, gc.enable, gc.disable, gc.isenabled
    streams = (open(0, closefd=False),
               open(1, "w", encoding="utf-8", errors="backslashreplace", closefd=False),
               open(2, "w", encoding="utf-8", errors="backslashreplace", buffering=1, closefd=False))
    flushes = [s.flush for s in streams[1:]]
    main = types.ModuleType("__main__")  # the cells' namespace is __main__, as in a notebook (pickle finds classes)
    ns = main.__dict__
    ns["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.stdin, sys.stdout, sys.stderr = streams
    set_handler(signal.SIGINT, _on_sigint)
    handler, sigint, rlimit_cpu, rusage_self = _on_sigint, signal.SIGINT, resource.RLIMIT_CPU, resource.RUSAGE_SELF
    cpu_hard, unlimited = resource.getrlimit(rlimit_cpu)[1], resource.RLIM_INFINITY
    fds_seen, max_code = tuple(_fd_id(fd) for fd in range(5)), MAX_CODE
    seen = _snapshot()
    number, collect = 0, gc_enabled()
    while True:
        head = b""
        while len(head) < 8:
            data = read(3, 8 - len(head))
            if not data:
                exit_(0)  # the supervisor closed our input: it is done with us
            head += data
        n_meta, n_code = unpack(head)
        if n_meta > 4096 or n_code > max_code:
            exit_(71)  # not the supervisor's frame: the cell wrote into our input
        body = b""
        while len(body) < n_meta + n_code:
            data = read(3, n_meta + n_code - len(body))
            if not data:
                exit_(0)
            body += data
        if collect:
            gc_enable()
        token, cpu_s = body[:n_meta].decode("ascii", "replace").split(" ", 1)
        code = body[n_meta:].decode("utf-8", "surrogatepass")
        try:  # the killed leftovers of the previous cell are our children: collect them
            while waitpid(-1, nohang)[0]:
                pass
        except ChildProcessError:
            pass
        sys.stdin, sys.stdout, sys.stderr = streams  # a cell that replaced them affected only itself
        set_handler(sigint, handler)
        used = getrusage(rusage_self)
        soft = int(used.ru_utime + used.ru_stime + float(cpu_s)) + 1  # a CPU budget on top of what was used
        setrlimit(rlimit_cpu, (soft if cpu_hard == unlimited else min(soft, cpu_hard), cpu_hard))
        number += 1
        ok, error, traced = run_cell(code, ns, number)
        settrace(None)
        setprofile(None)
        for flush in flushes:
            try:
                flush()
            except BaseException:  # a cell may have closed them
                pass
        # From here until the next cell arrives no code of the cell's may run in this thread (the supervisor
        # may leave a kernel with no other thread and no signal handler awake): no collection, so no finalizer.
        collect = gc_enabled()
        gc_disable()
        try:
            changed = tampering(fds_seen, seen, traced)
        except BaseException as e:  # something it relies on was broken in a way it did not foresee
            changed = [f"the kernel's own check failed ({type(e).__name__})"]
        try:
            threads = int(active_count()) - 1  # the Python threads cells started and left alive
        except BaseException:
            threads = -1
        claim = "null" if error is None else quote(error)  # JSON by hand: the json module is the cell's to replace
        meta = (f'{{"token":{quote(token)},"ok":{"true" if ok else "false"},"error":{claim},"threads":{threads},'
                f'"tampered":[{",".join([quote(c) for c in changed])}]}}').encode()
        frame = pack(len(meta), 0) + meta
        try:
            while frame:
                frame = frame[write(4, frame) :]
        except OSError:
            exit_(72)  # the cell closed our result output
