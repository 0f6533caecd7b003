"""The ablation's pre-flight: can the start learn at all? Checked before any arm spends its budget.

The start plays `episodes` training episodes at the training temperature with the plain rule coach.
An action is *right* when every check the env ran on it passed (its inputs being ready aside); the
share of right actions must reach `min_right`. A start that is never right gives a process reward
nothing to reinforce and an outcome reward no success to find, so the comparison would be between
two arms that cannot move. The figures (and the team's success rate) are written to `path`.
"""
from __future__ import annotations

import json
from pathlib import Path

from mappa_envs.coach.types import INPUTS_READY
from mappa_train.config import ConfigError


def check_start(cfg, start: Path, episodes: int, min_right: float, path: Path) -> dict:
    """Play the start, write `path`, and raise ConfigError if fewer than `min_right` of its actions are right."""
    if path.exists():
        report = json.loads(path.read_text())
    else:
        report = play_start(cfg, start, episodes)
        path.write_text(json.dumps(report, indent=2))
    if report["right_share"] < min_right:
        raise ConfigError(f"pre-flight: the start in {start} got {report['right_share']:.1%} of its actions right "
                          f"(< preflight_min_right {min_right:.1%}) over {report['episodes']} episodes, so neither "
                          "reward has anything to reinforce; warm-start it longer (start.sft_short_steps, "
                          "start.sft_steps) or with a more skilled teacher (start.teacher)")
    return report


def play_start(cfg, start: Path, episodes: int) -> dict:
    """Share of the start's actions that pass all their checks, and its team success, over `episodes`."""
    from mappa_envs.sandbox import make_sandbox
    from mappa_envs.wrappers import VectorRunner
    from mappa_train.factories import make_envs
    from mappa_train.generation import SamplingParams, make_generator
    from mappa_train.model_source import resolve_model
    from mappa_train.text_policies import GeneratorPolicy

    model = resolve_model(str(start), seed=cfg.seed)  # a path, or a name such as smollm2-135m
    policy = GeneratorPolicy(make_generator("hf", str(model)),
                             SamplingParams(max_new_tokens=cfg.generation.max_new_tokens,
                                            temperature=cfg.generation.temperature, seed=cfg.seed))
    sandbox = make_sandbox(cfg.env.sandbox, **cfg.env.sandbox_kwargs)
    envs = make_envs(cfg, min(cfg.rollout.num_envs, episodes), sandbox=sandbox)
    try:
        results = VectorRunner(envs, policy).run(episodes=episodes, seed=cfg.seed + 20_000)
    finally:
        for env in envs:
            env.close()
        sandbox.close()
    by_role: dict[str, list[bool]] = {}
    actions = 0
    for turn in (t for r in results for t in r.turns):
        actions += 1
        checks = {k: v for k, v in turn.info.get("checks", {}).items() if k != INPUTS_READY}
        if checks:
            by_role.setdefault(turn.role, []).append(all(checks.values()))
    right = [ok for oks in by_role.values() for ok in oks]
    return {"episodes": len(results), "actions": actions, "checked_actions": len(right),
            "right_share": sum(right) / len(right) if right else 0.0,
            # per role: is a deep chain's last step as learnable as its first?
            "right_share_by_role": {role: round(sum(oks) / len(oks), 3) for role, oks in by_role.items()},
            "team_success": sum(bool(r.outcome and r.outcome.correct) for r in results) / max(1, len(results)),
            "temperature": cfg.generation.temperature}
