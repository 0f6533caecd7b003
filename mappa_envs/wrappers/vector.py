"""VectorRunner: play many episodes over many env instances with one batched policy call per round.

Each round, every env that waits for an action contributes its conversation; the policy answers them
all in one `respond` call (a `Team` routes each role to its own model); then the envs step in a
thread pool, because a step blocks on the sandbox and the coach, not on Python.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

from pettingzoo import AECEnv

from mappa_envs.policy import TextPolicy
from mappa_envs.wrappers.text_env import TextEnv


@dataclass
class Turn:
    """One action: who acted on which prompt, what it wrote, and what it earned."""

    role: str
    messages: list[dict]
    action: str
    reward: float
    info: dict  # the env's record of the action: tool results, checks, coach verdict
    usage: dict | None = None  # the policy's token counts for this action, when it reports them


@dataclass
class EpisodeResult:
    episode: int  # 0..episodes-1, in the order episodes were started
    env_index: int
    seed: int | None
    task_id: str | None
    turns: list[Turn] = field(default_factory=list)
    returns: dict[str, float] = field(default_factory=dict)  # role -> sum of its rewards (outcome bonus included)
    outcome: dict | None = None
    truncated: bool = False


class VectorRunner:
    """Play episodes over `envs` with `policy`: `run` resets episode k with `seed + k`; `play` takes
    each episode's (seed, options) and reports each episode as it ends.

    Results do not depend on how many envs run at once or on scheduling: the seed fixes each episode.

    >>> import mappa_envs
    >>> from mappa_envs.wrappers import VectorRunner
    >>> class Echo:  # any TextPolicy: respond(conversations, roles) -> one text per conversation
    ...     def respond(self, conversations, roles):
    ...         return [f"I am the {role}. The answer is \\\\boxed{{1}}." for role in roles]
    >>> envs = [mappa_envs.make("MathChat-v0", task_source="synthetic") for _ in range(2)]
    >>> results = VectorRunner(envs, Echo()).run(episodes=3, seed=0)
    >>> [r.episode for r in results], [t.role for t in results[0].turns]
    ([0, 1, 2], ['problem_solver', 'code_executor', 'verifier'])
    >>> for env in envs:
    ...     env.close()
    """

    def __init__(self, envs: Sequence[AECEnv], policy: TextPolicy, workers: int | None = None):
        if not envs:
            raise ValueError("VectorRunner needs at least one env")
        if not isinstance(policy, TextPolicy):
            raise TypeError(f"policy must have respond(conversations, roles) -> list[str]; got {type(policy).__name__}")
        self.envs = [TextEnv(e) for e in envs]
        self.policy = policy
        self.workers = workers or len(envs)

    def run(self, episodes: int, seed: int | None = None, options: dict | None = None) -> list[EpisodeResult]:
        """Play `episodes` episodes; return them ordered by episode number."""
        if episodes < 0:
            raise ValueError(f"episodes must be >= 0, got {episodes}")
        jobs = ((None if seed is None else seed + k, options) for k in range(episodes))
        return sorted(self.play(jobs), key=lambda r: r.episode)

    def play(self, jobs: Iterable[tuple[int | None, dict | None]],
             on_episode: Callable[[EpisodeResult, AECEnv], None] | None = None) -> list[EpisodeResult]:
        """Play one episode per (seed, options) job, episode k being the k-th job; return them in finish order.

        `on_episode(result, env)` runs as each episode ends, before its env is reset for the next
        job, so it can still read the env's own record of the episode.
        """
        pending = iter(jobs)
        done: list[EpisodeResult] = []
        live: dict[int, tuple[EpisodeResult, dict]] = {}  # env index -> (episode so far, next step's info)
        started = 0

        def start(i: int) -> None:
            nonlocal started
            job = next(pending, None)
            if job is None:
                return
            ep_seed, options = job
            _, info = self.envs[i].reset(seed=ep_seed, options=options)
            returns = {role: 0.0 for role in self.envs[i].env.possible_agents}
            live[i] = (EpisodeResult(started, i, ep_seed, info.get("task_id"), returns=returns), info)
            started += 1

        for i in range(len(self.envs)):
            start(i)
        with ThreadPoolExecutor(self.workers) as pool:
            while live:
                order = sorted(live)
                infos = [live[i][1] for i in order]
                texts = self.policy.respond([info["messages"] for info in infos], [info["role"] for info in infos])
                if len(texts) != len(order):
                    raise ValueError(f"policy returned {len(texts)} texts for {len(order)} conversations")
                usages = self._usage(len(order))
                steps = pool.map(lambda i_text: self.envs[i_text[0]].step(i_text[1]), zip(order, texts))
                for i, info, text, usage, step in zip(order, infos, texts, usages, steps):
                    _, reward, terminated, truncated, next_info = step
                    result = live[i][0]
                    result.turns.append(Turn(info["role"], info["messages"], text, reward, next_info["action"], usage))
                    for role, r in next_info["rewards"].items():
                        result.returns[role] += r
                    if terminated or truncated:
                        result.outcome, result.truncated = next_info.get("outcome"), truncated
                        done.append(result)
                        del live[i]
                        if on_episode:
                            on_episode(result, self.envs[i].env)
                        start(i)
                    else:
                        live[i] = (result, next_info)
        return done

    def _usage(self, n: int) -> list[dict | None]:
        """Token counts of the last `respond` call, when the policy reports them (`last_usage`, per conversation)."""
        usage = getattr(self.policy, "last_usage", None)
        if isinstance(usage, list) and len(usage) == n:
            return [dict(u) if u else None for u in usage]
        return [None] * n
