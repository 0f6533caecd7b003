"""Chain-v0: a team of `depth` agents; agent k applies step k of a multi-step problem and passes its value on.

A task is a start value and `depth` steps ("multiply by 3", "add 4", ...). Agent `step_k` sees the
task and the output of `step_{k-1}` only (the value handed on, not the whole history: prompts stay
short at depth 32). With `view="all"` the task is the start value and every step, and the agent picks
its own line; with `view="own"` it is shown only its own step (and step_1 the start value), which
leaves a small model the arithmetic and the hand-off to learn, not finding line k of a list. It may
check its arithmetic in the sandbox (```python blocks, `max_actions` per turn), and ends its turn
with the new value as \\boxed{VALUE}. The team is a generated chain spec
(`chain_spec`), so the same family runs under `Team-v0` with any other order.

What a step hands on is one value, read one way (`stated_value`) from the action that closes its
turn: the value it is paid for, the value the next step is judged against, and, for the last step,
the team's answer. Steps are judged by the role's name (`step_k` does step k, handed on by
`step_{k-1}`), whatever the acting order; the scenario refuses (one `SpecError` line at make()) a
team where `step_k` does not act after `step_{k-1}` or is not shown its output, or a role has no step.

Checks, per action (the rule coach scores them):
- `answer_present`: the turn's closing action states a value.
- `step_correct`: that value is this agent's step applied to the value it was handed (the start
  value for `step_1`): its own step, right or wrong whatever came before; credit stays local.
- `step_computed`: an action with code: its cells ran and the last integer they printed is the step's
  value, which no cell spells out in any sign or form (filler like `print(0)`, an echo of the handed
  value, a copied number, `print(0x9)`, `print(--9)` or printing every number fail);
  `new_work` False on a further cell once a cell of the turn has computed it (padding).
- `inputs_ready`: False when the previous agent handed on no value (the action is then not judged).
The outcome is the value the last step hands on against the true final value (score 1 or 0): team
success needs every step right, so it gets sparser with depth while every action keeps a checkable score.

Splits: "train" and "eval" are draws of the same distribution (even start values), disjoint by problem
(a problem's split is a hash of its start and steps, 1 in 5 held out), so "eval" measures learning;
"shift" starts from odd values (the former "eval"), a distribution shift reported beside "eval".
"""
from __future__ import annotations

import ast
import hashlib
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mappa_envs.coach.types import INPUTS_READY
from mappa_envs.core.pipeline import Episode, EpisodeLimits, Outcome, PipelineEnv, Role, Task
from mappa_envs.core.team import Team, no_team_argument
from mappa_envs.core.tools import extract_code_blocks
from mappa_envs.errors import EnvArgumentError, SpecError
from mappa_envs.mathchat.answers import extract_answer
from mappa_envs.sandbox.types import ExecResult

MAX_DEPTH = 128
MIN_MAX_VALUE = 20  # the largest start value
OPS = {"add": "add {k}", "sub": "subtract {k}", "mul": "multiply by {k}"}
ROLE_PROMPT = """You are {name}, agent {k} of {n} in a chain that solves a multi-step arithmetic problem.
Apply step {k} of the task (and only that step) to the value the previous agent handed you{first}.
You may check the arithmetic in ```python fenced blocks (you see their output before your next action).
End your turn with the new value, an integer, as \\boxed{{VALUE}}: the next agent works from it."""


def role_name(k: int) -> str:
    return f"step_{k}"


_ROLE = re.compile(r"^step_([1-9]\d{0,3})\Z")


def step_number(role: str) -> int | None:
    """k of the role `step_k` (the step it does), or None for any other name."""
    m = _ROLE.match(role)
    return int(m.group(1)) if m else None


def apply(op: str, k: int, value: int) -> int:
    return value + k if op == "add" else value - k if op == "sub" else value * k


SPLITS = ("train", "eval", "shift")
HELD_OUT_SHARE = 0.2  # of the problems with even start values: "eval", the rest "train"
VIEWS = ("all", "own")

# The task's wording, written here and read back by `read_step` (the scripted team): one format.
START_LINE = "Start value: {start}"
OWN_STEP_LINE = "Your step (step {k} of {n}): {step}"
_OP_OF = {template.split(" {")[0]: op for op, template in OPS.items()}  # "multiply by" -> "mul"
_STEP = re.compile(rf"({'|'.join(_OP_OF)}) (\d+)$")
_START = re.compile(r"^Start value: (-?\d+)$", re.MULTILINE)
_OWN = re.compile(r"^Your step \(step \d+ of \d+\): (.+)$", re.MULTILINE)


