"""`validate`: every field's range rule, then the rules that span fields, and the free-form dicts
checked against the signatures they feed. Raises ConfigError naming the key and the fix.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from mappa_envs.coach.types import is_score
from mappa_envs.core.pipeline import REWARD_MODES, SCORES_EACH_ACTION
from mappa_envs.errors import MappaError
from mappa_train.config.schema import ConfigError, EnvConfig, TrainConfig


def validate(cfg: TrainConfig) -> TrainConfig:
    """Every field's range rule, then the cross-field rules. Returns cfg unchanged or raises ConfigError."""
    for key, value, rule in leaves_with_rules(cfg):
        problem = rule(value)
        if problem:
            raise ConfigError(f"{key} {problem}, got {value!r}")
    g, learner = cfg.generation, cfg.learner
    if not cfg.out_dir.strip():
        raise ConfigError("out_dir must name a folder for the run, e.g. out_dir=runs/mine")
    if g.temperature == 0:
        raise ConfigError("generation.temperature must be > 0 for training: RL needs sampled actions and their "
                          "log-probs")
    if learner.packed and cfg.model.attn_implementation not in ("sdpa", "flash_attention_2"):
        raise ConfigError("learner.packed needs model.attn_implementation sdpa or flash_attention_2 "
                          f"(block-diagonal masks), got {cfg.model.attn_implementation!r}; or set learner.packed=false")
    if learner.offload_optimizer and learner.zero_stage == 0:
        raise ConfigError("learner.offload_optimizer needs learner.zero_stage >= 1")
    if not cfg.env.eval_sets or not all(isinstance(v, dict) for v in cfg.env.eval_sets.values()):
        raise ConfigError(f"env.eval_sets must map a set name to a dict of env kwargs, got {cfg.env.eval_sets!r}")
    stop = cfg.rollout.stop_below
    if not all(isinstance(k, str) and is_score(v) for k, v in stop.items()):
        raise ConfigError(f"rollout.stop_below must map role names to coach scores (0-10), e.g. {{code_executor: 4}}; "
                          f"got {stop!r}")
    mode = cfg.env.kwargs.get("reward_mode", "process")
    if stop and mode in REWARD_MODES and mode not in SCORES_EACH_ACTION:
        raise ConfigError(f"rollout.stop_below reads per-action coach scores, which env.kwargs.reward_mode={mode} "
                          "does not compute; drop one of them")
    if g.top_p < 1:  # the learner scores every action under the full softmax (mappa_train.learner)
        raise ConfigError(f"generation.top_p={g.top_p:g} would train off-policy: rollouts would be sampled from the "
                          "top-p truncated distribution while the learner scores log-probs (PPO ratio, KL) under the "
                          "full one; set generation.top_p=1 (evaluation samples without it anyway)")
    _check_env_kwargs(cfg.env)
    paths = cfg.model.role_paths
    if paths and cfg.model.policies != "per_role":
        raise ConfigError(f"model.role_paths gives roles their own models, which needs model.policies=per_role "
                          f"(got {cfg.model.policies}); set it, or drop model.role_paths")
    if not all(isinstance(v, str) and v for v in paths.values()):
        raise ConfigError(f"model.role_paths must map role names to model paths or hub ids, got {paths!r}")
    if cfg.model.policies == "lora":
        _check_lora(cfg)
    return cfg


