"""The coach's request and verdict, and the Protocol every coach implements."""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol, runtime_checkable

INPUTS_READY = "inputs_ready"  # a check a scenario may report: False when an upstream role broke the action's inputs
CHECKS_RAN = "checks_ran"  # set by the env, False only: the scenario's checks raised on the action (it is paid 0)


def is_score(x: Any) -> bool:
    """A verdict on the coach's scale: a finite number from 0 to 10 (True and False are not numbers here)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) and 0.0 <= x <= 10.0


def excused(checks: dict[str, bool]) -> bool:
    """The scenario says the action's inputs were broken upstream: it could not succeed, so it is not
    judged as its own failure (the trainer leaves it out of the loss, `mappa blame` out of the table)."""
    return checks.get(INPUTS_READY) is False


@dataclass
class CoachRequest:
    """Everything the coach needs to score one action of one agent.

    `checks` are verifiable facts the environment computed itself (e.g. "code_ran", "answer_present",
    "answer_correct", "submission_valid", "beats_baseline"): the rule coach scores from them, and the
    LLM coach is shown them as evidence.
    """

    env_id: str
    role: str
    role_duties: str
    task: str
    action: str
    context: str = ""  # the prompt the agent saw before this action
    tool_results: list[dict] = field(default_factory=list)  # ExecResult.to_dict() per tool call
    files: dict[str, str] = field(default_factory=dict)  # workspace path -> role that wrote it last
    files_omitted: int = 0  # workspace files left out of `files` (the env caps the list)
    upstream: dict[str, str] = field(default_factory=dict)  # earlier role -> its final output
    ground_truth: Any = None  # the reference answer, when the dataset has one
    metrics: dict[str, Any] | None = None  # ground-truth metrics of the outcome (DSBench)
    checks: dict[str, bool] = field(default_factory=dict)
    ask_answer_correct: bool = False  # the coach should also say whether the final answer is right
    action_index: int = 0  # this action's position within the role's turn
    is_final_action: bool = False  # the last action of the whole episode
    team: str = ""  # the team's topology in words (order, fan-in, loops), so blame can follow the hand-offs

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CoachScore:
    """A verdict. `ok=False` means no score could be had: `score` is None and `error` says why."""

    score: float | None
    rationale: str = ""
    answer_correct: bool | None = None
    ok: bool = True
    error: str | None = None
    attempts: int = 1
    latency_s: float = 0.0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached: bool = False
    cost_usd: float = 0.0  # what this call cost at the coach's configured prices (0 on a cache hit)

    def to_dict(self, timings: bool = False) -> dict:
        d = asdict(self)
        if not timings:  # wall-clock figures break seeded determinism checks on infos
            d.pop("latency_s")
        return d


@runtime_checkable
class Coach(Protocol):
    """Scores one action 0-10. Envs call `score`; trainers may gather many `ascore` calls at once."""

    def score(self, request: CoachRequest) -> CoachScore: ...
    async def ascore(self, request: CoachRequest) -> CoachScore: ...
