"""The episode driver: many episodes over B AEC envs, the agents' turns batched, no global barrier.

    driver = Driver(envs, team)                 # a TextPolicy, an Actor, or {name: ...} + role_policy
    for result in driver.play([(seed, options), ...]):
        ...                                     # an EpisodeResult as each episode ends

Every env waiting for an action becomes a `Request`. The driver hands all requests waiting at that
moment to their policies (one batched call per policy) and steps the envs in a thread pool, since a
step blocks on the sandbox and the coach, not on Python. An env whose step is slow (an LLM coach
call, a long cell) does not hold the others back: whoever is ready joins the next call. With
`schedule="rounds"` it waits for every env instead (lock-step rounds, the old behaviour; kept as the
benchmark baseline).

Each request carries a seed derived from its episode's seed and its position in the episode, and a
policy that takes `seeds=` samples with it, so results do not depend on scheduling as far as a row's
logits do not depend on the rows batched with it: true of float32 here, not of bfloat16, where a
batch's make-up moves a row's log-probs by ~0.01-0.02 nats (SmolLM2 on CPU) and so, now and then, a
sampled token. `schedule="rounds"` batches the same rows every run and so repeats a bf16 run exactly. Every episode
that raises (in reset, step or the env's own code) is reported as a failed `EpisodeResult` with the
error and the driver goes on; only a run of `max_failures` failures in a row stops it, since that
is a broken set-up rather than a bad episode.

Every reset and step has a deadline (`step_deadline_s`): one that overruns is recorded as the failed
action of a failed episode, and the other episodes go on. Its env is set aside, since its step is
still running in its thread and cannot be stopped from outside; when that step returns, the env is
reset for the next job. (A deadline cannot help against work that holds the GIL, which stops every
thread: nothing an action controls may run unbounded in this process — see mathchat/answers.py.)

Evaluation, `mappa run`, the quickstart's warm start (via `VectorRunner`) and training rollouts
(`mappa_train.rollout`, which adds the token bookkeeping) all play through this one loop.
"""
from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, get_args, runtime_checkable

from mappa_envs.core.records import ActionRecord, Outcome
from mappa_envs.errors import InputError
from mappa_envs.policy import Team, TextPolicy, route_roles
from mappa_envs.seeding import derive_seed

log = logging.getLogger(__name__)
Schedule = Literal["async", "rounds"]
STEP_DEADLINE_S = 900.0  # above any sane step (cells time out in 10-60 s, a coach call in 120 s), finite
Job = tuple  # (seed: int | None, options: dict | None): the reset arguments of one episode


@dataclass(frozen=True)
class Request:
    """One agent waiting for an action."""

    env_index: int
    episode: int  # the job's position in `play(jobs)`
    role: str
    messages: list[dict]  # what the agent sees: infos[role]["messages"]
    action_index: int  # position of this action in the episode
    seed: int | None  # sampling seed for this action (None: the episode is unseeded)


@runtime_checkable
class Actor(Protocol):
    """The driver's policy interface: one action per request, in order. An action is a str or any
    object with a `.text` (e.g. a Generation carrying token ids and logprobs)."""

    def act(self, requests: Sequence[Request]) -> list[Any]: ...


@dataclass
class Turn:
    """One action: who acted on which prompt, what it wrote, and what it earned."""

    role: str
    messages: list[dict]
    action: str
    reward: float  # what the env paid the role on this step (an end-of-episode payment included)
    info: dict  # infos[role]["action"]: `record` as a plain dict
    record: ActionRecord  # the env's typed record of the action (`env.unwrapped.last_action`)
    usage: dict | None = None  # the policy's token counts for this action, when it reports them
    output: Any = None  # what the policy returned for this request (the text, or a richer object)
    action_index: int = 0


