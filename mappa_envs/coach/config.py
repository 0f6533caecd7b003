"""LLMCoachConfig: every setting of an LLM coach, the presets, and settings given as `key=value` text.

`llm_config(preset, settings)` is the one way a config is built from names: from Python keywords
(`LLMCoach(preset=..., rpm=10)`), a YAML mapping (the training config's `coach_kwargs`) or command-line
text (`mappa eval --coach-set max_tokens=256`). Text values are typed by their field ("true", "256",
"none", "{...}"); an unknown key or a value of the wrong type is a `CoachConfigError` naming it.
"""
from __future__ import annotations

import difflib
import json
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from mappa_envs.errors import MappaError

OnFailure = Literal["raise", "skip", "neutral"]
GEMINI_BASE_URL = "https://generativelanguage.googleapis.com/v1beta/openai/"
RATIONALE_CHARS = 800  # the structured reply's default cap on the rationale


class CoachConfigError(MappaError, ValueError):
    """A coach spec or setting that cannot be used; the message says which, and what would work."""


@dataclass
class LLMCoachConfig:
    """Where the coach model lives, how to call it, and what to do when it fails."""

    model: str  # the model name the endpoint expects (vLLM: the served model name)
    base_url: str  # the OpenAI-compatible endpoint, e.g. http://127.0.0.1:8000/v1
    api_key_env: str | None = "OPENAI_API_KEY"  # environment variable holding the key; None: no key needed
    temperature: float = 0.0
    max_tokens: int = 1024  # for thinking models this must cover the thinking tokens too
    concurrency: int = 16  # requests in flight at once (per sync coach / per event loop)
    rpm: float | None = None  # requests started per minute, across all callers; None: no limit
    timeout_s: float = 120.0  # per HTTP call
    max_retries: int = 4  # retries of transient failures, per score
    backoff_s: float = 1.0  # first retry waits ~backoff_s, then doubling, jittered to 50-100%
    backoff_max_s: float = 60.0
    format_retry: bool = True  # one resend of the full request when the reply has no usable score
    on_failure: OnFailure = "skip"
    neutral_score: float = 5.0  # the placeholder `on_failure="neutral"` puts in an ok=False score
    structured_output: bool = False  # ask for JSON via response_format=json_schema (OpenAI, Gemini, vLLM)
    rationale_chars: int = RATIONALE_CHARS  # the schema's rationale cap: a small judge that loops reaches its score
    reasoning_effort: str | None = None  # passed through when set (Gemini 2.5 / OpenAI reasoning models)
    extra_body: dict | None = None  # endpoint-specific request fields, e.g. vLLM {"structured_outputs": {"regex": ...}}
    price_prompt_per_mtok: float = 0.0  # USD per million prompt tokens, for cost accounting
    price_completion_per_mtok: float = 0.0  # USD per million completion tokens (thinking included)
    max_field_chars: int = 8000  # longer prompt fields keep their head and tail

    def __post_init__(self) -> None:
        problems = []
        if not self.model:
            problems.append("model is empty: set it to the endpoint's model name (vLLM: the served model name)")
        if not self.base_url.startswith(("http://", "https://")):
            problems.append(f"base_url {self.base_url!r} must start with http:// or https://")
        if self.on_failure not in ("raise", "skip", "neutral"):
            problems.append(f"on_failure {self.on_failure!r} must be 'raise', 'skip' or 'neutral'")
        if self.concurrency < 1 or self.max_retries < 0 or self.max_tokens < 1 or self.rationale_chars < 1:
            problems.append("concurrency, max_tokens and rationale_chars must be >= 1 and max_retries >= 0")
        if self.timeout_s <= 0 or (self.rpm is not None and self.rpm <= 0):
            problems.append("timeout_s and rpm must be > 0 (rpm=None for no limit)")
        if self.rationale_chars != RATIONALE_CHARS and not self.structured_output:  # the text format has no cap
            problems.append(f"rationale_chars={self.rationale_chars} caps the JSON schema's rationale and has no "
                            "effect without structured_output=true: set that too, or drop rationale_chars")
        if not 0.0 <= self.neutral_score <= 10.0:
            problems.append("neutral_score must lie in [0, 10]")
        if problems:
            raise CoachConfigError("LLM coach: " + "; ".join(problems))


