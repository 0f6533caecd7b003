"""Where a run's experience comes from: an `ExperienceSource` plays episodes and takes new weights.

    rollout = experience.collect(task_ids, seed, eval_set=None)    # a rollout.Rollout
    experience.sync({policy: state_dict})                           # the generators take the new weights

`LocalExperience` (here) holds envs and generators in this process; `ray_mode.RayExperience` splits
the episodes over Ray rollout workers, each holding a `LocalExperience`. Both are built in
`mappa_train.factories` / `mappa_train.ray_mode`; the loop in `mappa_train.train` sees only the Protocol.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from mappa_envs.seeding import stride_seed

if TYPE_CHECKING:
    from mappa_train.config import TrainConfig
    from mappa_train.generation import SamplingParams
    from mappa_train.rollout import Rollout


@runtime_checkable
class ExperienceSource(Protocol):
    """Episodes on the training tasks or an eval set, played by the current generators."""

    train_tasks: list[str]
    eval_tasks: dict[str, list[str]]  # eval set -> its task ids
    policy_of: dict[str, str]  # role -> policy name
    coach: Any  # the training envs' coach: checkpointed with the learners when it keeps state (else None)

    def collect(self, task_ids: Sequence[str], seed: int, eval_set: str | None, offset: int = 0) -> Rollout:
        """One episode per task id; episode offset+i gets env seed seed+offset+i."""

    def sync(self, weights: Mapping[str, Any]) -> None:
        """{policy: state_dict (or a Ray reference to one)}: load new weights into the generators."""

    def close(self) -> None: ...


def step_seed(cfg: TrainConfig, step: int) -> int:
    """The seed `collect` plays step N's episodes with (their env and sampling seeds derive from it)."""
    return stride_seed(cfg.seed, step * 7919) % 2**31


def sampling_params(cfg: TrainConfig, evaluation: bool) -> SamplingParams:
    from mappa_train.generation import SamplingParams

    g = cfg.generation
    return SamplingParams(max_new_tokens=g.max_new_tokens,
                          temperature=g.eval_temperature if evaluation else g.temperature,
                          top_p=1.0 if evaluation else g.top_p)


class LocalExperience:
    """Envs and generators in this process: `collect` drives B = rollout.num_envs envs at once.

    `envs` maps None to the training envs and each eval set's name to its envs; `stop` is the
    driver's stop rule for training episodes (`rollout.stop_below`)."""

    def __init__(self, cfg: TrainConfig, envs: Mapping[str | None, list], generators: Mapping[str, Any],
                 policy_of: dict[str, str], sandbox: Any, stop: Callable | None = None):
        self.cfg, self.envs, self.generators, self.policy_of = cfg, envs, generators, policy_of
        self.sandbox, self.stop = sandbox, stop
        self.train_tasks = _task_ids(envs[None][0])
        self.eval_tasks = {k: _task_ids(v[0]) for k, v in envs.items() if k}
        self.coach = envs[None][0].unwrapped.coach

    def collect(self, task_ids: Sequence[str], seed: int, eval_set: str | None, offset: int = 0) -> Rollout:
        """Episodes offset+i get env seed seed+offset+i: a slice of a step plays as in the whole step."""
        from mappa_train.rollout import collect

        cfg = self.cfg
        episodes = [{"seed": seed + offset + i, "options": {"task_id": t}} for i, t in enumerate(task_ids)]
        return collect(self.envs[eval_set], self.generators, sampling_params(cfg, eval_set is not None), episodes,
                       role_policy=self.policy_of, seed=seed + offset, first_episode_id=offset,
                       max_prompt_tokens=cfg.generation.max_prompt_tokens, workers=cfg.rollout.step_workers,
                       schedule=cfg.rollout.schedule,
                       continuation=cfg.generation.continuation, stop=self.stop if eval_set is None else None)

    def sync(self, weights: Mapping[str, Any]) -> None:
        for name, gen in self.generators.items():
            gen.load_weights(weights[name].items())

    def close(self) -> None:
        for group in self.envs.values():
            for env in group:
                env.close()
        self.sandbox.close()


def _task_ids(env) -> list[str]:
    return [t.id for t in env.unwrapped.tasks]