def task_text(start: int, steps: Sequence[tuple[str, int]]) -> str:
    """The whole task, as the "all" view shows it."""
    lines = "\n".join(f"{j}. {OPS[op].format(k=k)}" for j, (op, k) in enumerate(steps, 1))
    return f"{START_LINE.format(start=start)}\nSteps (agent k applies step k to the value it is handed):\n{lines}"


def own_step_text(start: int, steps: Sequence[tuple[str, int]], k: int) -> str:
    """Agent k's step alone (1-based), as the "own" view shows it; step 1 also gets the start value."""
    op, n = steps[k - 1]
    line = OWN_STEP_LINE.format(k=k, n=len(steps), step=OPS[op].format(k=n))
    return f"{START_LINE.format(start=start)}\n{line}" if k == 1 else line


def read_step(text: str, k: int) -> tuple[str, int, int | None] | None:
    """(op, operand, start value or None) of agent k, read back from the task in either view."""
    line = _OWN.search(text) or re.search(rf"^{k}\. (.+)$", text, re.MULTILINE)
    step = _STEP.match(line.group(1)) if line else None
    if step is None:
        return None
    start = _START.search(text)
    return _OP_OF[step.group(1)], int(step.group(2)), int(start.group(1)) if start else None


def held_out(start: int, steps: Sequence[tuple[str, int]]) -> bool:
    """Whether a problem belongs to the held-out share: a hash of the problem alone (no seed, no size),
    so "train" and "eval" never share a problem and both are the same distribution."""
    digest = hashlib.blake2b(repr((start, tuple(steps))).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") < HELD_OUT_SHARE * 2**64


def _draw_steps(rng: random.Random, start: int, depth: int, max_value: int | None) -> tuple[list, list[int]]:
    ceiling = 10_000 if max_value is None else max_value
    value, steps, values = start, [], []
    for _ in range(depth):
        op = rng.choice(("add", "sub", "mul"))
        k = rng.randint(2, 4) if op == "mul" else rng.randint(1, 9)
        if (op == "mul" and value * k > ceiling) or (op == "sub" and value - k < 0):
            op, k = "add", rng.randint(1, 9)
        if max_value is not None and op == "add" and value + k > max_value:
            op = "sub"  # value <= max_value and max_value >= MIN_MAX_VALUE, so it stays >= 0
        value = apply(op, k, value)
        steps.append((op, k))
        values.append(value)
    return steps, values


def chain_tasks(depth: int, num_tasks: int, seed: int, split: str = "train",
                max_value: int | None = None) -> list[Task]:
    """`num_tasks` problems of `depth` steps; values stay integers in [0, 10_000 + 9 * depth], or with
    `max_value` in [0, max_value]: later steps then handle numbers as small as earlier ones, so a step is
    as hard at depth 8 as at depth 2 (without it the values grow along the chain).

    "train" and "eval" draw from one distribution (even start values) and keep the problems of their own
    share (`held_out`): disjoint by problem whatever their sizes and seeds. "shift" starts from odd values
    (so it shares no problem with either); its tasks are the former "eval" split's, draw for draw."""
    if split not in SPLITS:
        raise EnvArgumentError(f"split={split!r} is not one of {SPLITS}")
    stream = {"train": "train", "eval": "heldout", "shift": "eval"}[split]  # "shift" keeps the old odd-start draws
    rng = random.Random(f"chain/{depth}/{seed}/{stream}")
    tasks: list[Task] = []
    while len(tasks) < num_tasks:
        start = rng.randrange(3 if split == "shift" else 2, 21, 2)
        for _ in range(1_000):  # the start value is kept (its distribution is the same in every split) ...
            steps, values = _draw_steps(rng, start, depth, max_value)
            if split == "shift" or held_out(start, steps) == (split == "eval"):
                break
        else:  # ... unless none of its problems is in this split (a tiny space: depth 1)
            continue
        tasks.append(Task(f"chain{depth}-{seed}-{split}-{len(tasks)}", task_text(start, steps), answer=str(values[-1]),
                          meta={"start": start, "steps": steps, "values": values}))
    return tasks


def chain_spec(depth: int, max_actions: int = 2) -> dict:
    """The team spec of a chain of `depth` agents: each sees only the one before it."""
    roles = [{"name": role_name(k), "tools": True, "max_actions": max_actions,
              "sees": [role_name(k - 1)] if k > 1 else [],
              "prompt": ROLE_PROMPT.format(name=role_name(k), k=k, n=depth,
                                           first=" (step 1: the start value)" if k == 1 else "")}
             for k in range(1, depth + 1)]
    return {"name": "Chain-v0", "description": f"a chain of {depth} agents, one arithmetic step each",
            "scenario": "mappa_envs.chain.env:make_scenario", "scripted": "mappa_envs.chain.scripted:for_env",
            "scenario_args": {"depth": depth}, "roles": roles}


def stated_value(text: str | None) -> int | None:
    """The integer an action states (its last \\boxed{}, else a "Final answer:" line), or None. The one
    reading of a hand-off: a step is paid for the value its closing action states, and that same value
    is what the next step is judged against and, for the last step, the team's answer."""
    answer = extract_answer(text) if text else None
    try:
        return int(answer.replace(",", "").strip()) if answer is not None else None
    except ValueError:
        return None


def handed_on(episode: Episode, role: str) -> int | None:
    """The value `role` handed on: what the last action of its latest turn states (None before it acted)."""
    last = next((a for a in reversed(episode.actions) if a.role == role), None)
    return None if last is None else stated_value(last.text)


# An integer as printed; longer runs of digits than Python converts by default are no value of a chain
# (and int() would raise on them).
_INT = re.compile(r"(?<![\w.])-?\d{1,4000}(?![\w.])")


def _computes(blocks: list[str], results: list[ExecResult], value: int, operands: tuple[int, int]) -> bool:
    """The cells ran, the last integer they printed is `value` (printing every number is no answer), and
    no cell spells `value` out, in any sign or form, besides the step's own operands (else the print is a
    copy). Signs are ignored both ways: `--7` and `abs(-7)` are copies of 7, and `print(2 - 4)` computes
    -2 although the handed value is 2."""
    printed = [int(t) for r in results for t in _INT.findall(r.stdout or "")]
    spelled = {int(t) for b in blocks for t in _INT.findall(b)}.union(*(_numbers(b) for b in blocks))
    written = {abs(n) for n in spelled} - {abs(n) for n in operands}
    return bool(results) and all(r.ok for r in results) and printed[-1:] == [value] and abs(value) not in written


def _numbers(block: str) -> set[int]:
    """The integers a cell's number literals stand for, as Python reads them: `0x9`, `1_5`, `9.0`, and both
    integers beside a fraction (`int(7.5)`) or in a complex number (`7j.imag`)."""
    try:
        tree = ast.parse(block)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return set()  # a cell that does not parse does not run: it computes nothing either way
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or type(node.value) not in (int, float, complex):
            continue
        for part in (node.value.real, node.value.imag) if type(node.value) is complex else (node.value,):
            if type(part) is int:
                found.add(part)
            elif math.isfinite(part) and abs(part) < 2**63:  # a float near a chain value, not 1e300
                found |= {math.floor(part), math.ceil(part)}
    return found


@dataclass
class ChainScenario:
    task_list: Sequence[Task]
    view: str = "all"
    env_id: str = "Chain-v0"
    preimport: tuple[str, ...] = ()
    roles: tuple[Role, ...] = field(default=())  # the team comes from the spec (bind)

    def bind(self, team: Team) -> None:
        """Refuse a team this scenario cannot judge: every role is a step (`step_1` ... `step_N`, N the
        tasks' depth), and `step_k` acts after `step_{k-1}` and is shown its output (the value it is
        judged against)."""
        depth = len(self.task_list[0].meta["steps"])
        expected = [role_name(k) for k in range(1, depth + 1)]
        names = team.names
        extra, missing = sorted(set(names) - set(expected)), sorted(set(expected) - set(names))
        if extra or missing:
            why = f"role(s) {extra} have no step" if extra else f"role(s) {missing} are missing"
            raise SpecError(f"{team.name}: the chain scenario judges the roles {expected[0]} ... {expected[-1]} "
                            f"(depth {depth}), one step each; {why}")
        position = {n: i for i, n in enumerate(names)}
        by_name = {r.name: r for r in team.roles}
        for k in range(2, depth + 1):
            before, here = role_name(k - 1), role_name(k)
            if position[before] > position[here]:
                raise SpecError(f"{team.name}: {here} acts before {before}, whose value it is judged against; "
                                f"add the flow edge {before} -> {here}")
            if before not in by_name[here].sees:
                raise SpecError(f"{team.name}: {here} is judged against the value {before} hands on but is not "
                                f"shown it; add {before} to its sees")
        self.roles = team.roles

    def tasks(self) -> Sequence[Task]:
        return self.task_list

    def prepare(self, episode: Episode) -> None:
        pass

    def task_prompt(self, task: Task) -> str:
        return task.prompt

    def task_prompt_for(self, task: Task, role: Role) -> str:
        if self.view == "all":
            return task.prompt
        return own_step_text(task.meta["start"], task.meta["steps"], step_number(role.name))

    def handed(self, episode: Episode, role: str) -> int | None:
        """The value `role` (step k) is judged against: the start value, or what step k-1 handed on."""
        k = step_number(role)
        return episode.task.meta["start"] if k == 1 else handed_on(episode, role_name(k - 1))

    def checks(self, episode: Episode, role: Role, action: str, results: list[ExecResult]) -> dict[str, bool]:
        earlier = 0
        for a in reversed(episode.actions):
            if a.role != role.name:
                break
            earlier += 1
        given = self.handed(episode, role.name)
        op, k = episode.task.meta["steps"][step_number(role.name) - 1]
        right = apply(op, k, given) if given is not None else None
        blocks = extract_code_blocks(action) if role.tools else []  # as the env runs them: none without tools
        checks: dict[str, bool] = {INPUTS_READY: given is not None}
        if blocks and right is not None:
            # A cell earns only when it computes the step: it prints the new value, which its code does not
            # spell out (a copy). Once a cell of this turn has, more cells are padding.
            done = any(a.checks.get("step_computed") for a in episode.actions[len(episode.actions) - earlier:])
            if done:
                checks["new_work"] = False
            else:
                checks["step_computed"] = _computes(blocks, results, right, (given, k))
        if blocks and earlier + 1 < role.max_actions:
            return checks  # working: the value comes in a later action of the turn
        stated = stated_value(action)  # this action closes the turn: what it states is handed on
        checks["answer_present"] = stated is not None
        if right is not None:
            checks["step_correct"] = stated == right
        return checks

    def outcome(self, episode: Episode) -> Outcome:
        values = episode.task.meta["values"]
        stated = [handed_on(episode, role_name(k)) for k in range(1, len(values) + 1)]
        predicted, gold = stated[-1], int(episode.task.answer)
        first_wrong = next((role_name(k) for k, v in enumerate(stated, 1) if v != values[k - 1]), None)
        return Outcome(score=float(predicted == gold), correct=predicted == gold,
                       details={"predicted": predicted, "gold": gold, "task_id": episode.task.id,
                                "first_wrong_step": first_wrong})

    def coach_evidence(self, episode: Episode, role: Role) -> dict:
        return {}


def make_scenario(depth: int = 4, num_tasks: int = 256, task_seed: int = 0, split: str = "train",
                  view: str = "all", max_value: int | None = None) -> ChainScenario:
    bounds = [("depth", depth, 1, MAX_DEPTH), ("num_tasks", num_tasks, 1, 1_000_000)]
    if max_value is not None:
        bounds.append(("max_value", max_value, MIN_MAX_VALUE, 10_000))
    for name, value, low, high in bounds:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise EnvArgumentError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    if isinstance(task_seed, bool) or not isinstance(task_seed, int):
        raise EnvArgumentError(f"task_seed must be an integer, got {task_seed!r}")
    if split not in SPLITS:
        raise EnvArgumentError(f"split={split!r} is not one of {SPLITS}: 'eval' is held out from the training "
                               "distribution, 'shift' starts from odd values (a distribution shift)")
    if view not in VIEWS:
        raise EnvArgumentError(f"view={view!r} is not one of {VIEWS}: 'all' shows every agent every step, "
                               "'own' only its own")
    return ChainScenario(chain_tasks(depth, num_tasks, task_seed, split, max_value), view=view)


class ChainEnv(PipelineEnv):
    """Chain-v0. See the module docstring.

    Args:
        depth: how many agents (and steps), 1 to 128.
        num_tasks, task_seed: how many problems, and their seed.
        split: "train", "eval" (held out: the same distribution, disjoint by problem) or "shift" (odd start
            values: a distribution shift, to report beside "eval").
        view: "all" (each agent is shown every step) or "own" (only its own step).
        max_value: keep every value in [0, max_value] (20 to 10,000; default: let them grow along the chain).
        max_actions: most actions per agent's turn (code, then the value).
        limits: default: room for every agent's full turn.
        Everything else goes to `PipelineEnv` (coach, sandbox, reward_mode, render_mode, ...).
    """

    def __init__(self, depth: int = 4, num_tasks: int = 256, task_seed: int = 0, split: str = "train",
                 view: str = "all", max_value: int | None = None, max_actions: int = 2,
                 limits: EpisodeLimits | dict | None = None, **kwargs: Any):
        if isinstance(max_actions, bool) or not isinstance(max_actions, int) or max_actions < 1:
            raise EnvArgumentError(f"max_actions must be an integer >= 1, got {max_actions!r}")
        no_team_argument("Chain-v0", "mappa_envs.chain.env:make_scenario", kwargs)
        scenario = make_scenario(depth, num_tasks, task_seed, split, view, max_value)
        if limits is None:
            limits = {"max_total_actions": depth * max_actions + 1}
        super().__init__(scenario, team=chain_spec(depth, max_actions), limits=limits, **kwargs)
