"""A random baseline that plays the game: plausible actions drawn from what the env itself shows.

Sampling the action space gives thousands of characters of random Unicode, which no env reads as an
attempt, so it measures nothing. This policy instead draws each action from the vocabulary of the
conversation it answers: the numbers of the task (MathChat), the file names and columns it mentions
(DSBench), and the env's own action forms: a final answer (`\\boxed{...}`), a Python cell that
computes with the task's numbers, one that loads a named file and looks at it, or one that writes a
file the prompt names. What it writes is random; the form is what an agent of the env would write,
so the run goes through the same sandbox, checks and coach paths as a real team's and scores near
the floor a real team must beat.

Seeded per action (the driver's `seeds`), so its episodes are reproducible whatever their batching.
"""
from __future__ import annotations

import random
import re
from collections.abc import Sequence

from mappa_envs.seeding import stride_seed

_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?(?![\w.])")
_FILE = re.compile(r"\b[\w-]+\.(?:csv|pkl|json|txt)\b")
_NAME = re.compile(r"`([A-Za-z_][\w]*)`")  # identifiers the prompt quotes: columns, variables
_OPS = ("+", "-", "*", "//", "%", "**")


class RandomPolicy:
    """A `TextPolicy` of random but well-formed actions from the conversation's own vocabulary."""

    def __init__(self, env=None, seed: int = 0):
        self.seed = seed
        self._rng = random.Random(seed)

    def respond(self, conversations: list[list[dict]], roles: list[str],
                seeds: Sequence[int | None] | None = None) -> list[str]:
        out = []
        for i, conversation in enumerate(conversations):
            seed = None if seeds is None else seeds[i]
            rng = self._rng if seed is None else random.Random(stride_seed(self.seed, seed))
            out.append(random_action(" ".join(str(m.get("content", "")) for m in conversation), rng))
        return out


def random_action(text: str, rng: random.Random) -> str:
    """One action: a final answer, a computing cell, a file-reading cell or a file-writing cell."""
    numbers = _NUMBER.findall(text)[-40:] or [str(rng.randint(0, 100))]
    files = sorted(set(_FILE.findall(text)))
    names = sorted(set(_NAME.findall(text)))
    forms = [_answer, _compute]
    if files:
        forms += [_look, _write]
    return rng.choice(forms)(rng, numbers, files, names)


def _answer(rng: random.Random, numbers: list[str], files: list[str], names: list[str]) -> str:
    return f"The answer is \\boxed{{{rng.choice(numbers)}}}."


def _compute(rng: random.Random, numbers: list[str], files: list[str], names: list[str]) -> str:
    expr = rng.choice(numbers)
    for _ in range(rng.randint(1, 3)):
        op = rng.choice(_OPS)
        right = rng.choice(numbers) if op != "**" else str(rng.randint(0, 3))
        expr = f"({expr} {op} {right})"
    return f"Let me compute.\n```python\nresult = {expr}\nprint(result)\n```"


def _look(rng: random.Random, numbers: list[str], files: list[str], names: list[str]) -> str:
    path = rng.choice([f for f in files if f.endswith(".csv")] or files)
    if not path.endswith(".csv"):
        return f"```python\nimport os\nprint(os.path.getsize({path!r}))\n```"
    what = rng.choice(["df.shape", "df.head()", "df.columns.tolist()", "df.describe()",
                       *(f"df[{n!r}].head()" for n in names[:5])])
    return f"```python\nimport pandas as pd\ndf = pd.read_csv({path!r})\nprint({what})\n```"


def _write(rng: random.Random, numbers: list[str], files: list[str], names: list[str]) -> str:
    source = rng.choice([f for f in files if f.endswith(".csv")] or files)
    target = rng.choice(files)
    if not (source.endswith(".csv") and target.endswith(".csv")):
        return f"```python\nopen({target!r}, 'w').write({rng.choice(numbers)!r})\n```"
    rows = rng.randint(1, 50)
    return (f"```python\nimport pandas as pd\ndf = pd.read_csv({source!r})\n"
            f"df.sample(n=min({rows}, len(df)), random_state={rng.randint(0, 999)}).to_csv({target!r}, index=False)\n"
            "print('wrote', len(df))\n```")
