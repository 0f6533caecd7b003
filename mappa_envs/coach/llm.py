"""LLMCoach: scores actions with a chat model behind any OpenAI-compatible endpoint.

Gemini (its OpenAI-compatible endpoint), OpenAI, or a local `vllm serve`; settings and presets are in
`mappa_envs.coach.config`, and `mappa_envs.coach.make_coach` builds any coach from a spec.

Per call: render the env's versioned prompt (`mappa_envs.coach.prompts`), send it, read the score
with `parse_score`'s strict rules. Failures are handled in bounded, explicit steps:

- transient errors (timeout, connection error, 429, 5xx, a malformed response body) are retried
  up to `max_retries` times with exponential backoff and jitter (a `retry-after` header is honoured);
- other API errors (400, 401, 404, ...) are not retried: retrying cannot fix them;
- a reply without a usable score gets ONE format retry that resends the full original request
  with a note saying what was wrong;
- if no score can be had, `on_failure` decides: "raise" raises `CoachError`; "skip" returns
  `CoachScore(score=None, ok=False, error=...)`; "neutral" returns `score=neutral_score` but still
  `ok=False` with the error, so consumers that need a number for display have one while
  `ok=False` keeps meaning "do not train on this" (the env's reward for it is 0 and `infos` carry
  the error). No policy ever passes off an invented number as a verdict.

Concurrency: sync `score` calls (env steps in worker threads) share one semaphore of size
`concurrency`; async `ascore` calls share one per event loop. Both draw from one requests-per-minute
budget, and every call adds its tokens and cost to `usage`.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import threading
import time
import weakref
from dataclasses import dataclass
from typing import Any

from mappa_envs.coach.config import RATIONALE_CHARS, CoachConfigError, LLMCoachConfig, llm_config
from mappa_envs.coach.parse import parse_reply
from mappa_envs.coach.prompts import FORMAT_VERSION, coach_messages, json_schema, load_template
from mappa_envs.coach.types import CoachRequest, CoachScore
from mappa_envs.errors import MappaError


class CoachError(MappaError, RuntimeError):
    """No score could be had and the coach's `on_failure` is "raise"."""


@dataclass
class CoachUsage:
    """Running totals over every score call of one coach."""

    scores: int = 0  # score()/ascore() calls
    failures: int = 0  # of which ended ok=False (or raised)
    http_calls: int = 0  # every attempt, retries included
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0