def _check_lora(cfg: TrainConfig) -> None:
    """The `lora` section's shapes and its interplay with the rest; role names are checked against the
    env (`lora.adapter_map`) and target modules against the model (`lora.check_targets`) at start-up."""
    lora = cfg.lora
    if not lora.target_modules or not all(isinstance(m, str) and m for m in lora.target_modules):
        raise ConfigError(f"lora.target_modules must be a non-empty list of module names, e.g. [q_proj, v_proj]; "
                          f"got {lora.target_modules!r}")
    groups = lora.groups
    if not all(isinstance(g, str) and isinstance(r, list) and r and all(isinstance(x, str) for x in r)
               for g, r in groups.items()):
        raise ConfigError(f"lora.groups must map an adapter name to a list of roles, e.g. {{tools: [code_executor, "
                          f"verifier]}}; got {groups!r}")
    listed = [r for roles in groups.values() for r in roles]
    twice = sorted({r for r in listed if listed.count(r) > 1})
    if twice:
        raise ConfigError(f"lora.groups puts roles {twice} in more than one group; give each role one adapter")
    bad_lr = {k: v for k, v in lora.lr.items() if not (_number(v) or 0) > 0}
    if bad_lr:
        raise ConfigError(f"lora.lr must map adapter names to learning rates > 0, e.g. {{verifier: 1e-4}}; "
                          f"got {bad_lr}")
    if not all(isinstance(f, str) for f in lora.frozen):
        raise ConfigError(f"lora.frozen must be a list of adapter (role or group) names; got {lora.frozen!r}")
    if cfg.learner.zero_stage != 0:
        raise ConfigError(f"model.policies=lora trains small adapters on a frozen base and needs learner.zero_stage=0 "
                          f"(nothing worth partitioning), got {cfg.learner.zero_stage}; set learner.zero_stage=0")
    if cfg.ray.enabled:
        raise ConfigError("model.policies=lora runs in one process for now; set ray.enabled=false "
                          "(or use model.policies=per_role with Ray)")


def _check_env_kwargs(env: EnvConfig) -> None:
    """The free-form dicts must name arguments their consumers take: caught here, not at step 1."""
    import mappa_envs
    from mappa_envs.registration import accepted_kwargs, load_callable

    try:
        accepted = accepted_kwargs(load_callable(mappa_envs.spec(env.id).entry_point))
    except KeyError:
        registered = ", ".join(sorted(mappa_envs.registry))
        raise ConfigError(f"env.id {env.id!r} is not registered; registered ids: {registered}") from None
    for name, kwargs in [("env.kwargs", env.kwargs)] + [(f"env.eval_sets.{k}", v) for k, v in env.eval_sets.items()]:
        for key in kwargs:
            if key in ("coach", "sandbox"):
                raise ConfigError(f"{name} sets {key!r}; set env.{key} (and env.{key}_kwargs) instead")
            if accepted is not None and key not in accepted:
                raise ConfigError(f"{name} has {key!r}, which {env.id} does not take; "
                                  f"it takes {', '.join(sorted(accepted))}")
    from mappa_envs.coach.config import PRESETS, typed_settings

    settings = dict(env.coach_kwargs)
    if env.coach == "rule" and settings:
        raise ConfigError(f"env.coach_kwargs {sorted(settings)} set, but env.coach is 'rule', which has no settings")
    if settings.get("preset") is not None and settings["preset"] not in PRESETS:
        raise ConfigError(f"env.coach_kwargs.preset {settings['preset']!r} is not a preset; "
                          f"presets: {', '.join(PRESETS)}")
    settings.pop("preset", None)
    try:
        typed_settings(settings)
    except MappaError as e:
        raise ConfigError(f"env.coach_kwargs: {e}") from None
    if env.eval_coach:
        from mappa_envs.coach import make_coach

        try:
            make_coach(env.eval_coach)
        except MappaError as e:
            raise ConfigError(f"env.eval_coach {env.eval_coach!r}: {e}") from None
    from mappa_envs.sandbox.factory import accepted_arguments

    unknown = sorted(set(env.sandbox_kwargs) - accepted_arguments(env.sandbox))
    if unknown:
        raise ConfigError(f"env.sandbox_kwargs has {unknown}, which the {env.sandbox} sandbox does not take; "
                          f"it takes {', '.join(sorted(accepted_arguments(env.sandbox)))}")


def _number(value) -> float | None:
    """A YAML number (YAML 1.1 reads 1e-4, with no dot, as a string), or None."""
    if isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def leaves_with_rules(node: Any, prefix: str = ""):
    for f in dataclasses.fields(node):
        value = getattr(node, f.name)
        if dataclasses.is_dataclass(value):
            yield from leaves_with_rules(value, f"{prefix}{f.name}.")
        elif f.metadata.get("rule") is not None:
            yield f"{prefix}{f.name}", value, f.metadata["rule"]
