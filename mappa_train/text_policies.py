"""Text policies (`mappa_envs.policy.TextPolicy`) over the generation backends, for `mappa eval`,
`mappa run` and the examples:

    policy = GeneratorPolicy(make_generator("hf", "path/to/model"), SamplingParams(temperature=0))
    policy = EndpointPolicy(OpenAIChat("served-model", base_url="http://127.0.0.1:8000/v1"))
    texts = policy.respond(conversations, roles)       # one batched call for all conversations

Route roles to different policies with `mappa_envs.policy.Team`.
"""
from __future__ import annotations

from mappa_train.generation import Generator, SamplingParams, chat_prompt_ids
from mappa_train.generation.openai_chat import OpenAIChat


class GeneratorPolicy:
    """Chat-template each conversation with the generator's tokenizer; one `generate` call per batch."""

    def __init__(self, generator: Generator, params: SamplingParams = SamplingParams()):
        self.generator = generator
        self.params = params
        self.last_usage: list[dict] = []  # token counts per conversation of the last call

    def respond(self, conversations: list[list[dict]], roles: list[str]) -> list[str]:
        if not conversations:
            return []
        prompts = [chat_prompt_ids(self.generator.tokenizer, c) for c in conversations]
        outs = self.generator.generate(prompts, self.params)
        self.last_usage = [{"prompt_tokens": len(p), "completion_tokens": len(g.token_ids)}
                           for p, g in zip(prompts, outs)]
        return [g.text for g in outs]


class EndpointPolicy:
    """An OpenAI-compatible endpoint; the server applies its own chat template."""

    def __init__(self, client: OpenAIChat, params: SamplingParams = SamplingParams()):
        self.client = client
        self.params = params

    def respond(self, conversations: list[list[dict]], roles: list[str]) -> list[str]:
        return self.client.chat(conversations, self.params)

    @property
    def last_usage(self) -> list[dict | None]:
        """The server's token counts per conversation of the last call."""
        return self.client.last_usage