@dataclass
class EpisodeResult:
    episode: int  # position of the job in play(jobs)
    env_index: int
    seed: int | None
    task_id: str | None
    turns: list[Turn] = field(default_factory=list)
    returns: dict[str, float] = field(default_factory=dict)  # role -> sum of its rewards (outcome bonus included)
    outcome: Outcome | None = None  # the env's verdict (`env.unwrapped.outcome`); None for a failed episode
    truncated: bool = False
    end_rewards: dict[str, float] = field(default_factory=dict)  # role -> what the env paid it when the
    # episode ended, beyond its last action's own reward (e.g. reward_mode="outcome"'s 10 x score)
    error: str | None = None  # the episode failed: why (it is not trained on; it counts as a failure)
    stopped: str | None = None  # the episode was ended early by the `stop` rule: why


@dataclass
class DriverStats:
    calls: dict[str, int] = field(default_factory=dict)  # policy name -> batched calls
    batches: int = 0  # iterations that called at least one policy
    act_s: float = 0.0  # wall time inside policy calls
    env_busy_s: float = 0.0  # summed time of every reset/step (they overlap: env_busy_s / wall_s)
    wall_s: float = 0.0
    failures: int = 0
    stopped: int = 0
    overran: int = 0  # resets/steps that ran past the deadline (their episodes are among `failures`)


class StepDeadlineError(TimeoutError):
    """An env's reset or step ran past the driver's deadline."""


def action_seed(episode_seed: int | None, action_index: int) -> int | None:
    """The sampling seed of an episode's `action_index`-th action: fixed by the episode's seed alone."""
    if episode_seed is None:
        return None
    return derive_seed(episode_seed, action_index)


def episode_over(env) -> bool:
    """Every live agent of an AEC env is terminated or truncated (or none is left)."""
    return not env.agents or all(env.terminations[a] or env.truncations[a] for a in env.agents)


class TextActor:
    """An `Actor` over a `TextPolicy`: respond(conversations, roles[, seeds]) -> one text each."""

    def __init__(self, policy: TextPolicy):
        if not isinstance(policy, TextPolicy):
            raise TypeError(f"policy must have respond(conversations, roles) -> list[str]; got {type(policy).__name__}")
        self.policy = policy
        self._seeded = "seeds" in inspect.signature(policy.respond).parameters

    def act(self, requests: Sequence[Request]) -> list[Any]:
        conversations, roles = [r.messages for r in requests], [r.role for r in requests]
        if self._seeded:
            return self.policy.respond(conversations, roles, seeds=[r.seed for r in requests])
        return self.policy.respond(conversations, roles)

    def usage(self, n: int) -> list[dict | None]:
        """Token counts of the last call, when the policy reports them (`last_usage`, per conversation)."""
        usage = getattr(self.policy, "last_usage", None)
        if isinstance(usage, list) and len(usage) == n:
            return [dict(u) if u else None for u in usage]
        return [None] * n


def as_actors(policies: Any) -> dict[str, Any]:
    """{name: Actor} from an Actor, a TextPolicy, a Team of them, or a mapping of them."""
    if isinstance(policies, Team) and isinstance(policies.policies, Mapping):
        policies = policies.policies
    if isinstance(policies, Mapping):
        return {name: p if isinstance(p, Actor) else TextActor(p) for name, p in policies.items()}
    return {"shared": policies if isinstance(policies, Actor) else TextActor(policies)}


@dataclass
class _Live:
    """An env and the episode it is playing."""

    result: EpisodeResult
    actions: int = 0


class _Jobs:
    """The job iterator, with a look ahead (is there another job?) that does not lose the job."""

    def __init__(self, jobs: Iterable[Job]):
        self._it, self._ahead = iter(jobs), []

    def more(self) -> bool:
        if not self._ahead:
            job = next(self._it, None)
            if job is not None:
                self._ahead.append(job)
        return bool(self._ahead)

    def next(self) -> Job | None:
        return self._ahead.pop() if self.more() else None


def _timed(fn, *args, **kwargs) -> tuple[Any, float]:
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


