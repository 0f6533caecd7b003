"""TextEnv: one MAPPA team episode as a single stream of text turns (the Gym/GEM-style LLM env API).

Trainers built for single-agent LLM environments (GEM and the frameworks that consume it) expect

    observation, info = env.reset(seed=...)
    observation, reward, terminated, truncated, info = env.step(text)

`TextEnv` gives them that over any MAPPA AEC env: each `step` is one action of whichever role is
due, the observation is that role's prompt, and `info["role"]` says who it is. Roles act in the
env's order, so one policy plays the whole team (or route by `info["role"]` to one model per role).
"""
from __future__ import annotations

from typing import Any

import gymnasium
from pettingzoo import AECEnv

from mappa_envs.errors import EnvArgumentError, ResetNeededError


class TextEnv(gymnasium.Env):
    """A Gymnasium view of a MAPPA AEC env: text in, text out, one action per step.

    - observation: the prompt of the role due to act (`""` once the episode is over);
    - `info["role"]` / `info["messages"]`: that role and its prompt as chat messages;
    - reward: what the action just taken earned its role (`env.rewards[role]` of that step: the
      coach score, plus any outcome bonus paid on the last step); `info["rewards"]` has every
      agent's reward of the step, `info["last_role"]` the role that acted, `info["action"]` its
      record (tool results, checks, coach verdict) and `info["outcome"]` the verdict at the end, as
      dicts; the typed records are `env.unwrapped.last_action` and `env.unwrapped.outcome`.
    - terminated: the team finished; truncated: an episode limit cut it short.

    >>> import mappa_envs
    >>> from mappa_envs.wrappers import TextEnv
    >>> env = TextEnv(mappa_envs.make("MathChat-v0", task_source="synthetic"))
    >>> obs, info = env.reset(seed=0)
    >>> info["role"], info["messages"][0]["role"]
    ('problem_solver', 'system')
    >>> obs, reward, terminated, truncated, info = env.step("The answer is \\\\boxed{7}.")
    >>> info["last_role"], info["role"], 0 <= reward <= 10
    ('problem_solver', 'code_executor', True)
    >>> env.close()
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, env: AECEnv, render_mode: str | None = None):
        if not isinstance(env, AECEnv):
            raise TypeError(f"TextEnv wraps a PettingZoo AECEnv (e.g. mappa_envs.make(...)); got {type(env).__name__}")
        if render_mode not in (None, *self.metadata["render_modes"]):
            raise EnvArgumentError(f"TextEnv: render_mode={render_mode!r} is not one of "
                                   f"{self.metadata['render_modes']}")
        self.env = env
        first = env.possible_agents[0]
        obs_space = env.observation_space(first)
        if not isinstance(obs_space, gymnasium.spaces.Dict) or "prompt" not in obs_space.spaces:
            raise TypeError(f"TextEnv needs observations shaped {{'prompt': text}} (MAPPA's convention); "
                            f"{first!r} observes {obs_space}")
        self.observation_space = obs_space["prompt"]
        self.action_space = env.action_space(first)
        self.render_mode = render_mode
        self._over = True

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[str, dict]:
        super().reset(seed=seed)
        self.env.reset(seed=seed, options=options)
        self._over = False
        return self._observation(), self._next_info()

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self._over:
            raise ResetNeededError("the episode is over (or was never started): call reset() before step()")
        env = self.env
        role = env.agent_selection
        env.step(action)
        rewards = {a: float(r) for a, r in env.rewards.items()}
        self._over = not env.agents or all(env.terminations[a] or env.truncations[a] for a in env.agents)
        truncated = self._over and any(env.truncations[a] for a in env.agents)
        terminated = self._over and not truncated
        done_info = env.infos[role]
        info = {**self._next_info(), "last_role": role, "rewards": rewards, "action": done_info.get("action")}
        if "outcome" in done_info:
            info["outcome"] = done_info["outcome"]
        return self._observation(), rewards.get(role, 0.0), terminated, truncated, info

    def render(self) -> str | None:
        """The episode so far as text with render_mode="ansi"; without one, Gymnasium's warning and None."""
        if self.render_mode is None:
            from mappa_envs.core.guards import warn_no_render_mode

            warn_no_render_mode(f"TextEnv({getattr(self.env.unwrapped, 'env_id', type(self.env).__name__)})")
            return None
        inner = self.env.unwrapped
        return inner.render_text() if hasattr(inner, "render_text") else self.env.render()

    def close(self) -> None:
        self.env.close()

    def sample_random_action(self) -> str:
        """A random action from the action space (GEM names this helper)."""
        return self.action_space.sample()

    def _observation(self) -> str:
        return "" if self._over else self.env.observe(self.env.agent_selection)["prompt"]

    def _next_info(self) -> dict[str, Any]:
        if self._over:
            return {"role": None, "messages": []}
        role = self.env.agent_selection
        info = self.env.infos[role]
        return {"role": role, "messages": list(info.get("messages", [])), "task_id": info.get("task_id")}


def make_text_env(env_id: str, render_mode: str | None = None, **kwargs) -> TextEnv:
    """`TextEnv(mappa_envs.make(env_id, **kwargs))`: what `gymnasium.make("mappa/<env_id>")` builds."""
    import mappa_envs

    return TextEnv(mappa_envs.make(env_id, **kwargs), render_mode=render_mode)
