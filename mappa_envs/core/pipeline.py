"""PipelineEnv: a sequential team of LLM agents as a PettingZoo AEC environment.

Roles act in order. A role with tools keeps acting until it writes an action with no tool call or
uses up its `max_actions`; after each action it sees its tool output. Every action is scored by the
coach (the process reward). After the last role the scenario judges the outcome (ground truth).

What varies between environments — roles, tasks, workspace set-up, verifiable checks, the outcome —
lives in a `Scenario` (a Protocol); who is on the team and in which order they act is a `Team`
(`core.team`: a chain, a DAG with fan-in, bounded loops; by default the scenario's roles in a chain).
This class owns only the turn-taking (`core.turns`), the sandbox session, the coach call and the
PettingZoo bookkeeping.

Whatever an action holds, `step()` returns: a failure while running its cells, computing its checks,
judging the outcome or asking the coach becomes part of that action's record (`env_errors`, a failed
check, a zero reward) and is logged, never raised. Untrusted text (actions, tool output, file names)
is sanitized to valid UTF-8 and quoted (`core.untrusted`) wherever the env shows it to an agent.
"""
from __future__ import annotations

import logging
import math
import numbers
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any, Literal, TypeVar, get_args

import numpy as np
from pettingzoo import AECEnv

from mappa_envs.coach.backprop import settle
from mappa_envs.coach.types import CHECKS_RAN, Coach, CoachRequest, CoachScore
from mappa_envs.core.arguments import coach_from, sandbox_from
from mappa_envs.core.guards import check_agent, check_live, check_reset_options, warn_no_render_mode
from mappa_envs.core.records import ActionRecord, Episode, EpisodeLimits, Outcome, Role, Scenario, Task
from mappa_envs.core.spaces import LLMText, prompt_space
from mappa_envs.core.team import Team, load_team
from mappa_envs.core.tools import extract_code_blocks, format_tool_output
from mappa_envs.core.turns import Schedule, chat_as_text, coach_request, turn_prompt
from mappa_envs.core.untrusted import clean_action, clip, one_line, safe_text, sanitized
from mappa_envs.errors import EnvArgumentError, ResetNeededError, TaskDataError, UnknownTaskError
from mappa_envs.sandbox.types import ExecResult, Sandbox

log = logging.getLogger(__name__)
T = TypeVar("T")

RewardMode = Literal["process", "outcome", "process+outcome", "backprop"]
REWARD_MODES: tuple[str, ...] = get_args(RewardMode)
SCORES_EACH_ACTION = ("process", "process+outcome")  # a coach score on every action as it is taken
PAYS_OUTCOME = ("outcome", "process+outcome")  # 10 x the team's outcome at the end
# Per-episode attributes: a pickled or copied env carries none of them (it is reset again where it lands).
_EPISODE_ATTRS = ("agents", "rewards", "_cumulative_rewards", "terminations", "truncations", "infos",
                  "agent_selection", "_messages", "_turn_actions", "_started", "_transcript_chars", "_schedule")

__all__ = ["ActionRecord", "Episode", "EpisodeLimits", "Outcome", "PipelineEnv", "REWARD_MODES", "Role",
           "Scenario", "Task", "chat_as_text"]


