"""The judge: calls a candidate function in a sandbox and decides every verdict on the host.

Nothing the candidate runs can pass a test by itself, because no test runs where it runs. The host
executes the (trusted) test code; `candidate` there is a `RemoteFunction` whose every call becomes
one sandbox cell: the arguments go in as data, the return value comes back as data on a line marked
with a fresh random token, and the host rebuilds it from plain types only (`decode`). So:

- `sys.exit`, `os._exit`, a crash, a timeout, an exception: that call has no result, its test fails;
- printing "passed", patching `AssertionError`, `unittest` or builtins: the asserts are not in the
  sandbox, and nothing printed decides anything (the call's own output is swallowed);
- an object whose `__eq__` always says True: only ints, floats, strings, bools, None, lists,
  tuples, dicts, sets and bytes cross (subclasses as their base type, numpy scalars as Python
  ones); anything else is no result;
- writing files: the host reads none; the hidden-tests session is fresh and thrown away.

What the candidate can do is return values; returning the right ones is solving the problem.
Host-side safety: decoded values are bounded by the cell's output cap and Python's int-digit limit,
and the whole run by a wall-time budget.
"""
from __future__ import annotations

import ast
import json
import math
import secrets
import textwrap
import time
from dataclasses import dataclass, field

from mappa_envs.codetest.tasks import parse
from mappa_envs.core.untrusted import clip, one_line
from mappa_envs.sandbox.types import SandboxSession

MAX_DEPTH = 64
MAX_INT_DIGITS = 4300  # as Python's own default int-to-str limit
_CALL = """\
def __mappa_call(token, entry, payload):
    import contextlib, io, json, sys
    def dec(x):
        if isinstance(x, list):
            return [dec(v) for v in x]
        if isinstance(x, dict):
            (tag, v), = x.items()
            return {"i": int, "f": float, "b": bytes.fromhex, "t": lambda v: tuple(dec(e) for e in v),
                    "s": lambda v: {dec(e) for e in v}, "fs": lambda v: frozenset(dec(e) for e in v),
                    "d": lambda v: {dec(k): dec(e) for k, e in v}}[tag](v)
        return x
    def enc(v, depth=0):
        if depth > %(depth)d:
            raise ValueError("the result is nested too deeply")
        if type(v).__module__ == "numpy" and hasattr(v, "item"):
            v = v.item()
        if v is None or isinstance(v, bool):
            return None if v is None else bool(v)
        if isinstance(v, int):
            return {"i": int.__repr__(int(v))}
        if isinstance(v, float):
            return {"f": float.__repr__(float(v))}
        if isinstance(v, str):
            return str.__str__(v)
        if isinstance(v, (bytes, bytearray)):
            return {"b": bytes(v).hex()}
        if isinstance(v, list):
            return [enc(e, depth + 1) for e in list.__iter__(v)]
        if isinstance(v, tuple):
            return {"t": [enc(e, depth + 1) for e in tuple.__iter__(v)]}
        if isinstance(v, dict):
            return {"d": [[enc(k, depth + 1), enc(e, depth + 1)] for k, e in dict.items(v)]}
        if isinstance(v, frozenset):
            return {"fs": [enc(e, depth + 1) for e in v]}
        if isinstance(v, set):
            return {"s": [enc(e, depth + 1) for e in v]}
        raise TypeError(f"returned a {type(v).__name__}, which is not plain data")
    fn = globals()[entry]
    args = dec(json.loads(payload))
    with contextlib.redirect_stdout(io.StringIO()):
        out = fn(*args)
    sys.stdout.write(token + json.dumps(enc(out)) + "\\n")
__mappa_call(%(token)r, %(entry)r, %(payload)r)
del __mappa_call
"""


class CandidateError(Exception):
    """A call of the candidate gave no usable result (it raised, exited, timed out or returned non-data)."""


# ---- plain data across the boundary --------------------------------------------------------------