# Prices are list prices in USD per million tokens as of 2025 (Gemini 2.5 Pro: prompts <= 200k
# tokens); rpm is the paid tier-1 quota. Override either for your account.
PRESETS: dict[str, dict[str, Any]] = {
    "gemini-2.5-flash": dict(model="gemini-2.5-flash", base_url=GEMINI_BASE_URL, api_key_env="GEMINI_API_KEY",
                             max_tokens=8192, rpm=1000, price_prompt_per_mtok=0.30, price_completion_per_mtok=2.50),
    "gemini-2.5-pro": dict(model="gemini-2.5-pro", base_url=GEMINI_BASE_URL, api_key_env="GEMINI_API_KEY",
                           max_tokens=16384, rpm=150, price_prompt_per_mtok=1.25, price_completion_per_mtok=10.0),
    "openai": dict(model="gpt-4.1-mini", base_url="https://api.openai.com/v1", api_key_env="OPENAI_API_KEY",
                   price_prompt_per_mtok=0.40, price_completion_per_mtok=1.60),
    "vllm-local": dict(model="", base_url="http://127.0.0.1:8000/v1", api_key_env=None, structured_output=True),
}


def llm_config(preset: str | None = None, settings: Mapping[str, Any] | None = None) -> LLMCoachConfig:
    """A preset's settings (if any) overridden by `settings` (LLMCoachConfig fields; text values are typed)."""
    if preset is not None and preset not in PRESETS:
        raise CoachConfigError(f"unknown coach preset {preset!r}; choose one of {', '.join(PRESETS)}")
    merged = {**PRESETS.get(preset, {}), **typed_settings(settings or {})}
    if not merged.get("model") or "base_url" not in merged:
        if preset == "vllm-local":
            raise CoachConfigError("the vllm-local coach needs the served model name: vllm-local:MODEL, "
                                   "or the setting model=NAME")
        hint = f"; did you mean the preset {merged['model']!r}?" if merged.get("model") in PRESETS else ""
        raise CoachConfigError(f"an LLM coach needs a preset (one of {', '.join(PRESETS)}) or both model and "
                               f"base_url{hint}")
    return LLMCoachConfig(**merged)


def typed_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """`settings` checked against LLMCoachConfig's fields, text values converted to each field's type."""
    hints = typing.get_type_hints(LLMCoachConfig)
    out = {}
    for key, value in settings.items():
        if key not in hints:
            close = difflib.get_close_matches(key, hints, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise CoachConfigError(f"unknown coach setting {key!r}{hint}; the settings are {', '.join(hints)}")
        out[key] = _typed(key, value, hints[key])
    return out


def _typed(key: str, value: Any, hint: Any) -> Any:
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    options = typing.get_args(hint) if union else (hint,)
    takes_text = any(o is str or typing.get_origin(o) is Literal for o in options)
    if isinstance(value, str) and (not takes_text or (type(None) in options and value.lower() in ("none", "null"))):
        value = _from_text(value)
    for option in options:
        if option is type(None) and value is None:
            return None
        if typing.get_origin(option) is Literal and value in typing.get_args(option):
            return value
        if option is bool and isinstance(value, bool):
            return value
        if option in (int, float) and isinstance(value, (int, float)) and not isinstance(value, bool):
            if option is float or float(value).is_integer():
                return option(value)
        if option in (str, dict) and isinstance(value, option):
            return value
    raise CoachConfigError(f"coach setting {key} must be {' or '.join(map(_describe, options))}, got {value!r}")


def _from_text(text: str) -> Any:
    """'true' -> True, '256' -> 256, '1e-5' -> 1e-05, 'none' -> None, '{"a": 1}' -> {'a': 1}; else the text."""
    low = text.strip().lower()
    if low in ("none", "null"):
        return None
    if low in ("true", "yes", "on", "false", "no", "off"):
        return low in ("true", "yes", "on")
    for kind in (int, float):
        try:
            return kind(low)
        except ValueError:
            pass
    if low.startswith("{"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as e:
            raise CoachConfigError(f"coach setting value {text!r} is not valid JSON "
                                   f"({e.msg} at column {e.colno})") from None
    return text


def _describe(option: Any) -> str:
    if typing.get_origin(option) is Literal:
        return "one of " + ", ".join(map(repr, typing.get_args(option)))
    return {bool: "true or false", int: "an integer", float: "a number", str: "text", dict: 'a JSON object ({"k": v})',
            type(None): "none"}.get(option, getattr(option, "__name__", str(option)))
