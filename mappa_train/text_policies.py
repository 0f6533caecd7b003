"""Text policies (`mappa_envs.policy.TextPolicy`) over the generation backends, for `mappa eval`,
`mappa run` and the examples:

    policy = GeneratorPolicy(make_generator("hf", "path/to/model"), SamplingParams(temperature=0))
    policy = EndpointPolicy(OpenAIChat("served-model", base_url="http://127.0.0.1:8000/v1"))
    texts = policy.respond(conversations, roles)       # one batched call for all conversations

Route roles to different policies with `mappa_envs.policy.Team`. Both take the episode driver's
per-action `seeds`, so what a seeded policy samples for an action does not depend on which other
actions share its batch, up to floating point: in bfloat16 a batch's make-up moves a row's log-probs
by ~0.01 nats (mappa_envs.driver).
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mappa_train.generation import Generator, SamplingParams, chat_prompt_ids
from mappa_train.generation.openai_chat import OpenAIChat


class GeneratorPolicy:
    """Chat-template each conversation with the generator's tokenizer; one `generate` call per batch."""

    def __init__(self, generator: Generator, params: SamplingParams = SamplingParams()):
        self.generator = generator
        self.params = params
        self.last_usage: list[dict] = []  # token counts per conversation of the last call

    def respond(self, conversations: list[list[dict]], roles: list[str],
                seeds: Sequence[int | None] | None = None) -> list[str]:
        if not conversations:
            return []
        prompts = [chat_prompt_ids(self.generator.tokenizer, c) for c in conversations]
        outs = self.generator.generate(prompts, _with_seeds(self.params, seeds))
        self.last_usage = [{"prompt_tokens": len(p), "completion_tokens": len(g.token_ids)}
                           for p, g in zip(prompts, outs)]
        return [g.text for g in outs]


class EndpointPolicy:
    """An OpenAI-compatible endpoint; the server applies its own chat template."""

    def __init__(self, client: OpenAIChat, params: SamplingParams = SamplingParams()):
        self.client = client
        self.params = params

    def respond(self, conversations: list[list[dict]], roles: list[str],
                seeds: Sequence[int | None] | None = None) -> list[str]:
        return self.client.chat(conversations, _with_seeds(self.params, seeds))

    @property
    def last_usage(self) -> list[dict | None]:
        """The server's token counts per conversation of the last call."""
        return self.client.last_usage


def _with_seeds(params: SamplingParams, seeds: Sequence[int | None] | None) -> SamplingParams:
    """`params` sampling each conversation with its own seed, when the caller gave one for each.
    An unseeded policy (params.seed None) stays unseeded: the driver's seeds only make a seeded
    policy independent of batching, they do not turn sampling deterministic behind the user's back."""
    if params.seed is None or seeds is None or None in seeds:
        return params
    return replace(params, seeds=tuple(params.seed + s for s in seeds))