def encode(v, depth: int = 0):
    """Host values (test arguments) as tagged JSON the call cell decodes."""
    if depth > MAX_DEPTH:
        raise ValueError("argument nested too deeply")
    if v is None or isinstance(v, (bool, str)):
        return v
    if isinstance(v, int):
        return {"i": repr(v)}
    if isinstance(v, float):
        return {"f": repr(v)}
    if isinstance(v, bytes):
        return {"b": v.hex()}
    if isinstance(v, list):
        return [encode(e, depth + 1) for e in v]
    if isinstance(v, tuple):
        return {"t": [encode(e, depth + 1) for e in v]}
    if isinstance(v, dict):
        return {"d": [[encode(k, depth + 1), encode(e, depth + 1)] for k, e in v.items()]}
    if isinstance(v, frozenset):
        return {"fs": [encode(e, depth + 1) for e in v]}
    if isinstance(v, set):
        return {"s": [encode(e, depth + 1) for e in v]}
    raise TypeError(f"cannot send a {type(v).__name__} to the candidate")


def decode(x, depth: int = 0):
    """Untrusted tagged JSON back into plain Python values; anything unexpected raises CandidateError."""
    if depth > MAX_DEPTH:
        raise CandidateError("the result is nested too deeply")
    if x is None or isinstance(x, (bool, str)):
        return x
    if isinstance(x, list):
        return [decode(e, depth + 1) for e in x]
    if not isinstance(x, dict) or len(x) != 1:
        raise CandidateError("malformed result")
    (tag, v), = x.items()
    try:
        if tag == "i" and isinstance(v, str) and v.lstrip("-").isdigit() and len(v.lstrip("-")) <= MAX_INT_DIGITS:
            return int(v)  # bounded: arithmetic on it in the host's test code stays cheap
        if tag == "f" and isinstance(v, str) and len(v) < 40:
            return float(v)
        if tag == "b" and isinstance(v, str):
            return bytes.fromhex(v)
        if tag == "t" and isinstance(v, list):
            return tuple(decode(e, depth + 1) for e in v)
        if tag in ("s", "fs") and isinstance(v, list):
            items = [decode(e, depth + 1) for e in v]
            return set(items) if tag == "s" else frozenset(items)
        if tag == "d" and isinstance(v, list) and all(isinstance(p, list) and len(p) == 2 for p in v):
            return {decode(k, depth + 1): decode(e, depth + 1) for k, e in v}
    except (ValueError, TypeError, OverflowError) as e:  # an unhashable key, a bad number
        raise CandidateError(f"malformed result ({type(e).__name__})") from None
    raise CandidateError("malformed result")


# ---- the remote function -------------------------------------------------------------------------

class RemoteFunction:
    """`entry` of `program`, loaded in `session`'s kernel `kernel`; each call is one cell."""

    def __init__(self, session: SandboxSession, program: str, entry: str, timeout: float, deadline: float,
                 kernel: str = "main"):
        self.session, self.program, self.entry, self.kernel = session, program, entry, kernel
        self.timeout, self.deadline = timeout, deadline
        self.load_error: str | None = None
        self._loaded = False
        self.calls = 0

    def load(self) -> bool:
        r = self.session.run(self.program, timeout=self.timeout, kernel=self.kernel)
        self._loaded = r.ok
        self.load_error = None if r.ok else f"the program did not load: {one_line(r.error or 'failed')}"
        return r.ok

    def __call__(self, *args):
        if time.monotonic() > self.deadline:
            raise CandidateError("the judge's time budget is spent")
        if not self._loaded and not self.load():
            raise CandidateError(self.load_error)
        token = secrets.token_hex(16)
        cell = _CALL % {"depth": MAX_DEPTH, "token": token, "entry": self.entry, "payload": json.dumps(encode(args))}
        self.calls += 1
        r = self.session.run(cell, timeout=self.timeout, kernel=self.kernel)
        if r.interpreter_restarted:  # a timeout or crash cost the kernel its state: reload for the next call
            self._loaded = False
        if not r.ok:
            raise CandidateError(one_line(r.error or "the call failed"))
        lines = [line for line in r.stdout.splitlines() if line.startswith(token)]
        if len(lines) != 1:
            raise CandidateError("the call printed no result")
        try:
            payload = json.loads(lines[0][len(token):])
        except (ValueError, RecursionError):
            raise CandidateError("malformed result") from None
        try:
            return decode(payload)
        except RecursionError:
            raise CandidateError("the result is nested too deeply") from None


