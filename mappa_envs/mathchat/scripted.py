"""A scripted MathChat team: an oracle with a tunable error rate, for smoke runs, tests and SFT data.

It knows the tasks it plays (it looks each problem up by its text) and uses the generator's solution
code where the task has one. The Problem Solver restates the problem and proposes an answer; with
`skill < 1` that answer is wrong at that rate. The Code Executor then computes, and the Verifier
follows the computation (the executor's stated answer, else what its code printed), as a good team would.

With `code_skill < 1` the team is noisy where a coach can see it: at that rate the Code Executor's
code is broken (it stores the result under one name and prints another, so it raises `NameError`),
and the executor, having nothing computed, reports the Problem Solver's answer instead. The quickstart
warm-starts on such a team, so imitation alone inherits its mistakes and RL has something to fix.
"""
from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence

from mappa_envs.core.pipeline import Task
from mappa_envs.errors import InputError
from mappa_envs.mathchat.answers import extract_answer
from mappa_envs.policy import action_rngs

# a cell that ran, and what it printed: the env indents printed lines by four spaces (format_tool_output)
_OUTPUT = re.compile(r"^\[cell \d+\] ok\n((?: {4}.*(?:\n|$))+)", re.MULTILINE)


class ScriptedMathPolicy:
    """A `TextPolicy` for MathChat-v0's three roles."""

    def __init__(self, tasks: Sequence[Task], skill: float = 1.0, seed: int = 0, code_skill: float = 1.0):
        for name, value in (("skill", skill), ("code_skill", code_skill)):
            if not 0 <= value <= 1:
                raise InputError(f"ScriptedMathPolicy: {name} must be in [0, 1], got {value}")
        self.by_prompt = {t.prompt: t for t in tasks}
        self.skill, self.code_skill = skill, code_skill
        self.seed, self.rng = seed, random.Random(seed)

    def respond(self, conversations: list[list[dict]], roles: list[str],
                seeds: Sequence[int | None] | None = None) -> list[str]:
        """With the driver's per-action `seeds`, each action's coin flips depend on its seed alone, not
        on the order in which concurrent episodes happen to ask (reproducible under async play)."""
        rngs = action_rngs(self.seed, self.rng, seeds, len(conversations))
        return [self._act(conv, role, rng) for conv, role, rng in zip(conversations, roles, rngs)]

    def _task(self, conversation: list[dict]) -> Task | None:
        user = next((m["content"] for m in conversation if m["role"] == "user"), "")
        problem = user.removeprefix("Problem:\n").split("\n\n## Output of the", 1)[0]
        return self.by_prompt.get(problem)

    def _act(self, conversation: list[dict], role: str, rng: random.Random) -> str:
        task = self._task(conversation)
        gold = task.answer if task else "0"
        if role == "problem_solver":
            guess = gold
            if rng.random() >= self.skill:  # a plausible wrong answer
                guess = str(int(float(gold)) + rng.randint(1, 9)) if _is_int(gold) else "0"
            return f"The problem asks: {task.prompt if task else 'unknown'}\nMy answer is \\boxed{{{guess}}}"
        if role == "code_executor":
            if conversation[-1]["role"] == "user" and conversation[-1]["content"].startswith("Output of your code"):
                printed = _OUTPUT.findall(conversation[-1]["content"])
                if self.code_skill < 1 and not printed:  # the noisy team falls back on the solver
                    solver = extract_answer(conversation[1]["content"]) or "0"  # the prompt with its output
                    return f"The code failed, so I report the Problem Solver's answer.\n\\boxed{{{solver}}}"
                value = printed[-1].strip().splitlines()[-1] if printed and printed[-1].strip() else "unknown"
                return f"The code printed {value}.\n\\boxed{{{value}}}"
            code = (task.meta.get("solution_code") if task else None) or f"print({gold!r})"
            if self.code_skill < 1 and rng.random() >= self.code_skill:
                code = _broken(code)
            return f"Let me compute it.\n```python\n{code}\n```"
        if role == "verifier":
            upstream = conversation[-1]["content"]
            executor = upstream.split("## Output of the code_executor", 1)[-1]
            printed = [p.strip().splitlines()[-1] for p in _OUTPUT.findall(executor) if p.strip()]
            # the executor's stated answer, else what its code printed, else the solver's answer; the
            # verifier says which before it answers, so a model imitating it decides, then copies
            stated = extract_answer(executor)
            if stated:
                return f"The Code Executor's answer checks out.\n\\boxed{{{stated}}}"
            if printed:
                return f"The code printed {printed[-1]}.\n\\boxed{{{printed[-1]}}}"
            solver = extract_answer(upstream) or gold
            return f"No code output, so I take the Problem Solver's answer.\n\\boxed{{{solver}}}"
        raise ValueError(f"ScriptedMathPolicy has no script for role {role!r}")


