"""A scripted Chain-v0 team with a skill per agent: for warm starts, evaluation and depth studies.

Agent `step_k` reads its step from its prompt (line k of the task, or its own step in the "own" view),
takes the value it was handed (the previous agent's \\boxed{} value, or the start value), applies the
step and states the result. With probability `1 - skill[k]` it slips: the result is off by 1 to 9.
With `code_rate > 0` it first computes the value in a ```python block at that rate and states what
the code printed in its next action.
"""
from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence

from mappa_envs.chain.env import OPS, apply, read_step
from mappa_envs.errors import InputError
from mappa_envs.mathchat.answers import extract_answer
from mappa_envs.policy import action_rngs

_SYMBOL = {"add": "+", "sub": "-", "mul": "*"}
_PRINTED = re.compile(r"^\[cell \d+\] ok\n {4}(-?\d+)\s*$", re.MULTILINE)


class ScriptedChainPolicy:
    """A `TextPolicy` for Chain-v0's roles `step_1` ... `step_N`.

    Args:
        skill: one probability for every agent, a list (agent k gets skill[k-1]) or {role: p}.
        code_rate: how often an agent computes in the sandbox before stating its value.
    """

    def __init__(self, skill: float | Sequence[float] | Mapping[str, float] = 1.0, seed: int = 0,
                 code_rate: float = 0.0):
        self.skill, self.code_rate, self.seed, self.rng = skill, code_rate, seed, random.Random(seed)
        for p in self._all_skills() + [code_rate]:
            if not 0 <= p <= 1:
                raise InputError(f"ScriptedChainPolicy: skills and code_rate must be in [0, 1], got {p}")

    def _all_skills(self) -> list[float]:
        s = self.skill
        return list(s.values()) if isinstance(s, Mapping) else [s] if isinstance(s, (int, float)) else list(s)

    def skill_of(self, role: str) -> float:
        s = self.skill
        if isinstance(s, Mapping):
            return s.get(role, 1.0)
        if isinstance(s, (int, float)):
            return float(s)
        k = int(role.rsplit("_", 1)[1])
        return s[k - 1] if k <= len(s) else 1.0

    def respond(self, conversations: list[list[dict]], roles: list[str],
                seeds: Sequence[int | None] | None = None) -> list[str]:
        rngs = action_rngs(self.seed, self.rng, seeds, len(conversations))
        return [self._act(c, r, rng) for c, r, rng in zip(conversations, roles, rngs)]

    def _act(self, conversation: list[dict], role: str, rng: random.Random) -> str:
        opening = next(m["content"] for m in conversation if m["role"] == "user")
        k = int(role.rsplit("_", 1)[1])
        step = read_step(opening.split("\n\n## ", 1)[0], k)
        if step is None:
            return "I cannot find my step. \\boxed{0}"
        op, n, start = step
        if conversation[-1]["role"] == "user" and conversation[-1]["content"].startswith("Output of your code"):
            printed = _PRINTED.findall(conversation[-1]["content"])
            value = printed[-1] if printed else "0"
            return f"The code printed {value}.\n\\boxed{{{value}}}"
        handed = start if k == 1 else _handed(opening, f"step_{k - 1}")
        if handed is None:
            return "The previous agent handed on no value. \\boxed{0}"
        result = apply(op, n, handed)
        if rng.random() >= self.skill_of(role):
            result += rng.choice((-1, 1)) * rng.randint(1, 9)
        if self.code_rate and rng.random() < self.code_rate:
            expr = f"{handed} {_SYMBOL[op]} {n}"
            slip = result - apply(op, n, handed)
            return f"Step {k}: {OPS[op].format(k=n)}.\n```python\nprint({expr}{f' + {slip}' if slip else ''})\n```"
        return f"Step {k}: {OPS[op].format(k=n)}, applied to {handed}.\n\\boxed{{{result}}}"


def _handed(opening: str, previous: str) -> int | None:
    section = opening.split(f"## Output of the {previous}", 1)
    answer = extract_answer(section[1]) if len(section) == 2 else None
    try:
        return int(answer) if answer is not None else None
    except ValueError:
        return None


def for_env(env, skill: float | Sequence[float] | Mapping[str, float] = 1.0, seed: int = 0,
            code_rate: float = 0.0) -> ScriptedChainPolicy:
    """The scripted team for a Chain env (it reads each step from the prompt, in either view)."""
    return ScriptedChainPolicy(skill=skill, seed=seed, code_rate=code_rate)
