"""Symbolic answer matching (math-verify) in a child process that a hostile answer cannot hang.

An answer is the policy's own text, and sympy will happily spend hours on `\\boxed{9^{9^{9^{9}}}}`
inside one C call that holds the GIL: no thread timeout, not even a signal, gets control back, and
the whole training run stops. So the match runs in worker processes, one request at a time each; a
request that takes longer than `timeout_s` kills its worker (the answer is then not a match) and the
next request there starts a fresh one. A small pool: a hostile answer stalls only its own request,
not every env thread's check queued behind it. Started lazily, per process (a forked child starts its own).
"""
from __future__ import annotations

import json
import os
import queue
import select
import subprocess
import sys

TIMEOUT_S = 5.0
START_TIMEOUT_S = 120.0  # importing sympy on a loaded machine; not counted against a request
MAX_CHARS = 2_000  # longer than any real answer; a longer one is not a match (and costs no worker time)
WORKERS = 4  # requests at once; each worker (sympy loaded) is ~100 MB, started only when needed

_WORKER = r"""
import json, sys
from math_verify import parse, verify
from sympy import FiniteSet, Number

def kind(g):
    # what the reference is, read as math-verify reads it: "int", "num" (another number) or "" (not a number)
    v = g[0] if g else None
    if isinstance(v, FiniteSet) and len(v) == 1:
        v = next(iter(v))  # "{31}"
    if not isinstance(v, Number) or not v.is_finite:
        return ""
    return "int" if v == int(v) else "num"

print("ready", flush=True)
for line in sys.stdin:
    pred, gold = json.loads(line)
    try:
        g, p = parse(f"${gold}$", parsing_timeout=None), parse(f"${pred}$", parsing_timeout=None)
        ok = bool(g and p and verify(g, p, timeout_seconds=None))
        k = kind(g) if ok else ""
    except Exception:
        ok, k = False, ""
    sys.stdout.write(("1" if ok else "0") + k + "\n")
    sys.stdout.flush()
"""


class SymbolicMatcher:
    """`match(pred, gold)`: math-verify's verdict, or False when it errs or takes over `timeout_s`.
    `check(pred, gold)`: the verdict and, when it is a match, what math-verify reads the reference as:
    "int" (an integer, whatever its LaTeX: `31\\,\\text{m}`, `(31)`, `{31}`), "num" (another number) or "".

    Up to `workers` requests run at once, each in its own worker process (started on demand): one
    hostile answer holds one worker for `timeout_s`, not every env thread's answer check behind it."""

    def __init__(self, timeout_s: float = TIMEOUT_S, workers: int = WORKERS):
        self.timeout_s = timeout_s
        self._idle: queue.LifoQueue[_Worker] = queue.LifoQueue()  # the warmest worker first
        for _ in range(workers):
            self._idle.put(_Worker())

    def match(self, pred: str, gold: str) -> bool:
        return self.check(pred, gold)[0]

    def check(self, pred: str, gold: str) -> tuple[bool, str]:
        if len(pred) > MAX_CHARS or len(gold) > MAX_CHARS:
            return False, ""
        worker = self._idle.get()
        try:
            reply = worker.ask(json.dumps([pred, gold]), self.timeout_s)
            if reply[:1] not in ("0", "1") or reply[1:] not in ("", "int", "num"):  # timed out, died, garbled
                worker.stop()  # never reuse a busy worker
                return False, ""
        finally:
            self._idle.put(worker)
        return reply[:1] == "1", reply[1:]


class _Worker:
    """One math-verify process, used by one request at a time (the pool's queue sees to it)."""

    def __init__(self):
        self._proc: subprocess.Popen | None = None
        self._pid = os.getpid()

    def ask(self, line: str, timeout_s: float) -> str:
        """The worker's reply to `line`, or "" when it could not start, died or took over `timeout_s`."""
        proc = self._start()
        if proc is None:
            return ""
        try:
            proc.stdin.write(line + "\n")
            proc.stdin.flush()
            ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
            reply = proc.stdout.readline().strip() if ready else ""
        except (BrokenPipeError, OSError, ValueError):
            reply = ""
        return reply

    def _start(self) -> subprocess.Popen | None:
        if self._proc is not None and (self._pid != os.getpid() or self._proc.poll() is not None):
            self._proc = None  # inherited across a fork, or gone
        if self._proc is None:
            self._pid = os.getpid()
            self._proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
            ready, _, _ = select.select([self._proc.stdout], [], [], START_TIMEOUT_S)
            if not ready or self._proc.stdout.readline().strip() != "ready":
                self.stop()
        return self._proc

    def stop(self) -> None:
        if self._proc is not None:
            self._proc.kill()
            self._proc.wait()
            self._proc = None


_matcher = SymbolicMatcher()


def symbolic_match(pred: str, gold: str) -> bool:
    """math-verify's `verify(parse(gold), parse(pred))`, bounded in time (see the module docstring)."""
    return _matcher.match(pred, gold)


def symbolic_check(pred: str, gold: str) -> tuple[bool, str]:
    """`symbolic_match`, and what the reference is when it matches (see `SymbolicMatcher.check`)."""
    return _matcher.check(pred, gold)