def _broken(code: str) -> str:
    """The code with its last print stored under `result` and a never-defined `answer` printed."""
    lines = code.rstrip().splitlines()
    last = lines[-1]
    if last.startswith("print(") and last.endswith(")"):
        lines[-1:] = [f"result = {last[len('print('):-1]}", "print(answer)"]
    else:
        lines.append("print(answer)")
    return "\n".join(lines)


def _is_int(s: str) -> bool:
    try:
        return float(s).is_integer()
    except ValueError:
        return False


def for_env(env, skill: float = 1.0, seed: int = 0, code_skill: float = 1.0) -> ScriptedMathPolicy:
    """The scripted team for a MathChat env (it plays that env's tasks)."""
    return ScriptedMathPolicy(env.unwrapped.tasks, skill=skill, seed=seed, code_skill=code_skill)


class ScriptedMathTeam:
    """A scripted team for any team spec on the MathChat scenario (`Team-v0`, e.g. spec="review").

    It knows the answers. A role with tools first prints the answer from code, then states what the
    code printed; every other role states the answer, wrong at rate `1 - skill`. A role that may send
    work back (a loop sender) writes its loop's signal when an answer it was shown differs from the
    truth, so the loop is exercised; the env bounds the rounds.

    `skill` is one rate for every role without tools, or {role: rate} for the roles named (the others
    are always right): a named role with tools then prints a wrong value at its rate. `mappa blame
    --spec` injects a fault in role R as skill={R: 0.0}.
    """

    def __init__(self, env, skill: float | Mapping[str, float] = 1.0, seed: int = 0):
        self.team = env.unwrapped.team
        rates = skill.values() if isinstance(skill, Mapping) else [skill]
        if not all(isinstance(p, (int, float)) and 0 <= p <= 1 for p in rates):
            raise InputError(f"ScriptedMathTeam: skill must be in [0, 1] (or a {{role: rate}} mapping), got {skill}")
        unknown = sorted(set(skill) - set(self.team.names)) if isinstance(skill, Mapping) else []
        if unknown:
            raise InputError(f"ScriptedMathTeam: no role(s) {unknown} on this team; its roles are {self.team.names}")
        self.by_prompt = {t.prompt: t for t in env.unwrapped.tasks}
        self.skill = skill
        self.seed, self.rng = seed, random.Random(seed)

    def respond(self, conversations: list[list[dict]], roles: list[str],
                seeds: Sequence[int | None] | None = None) -> list[str]:
        rngs = action_rngs(self.seed, self.rng, seeds, len(conversations))
        return [self._act(c, r, rng) for c, r, rng in zip(conversations, roles, rngs)]

    def _act(self, conversation: list[dict], role: str, rng: random.Random) -> str:
        opening = next(m["content"] for m in conversation if m["role"] == "user")
        task = self.by_prompt.get(opening.removeprefix("Problem:\n").split("\n\n## ", 1)[0])
        gold = str(task.answer) if task else "0"
        if next(r for r in self.team.roles if r.name == role).tools:
            last = conversation[-1]["content"]
            if conversation[-1]["role"] == "user" and last.startswith("Output of your code"):
                printed = _OUTPUT.findall(last)
                value = printed[-1].strip().splitlines()[-1] if printed and printed[-1].strip() else gold
                return f"The code printed {value}.\n\\boxed{{{value}}}"
            value = gold
            if isinstance(self.skill, Mapping) and rng.random() >= self.skill.get(role, 1.0):
                value = _miss(gold, rng)
            return f"Let me compute it.\n```python\nprint({value!r})\n```"
        answer = gold
        if rng.random() >= (self.skill.get(role, 1.0) if isinstance(self.skill, Mapping) else self.skill):
            answer = _miss(gold, rng)
        loop = next((lp for lp in self.team.loops if lp.sender == role), None)
        shown = [extract_answer(part) for part in opening.split("## Output of the ")[1:]]
        if loop is not None and any(a is not None and a != gold for a in shown):
            return f"An answer above is wrong: {loop.signal}.\n\\boxed{{{answer}}}"
        return f"I find the answer is {answer}.\n\\boxed{{{answer}}}"


def _miss(gold: str, rng: random.Random) -> str:
    """A plausible wrong answer."""
    return str(int(float(gold)) + rng.randint(1, 9)) if _is_int(gold) else "0"


def for_team(env, skill: float | Mapping[str, float] = 1.0, seed: int = 0) -> ScriptedMathTeam:
    """The scripted team for any spec on the MathChat scenario."""
    return ScriptedMathTeam(env, skill=skill, seed=seed)
