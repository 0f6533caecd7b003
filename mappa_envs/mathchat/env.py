"""MathChat-v0: Problem Solver -> Code Executor -> Verifier on competition math.

The Code Executor's ```python blocks run in one persistent interpreter per episode. The Verifier's
\\boxed{} answer is the team's answer, checked by rule (`answers_match`) against the ground truth.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from mappa_envs.core.pipeline import Episode, EpisodeLimits, Outcome, PipelineEnv, Role, Task
from mappa_envs.core.tools import extract_code_blocks
from mappa_envs.mathchat import prompts
from mappa_envs.mathchat.answers import answers_match, extract_answer
from mappa_envs.mathchat.tasks import load_tasks
from mappa_envs.sandbox.types import ExecResult

SOLVER, EXECUTOR, VERIFIER = "problem_solver", "code_executor", "verifier"


@dataclass
class MathChatScenario:
    task_list: Sequence[Task]
    executor_max_actions: int = 3
    env_id: str = "MathChat-v0"
    preimport: tuple[str, ...] = ()  # stdlib math needs nothing; sympy/numpy load on first use

    def __post_init__(self):
        self.roles = (
            Role(SOLVER, prompts.PROBLEM_SOLVER),
            Role(EXECUTOR, prompts.CODE_EXECUTOR, tools=True, max_actions=self.executor_max_actions, sees=(SOLVER,)),
            Role(VERIFIER, prompts.VERIFIER, sees=(SOLVER, EXECUTOR)),
        )

    def tasks(self) -> Sequence[Task]:
        return self.task_list

    def prepare(self, episode: Episode) -> None:
        pass  # math needs no files

    def task_prompt(self, task: Task) -> str:
        return f"Problem:\n{task.prompt}"

    def checks(self, episode: Episode, role: Role, action: str, results: list[ExecResult]) -> dict[str, bool]:
        if role.name == EXECUTOR:
            has_code = bool(extract_code_blocks(action))
            first_of_turn = not episode.actions or episode.actions[-1].role != EXECUTOR
            checks = {"code_present": has_code} if first_of_turn or has_code else {}
            answer = None if has_code else extract_answer(action)
            if answer is not None:  # the closing summary states a computed answer
                checks["answer_correct"] = answers_match(answer, episode.task.answer)
            return checks
        answer = extract_answer(action)
        checks = {"answer_present": answer is not None}
        if answer is not None:
            checks["answer_correct"] = answers_match(answer, episode.task.answer)
        return checks

    def outcome(self, episode: Episode) -> Outcome:
        final = next((a.text for a in reversed(episode.actions) if a.role == VERIFIER), None)
        if final is None:  # the outcome is judged before the current action is recorded: read its text
            final = episode.outputs.get(VERIFIER)
        predicted = extract_answer(final) if final else None
        correct = answers_match(predicted, episode.task.answer)
        return Outcome(score=float(correct), correct=correct,
                       details={"predicted": predicted, "gold": episode.task.answer, "task_id": episode.task.id})

    def coach_evidence(self, episode: Episode, role: Role) -> dict:
        return {"ask_answer_correct": role.name == VERIFIER}


class MathChatEnv(PipelineEnv):
    """MathChat-v0. Tasks come from `task_source` ("synthetic", a JSON/JSONL path, or "hf:<id>").

    Args:
        task_source, split, num_tasks, task_seed: see `mappa_envs.mathchat.tasks.load_tasks`.
        tasks: an explicit task list (overrides task_source).
        executor_max_actions: most actions the Code Executor may take in its turn.
        Everything else goes to `PipelineEnv` (coach, sandbox, reward_mode, limits, render_mode).
    """

    def __init__(self, task_source: str = "synthetic", split: str = "train", num_tasks: int = 256,
                 task_seed: int = 0, tasks: Sequence[Task] | None = None, executor_max_actions: int = 3,
                 limits: EpisodeLimits | None = None, **kwargs):
        if tasks is None:
            tasks = load_tasks(task_source, split=split, num_tasks=num_tasks, seed=task_seed)
        super().__init__(MathChatScenario(list(tasks), executor_max_actions), limits=limits, **kwargs)
