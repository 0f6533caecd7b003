"""MathChat task sources: AIME/AMC-format files, Hugging Face datasets, and a synthetic generator.

`load_tasks(source, split, ...)` accepts
- "synthetic" (the offline default): seeded competition-style problems whose integer answers are
  computed by the generator, with the Python that computes them in `task.meta["solution_code"]`;
  "synthetic:FAMILY[,FAMILY...]" draws from the named families only (`FAMILIES`, `EASY_FAMILIES`);
- a path to a JSON array or JSON-lines file with `prompt` (or `problem`/`question`) and `answer`;
- "hf:<dataset id>[:<split>]" for users with network access (needs `pip install datasets`).
`load_task_source` also takes the tasks themselves: a list of `Task`s or of such records (dicts).
"""
from __future__ import annotations

import hashlib
import math
import os
import random
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from mappa_envs.core.datafiles import read_json_records
from mappa_envs.core.records import Task
from mappa_envs.errors import EnvArgumentError, TaskDataError, TaskDataNotFoundError

SPLITS = ("all", "train", "eval")
_PROMPT_KEYS = ("prompt", "problem", "question")
SOURCES_HELP = "'synthetic', 'hf:<dataset id>[:<split>]', a JSON/JSONL file, a list of Task or a list of dicts"


class TaskSourceError(TaskDataError):
    """A task file or dataset is malformed; the message names the file and row."""


def load_task_source(tasks: Any, split: str = "train", num_tasks: int = 256, seed: int = 0) -> list[Task]:
    """Tasks from any accepted spelling of a source (see the module docstring); anything else is an
    `EnvArgumentError`, an empty source a `TaskDataError`. Lists are used as given (no split)."""
    if isinstance(tasks, (str, os.PathLike)):
        return load_tasks(os.fspath(tasks), split=split, num_tasks=num_tasks, seed=seed)
    if not isinstance(tasks, (list, tuple)):
        raise EnvArgumentError(f"tasks must be {SOURCES_HELP}; got a {type(tasks).__name__}")
    if not tasks:
        raise TaskDataError("tasks is an empty list: give at least one task")
    if all(isinstance(t, Task) for t in tasks):
        return list(tasks)
    if all(isinstance(t, dict) for t in tasks):
        return [_task_from_row(row, f"task-{n}", f"tasks[{n - 1}]") for n, row in enumerate(tasks, 1)]
    kinds = sorted({type(t).__name__ for t in tasks})
    raise EnvArgumentError(f"tasks must be {SOURCES_HELP}; got a list of {', '.join(kinds)}")


def load_tasks(source: str = "synthetic", split: str = "train", num_tasks: int = 256, seed: int = 0,
               eval_fraction: float = 0.1) -> list[Task]:
    if split not in SPLITS:
        raise EnvArgumentError(f"split={split!r} is not one of {SPLITS}")
    if source == "synthetic" or source.startswith("synthetic:"):
        # the synthetic stream is open-ended: "all" means the training stream
        families = source.partition(":")[2].split(",") if ":" in source else None
        return synthetic_tasks(num_tasks, seed=seed, split="train" if split == "all" else split, families=families)
    if source.startswith("hf:"):
        tasks = _load_hf(source[3:])
    elif not Path(source).expanduser().is_file():
        raise TaskDataNotFoundError(f"task source {source!r} does not exist; sources are {SOURCES_HELP}")
    else:
        tasks = load_task_file(Path(source).expanduser())
    picked = tasks if split == "all" else [t for t in tasks if _in_split(t.prompt, split, eval_fraction)]
    if not picked:
        raise TaskDataError(f"{source}: none of its {len(tasks)} tasks is in split {split!r}; use split='all'")
    return picked


