"""A scripted CodeTest team: an oracle with a skill per role, for smoke runs, warm starts, eval and blame.

It knows the reference solutions (the coach's ground truth) and the public docstring examples, never
the hidden tests, so its transcripts teach nothing about them. Per role, at rate 1 - skill:
- the Coder submits a buggy function (`mutant`: every return value off by one);
- the Test Writer asserts a wrong expected value in one of its tests;
- the Reviewer breaks working code (submits the buggy version) instead of judging it.
A skilled Reviewer approves correct code (whatever a wrong test says) and replaces buggy code with a
correct one. `fault` forces one role's failure in every episode (`mappa blame`): "coder_bug",
"tester_wrong_test" or "reviewer_breaks".
"""
from __future__ import annotations

import random
from collections.abc import Sequence

from mappa_envs.codetest.env import submitted
from mappa_envs.codetest.mutant import broken_solution
from mappa_envs.codetest.tasks import Problem, load_problems
from mappa_envs.codetest.team import CODER, REVIEWER, TESTER
from mappa_envs.errors import InputError
from mappa_envs.policy import action_rngs

FAULTS = {"none": None, "coder_bug": CODER, "tester_wrong_test": TESTER, "reviewer_breaks": REVIEWER}
MAX_TESTS = 6


class ScriptedCodeTeam:
    """A `TextPolicy` for CodeTest-v0's three roles."""

    def __init__(self, problems: Sequence[Problem], skill: float = 1.0, seed: int = 0, coder_skill: float | None = None,
                 tester_skill: float | None = None, reviewer_skill: float | None = None, fault: str = "none"):
        skills = {CODER: coder_skill, TESTER: tester_skill, REVIEWER: reviewer_skill}
        self.skill = {role: skill if s is None else s for role, s in skills.items()}
        for role, value in [("skill", skill), *self.skill.items()]:
            if not 0 <= value <= 1:
                raise InputError(f"ScriptedCodeTeam: {role} skill must be in [0, 1], got {value}")
        if fault not in FAULTS:
            raise InputError(f"ScriptedCodeTeam: unknown fault {fault!r}; faults: {', '.join(FAULTS)}")
        self.fault = FAULTS[fault]
        self.problems = sorted(problems, key=lambda p: -len(p.prompt))  # longest first: no prefix mix-ups
        self.seed, self.rng = seed, random.Random(seed)

    def respond(self, conversations: list[list[dict]], roles: list[str],
                seeds: Sequence[int | None] | None = None) -> list[str]:
        """With the driver's per-action `seeds`, each action's coin flip depends on its seed alone."""
        rngs = action_rngs(self.seed, self.rng, seeds, len(conversations))
        return [self._act(conv, role, rng) for conv, role, rng in zip(conversations, roles, rngs)]

    def _fails(self, role: str, rng: random.Random) -> bool:
        flip = rng.random()  # drawn always, so a fault changes nothing else
        return self.fault == role or flip >= self.skill[role]

    def _act(self, conversation: list[dict], role: str, rng: random.Random) -> str:
        user = conversation[1]["content"]
        problem = next((p for p in self.problems if p.prompt.rstrip() in user), None)
        if problem is None:
            raise ValueError("ScriptedCodeTeam: the conversation is about no problem it knows")
        followup = any(m["role"] == "assistant" for m in conversation)
        if role == CODER:
            if followup:
                return "The function is defined without errors; that is my solution."
            code = broken_solution(problem) if self._fails(CODER, rng) else problem.reference_solution
            return f"I implement `{problem.entry_point}` as the docstring describes.\n```python\n{code}```"
        if role == TESTER:
            if followup:
                out = conversation[-1]["content"]
                if "AssertionError" in out:
                    return "A test failed: the code does not return what the docstring asks for that input."
                return "All my tests passed." if "error:" not in out else "My tests did not run cleanly."
            return self._tests(problem, self._fails(TESTER, rng))
        if role == REVIEWER:
            if followup:
                return "The corrected function runs. APPROVED"
            coder_code = submitted(_blocks_of(user, CODER), problem.entry_point)
            breaks = self._fails(REVIEWER, rng)
            if breaks:
                return ("I tidied up how the results are returned.\n"
                        f"```python\n{broken_solution(problem)}```")
            if coder_code is not None and coder_code.strip() == problem.reference_solution.strip():
                verdict = "The code matches the docstring"
                if "AssertionError" in _section(user, TESTER):
                    verdict += "; the failing test expects a value the docstring contradicts, so the test is wrong"
                return f"{verdict}. APPROVED"
            return ("The code does not do what the docstring says; here is a corrected version.\n"
                    f"```python\n{problem.reference_solution}```")
        raise ValueError(f"ScriptedCodeTeam has no script for role {role!r}")

    def _tests(self, problem: Problem, wrong: bool) -> str:
        entry = problem.entry_point
        cases = list(problem.examples[:MAX_TESTS])
        if not cases:
            return (f"The docstring gives no examples, so I only check that it loads.\n```python\n"
                    f"from solution import {entry}\nassert callable({entry})\nprint('loaded')\n```")
        lines = [f"from solution import {entry}"]
        for i, (args, expected) in enumerate(cases):
            if wrong and i == len(cases) - 1:
                expected = _off(expected)
            call = f"{entry}({', '.join(map(repr, args))})"
            lines.append(f"assert {call} == {expected!r}, {call!r}")
        lines.append(f"print('{len(cases)} tests passed')")
        return "I test the docstring's examples.\n```python\n" + "\n".join(lines) + "\n```"


def _off(value):
    """A different expected value of the same kind (the Test Writer's mistake)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, (list, tuple)):
        return type(value)([*value, value[0] if value else 0])
    return 0 if value is None else None


def _section(user: str, role: str) -> str:
    """What the prompt quotes of `role`'s turn (empty if nothing)."""
    head = f"## Output of the {role}\n"
    if head not in user:
        return ""
    rest = user.split(head, 1)[1]
    return rest.split("\n## Output of the ", 1)[0]


def _blocks_of(user: str, role: str) -> list[str]:
    from mappa_envs.core.tools import extract_code_blocks

    return extract_code_blocks(_section(user, role))


def for_env(env, skill: float = 1.0, seed: int = 0, **skills) -> ScriptedCodeTeam:
    """The scripted team for a CodeTest env (it plays that env's problems)."""
    ids = {t.id for t in env.unwrapped.tasks}
    return ScriptedCodeTeam([p for p in load_problems() if p.task_id in ids], skill=skill, seed=seed, **skills)
