"""Build the team of `mappa eval` from its command-line spec (docs/evaluation.md); the coach comes
from `mappa_envs.coach.make_coach`. A spec that cannot work fails here, before anything is played."""
from __future__ import annotations

import inspect
import json
import re
from dataclasses import replace
from pathlib import Path

from mappa_envs.policy import Team, TextPolicy
from mappa_train.evaluation.runner import EvalSpecError, TeamSource
from mappa_train.generation import BACKENDS, SamplingParams

MODEL_KINDS = (*BACKENDS, "openai")


def team_name(spec: str) -> str:
    """A folder-safe run name derived from a team spec."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", spec).strip("_.")[:80] or "team"


def make_team(spec: str, seed: int = 0, sampling: SamplingParams = SamplingParams(temperature=0.6, max_new_tokens=1024),
              _models: dict | None = None) -> TeamSource:
    """A TextPolicy, or a builder of one from an env, for `spec` (see `TEAM_HELP` in mappa_cli/eval.py).

    Model specs: `hf:MODEL` (transformers), `vllm:MODEL` (an in-process vLLM engine), MODEL being
    anything `model.path` takes (mappa_train.model_source.resolve_model: a folder, a hub id, a .gguf file,
    `smollm2-135m`, `tiny`),
    `openai:MODEL@BASE_URL` (any OpenAI-compatible endpoint), sampled with `sampling`.
    """
    spec = spec.strip()
    models = {} if _models is None else _models  # one model per distinct spec, however many roles use it
    if "=" in spec.split(":", 1)[0]:  # "role=SPEC;role=SPEC": one policy per role
        members = {}
        for part in filter(None, (p.strip() for p in spec.split(";"))):
            role, sep, sub = part.partition("=")
            if not sep or not role.strip() or not sub.strip():
                raise EvalSpecError(f"team spec part {part!r}: expected ROLE=SPEC (e.g. verifier=scripted)")
            if role.strip() in members:
                raise EvalSpecError(f"team spec {spec!r} gives role {role.strip()!r} twice; give each role once")
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
            from mappa_train.export import checkpoint_steps

            steps = checkpoint_steps(Path(folder))
            kept = " (an unfinished one only has checkpoints)"
            if steps:
                kept = (f", this one has checkpoints of steps {steps}: `mappa export checkpoint {folder} --out DIR` "
                        "makes the newest one models, then --team hf:DIR/<policy>")
            raise EvalSpecError(f"team spec {spec!r}: {final} holds no trained model; a finished `mappa train` run "
                                f"writes final/<policy>/{kept}")
        backend = backend or "hf"
        if (final / "lora.json").is_file():  # one base, an adapter per role or group: one engine serves them all
            return _lora_team(final, backend, seed, sampling)
        if policies == ["shared"]:
            return make_team(f"{backend}:{final / 'shared'}", seed, sampling, models)
        return make_team(";".join(f"{p}={backend}:{final / p}" for p in policies), seed, sampling, models)
    if kind in MODEL_KINDS:
        if spec not in models:
            # seeded: each action samples with seed + its driver seed, whatever shares its batch
            models[spec] = _model_policy(kind, rest, replace(sampling, seed=seed))
        return models[spec]
    if kind == "scripted":
        skill = _skill(rest, spec) if rest else None
        options = {"skill": skill, "seed": seed} if skill is not None else {}
        return lambda env: _scripted(env, options)
    if re.fullmatch(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*", spec):  # module:factory, called with the env
        factory = _import(spec)
        return lambda env: factory(env)
    raise EvalSpecError(f"unknown team spec {spec!r}; expected hf:MODEL, vllm:MODEL, openai:MODEL@URL, "
                        "scripted[:SKILL], module:factory, or ROLE=SPEC;... (see docs/evaluation.md)")


def _lora_team(final: Path, backend: str, seed: int, sampling: SamplingParams) -> Team:
    """A LoRA run's team: its base with each role's trained adapter (mappa_train.lora)."""
    from mappa_train.lora import load_run_generators
    from mappa_train.text_policies import GeneratorPolicy

    if backend not in BACKENDS:
        raise EvalSpecError(f"team spec run:{final.parent}@{backend}: a LoRA run is served by hf or vllm")
    generators = load_run_generators(final, backend)
    seeded = replace(sampling, seed=seed)  # as for model specs: each action adds its driver seed
    return Team({role: GeneratorPolicy(g, seeded) for role, g in generators.items()})


def _skill(text: str, spec: str) -> float:
    try:
        skill = float(text)
    except ValueError:
        skill = float("nan")
    if not 0.0 <= skill <= 1.0:
        raise EvalSpecError(f"team spec {spec!r}: expected scripted or scripted:SKILL with SKILL in [0, 1]")
    return skill


def training_env(spec: str) -> tuple[str, str, dict] | None:
    """(DIR/config.json, env id, env kwargs) that a `run:DIR` team was trained on; None for other specs."""
    if not spec.startswith("run:"):
        return None
    path = Path(spec[4:].partition("@")[0]) / "config.json"
    if not path.is_file():
        raise EvalSpecError(f"team spec {spec!r}: {path} does not exist; run:DIR must name a `mappa train` "
                            "output folder")
    env = json.loads(path.read_text())["env"]
    return str(path), env["id"], env.get("kwargs", {})


def _model_policy(kind: str, target: str, sampling: SamplingParams) -> TextPolicy:
    from mappa_train.text_policies import EndpointPolicy, GeneratorPolicy

    if not target:
        raise EvalSpecError(f"team spec {kind}: names no model (e.g. hf:path/to/model, openai:MODEL@BASE_URL)")
    if kind == "openai":
        from mappa_train.generation.openai_chat import OpenAIChat

        model, sep, url = target.partition("@")
        if not sep or not model or not url:
            raise EvalSpecError(f"team spec openai:{target}: expected openai:MODEL@BASE_URL, e.g. openai:qwen@http://127.0.0.1:8000/v1")
        return EndpointPolicy(OpenAIChat(model, base_url=url), sampling)
    from mappa_train.generation import make_generator
    from mappa_train.model_source import resolve_model

    # the resolver `mappa train model.path=...` uses: hub ids, folders, .gguf files, smollm2-135m, tiny
    path = resolve_model(target, label=f"team spec {kind}:{target}")
    return GeneratorPolicy(make_generator(kind, str(path)), sampling)


def _scripted(env, options: dict) -> TextPolicy:
    import mappa_envs

    env_id = env.unwrapped.env_id
    # a spec-built team names its own scripted team; a registered env's is in the registry
    team = getattr(env.unwrapped, "team", None)
    target = team.scripted if team is not None and team.scripted else (
        mappa_envs.spec(env_id).scripted_policy if env_id in mappa_envs.registry else None)
    if target is None:
        raise EvalSpecError(f"{env_id} has no scripted team; evaluate a model or a module:factory policy")
    factory = _import(target)
    if "skill" in options and "code_skill" in inspect.signature(factory).parameters:
        # MathChat's Code Executor computes the gold answer unless its code breaks: as a baseline it breaks as
        # often as the solver errs, so accuracy follows SKILL (1 - (1 - SKILL)^2) instead of 1.000 at any SKILL
        options = {**options, "code_skill": options["skill"]}
    return factory(env, **options)


def _import(target: str):
    """The object "package.module:name" names, or an EvalSpecError saying why it cannot be imported."""
    from mappa_envs.registration import resolve

    return resolve(target, "team spec", EvalSpecError)