def _in_split(key: str, split: str, eval_fraction: float) -> bool:
    """A stable, seed-free holdout: a task's split depends only on its problem text, so the same
    problem lands in the same split whatever file, row or id it comes with."""
    bucket = int(hashlib.sha256(key.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
    return (bucket < eval_fraction) == (split == "eval")


def load_task_file(path: str | Path) -> list[Task]:
    """Read a JSON array or JSON-lines file of {prompt, answer, [id]} records."""
    path = Path(path)
    try:
        records = read_json_records(path, "task file")
    except TaskDataError as e:
        raise TaskSourceError(str(e)) from None
    return [_task_from_row(r.value, f"{path.name}-{r.number}", f"{path}: {r.where}") for r in records]


def _task_from_row(row: object, default_id: str, where: str) -> Task:
    if not isinstance(row, dict):
        raise TaskSourceError(f"{where} is a {type(row).__name__}, expected an object with 'prompt' and 'answer'")
    prompt = next((row[k] for k in _PROMPT_KEYS if isinstance(row.get(k), str) and row[k].strip()), None)
    if prompt is None:
        raise TaskSourceError(f"{where} has no non-empty text field among {_PROMPT_KEYS}; keys: {sorted(row)}")
    answer = row.get("answer")
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        raise TaskSourceError(f"{where} has no 'answer'")
    if isinstance(answer, float) and answer.is_integer():
        answer = int(answer)  # AMC files store 142.0
    meta = {k: v for k, v in row.items() if k not in (*_PROMPT_KEYS, "answer", "id")}
    return Task(id=str(row.get("id", default_id)), prompt=prompt, answer=str(answer), meta=meta)


def _load_hf(spec: str) -> list[Task]:
    try:
        import datasets
    except ImportError:
        raise ImportError("Hugging Face task sources need the datasets package: pip install datasets") from None
    name, _, split = spec.partition(":")
    data = datasets.load_dataset(name, split=split or "train")
    where = f"{name}[{split or 'train'}] row"
    return [_task_from_row(dict(row), f"{name}-{i}", f"{where} {i}") for i, row in enumerate(data)]


# --- the synthetic generator -----------------------------------------------------------------------
# Each family draws parameters from `rng` and returns (problem text, code that prints the answer).
# The answer is whatever that code prints, so it is computed, never guessed.


def _digit_sum(rng: random.Random):
    b, e = rng.choice([2, 3, 7, 11]), rng.randint(10, 60)
    return f"What is the sum of the digits of ${b}^{{{e}}}$?", f"print(sum(int(d) for d in str({b}**{e})))"


def _divisors(rng: random.Random):
    n = rng.choice([2, 3, 5, 7]) ** rng.randint(1, 4) * rng.choice([6, 10, 12, 15, 21]) * rng.randint(1, 9)
    return (f"How many positive integers divide ${n}$?",
            f"n = {n}\nprint(sum(1 for d in range(1, n + 1) if n % d == 0))")


def _power_mod(rng: random.Random):
    a, b, m = rng.randint(2, 19), rng.randint(50, 2000), rng.choice([7, 11, 13, 100, 1000])
    return f"Find the remainder when ${a}^{{{b}}}$ is divided by ${m}$.", f"print(pow({a}, {b}, {m}))"


def _inclusion_exclusion(rng: random.Random):
    n, a, b = rng.randint(100, 2000), rng.randint(2, 9), rng.randint(10, 19)
    return (f"How many integers from $1$ to ${n}$ inclusive are divisible by ${a}$ or by ${b}$?",
            f"print(sum(1 for k in range(1, {n} + 1) if k % {a} == 0 or k % {b} == 0))")


def _lattice_paths(rng: random.Random):
    a, b = rng.randint(3, 12), rng.randint(3, 12)
    return (f"A path on the grid moves one unit right or one unit up at each step. How many paths go from "
            f"$(0,0)$ to $({a},{b})$? Give the answer modulo $1000$.",
            f"import math\nprint(math.comb({a + b}, {a}) % 1000)")


def _stars_bars(rng: random.Random):
    n, k = rng.randint(5, 30), rng.randint(3, 4)
    variables = " + ".join(f"x_{i}" for i in range(1, k + 1))
    return (f"How many ordered {k}-tuples of nonnegative integers satisfy ${variables} = {n}$?",
            f"import math\nprint(math.comb({n + k - 1}, {k - 1}))")


def _trailing_zeros(rng: random.Random):
    n = rng.randint(30, 999)
    return (f"How many zeros are at the end of the decimal representation of ${n}!$?",
            f"import math\ns = str(math.factorial({n}))\nprint(len(s) - len(s.rstrip('0')))")


def _fibonacci_mod(rng: random.Random):
    n, m = rng.randint(20, 300), rng.choice([100, 1000, 997])
    return (f"Let $F_1 = F_2 = 1$ and $F_{{n+2}} = F_{{n+1}} + F_n$. Find the remainder when $F_{{{n}}}$ is "
            f"divided by ${m}$.",
            f"a, b = 1, 1\nfor _ in range({n} - 2):\n    a, b = b, a + b\nprint(b % {m} if {n} > 2 else 1)")


def _sum_of_squares(rng: random.Random):
    n = rng.randint(10, 200)
    return (f"Find the remainder when $1^2 + 2^2 + \\cdots + {n}^2$ is divided by $1000$.",
            f"print(sum(k * k for k in range(1, {n} + 1)) % 1000)")


def _gcd_lcm(rng: random.Random):
    a, b = rng.randint(12, 400), rng.randint(12, 400)
    return (f"Let $g = \\gcd({a}, {b})$ and $l = \\operatorname{{lcm}}({a}, {b})$. What is $l / g$?",
            f"import math\nprint(math.lcm({a}, {b}) // math.gcd({a}, {b}))")


FAMILIES: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    f.__name__.lstrip("_"): f
    for f in (_digit_sum, _divisors, _power_mod, _inclusion_exclusion, _lattice_paths, _stars_bars,
              _trailing_zeros, _fibonacci_mod, _sum_of_squares, _gcd_lcm)
}


# Families a tiny model can learn in minutes on a CPU: the code only has to copy the problem's numbers
# (no reasoning), so what training moves is whether the team writes, runs and reports the code right.
# Not in the default mix; select them with task_source="synthetic:product_sum" (or digit_product_sum).

def _product_sum(rng: random.Random):
    # the expression is written as the code writes it, and every answer has four digits (32 * 32 + 10
    # to 99 * 99 + 99), so each copy the team makes is the same shape on every problem
    a, b, c = rng.randint(32, 99), rng.randint(32, 99), rng.randint(10, 99)
    return f"What is {a} * {b} + {c}?", f"print({a} * {b} + {c})"


def _digit_product_sum(rng: random.Random):
    # the same shape with one-digit numbers: each copy is a single token, so a tiny model gets the copies
    # right after a short warm start and what is left to learn is whether the code runs (729 problems)
    a, b, c = rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9)
    return f"What is {a} * {b} + {c}?", f"print({a} * {b} + {c})"


