"""An OpenAI-compatible chat endpoint (vLLM server, OpenAI, any proxy): text in, text out.

For evaluation only: the API returns text, not the sampled token ids, so it cannot feed the trainer
(re-tokenizing the text would train on tokens the model never sampled).
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

from mappa_train.generation import SamplingParams, require


class OpenAIChat:
    """Chat completions for a batch of conversations, sent concurrently.

    Args:
        model: the served model name.
        base_url: e.g. "http://127.0.0.1:8000/v1" (None: the OpenAI default / OPENAI_BASE_URL).
        api_key: None reads OPENAI_API_KEY; local servers accept any string.
        max_concurrency: requests in flight at once.
        timeout_s, max_retries: per request, passed to the `openai` client.
    """

    def __init__(self, model: str, base_url: str | None = None, api_key: str | None = None,
                 max_concurrency: int = 8, timeout_s: float = 120.0, max_retries: int = 2):
        openai = require("openai", "openai")
        self.model = model
        self.client = openai.OpenAI(base_url=base_url, api_key=api_key or _env_key(), timeout=timeout_s,
                                    max_retries=max_retries)
        self.max_concurrency = max_concurrency
        self.last_usage: list[dict | None] = []  # the server's token counts, per conversation of the last call

    def chat(self, conversations: list[list[dict]], params: SamplingParams) -> list[str]:
        """One completion per conversation, in order. A failed request raises, naming the endpoint."""
        if not conversations:
            return []
        with ThreadPoolExecutor(min(self.max_concurrency, len(conversations))) as pool:
            replies = list(pool.map(lambda ic: self._one(ic[1], params, ic[0]), enumerate(conversations)))
        self.last_usage = [usage for _, usage in replies]
        return [text for text, _ in replies]

    def _one(self, messages: list[dict], params: SamplingParams, index: int) -> tuple[str, dict | None]:
        extra = {"top_k": params.top_k} if params.top_k else None  # not OpenAI's; vLLM accepts it
        try:
            response = self.client.chat.completions.create(
                model=self.model, messages=messages, max_tokens=params.max_new_tokens,
                temperature=params.temperature, top_p=params.top_p,
                seed=params.seed_of(index), extra_body=extra)
        except Exception as e:
            raise RuntimeError(f"chat completion failed at {self.client.base_url} (model {self.model!r}): {e}") from e
        u = response.usage
        usage = {"prompt_tokens": u.prompt_tokens, "completion_tokens": u.completion_tokens} if u else None
        return response.choices[0].message.content or "", usage


def _env_key() -> str:
    import os

    return os.environ.get("OPENAI_API_KEY", "EMPTY")  # local servers need some key, not a real one
