"""The learner: one DeepSpeed engine per policy, a frozen reference model, and the PPO-clip update.

A `Sample` is one action: the exact prompt tokens the policy saw and the exact tokens it sampled
(`Transition.prompt_ids + action_ids`). The learner scores samples (actor or reference log-probs of
the action tokens) and trains on them; the RL math lives in `mappa_train.algo`.

Batches are micro-batched by token budget. Packed micro-batches put several samples in one row with
positions restarting per sample and a block-diagonal causal mask, so no compute goes to padding;
padded micro-batches are the usual [rows, longest] layout (both give the same log-probs).

Log-probs never materialize a [tokens, vocab] tensor: the model runs with `logits_to_keep=1`, its
last hidden states are taken at the positions that score action tokens only, and the LM head +
log-softmax run over those in chunks of `logprob_chunk_tokens`, recomputed in backward instead of
kept (`benchmarks/bench_logprobs.py` measures peak memory and time against the full-logits way).

The loss of each micro-batch is `algo.micro_loss`: a token mean over the mini-batch (every action
token weighs the same, the paper) or a sequence mean (`algo.loss_mean=sequence`: every action weighs
the same, its tokens share 1/len). ceil(actions / train_batch_size) mini-batches × `algo.epochs`
optimizer steps; with one (the presets, docs/training.md) π/π_old = 1 and the clip never binds: plain
REINFORCE. Logged: `optimizer_steps`, `clip_frac` (tokens outside 1 ± ε), `clip_bound` (tokens the
clip gave no gradient).

Distributed (torchrun or Ray, `deepspeed.init_distributed`): each rank is given its share of the
samples. Ranks agree on the number of mini-batches and micro-batches (ZeRO-3 gathers parameters
collectively, so every rank must run every forward); a rank with nothing left runs a one-token
dummy pass with zero loss. The loss of each micro-batch is divided by the action-token count of
the whole mini-batch over all ranks, so the update is the exact token mean however data is split.
On CPU: `DS_ACCELERATOR=cpu`, gloo, and torch's AdamW (no JIT-built fused kernels).
"""
from __future__ import annotations

import functools
import math
import os
import socket
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import torch
from torch.utils.checkpoint import checkpoint

from mappa_train import algo
from mappa_train.algo import Sample
from mappa_train.health import torch_threads
from mappa_train.precision import resolve_precision

if TYPE_CHECKING:  # at run time the learner needs torch only (benchmarks/gpu_check.py imports it bare)
    from mappa_train.config import AlgoConfig, LearnerConfig, TrainConfig


def init_distributed() -> tuple[int, int]:
    """Start torch.distributed through DeepSpeed (gloo on CPU); one process gets a private port."""
    import deepspeed
    import torch.distributed as dist
    from deepspeed.accelerator import get_accelerator

    _forget_stale_world_group()
    if not dist.is_initialized():
        if os.environ.get("WORLD_SIZE", "1") == "1":  # a plain single process: make it a world of one
            # all five, every time: an earlier world of this process (an in-process vLLM engine's, now
            # gone) may have left some of them, and DeepSpeed falls back to MPI discovery on a partial set
            os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                              MASTER_PORT=str(_free_port()))
            _without_shared_memory_op()
        backend = "gloo" if get_accelerator().device_name() == "cpu" else get_accelerator().communication_backend_name()
        deepspeed.init_distributed(dist_backend=backend)
    else:  # someone else (an in-process vLLM engine) made the group: tell DeepSpeed who we are in it
        os.environ.setdefault("RANK", str(dist.get_rank()))
        os.environ.setdefault("WORLD_SIZE", str(dist.get_world_size()))
        os.environ.setdefault("LOCAL_RANK", "0")
    return dist.get_rank(), dist.get_world_size()


def _without_shared_memory_op() -> None:
    """DeepSpeed builds its shared-memory all-reduce op for every CPU process group, compiling it with ninja
    (about a minute) under a lock file; a process killed while compiling leaves the lock behind, and every
    later run then waits on it forever, silently. A world of one reduces nothing across processes: skip it."""
    import importlib

    # by name: `import deepspeed.comm.torch as m` binds deepspeed.comm's attribute `torch`, which is PyTorch
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None