EASY_FAMILIES: dict[str, Callable[[random.Random], tuple[str, str]]] = {
    "product_sum": _product_sum, "digit_product_sum": _digit_product_sum}


def _run_solution(code: str) -> str:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(code, {"math": math})  # generator-authored code, never model output
    return out.getvalue().strip()


def synthetic_tasks(num_tasks: int, seed: int = 0, split: str = "train",
                    families: Sequence[str] | None = None) -> list[Task]:
    """`num_tasks` distinct problems, round-robin over `families` (default: every one of `FAMILIES`).
    A problem's split is a function of its text (1 in 10 is eval), so train and eval never share a
    problem, whatever their sizes and seeds."""
    if split not in ("train", "eval"):
        raise EnvArgumentError(f"synthetic split must be 'train' or 'eval', got {split!r}")
    if isinstance(num_tasks, bool) or not isinstance(num_tasks, int) or num_tasks < 1:
        raise EnvArgumentError(f"num_tasks must be an integer >= 1, got {num_tasks!r}")
    makers = {**FAMILIES, **EASY_FAMILIES}
    unknown = sorted(set(families or ()) - set(makers))
    if unknown or families == []:
        raise EnvArgumentError(f"unknown synthetic families {unknown or families}; choose from {sorted(makers)}")
    rng = random.Random(f"mathchat-synthetic-{seed}-{split}" + ("" if families is None else "-" + ",".join(families)))
    families = sorted(families or FAMILIES)
    tasks, seen, misses = [], set(), dict.fromkeys(families, 0)
    while len(tasks) < num_tasks:
        if not families:
            raise EnvArgumentError(f"the synthetic generator has only {len(tasks)} distinct {split} problems; "
                             f"ask for fewer (num_tasks={num_tasks})")
        family = families[len(tasks) % len(families)]
        prompt, code = makers[family](rng)
        if prompt in seen or _in_split(prompt, "eval", 0.1) != (split == "eval"):
            misses[family] += 1
            if misses[family] > 2000:  # this family's parameter space is used up
                families.remove(family)
            continue
        seen.add(prompt)
        misses[family] = 0
        tasks.append(Task(id=f"synthetic-{split}-{seed}-{len(tasks)}", prompt=prompt, answer=_run_solution(code),
                          meta={"family": family, "solution_code": code}))
    return tasks
