"""transformers `generate` as a Generator: batched, left-padded, CPU or GPU.

The logprob of every sampled token is recorded during `generate` by one logits processor that does
the temperature / top-k / top-p warping itself and hands `generate` log-probabilities to sample
from; so the recorded value is, by construction, the log-probability of the distribution the token
was drawn from (see `mappa_train.generation` for what that means for the learner). Memory stays at
one [batch, vocab] tensor, where `output_scores=True` would keep one per generated token.
"""
from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable
from typing import Any

from mappa_envs.errors import InputError
from mappa_train.generation import Generation, SamplingParams, decode, require, stop_ids
from mappa_train.precision import resolve_precision

torch = require("torch", "'mappa[train]'")
transformers = require("transformers", "'mappa[train]'")


def warped_logprobs(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """log softmax of `logits` [B, V] after temperature, top-k and top-p (masked entries are -inf)."""
    logits = logits.float()
    if params.temperature > 0:
        logits = logits / params.temperature
    if params.top_k:
        kth = torch.topk(logits, min(params.top_k, logits.shape[-1]), dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if params.top_p < 1:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)
        probs = sorted_logits.softmax(-1)
        drop = probs.cumsum(-1) - probs >= params.top_p  # the mass before a token already reaches top_p
        logits = logits.scatter(-1, order, sorted_logits.masked_fill(drop, float("-inf")))
    return torch.log_softmax(logits, dim=-1)


class _WarpAndRecord(transformers.LogitsProcessor):
    """Warps scores into log-probabilities and records the logprob of each sampled token.

    At step t `input_ids[:, -1]` is the token sampled from step t-1's distribution, which is kept.
    With per-row `generators` it also draws each row's token itself, from that row's own RNG, and
    hands `generate` a distribution with all mass on it: a row's sample then depends on its seed
    and its prompt, not on the other rows of the batch.
    """

    def __init__(self, params: SamplingParams, generators: list[torch.Generator] | None = None):
        self.params, self.generators = params, generators
        self.previous: torch.Tensor | None = None
        self.logprobs: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.previous is not None:
            self.record(input_ids[:, -1])
        self.previous = warped_logprobs(scores, self.params)
        if self.generators is None or self.params.temperature == 0:
            return self.previous
        # inverse-CDF: one uniform per row from the row's RNG, one batched cumsum (per-row multinomial
        # drew a vocabulary's worth of exponentials per row and token: ~12% of decoding on CPU);
        # scaled by the row's total, and right=True, so a zero-probability token is never chosen
        cdf = self.previous.exp().cumsum(-1)
        u = torch.stack([torch.rand((), generator=g, device=cdf.device) for g in self.generators])
        chosen = torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).clamp_(max=cdf.shape[-1] - 1)
        return torch.full_like(self.previous, float("-inf")).scatter_(1, chosen, 0.0)

    def record(self, sampled: torch.Tensor) -> None:
        self.logprobs.append(self.previous.gather(1, sampled[:, None])[:, 0])


class HFGenerator:
    """Sample with a transformers causal LM.

    Args:
        model: a path/hub id, or a loaded model (shared with the learner: then no sync is needed).
        tokenizer: defaults to `AutoTokenizer.from_pretrained(model)`.
        device: "cuda" when available, else "cpu".
        dtype: for a model loaded from a path: a torch dtype or a `model.dtype` setting ("auto": bfloat16
            where the hardware has it, mappa_train.precision); None: float32 on CPU, bfloat16 on GPU.
        max_batch_size: prompts per `generate` call; larger batches are split.
    """

    def __init__(self, model: str | os.PathLike | Any, tokenizer: Any = None, device: str | None = None,
                 dtype: Any = None, max_batch_size: int = 64):
        self.device = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        if isinstance(model, (str, os.PathLike)):
            if isinstance(dtype, str):
                dtype = resolve_precision(dtype).torch_dtype
            dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
            model = transformers.AutoModelForCausalLM.from_pretrained(model, dtype=dtype).to(self.device).eval()
        self.model = model  # a model shared with the learner keeps its train/eval mode
        # generate() fills unset options from the checkpoint's generation_config (Qwen ships top_k=20,
        # repetition_penalty=1.05, ...), which would change the distribution: SamplingParams alone rules.
        # (a peft model generates with its base model's config)
        getattr(model, "get_base_model", lambda: model)().generation_config = transformers.GenerationConfig()
        if tokenizer is None:
            tokenizer = transformers.AutoTokenizer.from_pretrained(model.name_or_path)
        self.tokenizer = tokenizer
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        if self.pad_id is None:
            raise InputError("the tokenizer has neither a pad nor an eos token; set tokenizer.pad_token")
        self.max_batch_size = max_batch_size

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]:
        if any(not p for p in prompts):
            raise ValueError("every prompt needs at least one token")
        if params.seeds is not None and len(params.seeds) != len(prompts):
            raise ValueError(f"params.seeds has {len(params.seeds)} seeds for {len(prompts)} prompts")
        out: list[Generation] = []
        for start in range(0, len(prompts), self.max_batch_size):
            chunk = prompts[start:start + self.max_batch_size]
            seeds = [params.seed_of(start + i) for i in range(len(chunk))]
            out += self._generate(chunk, params, seeds)
        return out

    @torch.no_grad()
    def _generate(self, prompts: list[list[int]], params: SamplingParams, seeds: list[int | None]) -> list[Generation]:
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad_id] * (width - len(p)) + p for p in prompts], device=self.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=self.device)
        stops = stop_ids(self.tokenizer, params)
        sampling = dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if params.temperature > 0 else {}
        config = transformers.GenerationConfig(  # warping is _WarpAndRecord's job: generate's own is off
            max_new_tokens=params.max_new_tokens, eos_token_id=stops or None, pad_token_id=self.pad_id, **sampling)
        generators = None
        if None not in seeds:  # seeded: every row draws from its own RNG
            generators = [torch.Generator(self.device).manual_seed(s) for s in seeds]
        recorder = _WarpAndRecord(params, generators)
        devices = [self.device.index or 0] if self.device.type == "cuda" else []
        # seeded: generate's own (now trivial) draws must not move the global RNG; unseeded: they should
        fork = torch.random.fork_rng(devices=devices) if generators else contextlib.nullcontext()
        with fork:
            sequences = self.model.generate(input_ids=ids, attention_mask=mask, generation_config=config,
                                            logits_processor=transformers.LogitsProcessorList([recorder]))
        new = sequences[:, width:]
        recorder.record(new[:, -1])
        logprobs = torch.stack(recorder.logprobs, dim=1).cpu()
        new = new.cpu()
        results = []
        for row, row_logprobs in zip(new.tolist(), logprobs.tolist()):
            end = next((i + 1 for i, t in enumerate(row) if t in stops), None)
            tokens = row[:end] if end else row
            results.append(Generation(tokens, row_logprobs[:len(tokens)], decode(self.tokenizer, tokens),
                                      "stop" if end else "length"))
        return results

    @torch.no_grad()
    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None:
        """Copy tensors in by parameter/buffer name (a partial set is fine); unknown names are an error."""
        own = self.model.state_dict()
        for name, tensor in named_tensors:
            if name not in own:
                raise KeyError(f"load_weights: the model has no tensor {name!r} (names must match state_dict())")
            own[name].copy_(tensor.to(own[name].device, own[name].dtype))
