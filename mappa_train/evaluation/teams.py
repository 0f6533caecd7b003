"""Build the team and the coach of `mappa eval` from their command-line specs (docs/evaluation.md)."""
from __future__ import annotations

import json
import os
import re
from dataclasses import replace
from pathlib import Path

from mappa_envs.policy import Team, TextPolicy
from mappa_train.evaluation.runner import TeamSource
from mappa_train.generation import SamplingParams

MODEL_KINDS = ("hf", "vllm", "openai")


def team_name(spec: str) -> str:
    """A folder-safe run name derived from a team spec."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", spec).strip("_.")[:80] or "team"


def make_team(spec: str, seed: int = 0, sampling: SamplingParams = SamplingParams(temperature=0.6, max_new_tokens=1024),
              _models: dict | None = None) -> TeamSource:
    """A TextPolicy, or a builder of one from an env, for `spec` (see `TEAM_HELP` in cli.py).

    Model specs: `hf:PATH` (transformers), `vllm:PATH` (an in-process vLLM engine),
    `openai:MODEL@BASE_URL` (any OpenAI-compatible endpoint), sampled with `sampling`.
    """
    spec = spec.strip()
    models = {} if _models is None else _models  # one model per distinct spec, however many roles use it
    if "=" in spec.split(":", 1)[0]:  # "role=SPEC;role=SPEC": one policy per role
        members = {}
        for part in filter(None, (p.strip() for p in spec.split(";"))):
            role, sep, sub = part.partition("=")
            if not sep or not role.strip() or not sub.strip():
                raise ValueError(f"team spec part {part!r}: expected ROLE=SPEC (e.g. verifier=scripted)")
            members[role.strip()] = make_team(sub, seed, sampling, models)
        if all(isinstance(m, TextPolicy) for m in members.values()):
            return Team(members)
        return lambda env: Team({r: m if isinstance(m, TextPolicy) else m(env) for r, m in members.items()})
    kind, _, rest = spec.partition(":")
    if kind == "run":  # a finished `mappa train` run: its final model(s), one per role or shared
        folder, _, backend = rest.partition("@")
        final = Path(folder) / "final"
        policies = sorted(p.name for p in final.iterdir() if p.is_dir()) if final.is_dir() else []
        if not policies:
            raise ValueError(f"team spec {spec!r}: {final} holds no trained model; a finished `mappa train` run writes "
                             "final/<policy>/ (an unfinished one only has checkpoints)")
        backend = backend or "hf"
        if policies == ["shared"]:
            return make_team(f"{backend}:{final / 'shared'}", seed, sampling, models)
        return make_team(";".join(f"{p}={backend}:{final / p}" for p in policies), seed, sampling, models)
    if kind in MODEL_KINDS:
        if spec not in models:
            models[spec] = PerCallSeed(_model_policy(kind, rest, sampling), seed)
        return models[spec]
    if kind == "scripted":
        try:
            options = {"skill": float(rest), "seed": seed} if rest else {}
        except ValueError:
            raise ValueError(f"team spec {spec!r}: expected scripted or scripted:SKILL with SKILL in [0, 1]") from None
        return lambda env: _scripted(env, options)
    if re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", spec):  # module:factory, called with the env
        from mappa_envs.registration import load_callable

        factory = load_callable(spec)
        return lambda env: factory(env)
    raise ValueError(f"unknown team spec {spec!r}; expected hf:PATH, vllm:PATH, openai:MODEL@URL, scripted[:SKILL], "
                     "module:factory, or ROLE=SPEC;... (see docs/evaluation.md)")


def training_env(spec: str) -> tuple[str, str, dict] | None:
    """(DIR/config.json, env id, env kwargs) that a `run:DIR` team was trained on; None for other specs."""
    if not spec.startswith("run:"):
        return None
    path = Path(spec[4:].partition("@")[0]) / "config.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist: run:DIR must name a `mappa train` output folder")
    env = json.loads(path.read_text())["env"]
    return str(path), env["id"], env.get("kwargs", {})


def _model_policy(kind: str, target: str, sampling: SamplingParams) -> TextPolicy:
    from mappa_train.policies import EndpointPolicy, GeneratorPolicy

    if not target:
        raise ValueError(f"team spec {kind}: names no model (e.g. hf:path/to/model, openai:MODEL@BASE_URL)")
    if kind == "openai":
        from mappa_train.generation.openai_chat import OpenAIChat

        model, sep, url = target.partition("@")
        if not sep or not model or not url:
            raise ValueError(f"team spec openai:{target}: expected openai:MODEL@BASE_URL, e.g. openai:qwen@http://127.0.0.1:8000/v1")
        return EndpointPolicy(OpenAIChat(model, base_url=url), sampling)
    from mappa_train.generation import make_generator

    return GeneratorPolicy(make_generator(kind, target), sampling)


class PerCallSeed:
    """Give every batched call its own sampling seed (seed, seed + 1, ...), so a re-run of the same
    command samples the same texts; a resumed run continues from a different call count."""

    def __init__(self, policy, seed: int):
        self.policy, self.seed, self.calls = policy, seed, 0

    def respond(self, conversations: list[list[dict]], roles: list[str]) -> list[str]:
        self.policy.params = replace(self.policy.params, seed=self.seed + self.calls)
        self.calls += 1
        return self.policy.respond(conversations, roles)

    @property
    def last_usage(self) -> list[dict] | None:
        """The wrapped policy's token counts of its last call, when it reports them."""
        return getattr(self.policy, "last_usage", None)


def _scripted(env, options: dict) -> TextPolicy:
    import mappa_envs
    from mappa_envs.registration import load_callable

    env_id = env.unwrapped.scenario.env_id
    target = mappa_envs.spec(env_id).scripted_policy
    if target is None:
        raise ValueError(f"{env_id} has no scripted team; evaluate a model or a module:factory policy")
    return load_callable(target)(env, **options)


def make_coach(spec: str, cache: str | Path | None = None):
    """'rule' (offline), an LLMCoach preset ('gemini-2.5-flash', 'vllm-local:MODEL', ...) or
    'MODEL@BASE_URL' (any OpenAI-compatible endpoint; key from $OPENAI_API_KEY when set).
    An LLM coach is wrapped in a CachedCoach at `cache` so re-runs re-score for free."""
    from mappa_envs.coach import RuleCoach

    if spec == "rule":
        return RuleCoach()
    from mappa_envs.coach.cache import CachedCoach
    from mappa_envs.coach.llm import PRESETS, LLMCoach, LLMCoachConfig

    preset, _, model = spec.partition(":")
    if preset in PRESETS:
        coach = LLMCoach.from_preset(preset, **({"model": model} if model else {}))
    elif "@" in spec:
        model, _, url = spec.partition("@")
        coach = LLMCoach(LLMCoachConfig(model=model, base_url=url,
                                        api_key_env="OPENAI_API_KEY" if os.environ.get("OPENAI_API_KEY") else None))
    else:
        raise ValueError(f"unknown coach {spec!r}; use 'rule', one of {sorted(PRESETS)} (optionally PRESET:MODEL), "
                         "or MODEL@BASE_URL")
    return CachedCoach(coach, cache) if cache else coach
