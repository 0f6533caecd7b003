"""The typed records a `PipelineEnv` builds and exposes: roles, tasks, limits, actions and the outcome.

Consumers (trainers, evaluators, wrappers) read these objects instead of string keys: after each
`step()`, `env.unwrapped.last_action` is the `ActionRecord` of that action and, once the episode has
ended, `env.unwrapped.outcome` is its `Outcome`. The same content stays in `infos[agent]["action"]`
and `infos[agent]["outcome"]` as plain dicts (`to_info()`) for plain PettingZoo users.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Protocol

from mappa_envs.coach.types import CoachScore
from mappa_envs.errors import EnvArgumentError
from mappa_envs.sandbox.types import ExecResult, SandboxSession


@dataclass(frozen=True)
class Role:
    """One agent of the team."""

    name: str
    duties: str  # the role's instructions (its system prompt)
    tools: bool = False  # may run ```python blocks in the sandbox
    max_actions: int = 1  # most actions in one turn
    sees: tuple[str, ...] = ()  # other roles whose final output it is shown (a spec's default: all upstream)
    kernel: str = "main"  # the sandbox interpreter its code runs in


@dataclass(frozen=True)
class Task:
    """One problem. `answer` is the ground truth (never shown to agents); `meta` is free-form."""

    id: str
    prompt: str
    answer: Any = None
    meta: dict = field(default_factory=dict)


@dataclass
class Outcome:
    """The scenario's ground-truth verdict on a finished episode. `score` is in [0, 1]."""

    score: float
    correct: bool | None = None
    details: dict = field(default_factory=dict)  # env-specific: predicted/gold answer, metric values, failure

    def to_info(self) -> dict:
        """The dict in `infos[agent]["outcome"]`: score, correct and the details, flat."""
        return {"score": self.score, "correct": self.correct, **self.details}


@dataclass
class ActionRecord:
    """What happened to one action: its text, tool results, the env's checks and the coach's verdict."""

    role: str
    index: int  # position within the role's turn (0 = its first action)
    text: str  # the action as the env used it (coerced to str, cut to max_action_chars, sanitized)
    tool_results: list[ExecResult]
    checks: dict[str, bool]  # verifiable facts the env computed (answer_correct, submission_valid, ...)
    coach: CoachScore | None  # None when the coach was not asked (reward_mode="outcome")
    reward: float  # the coach's score for this action (0 when it failed or was not asked)
    input_error: str | None = None  # what was wrong with the action as given (not a str, too long, ...)
    env_errors: list[str] = field(default_factory=list)  # failures of the env's own work on this action
    share: float | None = None  # reward_mode="backprop": its share of 10 x outcome, set when the episode ends

    def render(self) -> str:
        """The action as `env.render()` shows it: text, tool output, coach verdict, problems."""
        from mappa_envs.core.tools import format_tool_output

        lines = [f"--- {self.role} (action {self.index + 1}) reward={self.reward:.2f}", self.text]
        if self.tool_results:
            lines.append(">>> tool output\n" + format_tool_output(self.tool_results))
        if self.coach is not None:
            lines.append(f">>> coach: {self.coach.score} {self.coach.rationale}")
        if self.input_error:
            lines.append(f">>> input error: {self.input_error}")
        lines += [f">>> env error: {e}" for e in self.env_errors]
        return "\n".join(lines)

    def to_info(self, timings: bool = False) -> dict:
        """The dict in `infos[agent]["action"]` (wall-clock figures only with `timings`)."""
        return {
            "role": self.role,
            "index": self.index,
            "tool_results": [r.to_dict(timings=timings) for r in self.tool_results],
            "checks": dict(self.checks),
            "coach": self.coach.to_dict(timings=timings) if self.coach else None,
            "reward": self.reward,
            "input_error": self.input_error,
            "env_errors": list(self.env_errors),
            "share": self.share,
        }


@dataclass
class Episode:
    """Everything that happened so far; scenarios read it to compute checks and the outcome."""

    task: Task
    session: SandboxSession
    actions: list[ActionRecord] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)  # role -> its turn: actions and tool output
    file_owners: dict[str, str] = field(default_factory=dict)  # workspace path -> its last writer (or "task")
    file_history: dict[str, list[str]] = field(default_factory=dict)  # workspace path -> every writer, in order
    outcome: Outcome | None = None
    state: dict = field(default_factory=dict)  # scenario-private scratch space
    held: list = field(default_factory=list)  # reward_mode="backprop": each action's CoachRequest, judged at the end


class Scenario(Protocol):
    """What makes MathChat differ from DSBench: tasks, workspace set-up, checks, outcome.

    `roles` is the team used when the env is given none (a chain in that order); with a team spec
    (`core.team`) the spec's roles act instead. A scenario may also have `bind(team)`, called once
    with the env's `Team` (to learn role names and the order, or to refuse a team it cannot judge
    with a `SpecError`), `task_prompt_for(task, role)`, the task as that role is shown it (absent:
    `task_prompt(task)` for every role), and `preimport: tuple[str, ...]`, the modules the default
    sandbox's kernels import before the first cell (absent: the backend's data-science default).
    """

    env_id: str
    roles: tuple[Role, ...]

    def tasks(self) -> Sequence[Task]: ...
    def prepare(self, episode: Episode) -> None: ...  # put the task's files in the workspace
    def task_prompt(self, task: Task) -> str: ...
    def checks(self, episode: Episode, role: Role, action: str, results: list[ExecResult]) -> dict[str, bool]: ...
    def outcome(self, episode: Episode) -> Outcome: ...
    def coach_evidence(self, episode: Episode, role: Role) -> dict: ...  # extra CoachRequest fields


@dataclass(frozen=True)
class EpisodeLimits:
    """Truncation limits and caps on what the env handles. Wall time is off by default so that
    seeded runs are reproducible."""

    max_action_chars: int = 16_000  # longer actions are cut (noted in infos)
    max_total_actions: int = 32
    max_transcript_chars: int = 400_000
    max_wall_s: float | None = None
    cell_timeout_s: float = 10.0
    max_read_bytes: int = 64 << 20  # the largest workspace file the env reads back (a submission, say)
    coach_field_chars: int = 24_000  # each untrusted text field of a CoachRequest is clipped to this
    coach_max_files: int = 200  # the workspace file list sent to the coach is cut to this many entries

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if value is None and f.name == "max_wall_s":
                continue
            number = (int,) if f.type == "int" else (int, float)
            if isinstance(value, bool) or not isinstance(value, number) or not 0 < value < math.inf:
                kind = "an integer" if f.type == "int" else "a finite number"
                raise EnvArgumentError(f"limits.{f.name} must be {kind} > 0, got {value!r}")

    @classmethod
    def coerce(cls, value: Any) -> EpisodeLimits:
        """`value` as limits: None (the defaults), an `EpisodeLimits`, or a dict of its fields."""
        if value is None:
            return cls()
        if isinstance(value, cls):
            return value
        if isinstance(value, dict):
            known = [f.name for f in fields(cls)]
            unknown = sorted(set(value) - set(known))
            if unknown:
                raise EnvArgumentError(f"limits: unknown field(s) {unknown}; the fields are {known}")
            return cls(**value)
        raise EnvArgumentError(f"limits must be an EpisodeLimits or a dict of its fields, got {type(value).__name__}")


__all__ = ["ActionRecord", "Episode", "EpisodeLimits", "Outcome", "Role", "Scenario", "Task"]