# ---- verdicts ------------------------------------------------------------------------------------

@dataclass
class Report:
    """What a run of tests found: `passed` of `total` tests, and why the first failures failed."""

    passed: int = 0
    total: int = 0
    failures: list[str] = field(default_factory=list)
    calls: int = 0

    @property
    def rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total

    def fail(self, what: str) -> None:
        if len(self.failures) < 5:
            self.failures.append(clip(what, 300))


def run_hidden_tests(session: SandboxSession, prompt: str, test: str, program: str, entry: str,
                     timeout: float, budget_s: float) -> Report:
    """The HumanEval `check(candidate)` run on the host, statement by statement, against `program`
    loaded in `session`. Each top-level statement of `check` that asserts and calls the candidate is
    one test (a failing one does not stop the next); the others are set-up."""
    fn = RemoteFunction(session, program, entry, timeout, time.monotonic() + budget_s)
    report = Report()
    param, statements = check_statements(test)
    namespace: dict = {"__name__": "__hidden_test__"}
    exec(compile(prompt, "<prompt>", "exec"), namespace)  # trusted dataset code: its helpers (poly, encode_shift)
    exec(compile(test, "<hidden test>", "exec"), namespace)
    namespace[param] = namespace[entry] = fn  # some tests call the function by its own name
    if not fn.load():
        report.fail(fn.load_error)
    for code, is_test in statements:
        report.total += is_test
        try:
            exec(code, namespace)
        except Exception as e:  # a failed assert, a call with no result, a wrong type
            if is_test:  # an assert's own message may quote expected values: only its type is kept
                why = "" if isinstance(e, AssertionError) or not str(e) else f": {one_line(e)}"
                report.fail(f"test {report.total}: {type(e).__name__}{why}")
            continue
        report.passed += is_test
    report.calls = fn.calls
    return report


_STATEMENTS: dict[str, tuple[str, list]] = {}


def check_statements(test: str) -> tuple[str, list]:
    """`check`'s parameter name and its body as (compiled statement, is it a test), cached per test text."""
    if test not in _STATEMENTS:
        check = next(n for n in parse(test).body if isinstance(n, ast.FunctionDef) and n.name == "check")
        param = check.args.args[0].arg
        statements = []
        for n, stmt in enumerate(check.body, 1):
            names = {x.id for x in ast.walk(stmt) if isinstance(x, ast.Name)}
            is_test = param in names and any(isinstance(x, ast.Assert) for x in ast.walk(stmt))
            source = textwrap.dedent(ast.get_source_segment(test, stmt, padded=True))
            statements.append((compile(source, f"<hidden test {n}>", "exec"), is_test))
        _STATEMENTS[test] = (param, statements)
    return _STATEMENTS[test]


def run_examples(session: SandboxSession, program: str, entry: str, examples, timeout: float, budget_s: float,
                 kernel: str = "main") -> Report:
    """The public docstring examples: each (args, expected) is one test, compared on the host."""
    fn = RemoteFunction(session, program, entry, timeout, time.monotonic() + budget_s, kernel)
    report = Report(total=len(examples))
    if not fn.load():
        report.fail(fn.load_error)
        return report
    for i, (args, expected) in enumerate(examples, 1):
        try:
            got = fn(*args)
        except CandidateError as e:
            report.fail(f"example {i}: {e}")
            continue
        if same(got, expected):
            report.passed += 1
        else:
            report.fail(f"example {i}: expected {expected!r}, got {clip(repr(got), 100)}")
    report.calls = fn.calls
    return report


def same(got, expected) -> bool:
    """Equality of plain values, with floats compared to 1e-6 relative (docstrings round them)."""
    if isinstance(expected, float) and isinstance(got, (int, float)) and not isinstance(got, bool):
        return math.isclose(got, expected, rel_tol=1e-6, abs_tol=1e-9)
    return got == expected