def _forget_stale_world_group() -> None:
    """DeepSpeed caches a clone of the world group for its whole process. When that world is
    destroyed (an in-process vLLM engine shutting down takes its group with it) and a new one is
    made, the clone is stale and deepspeed.initialize fails with "Group ... is not registered"."""
    import torch.distributed as dist
    from deepspeed.utils import groups

    cached = groups._WORLD_GROUP
    if cached is not None and (not dist.is_initialized() or cached not in dist.distributed_c10d._world.pg_group_ranks):
        groups._WORLD_GROUP = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ds_config(cfg: LearnerConfig, dtype: str) -> dict:
    """The DeepSpeed config for `cfg`. Gradient accumulation is driven here, micro-batch by micro-batch."""
    zero: dict = {"stage": cfg.zero_stage}
    if cfg.offload_optimizer:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "gradient_clipping": cfg.grad_clip,
        "zero_optimization": zero,
        "bf16": {"enabled": dtype == "bfloat16"},
        # torch's AdamW unless offloading (DeepSpeed's CPU Adam is the fast path there), fused: its default on
        # CPU tensors is a loop over parameters, 19% of a SmolLM2 update (docs/performance.md)
        "optimizer": {"type": "AdamW", "params": {"lr": cfg.lr, "weight_decay": cfg.weight_decay, "betas": [0.9, 0.95],
                                                  **({"fused": True} if not cfg.offload_optimizer else {}),
                                                  "torch_adam": not cfg.offload_optimizer}},
        "steps_per_print": 1 << 30,
    }


def lr_at(step: int, cfg: LearnerConfig, total_steps: int) -> float:
    """LR for training step `step` (0-based): linear warm-up, then constant or cosine to 10%."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return cfg.lr
    progress = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
    return cfg.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


@runtime_checkable
class Learner(Protocol):
    """One policy's learner as the training loop uses it: `PolicyLearner`, one LoRA adapter of one
    (`lora.AdapterLearner`) and a Ray rank group (`ray_mode.LearnerGroup`) all are one."""

    rank: int  # this process's rank in the learner's world: rank 0 writes files
    frozen: bool  # sampled with but never trained (its weights are not synced)

    def logprobs(self, samples: list[Sample], reference: bool = False) -> list[torch.Tensor]: ...
    def train(self, samples: list[Sample], lr: float) -> dict[str, float]: ...  # keeps π_θ_old in s.first_logp
    def state_dict(self) -> Any: ...  # the weights the generator loads (Ray: a reference to them)
    def save_pretrained(self, out_dir: str | Path) -> None: ...
    def save_checkpoint(self, ckpt_dir: str | Path) -> None: ...
    def load_checkpoint(self, ckpt_dir: str | Path) -> None: ...


class Adapters(Protocol):
    """Trainable adapters over a frozen base model (LoRA: `mappa_train.lora.LoraAdapters`). The learner
    then trains the adapters' parameters only, in fp32, and scores the reference as the bare base."""

    def attach(self, model: torch.nn.Module) -> torch.nn.Module:
        """The base wrapped with its adapters; the parameters to train require grad, no other does."""

    def base_only(self, model: torch.nn.Module) -> AbstractContextManager:
        """Inside this context the wrapped model computes as the bare base."""


def build_learner(cfg: TrainConfig, model_path: str | Path, pad_id: int,
                  adapters: Adapters | None = None) -> PolicyLearner:
    """A policy's learner as the run's config says: locally, per LoRA base, and on each Ray rank."""
    return PolicyLearner(model_path, cfg.learner, cfg.algo, dtype=cfg.model.dtype, seed=cfg.seed,
                         attn_implementation=cfg.model.attn_implementation, temperature=cfg.generation.temperature,
                         pad_id=pad_id, adapters=adapters)


def _own_threads(method):
    """Run with the thread count the learner was built with. A bf16 backward sums in an order that
    depends on it (SmolLM2 on CPU, 1 vs 2 threads: gradients differ by ~0.5% of their largest entry),
    and a job run beside others is given more cores when they end (mappa_train.health): that must
    speed its generation (whose logits moved in 3 of 64 evaluation episodes, measured) without
    changing what a seeded run learns."""
    @functools.wraps(method)
    def run(self, *args, **kwargs):
        with torch_threads(self.threads):
            return method(self, *args, **kwargs)
    return run