class PipelineEnv(AECEnv):
    """A team of agents acting in turn on one task; see the module docstring.

    Args:
        scenario: the environment's content (tasks, checks, outcome; its `roles` when no team is given).
        team: who acts, seeing what, in which order: a `Team`, a spec dict, a YAML path or a shipped
            spec name (`core.team`); None: the scenario's roles in a chain.
        coach: scores each action 0-10: a coach object, or None / "rule" for the offline `RuleCoach`.
        sandbox: runs tool calls: a backend name ("local", "docker" or "auto"), or None (the default:
            local with bubblewrap, else Docker, else a one-line refusal; never unisolated), made
            lazily in the process that first resets the env and closed with it; or a `Sandbox`
            object (shared, the caller closes it; an env holding one cannot be pickled).
        reward_mode: "process" (coach score per action, the paper), "outcome" (10 x ground-truth
            score to every agent at the end; the coach is not called), "process+outcome" (both), or
            "backprop" (10 x score split over the actions by blame, judged once at the end: coach.backprop).
        limits: truncation limits and caps (an `EpisodeLimits` or a dict of its fields).
        timings_in_infos: add wall-clock durations to `infos` (off: it breaks seeded comparisons).

    Typed views for consumers: `tasks`, `last_action` (`ActionRecord`), `outcome` (`Outcome`),
    `env_id`; `infos[agent]["action"]` / `["outcome"]` hold the same as dicts.
    """

    metadata = {"render_modes": ["human", "ansi"], "is_parallelizable": False}

    def __init__(
        self,
        scenario: Scenario,
        team: Team | dict | str | None = None,
        coach: Coach | str | None = None,
        sandbox: Sandbox | str | None = None,
        reward_mode: RewardMode = "process",
        limits: EpisodeLimits | dict | None = None,
        render_mode: str | None = None,
        timings_in_infos: bool = False,
    ):
        super().__init__()
        if reward_mode not in REWARD_MODES:
            raise EnvArgumentError(f"reward_mode={reward_mode!r} is not one of {REWARD_MODES}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise EnvArgumentError(f"render_mode={render_mode!r} is not one of {self.metadata['render_modes']}")
        if not isinstance(timings_in_infos, bool):
            raise EnvArgumentError(f"timings_in_infos must be True or False, got {timings_in_infos!r}")
        self.scenario = scenario
        self.team = Team.chain(scenario.roles, name=scenario.env_id) if team is None else load_team(team)
        if hasattr(scenario, "bind"):  # a scenario that reads role names or the order learns them here
            scenario.bind(self.team)
        self.metadata = {**self.metadata, "name": self.team.name}
        self.reward_mode = reward_mode
        self.limits = EpisodeLimits.coerce(limits)
        self.render_mode = render_mode
        self.timings_in_infos = timings_in_infos
        self.coach = coach_from(coach)
        self._sandbox, self._sandbox_backend = sandbox_from(sandbox)
        self._own_sandbox = self._sandbox is None
        self._tasks = tuple(scenario.tasks())
        if not self._tasks:
            raise TaskDataError(f"{self.team.name}: the task source is empty; give at least one task")
        self.roles = {r.name: r for r in self.team.roles}
        self.possible_agents = self.team.names
        self._obs_space = prompt_space(max_length=self.limits.max_transcript_chars + 100_000)
        self._act_space = LLMText(max_length=self.limits.max_action_chars)
        self._rng = np.random.default_rng()
        self._session_cm = None
        self.episode: Episode | None = None

    # --- typed views ------------------------------------------------------------------------------

    @property
    def env_id(self) -> str:
        return self.team.name

    @property
    def tasks(self) -> tuple[Task, ...]:
        """Every task the env draws from (read-only)."""
        return self._tasks

    @property
    def last_action(self) -> ActionRecord | None:
        """The record of the action the last `step()` took (None before the episode's first action)."""
        return self.episode.actions[-1] if self.episode is not None and self.episode.actions else None

    @property
    def outcome(self) -> Outcome | None:
        """The ground-truth verdict, once the episode has ended (None before)."""
        return self.episode.outcome if self.episode is not None else None

    @property
    def sandbox(self) -> Sandbox:
        """The sandbox; an env that owns its sandbox makes it here, on first use, in this process."""
        if self._sandbox is None:
            from mappa_envs.sandbox.factory import make_default_sandbox, make_sandbox

            # Scenarios say which modules their kernels should have pre-imported (pandas costs ~1 s a start).
            preimport = getattr(self.scenario, "preimport", None)
            options = {} if preimport is None else {"preimport": tuple(preimport)}
            options["timeout_s"] = self.limits.cell_timeout_s
            if self._sandbox_backend is None:  # isolated or refused, never silently unisolated
                self._sandbox = make_default_sandbox(**options)
            else:
                self._sandbox = make_sandbox(self._sandbox_backend, **options)
        return self._sandbox

    # --- PettingZoo API --------------------------------------------------------------------------

    def observation_space(self, agent: str):
        return self._obs_space

    def action_space(self, agent: str):
        return self._act_space

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        if options is not None and not isinstance(options, dict):
            raise EnvArgumentError(f"reset(options=...) takes a dict (task_id=, task_index=), "
                                   f"got {type(options).__name__}")
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            self._obs_space.seed(seed)
            self._act_space.seed(seed)
        check_reset_options(self.env_id, options or {}, len(self._tasks))
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
        self._schedule = Schedule(self.team)
        self.agent_selection = self._schedule.current
        self._begin_turn(self.agent_selection)

    def observe(self, agent: str) -> dict:
        self._require_reset("observe()")
        check_agent(self.env_id, agent, self.possible_agents)
        return {"prompt": chat_as_text(self._messages.get(agent, []))}

    def last(self, observe: bool = True):
        self._require_reset("last()")
        check_live(self.env_id, self.agents, "last()")
        return super().last(observe)

    def agent_iter(self, max_iter: int = 2**63):
        self._require_reset("agent_iter()")
        return super().agent_iter(max_iter)

    def step(self, action: Any) -> None:
        self._require_reset("step()")
        check_live(self.env_id, self.agents, "step()")
        agent = self.agent_selection
        if self.terminations[agent] or self.truncations[agent]:
            self._was_dead_step(action)
            return
        ep = self.episode
        role = self.roles[agent]
        self._cumulative_rewards[agent] = 0.0
        self.rewards = {a: 0.0 for a in self.agents}
        errors: list[str] = []

        text, input_error = clean_action(action, self.limits.max_action_chars)
        code = extract_code_blocks(text) if role.tools else []
        results = self._run_cells(role, code, errors)
        checks = self._guard(errors, "scenario.checks", lambda: self.scenario.checks(ep, role, text, results), None)
        unjudged = checks is None  # no checks to score it by: paid an honest 0, never the coach's baseline
        checks = {CHECKS_RAN: False} if unjudged else checks
        self._turn_actions += 1
        # What later roles see of this turn: every action, with its tool output.
        piece = f"{text}\n\nOutput of the code:\n{format_tool_output(results)}" if results else text
        ep.outputs[agent] = piece if self._turn_actions == 1 else f"{ep.outputs[agent]}\n\n{piece}"
        continues = bool(code) and self._turn_actions < role.max_actions
        following = None if continues else self._schedule.end_turn(agent, text)
        finished = not continues and following is None
        truncated = self._over_limits(text, results) and not finished  # a limit hit by the last action is no cut
        done = finished or truncated
        if done:  # judged before the coach, which sees the outcome (DSBench's metrics), with the closing action
            # already among the episode's actions (Chain reads the value handed on from there): unscored for now
            ep.actions.append(ActionRecord(agent, self._turn_actions - 1, text, results, checks, None, 0.0,
                                           input_error, errors))
            ep.outcome = self._judge(errors)
            ep.actions.pop()

        coach = None
        reward = 0.0
        if self.reward_mode == "backprop":  # judged once the episode is over (_finish)
            ep.held.append(self._coach_request(role, text, results, checks, done, errors))
        elif self.reward_mode in SCORES_EACH_ACTION and unjudged:
            coach = CoachScore(score=0.0, rationale=f"not judged: {errors[-1]}")
        elif self.reward_mode in SCORES_EACH_ACTION:
            coach = self._score(self._coach_request(role, text, results, checks, done, errors), errors)
            if coach.ok and coach.score is not None and math.isfinite(coach.score):
                reward = min(10.0, max(0.0, float(coach.score)))
        record = ActionRecord(agent, self._turn_actions - 1, text, results, checks, coach, reward, input_error, errors)
        ep.actions.append(record)
        self.rewards[agent] = reward
        self.infos[agent] = {**self.infos[agent], "action": record.to_info(self.timings_in_infos)}

        if continues and not done:
            self._messages[agent] += [
                {"role": "assistant", "content": text},
                {"role": "user", "content": "Output of your code:\n" + format_tool_output(results)},
            ]
            self.infos[agent]["messages"] = list(self._messages[agent])
        elif done:
            self._finish(truncated)
        else:
            self.agent_selection = following
            self._begin_turn(following)
        self._accumulate_rewards()
        if self.render_mode == "human":
            print(record.render())

    def render(self) -> str | None:
        """The episode so far as text ("ansi": returned; "human": printed). Without a render_mode, as in
        Gymnasium, it warns and returns None: pass render_mode="ansi" to make() for the text."""
        self._require_reset("render()")
        if self.render_mode is None:
            warn_no_render_mode(self.env_id)
            return None
        text = self.render_text()
        if self.render_mode == "human":
            print(text)
            return None
        return text

    def render_text(self) -> str:
        """The episode so far as text, whatever the render_mode (what `render()` shows)."""
        self._require_reset("render_text()")
        text = f"=== {self.env_id} task {self.episode.task.id} ===\n"
        text += "\n".join(a.render() for a in self.episode.actions)
        if self.episode.outcome is not None:
            o = self.episode.outcome
            text += f"\n=== outcome: score {o.score:.3f} correct={o.correct} {o.details}"
        return text

    def transcript(self) -> dict:
        """The episode so far as a JSON-able record: task, every action with tool output and verdict, outcome."""
        ep = self.episode
        if ep is None:
            return {}
        return {
            "env_id": self.env_id,
            "task_id": ep.task.id,
            "task": ep.task.prompt,
            "ground_truth": ep.task.answer,
            "actions": [{"text": a.text, **a.to_info(self.timings_in_infos)} for a in ep.actions],
            "files": dict(ep.file_owners),
            "outcome": None if ep.outcome is None else ep.outcome.to_info(),
            **({"loop_rounds": self._schedule.loop_rounds()} if self.team.loops else {}),
        }

    def close(self) -> None:
        self._close_session()
        if self._own_sandbox and self._sandbox is not None:
            sandbox, self._sandbox = self._sandbox, None
            sandbox.close()

    # --- pickling: config only; the copy makes its own sandbox and must be reset -----------------

    def __getstate__(self) -> dict:
        state = {k: v for k, v in self.__dict__.items() if k not in _EPISODE_ATTRS}
        state.update(_session_cm=None, episode=None)
        if self._own_sandbox:
            state["_sandbox"] = None
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    # --- internals -------------------------------------------------------------------------------

    def _require_reset(self, what: str) -> None:
        if self.episode is None:
            raise ResetNeededError(f"{self.env_id}: call reset() before {what}")

    def _pick_task(self, options: dict) -> Task:
        tasks = self._tasks
        if "task_id" in options:
            for t in tasks:
                if t.id == options["task_id"]:
                    return t
            raise UnknownTaskError(f"{self.env_id}: no task with id {options['task_id']!r} "
                                   f"({len(tasks)} tasks, e.g. {[t.id for t in tasks[:3]]})")
        if "task_index" in options:
            return tasks[options["task_index"]]  # checked in range by check_reset_options
        return tasks[int(self._rng.integers(len(tasks)))]

    def _task_view(self, task: Task, role: Role) -> str:
        view = getattr(self.scenario, "task_prompt_for", None)  # optional: a task each role sees its own way
        return view(task, role) if view else self.scenario.task_prompt(task)

    def _begin_turn(self, agent: str) -> None:
        role = self.roles[agent]
        ep = self.episode
        self._messages[agent] = [
            {"role": "system", "content": role.duties},
            {"role": "user", "content": turn_prompt(self._task_view(ep.task, role), role, ep, self._schedule)},
        ]
        self._turn_actions = 0
        self.infos[agent] = {"task_id": ep.task.id, "messages": list(self._messages[agent])}

    def _run_cells(self, role: Role, code: list[str], errors: list[str]) -> list[ExecResult]:
        results = []
        for cell in code:
            try:
                r = self.episode.session.run(cell, timeout=self.limits.cell_timeout_s, kernel=role.kernel)
            except Exception as e:  # a session that cannot run the cell: the cell failed, the episode goes on
                log.warning("%s: the sandbox could not run a cell of %s", self.env_id, role.name, exc_info=True)
                errors.append(_failure("sandbox.run", e))
                detail = clip(f"{type(e).__name__}: {one_line(e)}", 400)
                r = ExecResult(ok=False, error=f"the sandbox could not run this cell: {detail}")
            results.append(_clean_result(r))
            if not r.ok:  # like a notebook's "run all": stop at the first failing cell
                break
        return results

    def _guard(self, errors: list[str], what: str, call: Callable[[], T], default: T) -> T:
        """`call()`, or `default` when it raises: the failure is logged and put on the action's record."""
        try:
            return call()
        except Exception as e:
            log.error("%s: %s failed on an action of task %s", self.env_id, what, self.episode.task.id, exc_info=True)
            errors.append(_failure(what, e))
            return default

    def _judge(self, errors: list[str]) -> Outcome:
        outcome = self._guard(errors, "scenario.outcome", lambda: checked_outcome(self.scenario.outcome(self.episode)),
                              None)
        if outcome is None:  # no verdict could be had: an honest zero that says why
            return Outcome(score=0.0, correct=False, details={"env_error": errors[-1]})
        return Outcome(outcome.score, outcome.correct, sanitized(outcome.details))

    def _score(self, request: CoachRequest, errors: list[str]) -> CoachScore:
        from mappa_envs.coach.llm import CoachError

        try:
            verdict = self.coach.score(request)
            if not isinstance(verdict, CoachScore):
                raise TypeError(f"coach.score returned a {type(verdict).__name__}, not a CoachScore")
            return verdict
        except CoachError:  # the coach was told to raise when it cannot score (on_failure="raise")
            raise
        except Exception as e:
            log.error("%s: the coach failed on an action of %s", self.env_id, request.role, exc_info=True)
            errors.append(_failure("coach.score", e))
            return CoachScore(score=None, ok=False, error=errors[-1])

    def _over_limits(self, text: str, results: list[ExecResult]) -> bool:
        self._transcript_chars += len(text) + sum(len(r.stdout) + len(r.stderr) for r in results)
        lim = self.limits
        return (
            len(self.episode.actions) + 1 >= lim.max_total_actions
            or self._transcript_chars > lim.max_transcript_chars
            or (lim.max_wall_s is not None and time.monotonic() - self._started > lim.max_wall_s)
        )

    def _coach_request(self, role: Role, text: str, results: list[ExecResult], checks: dict, final: bool,
                       errors: list[str]) -> CoachRequest:
        ep = self.episode
        evidence = self._guard(errors, "scenario.coach_evidence", lambda: self.scenario.coach_evidence(ep, role), {})
        return coach_request(self.team, ep, role, text, results, checks, self.limits, self._messages[role.name],
                             self._turn_actions - 1, final, evidence)

    def _finish(self, truncated: bool) -> None:
        outcome = self.episode.outcome
        bonus = 10.0 * outcome.score if self.reward_mode in PAYS_OUTCOME else 0.0
        paid: dict[str, float] = {}
        if self.reward_mode == "backprop":  # each role is paid the sum of its actions' shares
            paid, outcome.details["backprop"] = settle(self.coach, self.episode)
        info = outcome.to_info()
        for a in self.agents:
            self.rewards[a] += bonus + paid.get(a, 0.0)
            self.infos[a] = {**self.infos[a], "outcome": info}
            self.terminations[a] = not truncated
            self.truncations[a] = truncated
        self.agent_selection = self.agents[0]  # dead agents are then stepped out in order

    def _close_session(self) -> None:
        if self._session_cm is not None:
            cm, self._session_cm = self._session_cm, None
            cm.__exit__(None, None, None)


def checked_outcome(outcome: Any) -> Outcome:
    """A scenario's verdict as it is paid: an `Outcome` whose score is a finite number in [0, 1] (10 x score
    goes to every agent), else a one-line ValueError (the env then pays an honest zero and says why)."""
    if not isinstance(outcome, Outcome):
        raise ValueError(f"scenario.outcome must return an Outcome, got a {type(outcome).__name__}")
    score = outcome.score
    if isinstance(score, bool) or not isinstance(score, numbers.Real) or not math.isfinite(score) \
            or not 0.0 <= score <= 1.0:
        raise ValueError(f"an outcome score must be a finite number in [0, 1], got {score!r}")
    return replace(outcome, score=float(score))


def _failure(what: str, e: BaseException) -> str:
    return clip(f"{what} failed: {type(e).__name__}: {one_line(e)}", 500)


def _clean_result(r: ExecResult) -> ExecResult:
    """The result with its texts valid UTF-8 and its error on one line (cell output is untrusted)."""
    return replace(r, stdout=safe_text(r.stdout), stderr=safe_text(r.stderr),
                   error=None if r.error is None else one_line(r.error))
