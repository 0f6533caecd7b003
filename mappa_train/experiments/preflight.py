"""The ablation's pre-flights: can the start learn at all, and at what budget does a curve rise?

The start plays `episodes` training episodes at the training temperature with the plain rule coach.
An action is *right* when every check the env ran on it passed (its inputs being ready aside); the
share of right actions must reach `min_right`. A start that is never right gives a process reward
nothing to reinforce and an outcome reward no success to find, so the comparison would be between
two arms that cannot move. The figures (and the team's success rate) are written to `path`.

`fix_budget` (issue 39): the process arm trains, `eval_every` steps at a time, until its held-out
accuracy rises by `gain` over its start (at two evaluations in a row: one is noisy); the budget every arm
then gets is `factor` × those steps. A
budget at which the process arm cannot rise would compare flat curves, so none is fixed then.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
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


def fix_budget(make: Callable[[int], object], train: Callable[[object], None], every: int, eval_set: str, gain: float,
               max_steps: int, factor: float, path: Path) -> dict:
    """Train (`train`) the run `make(steps)` builds (a resumable training config), `every` steps more at a time, until
    its `eval_set` accuracy is >= its start + `gain` at two evaluations in a row or `max_steps` are spent; write
    `path` (reused if there) with the budget, ceil(factor × steps to rise / every) × every steps, the steps to rise
    being the first of the two. Raises ConfigError if it never rose.

    Two in a row, because one evaluation is noisy: 48 problems sampled at temperature 1 from a start at 0.3 have a
    standard deviation of 0.066, so a flat curve crosses +0.10 at one of a dozen evaluations about half the time,
    and the budget would be fixed where nothing had yet been learnt."""
    from mappa_train.checkpoints import latest_checkpoint
    from mappa_train.runlog import METRICS_FILE, read_metrics

    if path.exists():  # the budget is fixed once, before the grid: a changed pre-flight may not move it silently
        report = json.loads(path.read_text())
        if (report["eval_set"], report["gain"], report["factor"]) != (eval_set, gain, factor):
            raise ConfigError(f"{path} fixed the budget with eval_set {report['eval_set']}, gain {report['gain']:g} "
                              f"and factor {report['factor']:g}, not {eval_set}, {gain:g} and {factor:g}; use another "
                              "--out, or delete it (and the grid's runs trained at that budget) to fix a new one")
        return report
    key, metrics = f"{eval_set}/accuracy", Path(make(every).out_dir) / METRICS_FILE
    steps = latest_checkpoint(metrics.parent)[0]  # an interrupted pre-flight goes on from its last checkpoint
    while True:
        rows = read_metrics(metrics) if metrics.exists() else []
        evals = {r["step"]: r[key] for r in rows if r["kind"] == "eval" and key in r and r["step"] <= steps}
        hit = first_held(evals, evals[0] + gain) if evals else None  # nothing trained yet: no evaluation
        if hit is not None or steps >= max_steps:
            break
        steps = min(steps + every, max_steps)
        train(make(steps))
    if hit is None:
        raise ConfigError(f"budget pre-flight: the process arm did not rise by {gain:g} over its start on {eval_set} "
                          "at two evaluations in a row "
                          f"within {max_steps} steps ({evals[0]:.3f} -> best {max(evals.values()):.3f}; its run is "
                          f"in {make(steps).out_dir}), so every curve would be flat at any budget up to it: raise "
                          "budget_max_steps or change the setting (learner.lr, the start)")
    report = {"eval_set": eval_set, "gain": gain, "start": evals[0], "reached": evals[hit], "steps_to_rise": hit,
              "budget_steps": math.ceil(factor * hit / every) * every, "factor": factor,
              "curve": [[k, v] for k, v in sorted(evals.items())], "run": str(make(steps).out_dir)}
    path.write_text(json.dumps(report, indent=2))
    return report


def first_held(evals: dict[int, float], target: float) -> int | None:
    """The first evaluated step ({step: accuracy}) at which accuracy is >= `target` and still is at the next
    evaluation (one evaluation is noisy: see `fix_budget`), or None."""
    steps = sorted(evals)
    return next((s for s, later in zip(steps, steps[1:]) if min(evals[s], evals[later]) >= target - 1e-12), None)
