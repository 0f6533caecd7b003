"""MathChat-v0's fault facts (`mappa blame`, `mappa coach-eval`): the three roles from the ground truth,
one of them wrong: the Problem Solver's answer, the Code Executor mis-copying its own correct output, or
the Verifier overruling a right answer."""
from __future__ import annotations

from collections.abc import Sequence

from mappa_envs.coach_eval.faults import NONE, Faults


def _wrong(answer: str) -> str:
    """A different, plausible answer."""
    try:
        return str(int(float(answer)) + 7)
    except ValueError:
        return "0" if answer != "0" else "1"


class MathTeam:
    """MathChat's three roles from the ground truth, with one of `FAULTS` injected."""

    def __init__(self, tasks: Sequence, fault: str):
        self.tasks, self.fault = sorted(tasks, key=lambda t: -len(t.prompt)), fault

    def respond(self, conversations: list[list[dict]], roles: list[str]) -> list[str]:
        return [self._one(c, r) for c, r in zip(conversations, roles)]

    def _one(self, conversation: list[dict], role: str) -> str:
        user = conversation[1]["content"]
        task = next(t for t in self.tasks if t.prompt in user)  # longest first: no prefix mix-ups
        gold, wrong = str(task.answer), _wrong(str(task.answer))
        if role == "problem_solver":
            answer = wrong if self.fault == "solver_wrong" else gold
            return f"Setting up the count and simplifying, the quantity asked for is {answer}.\n\\boxed{{{answer}}}"
        if role == "code_executor":
            if not any(m["role"] == "assistant" for m in conversation):
                code = task.meta.get("solution_code") or f"print({gold!r})"
                return f"Let me compute it.\n```python\n{code}\n```"
            answer = wrong if self.fault == "executor_miscopy" else gold
            return f"The code computed the answer.\n\\boxed{{{answer}}}"
        answer = wrong if self.fault == "verifier_overrules" else gold
        return f"I checked the reasoning against the computation.\n\\boxed{{{answer}}}"


FAULTS = Faults(
    roles={NONE: None, "solver_wrong": "problem_solver", "executor_miscopy": "code_executor",
           "verifier_overrules": "verifier"},
    team=lambda env, fault: MathTeam(env.unwrapped.tasks, fault),
    kwargs={"task_source": "synthetic", "num_tasks": 20, "split": "eval"},
)
