"""PipelineEnv: a sequential team of LLM agents as a PettingZoo AEC environment.

Roles act in order. A role with tools keeps acting until it writes an action with no tool call or
uses up its `max_actions`; after each action it sees its tool output. Every action is scored by the
coach (the process reward). After the last role the scenario judges the outcome (ground truth).

What varies between environments — roles, tasks, workspace set-up, verifiable checks, the outcome —
lives in a `Scenario` (a Protocol); this class owns only the turn-taking, the sandbox session, the
coach call and the PettingZoo bookkeeping. Other topologies (a DAG, loops back) would replace
`_next_role` and `Role.sees`; nothing else assumes a straight line.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, Sequence

import numpy as np
from pettingzoo import AECEnv

from mappa_envs.coach.types import Coach, CoachRequest, CoachScore
from mappa_envs.core.spaces import LLMText, prompt_space
from mappa_envs.core.tools import extract_code_blocks, format_tool_output
from mappa_envs.sandbox.types import ExecResult, Sandbox, SandboxSession

RewardMode = Literal["process", "outcome", "process+outcome"]
REWARD_MODES = ("process", "outcome", "process+outcome")


@dataclass(frozen=True)
class Role:
    """One agent of the team."""

    name: str
    duties: str  # the role's instructions (its system prompt)
    tools: bool = False  # may run ```python blocks in the sandbox
    max_actions: int = 1  # most actions in one turn
    sees: tuple[str, ...] = ()  # earlier roles whose final output it is shown
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
    details: dict = field(default_factory=dict)


@dataclass
class ActionRecord:
    role: str
    index: int  # position within the role's turn
    text: str
    tool_results: list[ExecResult]
    checks: dict[str, bool]
    coach: CoachScore | None
    reward: float
    input_error: str | None = None


@dataclass
class Episode:
    """Everything that happened so far; scenarios read it to compute checks and the outcome."""

    task: Task
    session: SandboxSession
    actions: list[ActionRecord] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)  # role -> its turn: actions and tool output
    file_owners: dict[str, str] = field(default_factory=dict)  # workspace path -> role (or "task")
    outcome: Outcome | None = None
    state: dict = field(default_factory=dict)  # scenario-private scratch space


class Scenario(Protocol):
    """What makes MathChat differ from DSBench.

    A scenario may also set `preimport: tuple[str, ...]`, the modules the default sandbox's kernels
    import before the first cell (absent: the backend's data-science default).
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
    """Truncation limits. Wall time is off by default so that seeded runs are reproducible."""

    max_action_chars: int = 16_000  # longer actions are cut (noted in infos)
    max_total_actions: int = 32
    max_transcript_chars: int = 400_000
    max_wall_s: float | None = None
    cell_timeout_s: float = 10.0


def render_messages(messages: list[dict]) -> str:
    """Plain-text rendering of chat messages: the observation's prompt."""
    return "\n\n".join(f"### {m['role']}\n{m['content']}" for m in messages)


class PipelineEnv(AECEnv):
    """A team of agents acting in turn on one task; see the module docstring.

    Args:
        scenario: the environment's content (roles, tasks, checks, outcome).
        coach: scores each action 0-10 (default: the offline `RuleCoach`).
        sandbox: runs tool calls (default: `make_sandbox("local")`, closed with the env).
        reward_mode: "process" (coach score per action, the paper), "outcome" (10 x ground-truth
            score to every agent at the end), or "process+outcome" (both).
        limits: truncation limits.
        timings_in_infos: add wall-clock durations to `infos` (off: it breaks seeded comparisons).
    """

    metadata = {"render_modes": ["human", "ansi"], "is_parallelizable": False}

    def __init__(
        self,
        scenario: Scenario,
        coach: Coach | None = None,
        sandbox: Sandbox | str | None = None,
        reward_mode: RewardMode = "process",
        limits: EpisodeLimits | None = None,
        render_mode: str | None = None,
        timings_in_infos: bool = False,
    ):
        super().__init__()
        if reward_mode not in REWARD_MODES:
            raise ValueError(f"reward_mode={reward_mode!r} is not one of {REWARD_MODES}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise ValueError(f"render_mode={render_mode!r} is not one of {self.metadata['render_modes']}")
        self.scenario = scenario
        self.metadata = {**self.metadata, "name": scenario.env_id}
        self.reward_mode = reward_mode
        self.limits = limits or EpisodeLimits()
        self.render_mode = render_mode
        self.timings_in_infos = timings_in_infos
        if coach is None:
            from mappa_envs.coach.rule import RuleCoach

            coach = RuleCoach()
        self.coach = coach
        self._own_sandbox = sandbox is None or isinstance(sandbox, str)
        if self._own_sandbox:
            from mappa_envs.sandbox import make_sandbox

            # Scenarios say which modules their kernels should have pre-imported (pandas costs ~1 s a start).
            preimport = getattr(scenario, "preimport", None)
            options = {} if preimport is None else {"preimport": tuple(preimport)}
            sandbox = make_sandbox(sandbox or "local", timeout_s=self.limits.cell_timeout_s, **options)
        self.sandbox = sandbox
        self.roles = {r.name: r for r in scenario.roles}
        self.possible_agents = [r.name for r in scenario.roles]
        self._obs_space = prompt_space(max_length=self.limits.max_transcript_chars + 100_000)
        self._act_space = LLMText(max_length=self.limits.max_action_chars)
        self._rng = np.random.default_rng()
        self._session_cm = None
        self.episode: Episode | None = None

    # --- PettingZoo API --------------------------------------------------------------------------

    def observation_space(self, agent: str):
        return self._obs_space

    def action_space(self, agent: str):
        return self._act_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            self._obs_space.seed(seed)
            self._act_space.seed(seed)
        self._close_session()
        task = self._pick_task(options or {})
        self._session_cm = self.sandbox.session()
        session = self._session_cm.__enter__()
        self.episode = Episode(task=task, session=session)
        self.scenario.prepare(self.episode)
        self._started = time.monotonic()
        self._transcript_chars = 0

        self.agents = list(self.possible_agents)
        self.rewards = {a: 0.0 for a in self.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.agents}
        self.terminations = {a: False for a in self.agents}
        self.truncations = {a: False for a in self.agents}
        self.infos = {a: {"task_id": task.id, "messages": []} for a in self.agents}
        self._messages: dict[str, list[dict]] = {}
        self._turn_actions = 0
        self.agent_selection = self.agents[0]
        self._begin_turn(self.agent_selection)

    def observe(self, agent: str) -> dict:
        return {"prompt": render_messages(self._messages.get(agent, []))}

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        ep = self.episode
        role = self.roles[agent]
        self._cumulative_rewards[agent] = 0.0
        self.rewards = {a: 0.0 for a in self.agents}

        text, input_error = self._clean_action(action)
        code = extract_code_blocks(text) if role.tools else []
        results = self._run_cells(role, code)
        checks = self.scenario.checks(ep, role, text, results)
        self._turn_actions += 1
        # What later roles see of this turn: every action, with its tool output.
        piece = f"{text}\n\nOutput of the code:\n{format_tool_output(results)}" if results else text
        ep.outputs[agent] = piece if self._turn_actions == 1 else f"{ep.outputs[agent]}\n\n{piece}"
        continues = bool(code) and self._turn_actions < role.max_actions
        finished = not continues and agent == self.possible_agents[-1]
        truncated = self._over_limits(text, results) and not finished  # a limit hit by the last action is no cut
        done = finished or truncated
        if done:
            ep.outcome = self.scenario.outcome(ep)

        coach = None
        reward = 0.0
        if self.reward_mode != "outcome":
            coach = self.coach.score(self._coach_request(role, text, results, checks, done))
            reward = float(coach.score) if coach.ok and coach.score is not None else 0.0
        record = ActionRecord(agent, self._turn_actions - 1, text, results, checks, coach, reward, input_error)
        ep.actions.append(record)
        self.rewards[agent] = reward
        self.infos[agent] = {**self.infos[agent], "action": self._record_info(record)}

        if continues and not done:
            self._messages[agent] += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": "Output of your code:\n" + format_tool_output(results)},
            ]
            self.infos[agent]["messages"] = list(self._messages[agent])
        elif done:
            self._finish(truncated)
        else:
            self.agent_selection = self.possible_agents[self.possible_agents.index(agent) + 1]
            self._begin_turn(self.agent_selection)
        self._accumulate_rewards()
        if self.render_mode == "human":
            print(self._render_action(record))

    def render(self) -> str | None:
        if self.episode is None:
            return None
        text = f"=== {self.scenario.env_id} task {self.episode.task.id} ===\n"
        text += "\n".join(self._render_action(a) for a in self.episode.actions)
        if self.episode.outcome is not None:
            o = self.episode.outcome
            text += f"\n=== outcome: score {o.score:.3f} correct={o.correct} {o.details}"
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def transcript(self) -> dict:
        """The episode so far as a JSON-able record: task, every action with tool output and verdict, outcome."""
        ep = self.episode
        if ep is None:
            return {}
        return {
            "env_id": self.scenario.env_id,
            "task_id": ep.task.id,
            "task": ep.task.prompt,
            "ground_truth": ep.task.answer,
            "actions": [{"text": a.text, **self._record_info(a)} for a in ep.actions],
            "files": dict(ep.file_owners),
            "outcome": None if ep.outcome is None else
            {"score": ep.outcome.score, "correct": ep.outcome.correct, **ep.outcome.details},
        }

    def close(self) -> None:
        self._close_session()
        if self._own_sandbox and self.sandbox is not None:
            self.sandbox.close()

    # --- internals -------------------------------------------------------------------------------

    def _pick_task(self, options: dict) -> Task:
        tasks = self.scenario.tasks()
        if not len(tasks):
            raise ValueError(f"{self.scenario.env_id}: the task source is empty")
        if "task_id" in options:
            for t in tasks:
                if t.id == options["task_id"]:
                    return t
            raise KeyError(f"{self.scenario.env_id}: no task with id {options['task_id']!r}")
        if "task_index" in options:
            return tasks[int(options["task_index"]) % len(tasks)]
        return tasks[int(self._rng.integers(len(tasks)))]

    def _begin_turn(self, agent: str) -> None:
        role = self.roles[agent]
        ep = self.episode
        parts = [self.scenario.task_prompt(ep.task)]
        for upstream in role.sees:
            if upstream in ep.outputs:
                parts.append(f"## Output of the {upstream}\n{ep.outputs[upstream]}")
        self._messages[agent] = [
            {"role": "system", "content": role.duties},
            {"role": "user", "content": "\n\n".join(parts)},
        ]
        self._turn_actions = 0
        self.infos[agent] = {"task_id": ep.task.id, "messages": list(self._messages[agent])}

    def _clean_action(self, action: Any) -> tuple[str, str | None]:
        """Coerce any action to text; problems are reported in infos, never raised."""
        if isinstance(action, bytes):
            action = action.decode("utf-8", errors="replace")
        if not isinstance(action, str):
            return "", f"action must be a str, got {type(action).__name__}; treated as an empty action"
        error = None
        if len(action) > self.limits.max_action_chars:
            error = f"action of {len(action)} chars cut to max_action_chars={self.limits.max_action_chars}"
            action = action[: self.limits.max_action_chars]
        if "\x00" in action:
            action = action.replace("\x00", "")
            error = (error + "; " if error else "") + "NUL characters removed"
        if not action.strip():
            error = error or "empty action"
        return action, error

    def _run_cells(self, role: Role, code: list[str]) -> list[ExecResult]:
        results = []
        for cell in code:
            r = self.episode.session.run(cell, timeout=self.limits.cell_timeout_s, kernel=role.kernel)
            results.append(r)
            if not r.ok:  # like a notebook's "run all": stop at the first failing cell
                break
        return results

    def _over_limits(self, text: str, results: list[ExecResult]) -> bool:
        self._transcript_chars += len(text) + sum(len(r.stdout) + len(r.stderr) for r in results)
        lim = self.limits
        return (
            len(self.episode.actions) + 1 >= lim.max_total_actions
            or self._transcript_chars > lim.max_transcript_chars
            or (lim.max_wall_s is not None and time.monotonic() - self._started > lim.max_wall_s)
        )

    def _coach_request(self, role: Role, text: str, results: list[ExecResult], checks: dict, final: bool) -> CoachRequest:
        ep = self.episode
        return CoachRequest(
            env_id=self.scenario.env_id,
            role=role.name,
            role_duties=role.duties,
            task=ep.task.prompt,
            action=text,
            context=render_messages(self._messages[role.name]),
            tool_results=[r.to_dict() for r in results],
            files=dict(ep.file_owners),
            upstream={r: ep.outputs[r] for r in self.possible_agents if r in ep.outputs and r != role.name},
            ground_truth=ep.task.answer,
            checks=dict(checks),
            action_index=self._turn_actions - 1,
            is_final_action=final,
            **self.scenario.coach_evidence(ep, role),
        )

    def _finish(self, truncated: bool) -> None:
        outcome = self.episode.outcome
        bonus = 10.0 * outcome.score if self.reward_mode != "process" else 0.0
        info = {"score": outcome.score, "correct": outcome.correct, **outcome.details}
        for a in self.agents:
            self.rewards[a] += bonus
            self.infos[a] = {**self.infos[a], "outcome": info}
            self.terminations[a] = not truncated
            self.truncations[a] = truncated
        self.agent_selection = self.agents[0]  # dead agents are then stepped out in order

    def _record_info(self, record: ActionRecord) -> dict:
        t = self.timings_in_infos
        return {
            "role": record.role,
            "index": record.index,
            "tool_results": [r.to_dict(timings=t) for r in record.tool_results],
            "checks": record.checks,
            "coach": record.coach.to_dict(timings=t) if record.coach else None,
            "reward": record.reward,
            "input_error": record.input_error,
        }

    def _render_action(self, a: ActionRecord) -> str:
        lines = [f"--- {a.role} (action {a.index + 1}) reward={a.reward:.2f}", a.text]
        if a.tool_results:
            lines.append(">>> tool output\n" + format_tool_output(a.tool_results))
        if a.coach is not None:
            lines.append(f">>> coach: {a.coach.score} {a.coach.rationale}")
        if a.input_error:
            lines.append(f">>> input error: {a.input_error}")
        return "\n".join(lines)

    def _close_session(self) -> None:
        if self._session_cm is not None:
            cm, self._session_cm = self._session_cm, None
            cm.__exit__(None, None, None)
