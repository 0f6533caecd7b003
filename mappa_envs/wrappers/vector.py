"""VectorRunner: play many episodes over many env instances with a text policy, batched.

A thin front to the episode driver (`mappa_envs.driver`): every env waiting for an action is
answered by one `respond` call per policy (a `Team` routes each role to its own model), the envs
step in a thread pool, and a slow env does not hold the others back.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from pettingzoo import AECEnv

from mappa_envs.driver import Driver, EpisodeResult, Schedule, TextActor, Turn
from mappa_envs.errors import InputError
from mappa_envs.policy import Team, TextPolicy


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

    def __init__(self, envs: Sequence[AECEnv], policy: TextPolicy, workers: int | None = None,
                 schedule: Schedule = "async"):
        if not envs:
            raise InputError("VectorRunner needs at least one env")
        if not isinstance(policy, TextPolicy):
            raise TypeError(f"policy must have respond(conversations, roles) -> list[str]; got {type(policy).__name__}")
        self.envs, self.policy = list(envs), policy
        members = policy.policies if isinstance(policy, Team) else policy
        for member in (members.values() if isinstance(members, dict) else [members]):
            TextActor(member)  # checks each member is a TextPolicy
        self.workers, self.schedule = workers, schedule
        self.stats = None  # the last play's DriverStats

    def run(self, episodes: int, seed: int | None = None, options: dict | None = None) -> list[EpisodeResult]:
        """Play `episodes` episodes; return them ordered by episode number."""
        if episodes < 0:
            raise InputError(f"episodes must be >= 0, got {episodes}")
        jobs = ((None if seed is None else seed + k, options) for k in range(episodes))
        return sorted(self.play(jobs), key=lambda r: r.episode)

    def play(self, jobs: Iterable[tuple[int | None, dict | None]],
             on_episode: Callable[[EpisodeResult, AECEnv], None] | None = None) -> list[EpisodeResult]:
        """Play one episode per (seed, options) job, episode k being the k-th job; return them in finish order.

        `on_episode(result, env)` runs as each episode ends, before its env is reset for the next
        job, so it can still read the env's own record of the episode. A failed episode comes back
        with `result.error` set (and is not retried).
        """
        driver = Driver(self.envs, self.policy, workers=self.workers, schedule=self.schedule)
        self.stats = driver.stats
        done = []
        for result in driver.play(jobs):
            done.append(result)
            if on_episode:
                on_episode(result, self.envs[result.env_index])
        return done


__all__ = ["EpisodeResult", "Turn", "VectorRunner"]
