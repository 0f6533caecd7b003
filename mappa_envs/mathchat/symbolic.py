"""Symbolic answer matching (math-verify) in a child process that a hostile answer cannot hang.

An answer is the policy's own text, and sympy will happily spend hours on `\\boxed{9^{9^{9^{9}}}}`
inside one C call that holds the GIL: no thread timeout, not even a signal, gets control back, and
the whole training run stops. So the match runs in a worker process, one request at a time; a
request that takes longer than `timeout_s` kills the worker (the answer is then not a match) and the
next request starts a fresh one. Started lazily, per process (a forked child starts its own).
"""
from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import threading

TIMEOUT_S = 5.0
START_TIMEOUT_S = 120.0  # importing sympy on a loaded machine; not counted against a request
MAX_CHARS = 2_000  # longer than any real answer; a longer one is not a match (and costs no worker time)

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
    "int" (an integer, whatever its LaTeX: `31\\,\\text{m}`, `(31)`, `{31}`), "num" (another number) or ""."""

    def __init__(self, timeout_s: float = TIMEOUT_S):
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self._proc: subprocess.Popen | None = None
        self._pid = os.getpid()

    def match(self, pred: str, gold: str) -> bool:
        return self.check(pred, gold)[0]

    def check(self, pred: str, gold: str) -> tuple[bool, str]:
        if len(pred) > MAX_CHARS or len(gold) > MAX_CHARS:
            return False, ""
        with self._lock:
            proc = self._worker()
            if proc is None:
                return False, ""
            try:
                proc.stdin.write(json.dumps([pred, gold]) + "\n")
                proc.stdin.flush()
                ready, _, _ = select.select([proc.stdout], [], [], self.timeout_s)
                reply = proc.stdout.readline() if ready else ""
            except (BrokenPipeError, OSError, ValueError):
                reply = ""
            reply = reply.strip()
            if reply[:1] not in ("0", "1") or reply[1:] not in ("", "int", "num"):  # timed out or died
                self._stop()  # never reuse a busy worker
                return False, ""
            return reply[:1] == "1", reply[1:]

    def _worker(self) -> subprocess.Popen | None:
        if self._proc is not None and (self._pid != os.getpid() or self._proc.poll() is not None):
            self._proc = None  # inherited across a fork, or gone
        if self._proc is None:
            self._pid = os.getpid()
            self._proc = subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, bufsize=1)
            ready, _, _ = select.select([self._proc.stdout], [], [], START_TIMEOUT_S)
            if not ready or self._proc.stdout.readline().strip() != "ready":
                self._stop()
        return self._proc

    def _stop(self) -> None:
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
