"""MathChat-v0: Problem Solver -> Code Executor -> Verifier on competition math.

The team is the shipped spec `mappa_envs/teams/mathchat.yaml`; this module is the scenario. The Code
Executor's ```python blocks run in one persistent interpreter per episode. The Verifier's \\boxed{}
answer is the team's answer, checked by rule (`answers_match`) against the ground truth.

The scenario judges any team by what its roles may do, not by their names: a role with tools gets
the code checks, any other role the answer checks, and the last role in the acting order gives the
team's answer. So `make("Team-v0", spec=..., scenario="mappa_envs.mathchat.env:make_scenario")`
runs math with a team of your own.
"""
from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from mappa_envs.core.pipeline import Episode, Outcome, PipelineEnv, Role, Task
from mappa_envs.core.team import Team, load_team, no_team_argument
from mappa_envs.core.tools import extract_code_blocks
from mappa_envs.errors import EnvArgumentError
from mappa_envs.mathchat import prompts
from mappa_envs.mathchat.answers import (
    MAX_ANSWER_CHARS,
    answers_match,
    extract_answer,
    normalize_answer,
    parse_number,
    restates_problem,
)
from mappa_envs.mathchat.tasks import SPLITS, load_task_source
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
        self.final_role = VERIFIER

    def bind(self, team: Team) -> None:
        self.final_role = team.names[-1]  # whose \\boxed{} answer is the team's

    def tasks(self) -> Sequence[Task]:
        return self.task_list

    def prepare(self, episode: Episode) -> None:
        pass  # math needs no files

    def task_prompt(self, task: Task) -> str:
        return f"Problem:\n{task.prompt}"

    def checks(self, episode: Episode, role: Role, action: str, results: list[ExecResult]) -> dict[str, bool]:
        if role.tools:
            return _executor_checks(episode, role, action, results)
        return _answer_checks(extract_answer(action), episode.task)

    def outcome(self, episode: Episode) -> Outcome:
        # read the final role's whole turn (episode.outputs), not only its last action
        final = episode.outputs.get(self.final_role)
        predicted = extract_answer(final) if final else None
        correct = _answers(predicted, episode.task)
        return Outcome(score=float(correct), correct=correct,
                       details={"predicted": predicted, "gold": episode.task.answer, "task_id": episode.task.id})

    def coach_evidence(self, episode: Episode, role: Role) -> dict:
        return {"ask_answer_correct": role.name == self.final_role}


def _answer_checks(answer: str | None, task: Task) -> dict[str, bool]:
    """An action that closes a turn states the answer: a missing one is also not a correct one, so no
    answer never pays more than a wrong one (a role rarely right would otherwise learn to stay silent)."""
    return {"answer_present": answer is not None, "answer_correct": answer is not None and _answers(answer, task)}


def _answers(pred: str | None, task: Task) -> bool:
    """`pred` states the task's answer, and does not restate its problem (`restates_problem`)."""
    return answers_match(pred, task.answer) and not restates_problem(pred, task.prompt, task.answer)


def _executor_checks(episode: Episode, role: Role, action: str, results: list[ExecResult]) -> dict[str, bool]:
    """The Code Executor's checks. They make the honest path strictly best for a policy paid by them:
    computing the answer beats printing a copied number (`printed_answer_correct` needs a computed
    result), and once the turn's code has computed it, reporting it (`answer_computed`) beats running
    more cells (`new_work` False: padding)."""
    first_of_turn = not episode.actions or episode.actions[-1].role != role.name
    if first_of_turn:
        episode.state["cells"], episode.state["code"] = [], []
    cells: list[_Cell] = episode.state.setdefault("cells", [])
    code = extract_code_blocks(action)
    checks = {"code_present": bool(code)} if first_of_turn or code else {}
    if code:
        printed = _last_printed(results)
        turn_code = episode.state.setdefault("code", [])
        turn_code += code  # the interpreter persists: a value set in an earlier cell is as copied as one set here
        cell = _Cell(printed, _answers(printed, episode.task),
                     printed is not None and _computed("\n".join(turn_code), printed, episode.task.prompt))
        if any(c.correct and c.computed for c in cells):
            checks["new_work"] = False  # the answer is already computed: this cell pads the turn
        else:
            if not first_of_turn:
                checks["new_work"] = True
            checks["printed_answer_correct"] = cell.correct and cell.computed  # a bonus: a cell may compute a step
        cells.append(cell)
        return checks
    answer = extract_answer(action)  # the closing summary: its answer, right, and what the team's code computed?
    checks.update(_answer_checks(answer, episode.task))
    if answer is not None:
        checks["answer_computed"] = any(c.computed and answers_match(answer, c.printed) for c in cells)
    return checks


