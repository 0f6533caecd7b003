"""Reward wrappers for ablations: keep only the outcome, or scale every reward.

Both are PettingZoo `BaseWrapper`s over any MAPPA AEC env. They rewrite `rewards` and
`_cumulative_rewards` (so `last()` reports the new reward, with the usual AEC timing) and leave
`infos` alone: `infos[agent]["action"]["coach"]` still holds the coach's raw verdict.
"""
from __future__ import annotations

from typing import Any

from pettingzoo.utils.wrappers import BaseWrapper


class _RewardWrapper(BaseWrapper):
    """Owns `rewards`/`_cumulative_rewards` and keeps them with the AEC bookkeeping of the inner env.

    Subclasses map the inner env's per-step `rewards` to new ones in `_new_rewards`.
    """

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        self.env.reset(seed=seed, options=options)
        self.rewards = {a: 0.0 for a in self.env.agents}
        self._cumulative_rewards = {a: 0.0 for a in self.env.agents}

    def step(self, action: Any) -> None:
        agent = self.env.agent_selection
        was_dead = self.env.terminations[agent] or self.env.truncations[agent]
        self.env.step(action)
        if not was_dead:  # AEC convention: an agent's cumulative reward restarts when it acts
            self._cumulative_rewards[agent] = 0.0
        self.rewards = self._new_rewards(dict(self.env.rewards))
        self._cumulative_rewards = {
            a: self._cumulative_rewards.get(a, 0.0) + self.rewards.get(a, 0.0) for a in self.env.agents
        }

    def _new_rewards(self, rewards: dict[str, float]) -> dict[str, float]:
        raise NotImplementedError


class ScaleReward(_RewardWrapper):
    """Multiply every reward by `scale` (e.g. 0.1 maps the coach's 0-10 onto 0-1).

    >>> import mappa_envs
    >>> from mappa_envs.wrappers import ScaleReward
    >>> env = ScaleReward(mappa_envs.make("MathChat-v0", task_source="synthetic"), scale=0.1)
    >>> env.reset(seed=0)
    >>> env.step("The answer is \\\\boxed{7}.")
    >>> raw = env.infos["problem_solver"]["action"]["reward"]   # the coach's 0-10 score
    >>> env.rewards["problem_solver"] == 0.1 * raw
    True
    >>> env.close()
    """

    def __init__(self, env, scale: float):
        super().__init__(env)
        self.scale = float(scale)

    def _new_rewards(self, rewards: dict[str, float]) -> dict[str, float]:
        return {a: self.scale * r for a, r in rewards.items()}


class OutcomeReward(_RewardWrapper):
    """Outcome-only reward: 0 for every action, then `scale` x the outcome score (in [0, 1]) to every
    agent at the step that ends the episode — the same numbers as `reward_mode="outcome"`.

    Unlike `reward_mode="outcome"`, the coach still scores every action (it is in `infos`), so an
    ablation can train on the outcome while logging the process rewards it ignores.

    >>> import mappa_envs
    >>> from mappa_envs.wrappers import OutcomeReward
    >>> env = OutcomeReward(mappa_envs.make("MathChat-v0", task_source="synthetic"))
    >>> env.reset(seed=0)
    >>> env.step("The answer is \\\\boxed{7}.")
    >>> env.rewards["problem_solver"], env.infos["problem_solver"]["action"]["reward"] > 0
    (0.0, True)
    >>> env.close()
    """

    def __init__(self, env, scale: float = 10.0):
        super().__init__(env)
        self.scale = float(scale)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        super().reset(seed=seed, options=options)
        self._paid = False

    def _new_rewards(self, rewards: dict[str, float]) -> dict[str, float]:
        new = {a: 0.0 for a in rewards}
        if self._paid:
            return new
        outcome = next((self.env.infos[a]["outcome"] for a in self.env.agents if "outcome" in self.env.infos[a]), None)
        if outcome is not None:  # the episode ended on this step
            self._paid = True
            new = {a: self.scale * float(outcome["score"]) for a in rewards}
        return new