class LLMCoach:
    """A `Coach` backed by a chat model; build one with `LLMCoach(LLMCoachConfig(...))` or `from_preset`."""

    name = "llm"

    def __init__(self, config: LLMCoachConfig | None = None, *, preset: str | None = None, **fields: Any):
        """Either a full `config`, or `preset` and/or `LLMCoachConfig` fields as keywords (YAML-friendly):
        `LLMCoach(preset="gemini-2.5-flash", rpm=10)`, `LLMCoach(model="m", base_url="http://...")`."""
        if config is None:
            config = llm_config(preset, fields)
        elif preset is not None or fields:
            raise CoachConfigError("LLMCoach: pass either config=LLMCoachConfig(...) or preset/fields as keywords, "
                                   "not both")
        self.config = config
        if config.api_key_env is None:
            self._api_key = "EMPTY"
        elif os.environ.get(config.api_key_env):
            self._api_key = os.environ[config.api_key_env]
        else:
            raise CoachConfigError(f"LLM coach: the environment variable {config.api_key_env} is not set; export your "
                                   "API key there, or set api_key_env=none for an endpoint without authentication")
        self.usage = CoachUsage()
        self._lock = threading.Lock()
        self._threads = threading.BoundedSemaphore(config.concurrency)
        self._rpm = _RateLimiter(config.rpm)
        self._client = None
        # event loop -> (client, semaphore, closer)
        self._loops: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
        self._jitter = random.Random()

    @classmethod
    def from_preset(cls, preset: str, **overrides: Any) -> LLMCoach:
        """A coach from one of `PRESETS` ("gemini-2.5-flash", "gemini-2.5-pro", "openai", "vllm-local")."""
        return cls(preset=preset, **overrides)

    def cache_identity(self, request: CoachRequest) -> str:
        """What, besides the request, determines this coach's verdict (the CachedCoach key)."""
        c = self.config
        identity = {"model": c.model, "template": load_template(request.env_id).version, "format": FORMAT_VERSION,
                    "temperature": c.temperature, "max_tokens": c.max_tokens, "structured": c.structured_output,
                    "reasoning_effort": c.reasoning_effort, "extra_body": c.extra_body}
        if c.rationale_chars != RATIONALE_CHARS:  # only a cap that changes the schema: existing caches keep their keys
            identity["rationale_chars"] = c.rationale_chars
        return json.dumps(identity, sort_keys=True)

    def score(self, request: CoachRequest) -> CoachScore:
        call = _Call(self, request)
        client = self._sync_client()
        while call.pending:
            _sleep(self._rpm.reserve())
            with self._threads:
                try:  # the raw response: its content type says what answered when it is not the API
                    call.took(client.chat.completions.with_raw_response.create(**call.kwargs))
                except Exception as exc:
                    call.failed(exc)
            _sleep(call.delay)
        return self._finish(call)

    async def ascore(self, request: CoachRequest) -> CoachScore:
        call = _Call(self, request)
        client, semaphore = await self._async_state()
        while call.pending:
            if wait := self._rpm.reserve():
                await asyncio.sleep(wait)
            async with semaphore:
                try:
                    call.took(await client.chat.completions.with_raw_response.create(**call.kwargs))
                except Exception as exc:
                    call.failed(exc)
            if call.delay:
                await asyncio.sleep(call.delay)
        return self._finish(call)

    def close(self) -> None:
        """Close the sync client's connections (async ones: `await aclose()` in their loop)."""
        if self._client is not None:
            self._client.close()

    async def aclose(self) -> None:
        """Close the current event loop's async client now (otherwise it closes when the loop shuts down)."""
        state = self._loops.get(asyncio.get_running_loop())
        if state is not None:
            await state[2].aclose()

    def __enter__(self) -> LLMCoach:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _sync_client(self):
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(base_url=self.config.base_url, api_key=self._api_key,
                                             timeout=self.config.timeout_s, max_retries=0)
            return self._client

    async def _async_state(self):
        loop = asyncio.get_running_loop()
        with self._lock:
            state = self._loops.get(loop)
            created = state is None
            if created:  # asyncio clients and semaphores belong to one event loop
                import openai

                client = openai.AsyncOpenAI(base_url=self.config.base_url, api_key=self._api_key,
                                            timeout=self.config.timeout_s, max_retries=0)
                state = self._loops[loop] = (client, asyncio.Semaphore(self.config.concurrency), self._closer(client))
        if created:
            await state[2].__anext__()
        return state[0], state[1]

    async def _closer(self, client):
        """Closes `client` with its event loop: `asyncio.run` finalizes async generators before it
        closes the loop, so this `finally` runs while the loop can still close connections."""
        try:
            yield
        finally:
            with self._lock:
                self._loops.pop(asyncio.get_running_loop(), None)
            await client.close()

    def _finish(self, call: _Call) -> CoachScore:
        c = self.config
        cost = (call.prompt_tokens * c.price_prompt_per_mtok
                + call.completion_tokens * c.price_completion_per_mtok) / 1e6
        with self._lock:
            u = self.usage
            u.scores += 1
            u.failures += call.error is not None
            u.http_calls += call.attempts
            u.prompt_tokens += call.prompt_tokens
            u.completion_tokens += call.completion_tokens
            u.cost_usd += cost
        common = dict(attempts=call.attempts, latency_s=time.monotonic() - call.started, cost_usd=cost,
                      prompt_tokens=call.prompt_tokens, completion_tokens=call.completion_tokens)
        if call.error is None:
            return CoachScore(score=call.verdict.score, rationale=call.verdict.rationale,
                              answer_correct=call.verdict.answer_correct if call.request.ask_answer_correct else None,
                              **common)
        if c.on_failure == "raise":
            raise CoachError(f"{c.model} at {c.base_url}: {call.error}")
        neutral = c.on_failure == "neutral"
        return CoachScore(score=c.neutral_score if neutral else None, ok=False, error=call.error,
                          rationale=f"placeholder {c.neutral_score:g} after a failure: not a verdict"
                          if neutral else "",
                          **common)