class Driver:
    """Plays jobs over `envs` (see the module docstring).

    Args:
        envs: mappa_envs AEC envs (`PipelineEnv`s, wrapped or not: the driver reads their typed
            `last_action` and `outcome`); they are reset here and left open.
        policies: an Actor or TextPolicy for every role, a `Team`, or {policy name: Actor | TextPolicy}.
        role_policy: role -> policy name (default: the policy named like the role, or the only one).
        workers: threads stepping envs (default: one per env).
        schedule: "async" (default) or "rounds" (every env waits for the slowest; the old loop).
        stop: `stop(result, turn) -> reason | None`, asked after every action; a reason ends the
            episode there (curriculum filtering: no more generation or coach calls spent on it).
        gather_s, straggle, max_gather_s: "async" batching. When the first env is ready after
            waiting d seconds, the others get max(gather_s, straggle * d) more (at most
            max_gather_s) to join the same call: envs that finish together share a call, a slow
            one holds nobody back for long.
        max_failures: failed episodes in a row before the driver gives up and raises.
        step_deadline_s: seconds a reset or step may take before its episode is failed and its env
            set aside until the step returns (None: no deadline).
    """

    def __init__(self, envs: Sequence[Any], policies: Any, role_policy: Mapping[str, str] | None = None,
                 workers: int | None = None, schedule: Schedule = "async",
                 stop: Callable[[EpisodeResult, Turn], str | None] | None = None, gather_s: float = 0.02,
                 straggle: float = 0.5, max_gather_s: float = 0.25, max_failures: int = 3,
                 step_deadline_s: float | None = STEP_DEADLINE_S):
        if not envs:
            raise InputError("the driver needs at least one env")
        if step_deadline_s is not None and (isinstance(step_deadline_s, bool) or not step_deadline_s > 0):
            raise InputError(f"step_deadline_s must be a number > 0 or None, got {step_deadline_s!r}")
        if schedule not in get_args(Schedule):
            raise InputError(f"schedule must be 'async' or 'rounds', got {schedule!r}")
        self.envs, self.actors = list(envs), as_actors(policies)
        self.route = route_roles(self.actors, envs[0].possible_agents, role_policy)
        self.workers, self.schedule, self.stop = workers or len(envs), schedule, stop
        self.gather_s, self.straggle, self.max_gather_s = gather_s, straggle, max_gather_s
        self.max_failures, self.step_deadline_s = max_failures, step_deadline_s
        self._failures_in_a_row = 0
        self._sent: dict[Future, float] = {}  # when each in-flight reset/step was handed to the pool
        self._what: dict[Future, str] = {}  # "reset" or "step"
        self._stuck: dict[Future, int] = {}  # overran steps still running -> their (set aside) env
        self.stats = DriverStats(calls={name: 0 for name in self.actors})

    def play(self, jobs: Iterable[Job]) -> Iterator[EpisodeResult]:
        """Play one episode per (seed, options) job; yield each as it ends, before its env is reset
        for the next job (so the env's own record of the episode can still be read)."""
        pending, numbers = _Jobs(jobs), iter(range(1 << 62))
        live: dict[int, _Live] = {}
        inflight: dict[Future, int] = {}
        started = time.perf_counter()
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="mappa-env")
        self._stuck = {}

        def start(i: int) -> None:
            job = pending.next()
            if job is None:
                live.pop(i, None)
                return
            seed, options = job
            live[i] = _Live(EpisodeResult(next(numbers), i, seed, None))
            self._submit(pool, inflight, i, self.envs[i].reset, seed=seed, options=options)

        try:
            for i in range(len(self.envs)):
                start(i)
            first = True  # the first batch waits for every env's first reset: they all start together
            while inflight or (self._stuck and pending.more()):
                if not inflight:  # every free env is set aside: wait for one to come back
                    for i in self._released(block=True):
                        start(i)
                    continue
                ready: list[int] = []
                for i in self._harvest(inflight, live, ready, everyone=first):
                    yield live[i].result
                    if i in self._stuck.values():
                        live.pop(i)  # its step still runs: the env is reset only once it returns
                    else:
                        start(i)
                for i in self._released(block=False):
                    start(i)
                first = False
                if ready:
                    self._dispatch(sorted(ready), live, inflight, pool)
            self._settle()
        finally:
            if self._stuck:
                log.warning("%d env step(s) still running past the deadline are abandoned", len(self._stuck))
            pool.shutdown(wait=not self._stuck, cancel_futures=True)
            self.stats.wall_s += time.perf_counter() - started

    # ---- one iteration ------------------------------------------------------------------------

    def _harvest(self, inflight: dict[Future, int], live: dict[int, _Live], ready: list[int],
                 everyone: bool = False) -> list[int]:
        """Wait for resets/steps to finish and account for them. Returns the envs whose episode
        ended; the envs that now wait for an action are appended to `ready`.

        "rounds" (or `everyone`) waits for all of them; "async" for the first, then gives the others
        a short grace (see `straggle`) to join the same policy call."""
        timeout = self._time_left(inflight)
        if self.schedule == "rounds" or everyone:
            done, _ = wait(list(inflight), timeout=timeout)
        else:
            done, _ = wait(list(inflight), timeout=timeout, return_when=FIRST_COMPLETED)
            if done and len(done) < len(inflight):
                took = time.perf_counter() - min(self._sent[f] for f in done)  # how long a step takes now
                grace = min(self.max_gather_s, max(self.gather_s, self.straggle * took))
                done |= wait([f for f in inflight if f not in done], timeout=grace)[0]
        finished = self._overdue(inflight, live, done)
        for future in sorted(done, key=inflight.__getitem__):  # env order: deterministic bookkeeping
            i = inflight.pop(future)
            del self._sent[future], self._what[future]
            episode, env = live[i], self.envs[i]
            try:
                turn, seconds = future.result()
                self.stats.env_busy_s += seconds
                if turn is not None:
                    self._record(episode, turn)
                over = episode_over(env)
                reason = None if over or turn is None or self.stop is None else self.stop(episode.result, turn)
                if over or reason:
                    episode.result.stopped = reason
                    self.stats.stopped += reason is not None
                    self._finish(i, episode)
                    self._failures_in_a_row = 0
            except Exception as e:  # a bad episode (or a bug the env hit on it): count it and go on
                self._fail(episode.result, e)
                finished.append(i)
                continue
            (finished if over or reason else ready).append(i)
        return finished

    def _time_left(self, inflight: dict[Future, int]) -> float | None:
        """Seconds until the first in-flight reset/step reaches its deadline (None: no deadline)."""
        if self.step_deadline_s is None:
            return None
        return max(0.0, min(self._sent[f] for f in inflight) + self.step_deadline_s - time.perf_counter())

    def _overdue(self, inflight: dict[Future, int], live: dict[int, _Live], done: set[Future]) -> list[int]:
        """Fail the episodes whose reset/step ran past the deadline; set their envs aside."""
        if self.step_deadline_s is None:
            return []
        now, failed = time.perf_counter(), []
        for future in [f for f in inflight if f not in done and now - self._sent[f] >= self.step_deadline_s]:
            i, what = inflight.pop(future), self._what.pop(future)
            del self._sent[future]
            self._stuck[future] = i
            self.stats.overran += 1
            self._fail(live[i].result, StepDeadlineError(
                f"the env's {what} ran past the driver's deadline of {self.step_deadline_s:g} s "
                f"(step_deadline_s); the episode is failed and env {i} is set aside until the {what} returns"))
            failed.append(i)
        return failed

    def _released(self, block: bool) -> list[int]:
        """Envs set aside whose overrunning step has now returned. With `block`, wait for one up to
        the deadline, and raise if none comes back: every env is hung."""
        if block:
            wait(list(self._stuck), timeout=self.step_deadline_s, return_when=FIRST_COMPLETED)
        back = [f for f in self._stuck if f.done()]
        if block and not back:
            raise RuntimeError(f"all {len(self._stuck)} free envs are stuck in steps that ran past the deadline "
                               f"of {self.step_deadline_s:g} s and have not returned: the env or its sandbox hangs")
        return [self._stuck.pop(f) for f in back]

    def _settle(self) -> None:
        """At the end of a play, wait (up to the deadline) for steps set aside: an env must not be
        handed to the next play while an old step still runs in it. One that never returns is hung."""
        if not self._stuck:
            return
        wait(list(self._stuck), timeout=self.step_deadline_s)
        self._stuck = {f: i for f, i in self._stuck.items() if not f.done()}
        if self._stuck:
            raise RuntimeError(f"env(s) {sorted(self._stuck.values())} are still inside a step that ran past the "
                               f"deadline of {self.step_deadline_s:g} s: they hang and cannot be used again")

    def _dispatch(self, waiting: list[int], live: dict[int, _Live], inflight: dict[Future, int], pool) -> None:
        """One batched call per policy for every waiting agent, then each env's step in the pool."""
        requests = {}
        for i in waiting:
            env, episode = self.envs[i], live[i]
            role = env.agent_selection
            requests[i] = Request(i, episode.result.episode, role, list(env.infos[role].get("messages", [])),
                                  episode.actions, action_seed(episode.result.seed, episode.actions))
        self.stats.batches += 1
        for name, actor in self.actors.items():
            mine = [i for i in waiting if self.route[requests[i].role] == name]
            if not mine:
                continue
            batch = [requests[i] for i in mine]
            t0 = time.perf_counter()
            outputs = actor.act(batch)
            self.stats.act_s += time.perf_counter() - t0
            self.stats.calls[name] += 1
            if len(outputs) != len(batch):
                raise ValueError(f"policy {name!r} returned {len(outputs)} texts for {len(batch)} requests")
            usages = actor.usage(len(batch)) if isinstance(actor, TextActor) else [None] * len(batch)
            for i, request, output, usage in zip(mine, batch, outputs, usages):
                live[i].actions += 1
                self._submit(pool, inflight, i, self._step, i, request, output, usage)

    def _submit(self, pool, inflight: dict[Future, int], i: int, fn, *args, **kwargs) -> None:
        future = pool.submit(_timed, fn, *args, **kwargs)
        inflight[future], self._sent[future] = i, time.perf_counter()
        self._what[future] = "reset" if getattr(fn, "__name__", "") == "reset" else "step"

    def _step(self, i: int, request: Request, output: Any, usage: dict | None) -> Turn:
        """In the pool: step the env with the action; the turn's reward is filled in by `_record`."""
        env = self.envs[i]
        text = output if isinstance(output, str) else getattr(output, "text", output)
        env.step(text)
        return Turn(request.role, request.messages, text if isinstance(text, str) else "", 0.0,
                    env.infos[request.role].get("action") or {}, env.unwrapped.last_action, usage, output,
                    request.action_index)

    # ---- bookkeeping (main thread) ------------------------------------------------------------

    def _record(self, episode: _Live, turn: Turn) -> None:
        env, result = self.envs[episode.result.env_index], episode.result
        turn.reward = float(env.rewards.get(turn.role, 0.0))
        result.turns.append(turn)
        if result.task_id is None:
            result.task_id = env.infos[turn.role].get("task_id")
        for role, reward in env.rewards.items():
            result.returns[role] = result.returns.get(role, 0.0) + float(reward)
        if episode_over(env):  # the end-of-episode payment, apart from the action's own
            own = turn.record.reward
            result.end_rewards = {r: float(v) - (own if r == turn.role else 0.0) for r, v in env.rewards.items()}

    def _finish(self, i: int, episode: _Live) -> None:
        env, result = self.envs[i], episode.result
        if not result.returns:
            result.returns = {role: 0.0 for role in env.possible_agents}
        first = env.agents[0] if env.agents else None
        if first is not None:
            result.outcome = env.unwrapped.outcome
            result.truncated = any(env.truncations[a] for a in env.agents)
            result.task_id = result.task_id or env.infos[first].get("task_id")
        if result.stopped is None:
            while env.agents:  # AEC: every done agent is stepped out with None
                env.step(None)

    def _fail(self, result: EpisodeResult, error: Exception) -> None:
        result.error = (f"{type(error).__name__}: {error}".splitlines() or [""])[0][:500]
        self.stats.failures += 1
        self._failures_in_a_row += 1
        log.warning("episode %d (env %d, task %s) failed and is skipped: %s", result.episode, result.env_index,
                    result.task_id, result.error, exc_info=error)
        if self._failures_in_a_row >= self.max_failures:
            raise RuntimeError(f"{self._failures_in_a_row} episodes in a row failed, so the set-up is broken rather "
                               f"than one episode; the last: {result.error}") from error