class PolicyLearner:
    """A policy's DeepSpeed engine and frozen reference model.

    With `adapters` the model is a frozen base carrying trainable adapters (`Adapters`; the active one
    is used and trained: `mappa_train.lora.AdapterLearner`); DeepSpeed holds the adapters'
    parameters only, and the reference is the base with the adapters off, not a second copy.
    """

    frozen = False

    def __init__(self, model_path: str | Path, cfg: LearnerConfig, algo_cfg: AlgoConfig, *, dtype: str = "float32",
                 attn_implementation: str = "sdpa", temperature: float = 1.0, pad_id: int = 0, seed: int = 0,
                 adapters: Adapters | None = None):
        import deepspeed
        from deepspeed.accelerator import get_accelerator
        from transformers import AutoModelForCausalLM

        self.cfg, self.algo, self.temperature, self.pad_id = cfg, algo_cfg, temperature, pad_id
        self.attn, self.adapters = attn_implementation, adapters
        self.rank, self.world = init_distributed()
        self.threads = torch.get_num_threads()
        torch.manual_seed(seed)
        self.precision = resolve_precision(dtype)
        # bf16 on CPU: autocast over fp32 weights, which torch's AdamW steps directly. DeepSpeed's bf16 mode
        # (bf16 weights, fp32 master copies) on one CPU rank spent more in its per-parameter copies and
        # overflow checks than the bf16 matmuls saved (docs/performance.md). On GPU it is the usual bf16 mode.
        self.autocast = self.precision.dtype == "bfloat16" and get_accelerator().device_name() == "cpu"
        weights = torch.float32 if self.autocast else self.precision.torch_dtype
        load = dict(dtype=weights, attn_implementation=attn_implementation)
        model = AutoModelForCausalLM.from_pretrained(model_path, **load)
        model.config.use_cache = False
        if adapters is not None:
            model = adapters.attach(model)
        if cfg.grad_checkpointing:
            model.gradient_checkpointing_enable()
            if adapters is not None:  # the frozen embeddings' output must carry grad into checkpointed layers
                model.enable_input_require_grads()
        # adapters are kept in fp32 over a bf16 base: they need no bf16 master copies
        config = ds_config(cfg, "float32" if self.autocast or adapters is not None else self.precision.dtype)
        params = [p for p in model.parameters() if p.requires_grad]
        self.engine, *_ = deepspeed.initialize(model=model, model_parameters=params, config=config)
        self.ref = None
        if adapters is None:
            self.ref = self._reference(model_path, load, config)

    def _reference(self, model_path: str | Path, load: dict, config: dict):
        """A frozen copy of the starting model (ZeRO-3: partitioned like the actor)."""
        import deepspeed
        from transformers import AutoModelForCausalLM

        cfg = self.cfg
        ref = AutoModelForCausalLM.from_pretrained(model_path, **load).eval().requires_grad_(False)
        if cfg.zero_stage == 3:  # partition the reference model too: ZeRO-3 inference
            ref_config = {k: config[k] for k in ("train_micro_batch_size_per_gpu", "zero_optimization", "bf16")}
            ref_config["zero_optimization"] = {"stage": 3}
            ref, *_ = deepspeed.initialize(model=ref, config=ref_config)
        return ref if cfg.zero_stage == 3 else ref.to(self.engine.device)

    # ---- scoring ---------------------------------------------------------------------------------

    @_own_threads
    @torch.no_grad()
    def logprobs(self, samples: list[Sample], reference: bool = False) -> list[torch.Tensor]:
        """Log-probs of each sample's action tokens under the actor (or the reference). [n_action] each."""
        model = self.ref if reference and self.ref is not None else self.engine
        model.eval()
        base_only = self.adapters.base_only(self.engine.module) if reference and self.ref is None else nullcontext()
        out: dict[int, torch.Tensor] = {}
        with base_only:  # adapters: the reference is the base with the adapters off
            for micro in self._micro_batches(samples, self._global_max(len(self._split(samples)))):
                for s, lp in zip(micro, self._forward(model, micro)):  # an empty micro keeps step (ZeRO-3)
                    out[id(s)] = lp.float().cpu()
        return [out[id(s)] for s in samples]  # micro-batches are sorted by length: back to the caller's order

    # ---- training --------------------------------------------------------------------------------

    @_own_threads
    def train(self, samples: list[Sample], lr: float) -> dict[str, float]:
        """PPO-clip update on this rank's samples (each with old_logp and advantages); returns metrics."""
        for group in self.engine.optimizer.param_groups:
            group["lr"] = lr
        self.engine.train()
        total = self._global_sum(len(samples))
        n_minibatches = max(1, math.ceil(total / self.cfg.train_batch_size))
        stats = dict.fromkeys(algo.LOSS_STATS, 0.0)
        grad_norms = []
        for epoch in range(self.algo.epochs):
            for j, mb in enumerate(_chunks(samples, n_minibatches)):
                total = self._global_sum(algo.loss_count(mb, self.algo))  # the loss's divisor over all ranks
                micros = self._micro_batches(mb, self._global_max(len(self._split(mb))))
                for i, micro in enumerate(micros):
                    self.engine.set_gradient_accumulation_boundary(i == len(micros) - 1)
                    loss, part = self._loss(micro, max(total, 1), first_step=epoch == j == 0)
                    self.engine.backward(loss * self.world)  # DeepSpeed averages gradients over ranks
                    for k in stats:
                        stats[k] += part[k]
                if self.cfg.zero_stage == 0:  # DeepSpeed reports the norm only for ZeRO optimizers
                    grads = [p.grad.norm() for p in self.engine.module.parameters() if p.grad is not None]
                    grad_norms.append(float(torch.stack(grads).norm()) if grads else 0.0)
                self.engine.step()
                if self.cfg.zero_stage > 0 and self.engine.get_global_grad_norm() is not None:
                    grad_norms.append(float(self.engine.get_global_grad_norm()))
        tokens = max(self._global_sum(stats.pop("tokens")), 1.0)
        weight = max(self._global_sum(stats.pop("weight")), 1e-12)
        result = {k: self._global_sum(v) / (weight if k == "loss" else tokens) for k, v in stats.items()}
        result.update(lr=lr, grad_norm=sum(grad_norms) / max(1, len(grad_norms)),
                      optimizer_steps=float(n_minibatches * self.algo.epochs), tokens=tokens / self.algo.epochs)
        return result

    def _loss(self, micro: list[Sample], total: float, first_step: bool) -> tuple[torch.Tensor, dict[str, float]]:
        """This micro-batch's share of the mini-batch loss (`algo.micro_loss`). Before the first optimizer
        step the policy is still π_θ_old: each sample keeps those log-probs (`first_logp`), the learner's
        view of the old policy at no extra pass (the log-prob gap check under `algo.old_logprobs=generator`)."""
        logps = self._forward(self.engine, micro)
        if not micro:  # this rank has no data for the micro-step the others run: a zero-loss pass
            return logps.sum() * 0.0, dict.fromkeys(algo.LOSS_STATS, 0.0)
        if first_step:
            for s, lp in zip(micro, logps):
                s.first_logp = lp.detach().float().cpu()
        return algo.micro_loss(logps, micro, self.algo, total)

    # ---- forward passes --------------------------------------------------------------------------

    def _forward(self, model, micro: list[Sample]):
        """Per-sample log-probs of the action tokens, from one packed or padded forward pass.

        An empty `micro` runs a one-token pass through the same modules and returns an empty tensor,
        so that a rank without data takes part in every ZeRO-3 gather (and, with grad, backward).
        """
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.autocast):  # forward only; backward follows it
            return self._forward_pass(model, micro)

    def _forward_pass(self, model, micro: list[Sample]):
        device = self.engine.device
        rows = micro or [Sample([self.pad_id], [])]
        if self.cfg.packed:
            ids = torch.tensor([t for s in rows for t in s.prompt_ids + s.action_ids], device=device)[None]
            positions = torch.cat([torch.arange(len(s)) for s in rows]).to(device)[None]
            kwargs = {"position_ids": positions}
            if self.attn != "flash_attention_2":  # flash-attention finds the packed samples from position_ids
                segment = torch.cat([torch.full((len(s),), i) for i, s in enumerate(rows)]).to(device)
                causal = torch.ones(len(segment), len(segment), dtype=torch.bool, device=device).tril()
                kwargs["attention_mask"] = (causal & (segment[:, None] == segment[None, :]))[None, None]
            starts = torch.tensor([0] + [len(s) for s in rows]).cumsum(0)[:-1].tolist()
            where = [(0, start + len(s.prompt_ids) - 1, len(s.action_ids)) for s, start in zip(rows, starts)]
        else:
            width = max(len(s) for s in rows)
            ids = torch.full((len(rows), width), self.pad_id, device=device)
            attention = torch.zeros((len(rows), width), dtype=torch.long, device=device)
            for r, s in enumerate(rows):
                ids[r, :len(s)] = torch.tensor(s.prompt_ids + s.action_ids)
                attention[r, :len(s)] = 1
            kwargs = {"attention_mask": attention}
            where = [(r, len(s.prompt_ids) - 1, len(s.action_ids)) for r, s in enumerate(rows)]
        # hidden state t scores token t+1: keep the positions that score action tokens, nothing else
        row = torch.tensor([r for r, _, n in where for _ in range(n)], dtype=torch.long, device=device)
        col = torch.tensor([c + i for _, c, n in where for i in range(n)], dtype=torch.long, device=device)
        hidden = final_hidden(model, input_ids=ids, **kwargs)[row, col]  # [N, H]
        chunk = self.cfg.logprob_chunk_tokens
        n_chunks = self._global_max(math.ceil(len(col) / chunk))  # every rank calls the head as often (ZeRO-3)
        logp = action_logprobs(hidden, output_head(model), ids[row, col + 1], self.temperature, chunk, n_chunks)
        return list(logp.split([len(s.action_ids) for s in micro])) if micro else logp

    def _split(self, samples: list[Sample]) -> list[list[Sample]]:
        """Micro-batches of samples sorted by length, so that a padded row is padded by little (a step's roles
        differ in prompt length by 3x): by token budget when packed (a sample longer than it goes alone), by
        rows when padded."""
        samples = sorted(samples, key=len)
        if not self.cfg.packed:
            n = self.cfg.micro_batch_size
            return [samples[i:i + n] for i in range(0, len(samples), n)]
        out: list[list[Sample]] = []
        for s in samples:
            if out and sum(map(len, out[-1])) + len(s) <= self.cfg.micro_batch_tokens:
                out[-1].append(s)
            else:
                out.append([s])
        return out

    def _micro_batches(self, samples: list[Sample], count: int) -> list[list[Sample]]:
        micros = self._split(samples)
        return micros + [[] for _ in range(count - len(micros))]

    # ---- collectives -----------------------------------------------------------------------------

    def _global_sum(self, x: float) -> float:
        return self._all_reduce(x, "sum")

    def _global_max(self, x: int) -> int:
        return int(self._all_reduce(x, "max"))

    def _all_reduce(self, x: float, op: str) -> float:
        if self.world == 1:
            return float(x)
        import torch.distributed as dist

        t = torch.tensor([float(x)], dtype=torch.float64)
        dist.all_reduce(t, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
        return float(t.item())

    # ---- weights ---------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Full (gathered) weights on CPU, for syncing the generator. Collective under ZeRO-3."""
        import deepspeed

        module = self.engine.module
        if self.cfg.zero_stage != 3:
            return {k: v.detach().cpu() for k, v in module.state_dict().items()}
        out, seen = {}, {}
        for name, p in module.named_parameters(remove_duplicate=False):  # tied aliases too (vLLM wants them)
            if id(p) not in seen:
                with deepspeed.zero.GatheredParameters([p]):
                    seen[id(p)] = p.detach().cpu().clone()
            out[name] = seen[id(p)]
        for name, b in module.named_buffers():
            out[name] = b.detach().cpu()
        return out

    def save_pretrained(self, out_dir: str | Path) -> None:
        """Write the policy as a plain transformers model (rank 0 writes; collective under ZeRO-3)."""
        state = self.state_dict()
        if self.rank == 0:
            self.engine.module.save_pretrained(out_dir, state_dict=state)

    def save_checkpoint(self, ckpt_dir: str | Path) -> None:
        """Model and optimizer state of every rank (collective)."""
        self.engine.save_checkpoint(str(ckpt_dir), tag="state")

    def load_checkpoint(self, ckpt_dir: str | Path) -> None:
        path, _ = self.engine.load_checkpoint(str(ckpt_dir), tag="state")
        if path is None:
            raise FileNotFoundError(f"no DeepSpeed checkpoint under {ckpt_dir}")


# ---- log-probs without a [tokens, vocab] tensor ----------------------------------------------------

def causal_lm(model):
    """The transformers causal LM inside a DeepSpeed engine and/or a peft wrapper."""
    model = getattr(model, "module", model)  # DeepSpeedEngine
    return model.get_base_model() if hasattr(model, "get_base_model") else model  # peft


def output_head(model) -> torch.nn.Module:
    return causal_lm(model).get_output_embeddings()


def final_hidden(model, **inputs) -> torch.Tensor:
    """The decoder's last hidden states [R, L, H], from the model's own forward (so DeepSpeed's hooks
    run as usual) with logits kept for one position only."""
    captured: list[torch.Tensor] = []
    decoder = causal_lm(model).get_decoder()
    handle = decoder.register_forward_hook(lambda _m, _in, out: captured.append(out[0]))
    try:
        model(**inputs, logits_to_keep=1)
    finally:
        handle.remove()
    return captured[-1]


def action_logprobs(hidden: torch.Tensor, head: torch.nn.Module, targets: torch.Tensor, temperature: float,
                    chunk: int, n_chunks: int | None = None) -> torch.Tensor:
    """log softmax(head(hidden) / temperature)[targets], `chunk` rows at a time. [N, H], [N] -> [N] fp32.

    The biggest tensor is [chunk, V] fp32 (a full [N, V] one is 50 GB at 32k tokens and a 152k
    vocabulary). With grad, each chunk's logits are recomputed in backward rather than stored.
    `n_chunks` (>= the chunks needed) pads with empty chunks: ranks then call `head` equally often.
    """
    n_chunks = max(n_chunks or 0, math.ceil(len(targets) / chunk))
    out = []
    for i in range(n_chunks):
        h, t = hidden[i * chunk:(i + 1) * chunk], targets[i * chunk:(i + 1) * chunk]
        if torch.is_grad_enabled():
            out.append(checkpoint(_chunk_logprobs, h, t, head, temperature, use_reentrant=False))
        else:
            out.append(_chunk_logprobs(h, t, head, temperature))
    return torch.cat(out) if out else hidden.new_zeros(0, dtype=torch.float32)


def _chunk_logprobs(hidden: torch.Tensor, targets: torch.Tensor, head: torch.nn.Module,
                    temperature: float) -> torch.Tensor:
    logits = head(hidden).float()  # [C, V]; the head's own backward needs its input, not this output
    if temperature != 1.0:
        logits = logits.div_(temperature) if logits.dtype != hidden.dtype else logits / temperature
    return _TargetLogprob.apply(logits, targets)


class _TargetLogprob(torch.autograd.Function):
    """log_softmax(logits)[targets] [C, V], [C] -> [C], whose backward writes the logits' gradient,
    (onehot − softmax) × grad, into one [C, V] buffer (autograd's gather + logsumexp would make three)."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        lse = logits.logsumexp(1)
        ctx.save_for_backward(logits, lse, targets)
        return logits.gather(1, targets[:, None])[:, 0] - lse

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        logits, lse, targets = ctx.saved_tensors
        out = torch.sub(logits, lse[:, None]).exp_().neg_()  # −softmax
        out.scatter_add_(1, targets[:, None], torch.ones_like(lse)[:, None])
        return out.mul_(grad[:, None]), None


def _chunks(items: list, n: int) -> list[list]:
    """`items` in `n` contiguous, nearly equal chunks (some may be empty)."""
    size, extra = divmod(len(items), n)
    bounds = [i * size + min(i, extra) for i in range(n + 1)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:])]