class _Call:
    """One score request across its attempts: what to send next, and whether to go on."""

    def __init__(self, coach: LLMCoach, request: CoachRequest):
        self.coach, self.request, self.config = coach, request, coach.config
        self.started = time.monotonic()
        self.template = load_template(request.env_id)
        self.kwargs = self._kwargs(retry_note=None)
        self.pending = True
        self.delay = 0.0
        self.attempts = self.transient_retries = 0
        self.format_retried = False
        self.prompt_tokens = self.completion_tokens = 0
        self.verdict = None
        self.error: str | None = None

    def _kwargs(self, retry_note: str | None) -> dict:
        c = self.config
        messages = coach_messages(self.template, self.request, c.max_field_chars, c.structured_output, retry_note)
        kwargs: dict[str, Any] = dict(model=c.model, messages=messages, temperature=c.temperature,
                                      max_tokens=c.max_tokens)
        if c.structured_output:
            kwargs["response_format"] = json_schema(self.request.ask_answer_correct, c.rationale_chars)
        if c.reasoning_effort is not None:
            kwargs["reasoning_effort"] = c.reasoning_effort
        if c.extra_body:
            kwargs["extra_body"] = c.extra_body
        return kwargs

    def took(self, raw) -> None:
        """One HTTP answer with status 2xx (`raw`: the openai client's raw response)."""
        response = raw.parse()  # a malformed JSON body raises here, and `failed` counts the attempt
        self.attempts += 1
        self.delay = 0.0
        if not hasattr(response, "choices"):  # the client hands back the body as text: not the API answering
            self._fail(not_the_api(raw, self.config.base_url))
            return
        if response.usage is not None:
            self.prompt_tokens += response.usage.prompt_tokens or 0
            self.completion_tokens += response.usage.completion_tokens or 0
        choice = response.choices[0] if response.choices else None
        content = choice.message.content if choice is not None else None
        verdict = parse_reply(content, self.kwargs.get("response_format"))
        # a reply cut off at max_tokens never reached its verdict: a "score" in it may be the agent's,
        # quoted just before the cut (a quoted </think> looks like the end of the judge's thinking)
        cut_off = choice is not None and choice.finish_reason == "length"
        if verdict.score is not None and not cut_off:
            self.verdict, self.pending = verdict, False
            return
        problem = "the reply hit max_tokens before its verdict" if cut_off else verdict.problem
        if self.config.format_retry and not self.format_retried:
            self.format_retried = True
            self.kwargs = self._kwargs(retry_note=f"Your previous reply to this request could not be used: {problem}. "
                                                  "Answer the request again, in exactly the format asked.")
            return
        tries = "after a format retry" if self.format_retried else "(format retry off)"
        self._fail(f"no usable score {tries}: {problem}; reply began {(content or '')[:200]!r}")

    def failed(self, exc: Exception) -> None:
        import openai

        self.attempts += 1
        transient = isinstance(exc, (openai.APIConnectionError, openai.RateLimitError, json.JSONDecodeError,
                                     openai.APIResponseValidationError)) \
            or (isinstance(exc, openai.APIStatusError) and exc.status_code >= 500)
        if not transient and not isinstance(exc, openai.APIError):
            raise exc  # a bug on our side, not a coach failure
        what = f"{type(exc).__name__}: {str(exc)[:300]}"
        if not transient:
            self._fail(f"{what} (not retried)")
        elif self.transient_retries >= self.config.max_retries:
            self._fail(f"{what} (gave up after {self.transient_retries} retries)")
        else:
            self.transient_retries += 1
            self.delay = self._backoff(exc)

    def _backoff(self, exc: Exception) -> float:
        c = self.config
        base = min(c.backoff_max_s, c.backoff_s * 2 ** (self.transient_retries - 1))
        delay = base * (0.5 + 0.5 * self.coach._jitter.random())  # jitter de-synchronises parallel callers
        response = getattr(exc, "response", None)
        retry_after = response.headers.get("retry-after") if response is not None else None
        try:
            return min(c.backoff_max_s, max(delay, float(retry_after))) if retry_after else delay
        except ValueError:  # an HTTP date: keep our own backoff
            return delay

    def _fail(self, error: str) -> None:
        self.error, self.pending, self.delay = error, False, 0.0


def not_the_api(raw, base_url: str) -> str:
    """What came back instead of a chat completion, and what was expected: a wrong base_url (a web page,
    a proxy's login page, a server's root) answers 200 with something else, which no retry fixes."""
    ctype = raw.headers.get("content-type") or "no content type"
    head = raw.content[:120].decode("utf-8", errors="replace")
    return (f"{raw.url} answered HTTP {raw.status_code} with {ctype}, not an OpenAI chat completion (JSON); "
            f"it began {head!r}. Expected an OpenAI-compatible API at {base_url.rstrip('/')}/chat/completions: "
            "check base_url (it usually ends in /v1)")


def _sleep(seconds: float) -> None:
    if seconds > 0:  # time.sleep(0) still yields the CPU, which costs milliseconds on a busy machine
        time.sleep(seconds)


class _RateLimiter:
    """Spaces request starts at least 60/rpm seconds apart, across threads and event loops."""

    def __init__(self, rpm: float | None):
        self.interval = 60.0 / rpm if rpm else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def reserve(self) -> float:
        """Claim the next start slot; returns how long to wait for it."""
        if not self.interval:
            return 0.0
        with self._lock:
            now = time.monotonic()
            start = max(now, self._next)
            self._next = start + self.interval
            return start - now
