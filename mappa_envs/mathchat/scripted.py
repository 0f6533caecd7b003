"""A scripted MathChat team: an oracle with a tunable error rate, for smoke runs, tests and SFT data.

It knows the tasks it plays (it looks each problem up by its text) and uses the generator's solution
code where the task has one. With `skill < 1` the Problem Solver proposes a wrong answer at that rate;
the Code Executor then computes and the Verifier follows the computation, as a good team would.
"""
from __future__ import annotations

import random
import re
from typing import Sequence

from mappa_envs.core.pipeline import Task
from mappa_envs.mathchat.answers import extract_answer

_OUTPUT = re.compile(r"\[cell \d+\] ok\n(.*?)(?:\n\n\[cell|\Z)", re.DOTALL)


class ScriptedMathPolicy:
    """A `TextPolicy` for MathChat-v0's three roles."""

    def __init__(self, tasks: Sequence[Task], skill: float = 1.0, seed: int = 0):
        self.by_prompt = {t.prompt: t for t in tasks}
        self.skill = skill
        self.rng = random.Random(seed)

    def respond(self, conversations: list[list[dict]], roles: list[str]) -> list[str]:
        return [self._act(conv, role) for conv, role in zip(conversations, roles)]

    def _task(self, conversation: list[dict]) -> Task | None:
        user = next((m["content"] for m in conversation if m["role"] == "user"), "")
        problem = user.removeprefix("Problem:\n").split("\n\n## Output of the", 1)[0]
        return self.by_prompt.get(problem)

    def _act(self, conversation: list[dict], role: str) -> str:
        task = self._task(conversation)
        gold = task.answer if task else "0"
        if role == "problem_solver":
            guess = gold
            if self.rng.random() >= self.skill:  # a plausible wrong answer
                guess = str(int(float(gold)) + self.rng.randint(1, 9)) if _is_int(gold) else "0"
            return f"Let me work through the problem carefully.\nThe computation gives the value below.\n\\boxed{{{guess}}}"
        if role == "code_executor":
            if conversation[-1]["role"] == "user" and conversation[-1]["content"].startswith("Output of your code"):
                printed = _OUTPUT.findall(conversation[-1]["content"])
                value = printed[-1].strip().splitlines()[-1] if printed and printed[-1].strip() else "unknown"
                return f"The code printed {value}.\n\\boxed{{{value}}}"
            code = task.meta.get("solution_code") if task else None
            return f"Let me compute it.\n```python\n{code or f'print({gold!r})'}\n```"
        if role == "verifier":
            upstream = conversation[-1]["content"]
            executor = upstream.split("## Output of the code_executor", 1)[-1]
            answer = extract_answer(executor) or extract_answer(upstream) or gold
            return f"The computation checks out.\n\\boxed{{{answer}}}"
        raise ValueError(f"ScriptedMathPolicy has no script for role {role!r}")


def _is_int(s: str) -> bool:
    try:
        return float(s).is_integer()
    except ValueError:
        return False


def for_env(env, skill: float = 1.0, seed: int = 0) -> ScriptedMathPolicy:
    """The scripted team for a MathChat env (it plays that env's tasks)."""
    return ScriptedMathPolicy(env.unwrapped.tasks, skill=skill, seed=seed)