@dataclass(frozen=True)
class _Cell:
    printed: str | None  # the last line a code action's last cell printed
    correct: bool  # it is the right answer
    computed: bool  # the code computed it (see `_computed`)


_NUMERAL = re.compile(r"\d[\d_]*(?:\.\d+)?")
# one-line Python string literals, but not f-strings: their {fields} are code ("print(f'{4*7+3}')")
_STRING = re.compile(r"(?<![fF])(?<![fF][rR])(?:'(?:[^'\\\n]|\\.)*'|\"(?:[^\"\\\n]|\\.)*\")")


def _numerals(text: str) -> set[Fraction]:
    """The values of the numerals written in `text` (code or problem), bounded like any answer."""
    found = (parse_number(m.group().replace("_", "")) for m in _NUMERAL.finditer(text))
    return {n.value for n in found if n is not None}


def _computed(code: str, printed: str, problem: str) -> bool:
    """Did `code` compute `printed` rather than print a copy of it? It did not when the printed value
    is written in the code (`print(31)`, `x = "31"`), nor when the code's numbers outside string
    literals include none of the problem's (`print(32 - 1)`, `print(int('3' + '1'))`). Arithmetic on
    the copied answer that also mentions a problem number (`print(3 * 10 + 1)`) is not caught here."""
    if len(printed) > MAX_ANSWER_CHARS:
        return False
    value = parse_number(normalize_answer(printed))
    if value is not None:
        if value.value in _numerals(code):
            return False
    elif normalize_answer(printed) in code:
        return False
    given = _numerals(problem)
    return not given or bool(given & _numerals(_STRING.sub("''", code)))


def _last_printed(results: list[ExecResult]) -> str | None:
    """The last non-empty line this action's last cell printed, if that cell ran."""
    if not results or not results[-1].ok:
        return None
    lines = [line.strip() for line in results[-1].stdout.splitlines() if line.strip()]
    return lines[-1] if lines else None


def make_scenario(tasks: str | Sequence[Task] | Sequence[dict] | None = None, split: str = "train",
                  num_tasks: int = 256, task_seed: int = 0, task_source: str | None = None) -> MathChatScenario:
    """The MathChat scenario (the arguments are `MathChatEnv`'s), for team specs."""
    if task_source is not None:
        if tasks is not None:
            raise EnvArgumentError("give tasks= or its older name task_source=, not both")
        tasks = task_source
    if split not in SPLITS:
        raise EnvArgumentError(f"split={split!r} is not one of {SPLITS}")
    if isinstance(task_seed, bool) or not isinstance(task_seed, int):
        raise EnvArgumentError(f"task_seed must be an integer, got {task_seed!r}")
    return MathChatScenario(load_task_source("synthetic" if tasks is None else tasks, split, num_tasks, task_seed))


class MathChatEnv(PipelineEnv):
    """MathChat-v0: the shipped spec "mathchat" on the MathChat scenario. See the module docstring.

    Args:
        tasks: "synthetic" (the offline default), a JSON/JSONL file of {prompt, answer} records,
            "hf:<dataset id>[:<split>]", a list of `Task`, or a list of such records (dicts).
        task_source: an older name for `tasks` (give one of the two).
        split: "train", "eval" or "all" (a stable holdout by problem text; lists are used as given).
        num_tasks, task_seed: how many synthetic problems, and their seed.
        executor_max_actions: most actions the Code Executor may take in its turn.
        Everything else goes to `PipelineEnv` (coach, sandbox, reward_mode, limits, render_mode).
    """

    def __init__(self, tasks: str | Sequence[Task] | Sequence[dict] | None = None, split: str = "train",
                 num_tasks: int = 256, task_seed: int = 0, executor_max_actions: int = 3,
                 task_source: str | None = None, **kwargs: Any):
        if isinstance(executor_max_actions, bool) or not isinstance(executor_max_actions, int) \
                or executor_max_actions < 1:
            raise EnvArgumentError(f"executor_max_actions must be an integer >= 1, got {executor_max_actions!r}")
        no_team_argument("MathChat-v0", "mappa_envs.mathchat.env:make_scenario", kwargs)
        scenario = make_scenario(tasks, split, num_tasks, task_seed, task_source)
        team = load_team("mathchat").with_max_actions({EXECUTOR: executor_max_actions})
        super().__init__(scenario, team=team, **kwargs)
