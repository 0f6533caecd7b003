"""The trainer's blocks, built from its config: the model, envs, coach, generators, learners, experience.

    model_path = resolve_checked_model(cfg)                    # a local checkpoint ('tiny' is built)
    experience = local_experience(cfg, model_path)             # envs + generators: an ExperienceSource
    learners = make_learners(cfg, model_path, policy names)    # policy -> Learner

What differs between shared, per-role and LoRA policies is asked of `policy_layout(cfg)`
(mappa_train.policy_layout). `mappa_train.train` runs the loop over these blocks;
`mappa_train.ray_mode` builds the same blocks as Ray actors.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from mappa_train.config import ConfigError, TrainConfig
from mappa_train.experience import LocalExperience
from mappa_train.learner import Learner
from mappa_train.policy_layout import TINY_DIR, policy_layout


def resolve_model(cfg: TrainConfig) -> Path:
    """The starting checkpoint as a local directory (mappa_train.model_source); 'tiny' is built under out_dir."""
    from mappa_train.model_source import resolve_model as resolve

    return resolve(cfg.model.path, tiny_dir=Path(cfg.out_dir) / TINY_DIR, seed=cfg.seed)


def resolve_checked_model(cfg: TrainConfig) -> Path:
    """`resolve_model`, after refusing any policy's starting model whose chat template fails `check_template`."""
    model_path = resolve_model(cfg)
    for path in {model_path, *policy_layout(cfg).starts(cfg.model.role_paths, model_path).values()}:
        check_template(cfg, path)
    return model_path


def check_template(cfg: TrainConfig, model_path: Path | str):
    """Refuse, before anything starts, a chat template the rollout cannot prompt token-exactly."""
    from mappa_train.chat_tokens import ChatFormat

    return ChatFormat.of(AutoTokenizer.from_pretrained(model_path), cfg.generation.continuation)


def make_coach(cfg: TrainConfig, evaluation: bool = False):
    """The configured coach, through the one factory training and `mappa eval` share; for evaluation envs
    `env.eval_coach` when it is set (built from its spec alone: the settings are the training coach's)."""
    from mappa_envs.coach import make_coach as build

    if evaluation and cfg.env.eval_coach:
        return build(cfg.env.eval_coach)
    return build(cfg.env.coach, cfg.env.coach_kwargs, cfg.env.coach_cache)


def make_envs(cfg: TrainConfig, n: int, overrides: Mapping[str, Any] | None = None, sandbox: Any = None,
              evaluation: bool = False) -> list:
    """`n` envs as configured (`evaluation`: held-out envs); they share one coach and (when given) one sandbox."""
    import mappa_envs

    coach = make_coach(cfg, evaluation)
    kwargs = {**cfg.env.kwargs, **(overrides or {})}
    return [mappa_envs.make(cfg.env.id, coach=coach, sandbox=sandbox or cfg.env.sandbox, **kwargs) for _ in range(n)]


def policy_map(cfg: TrainConfig, roles: Sequence[str]) -> dict[str, str]:
    """role -> policy name: one shared policy, one per role (the paper), or one LoRA adapter per role or group."""
    return policy_layout(cfg).policy_of(roles)


def make_generators(cfg: TrainConfig, model_path: Path | str, names: Sequence[str]) -> dict[str, Any]:
    """policy name -> its Generator, after refusing a context too short for prompt + new tokens."""
    from transformers import AutoConfig

    g, layout = cfg.generation, policy_layout(cfg)
    paths = layout.starts(names, model_path)
    for path in sorted(set(paths.values())):
        limit = getattr(AutoConfig.from_pretrained(path), "max_position_embeddings", None)
        if limit and g.max_prompt_tokens + g.max_new_tokens > limit:
            total = g.max_prompt_tokens + g.max_new_tokens
            raise ConfigError(f"generation.max_prompt_tokens + max_new_tokens = {total} exceeds the context of "
                              f"{path} ({limit}); lower generation.max_prompt_tokens")
    if g.backend == "hf":
        kwargs: dict = {"dtype": cfg.model.dtype}  # resolved as the learner resolves it (mappa_train.precision)
    else:  # one GPU holds this process's engines: they share vllm_gpu_memory_utilization (vLLM checks the sum)
        kwargs = {"dtype": cfg.model.dtype, "max_model_len": g.max_prompt_tokens + g.max_new_tokens,
                  "gpu_memory_utilization": g.vllm_gpu_memory_utilization / layout.engines(names), "seed": cfg.seed}
    return layout.make_generators(model_path, names, **kwargs)


def make_learners(cfg: TrainConfig, model_path: Path | str, names: Sequence[str]) -> dict[str, Learner]:
    """policy name -> its learner; in LoRA mode one base model's adapters, each behind the same interface."""
    return policy_layout(cfg).make_learners(model_path, names)


def stop_rule(stop_below: Mapping[str, float], roles: Sequence[str]) -> Callable | None:
    """`rollout.stop_below` as the driver's stop rule: an action of a listed role scored below its threshold."""
    if not stop_below:
        return None
    unknown = sorted(set(stop_below) - set(roles))
    if unknown:
        raise ConfigError(f"rollout.stop_below names roles {unknown} that the env does not have; "
                          f"its roles: {list(roles)}")

    def doomed(result, turn) -> str | None:
        limit = stop_below.get(turn.role)
        score = turn.record.reward
        return f"{turn.role} scored {score:g} < {limit:g}" if limit is not None and score < limit else None

    return doomed


def local_experience(cfg: TrainConfig, model_path: Path | str) -> LocalExperience:
    """Envs and generators in this process; its `collect` drives B = rollout.num_envs envs at once."""
    from mappa_envs.sandbox import make_sandbox

    sandbox = make_sandbox(cfg.env.sandbox, **cfg.env.sandbox_kwargs)
    envs = {None: make_envs(cfg, cfg.rollout.num_envs, sandbox=sandbox)}
    for name, overrides in cfg.env.eval_sets.items():
        envs[name] = make_envs(cfg, cfg.rollout.num_envs, overrides, sandbox=sandbox, evaluation=True)
    roles = envs[None][0].possible_agents
    policy_of = policy_map(cfg, roles)
    generators = make_generators(cfg, model_path, sorted(set(policy_of.values())))
    return LocalExperience(cfg, envs, generators, policy_of, sandbox, stop_rule(cfg.rollout.stop_below, roles))
