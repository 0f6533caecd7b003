"""`make_coach`: one factory and one spec vocabulary for every coach, in training and evaluation.

| spec                      | coach |
|---------------------------|-------|
| None, `"rule"`            | `RuleCoach` (offline) |
| `"rule:noise=EPS,..."`    | the rule coach wrong at rate EPS (`NoisyCoach`; also `mode=flip` or `random`, `seed=N`) |
| `"judge:FOLDER"`          | a judge model folder, in-process: the expected score of one forward (`LocalJudge`) |
| a preset name             | that `LLMCoach` preset: `gemini-2.5-flash`, `gemini-2.5-pro`, `openai`, `vllm-local` |
| `PRESET:MODEL`            | the preset with another model, e.g. `vllm-local:qwen3-0.6b` |
| `PRESET:PORT`             | the preset on another port of its host, e.g. `vllm-local:8001` |
| `MODEL@BASE_URL`          | any OpenAI-compatible endpoint; the key from $OPENAI_API_KEY when it is set, else none |
| `"llm"`                   | an `LLMCoach` from the settings alone (a `preset` key and/or `model`, `base_url`, ...) |
| `stateful:SPEC`           | SPEC's coach in a `StatefulCoach` (balance statistics, corrections; cached inside) |
| a dict                    | `LLMCoachConfig` fields, optionally with a `preset` key |
| a `Coach`                 | itself |

`settings` are `LLMCoachConfig` fields applied on top of the spec (`{"structured_output": "true",
"max_tokens": "256"}`: text is typed by field, as `mappa eval --coach-set KEY=VALUE` gives it).
`cache`, when given, puts the coach behind a `CachedCoach` at that SQLite path.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from mappa_envs.coach.config import PRESETS, CoachConfigError
from mappa_envs.coach.types import Coach

CoachSpec = str | Mapping[str, Any] | Coach | None


def make_coach(spec: CoachSpec = None, settings: Mapping[str, Any] | None = None,
               cache: str | Path | None = None) -> Coach:
    """The coach `spec` names (see the module docstring), with `settings` applied, cached at `cache`."""
    from mappa_envs.coach.cache import CachedCoach

    if isinstance(spec, str) and spec.strip().partition(":")[0] == "stateful":
        from mappa_envs.coach.stateful import StatefulCoach

        inner = spec.strip().partition(":")[2]
        if not inner:
            raise CoachConfigError(f"coach {spec!r}: name the coach it wraps, e.g. stateful:rule")
        return StatefulCoach(make_coach(inner, settings, cache))  # its verdicts change with its state: cache inside
    coach = _build(spec, dict(settings or {}))
    return CachedCoach(coach, cache) if cache else coach


def _build(spec: CoachSpec, settings: dict[str, Any]) -> Coach:
    from mappa_envs.coach.llm import LLMCoach
    from mappa_envs.coach.rule import RuleCoach

    if spec is None or spec == "rule":
        if settings:
            raise CoachConfigError(f"the rule coach has no settings (got {', '.join(settings)}); "
                                   "name an LLM coach to use them")
        return RuleCoach()
    if isinstance(spec, Mapping):
        return LLMCoach(**{**spec, **settings})
    if not isinstance(spec, str):
        if not isinstance(spec, Coach):
            raise CoachConfigError(f"a coach spec must be text, a mapping or a Coach, got {type(spec).__name__}")
        if settings:
            raise CoachConfigError("settings apply to a coach built from a spec, not to a ready Coach object")
        return spec
    spec = spec.strip()
    if spec.startswith("rule:"):
        from mappa_envs.coach.noisy import rule_coach_from_spec

        if settings:
            raise CoachConfigError(f"the rule coach has no settings (got {', '.join(settings)})")
        return rule_coach_from_spec(spec)
    if spec.startswith("judge:"):
        return _local_judge(spec.partition(":")[2], settings)
    if spec == "llm":
        return LLMCoach(**settings)
    model, at, url = spec.partition("@")
    if at:
        if not model or not url:
            raise CoachConfigError(f"coach {spec!r}: expected MODEL@BASE_URL, e.g. qwen@http://127.0.0.1:8000/v1")
        key = "OPENAI_API_KEY" if os.environ.get("OPENAI_API_KEY") else None
        return LLMCoach(**{"model": model, "base_url": url, "api_key_env": key, **settings})
    preset, _, variant = spec.partition(":")
    if "preset" in settings:
        raise CoachConfigError(f"coach {spec!r} already names its preset; a 'preset' setting goes with the spec 'llm'")
    if preset not in PRESETS:
        raise CoachConfigError(f"unknown coach {spec!r}; use 'rule', a preset ({', '.join(PRESETS)}), "
                               "PRESET:MODEL, PRESET:PORT, MODEL@BASE_URL or judge:FOLDER")
    if variant.isdigit():
        parts = urlsplit(PRESETS[preset]["base_url"])
        variant_settings = {"base_url": parts._replace(netloc=f"{parts.hostname}:{variant}").geturl()}
    else:
        variant_settings = {"model": variant} if variant else {}
    return LLMCoach(preset=preset, **{**variant_settings, **settings})


def _local_judge(folder: str, settings: dict[str, Any]) -> Coach:
    from mappa_envs.coach.judge import LocalJudge

    if settings:
        raise CoachConfigError(f"a judge:FOLDER coach has no settings (got {', '.join(settings)})")
    if not folder.strip():
        raise CoachConfigError("coach 'judge:' names no folder; use judge:FOLDER, e.g. judge:runs/judge")
    if not (Path(folder) / "config.json").is_file():
        raise CoachConfigError(f"coach 'judge:{folder}': no model folder there (no config.json); "
                               "train one with `mappa coach-train --out FOLDER`")
    return LocalJudge(folder, readout="expected")
