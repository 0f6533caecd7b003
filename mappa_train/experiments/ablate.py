"""`mappa ablate`: train one start several ways at the same number of rollouts, several seeds each.

    mappa ablate --config configs/ablate/cpu.yaml --out runs/ablate

A preset names a training preset, the warm start every arm begins from (the quickstart's: a tiny
model imitating a noisy scripted team), the seeds, a target held-out accuracy, and the arms. An arm
is a reward (`process`: the coach's score per action, the paper; `outcome`: the team's 0/1 result
×10 on each role's last action, no coach calls; `process+outcome`: both), an advantage normalisation
(`mappa_train.algo.normalize`), optionally curriculum filtering (`rollout.stop_below`) and any other
training overrides. Every arm × seed trains for the same steps × episodes per step from the same
start, evaluating on the held-out set every `eval_every` steps.

A preset may also sweep conditions (issue 25, configs/ablate/credit_cpu.yaml; the grid is
`ablate_preset`'s): `sweep`, one training config key set to each of its values (Chain-v0's depth:
`sweep: {key: env.kwargs.depth, values: [2, 4, 8]}`; one warm start imitating the scripted team of
every condition, or with `start_per_value` one start per value imitating its own), and `coach_noise`
(the rule coach wrong at rate ε, `rule:noise=ε,seed=<training seed>`; the outcome arm calls no
coach, so its noise-free runs stand for it at every ε). A `preflight_episodes` pre-flight plays the
start before any arm trains and stops the ablation if too few of its actions pass their checks: a
start that is never right cannot learn from either reward.

Issue 39, a fair comparison where curves can rise. The outcome arms credit the team's result to every
action of each agent (`algo.outcome_credit` every_action); an arm with `outcome_credit: last_action`
(the result on each role's last action only) is a labelled ablation. `baseline` may list several outcome
variants: in each condition the strongest at the budget is the one every arm is paired with. With
`budget_gain` a budget pre-flight trains `budget_arm` (the process arm) at `budget_seed`, a seed outside
the grid, `eval_every` steps at a time until its `eval_set` accuracy holds `budget_gain` over its start
at two evaluations in a row, says so, and fixes every arm's steps at that sweep value to `budget_factor` ×
the steps it took (`start/budget[_depthD].json`, reused: the budget is fixed before the grid runs); if it
never rises within `budget_max_steps` the ablation stops, since flat curves compare nothing. The report gives
the cost to start + each of `target_gains` (the first evaluation at it) and the rollouts ratio with its
paired bootstrap interval (ablate_report).
Controls are ordinary arms, e.g. the coach that says nothing, `overrides: ["env.coach=rule:noise=0.5,
seed={seed}"]`, and a random reward, `"env.coach=rule:noise=1,mode=random,seed={seed}"` (`{seed}` in an
arm's overrides is the training seed).

A preset may `extends:` another (a path relative to it) and change only what differs: its mappings
(`arms`, `start`) merge into the other's key by key, any other field replaces the other's
(configs/ablate/credit_llm_coach.yaml adds one arm to credit_cpu.yaml).

Written to --out: `runs/[<condition>/]<arm>/seed<N>/` (each a resumable `mappa train` run: a re-run
only trains what is missing), `results.json`, `results.md` and plots (experiments/ablate_report.py):
per arm, held-out accuracy against rollouts (mean and a 95% Student-t interval over seeds) and the
cost to first reach the target; one record per condition × arm × seed; and each arm paired with the
`baseline` arm seed by seed (same start, same evaluation seeds, same rollouts): the difference in
mean held-out accuracy after the start (area under the curve) with its t-interval and a sign test.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path

from mappa_train.config import ConfigError, load_config
from mappa_train.experiments.ablate_preset import (
    AblateConfig,
    Arm,
    Condition,
    arms_at,
    calls_coach,
    conditions,
    run_dir,
    start_file,
)
from mappa_train.experiments.ablate_prior import (
    as_settings,
    check_prior,
    check_runs_here,
    check_same_start,
    digest,
    prior_records,
    restore_budgets,
    start_reports,
)
from mappa_train.experiments.ablate_report import axis, format_table, plot, plot_differences, summarise
from mappa_train.experiments.warm_start import build_start


def arm_overrides(arm: Arm, env_kwargs: dict, seed: int = 0) -> list[str]:
    """The training overrides that make an arm, the one place an arm's reward is decided: the env's reward
    mode (its outcome bonus is 10 × the 0/1 result, paid to every agent at the end), which actions the
    outcome reaches, the normalisation, the curriculum, then the arm's own overrides ({seed}: `seed`)."""
    kwargs = {**env_kwargs, "reward_mode": arm.reward}
    out = [f"env.kwargs={json.dumps(kwargs)}", f"algo.outcome_credit={arm.outcome_credit}", f"algo.whiten={arm.whiten}"]
    if arm.stop_below:
        out.append(f"rollout.stop_below={json.dumps(arm.stop_below)}")
    return out + [str(o).replace("{seed}", str(seed)) for o in arm.overrides]


def arm_config(cfg: AblateConfig, base, cond: Condition, arm: Arm, seed: int, start: str, path: Path,
               extra: tuple[str, ...] = ()):
    """The training config of one run: the preset's, the condition's sweep value and coach, the arm, the start."""
    coach = [f"env.coach=rule:noise={cond.noise:g},seed={seed}"] if cond.noise else []
    return load_config(cfg.train_config, [
        *cfg.overrides, *cond.overrides(), *arm_overrides(arm, base.env.kwargs, seed), *coach,
        f"model.path={start}", f"seed={seed}", f"out_dir={path}", *extra])


# ---- running ---------------------------------------------------------------------------------------

def base_config(cfg: AblateConfig, out: Path, cond: Condition | None = None):
    """The training config every arm of a condition (by default: the preset as it is) shares, checked for what
    the ablation reads from it."""
    cond = cond or Condition()
    base = load_config(cfg.train_config, [*cfg.overrides, *cond.overrides(), f"out_dir={out / 'start'}"])
    if base.eval_every == 0 or cfg.eval_set not in base.env.eval_sets:
        raise ConfigError(f"the ablation reads held-out accuracy from env.eval_sets.{cfg.eval_set} every eval_every "
                          f"steps; the training preset has eval sets {sorted(base.env.eval_sets)} and eval_every="
                          f"{base.eval_every}")
    if cond.noise and base.env.coach != "rule":
        raise ConfigError(f"coach_noise wraps the rule coach (rule:noise=EPS); the training preset's coach is "
                          f"{base.env.coach!r}: set env.coach=rule or coach_noise: [0]")
    return base


def train_settings(cfg: AblateConfig, out: Path) -> dict:
    """The preset's resolved training config as results.json keeps it (without out_dir): `--prior` compares it
    field by field, so an edit to the training preset between sessions is not paired across."""
    settings = as_settings(base_config(cfg, out))
    settings.pop("out_dir", None)
    return settings


def ablate(cfg: AblateConfig, arms: dict[str, Arm], out: Path, progress=print, prior: dict | None = None,
           prior_path: str = "") -> dict:
    """Build the start (reused) and pre-flight it at each sweep value, train every seed × condition × arm
    (skipping finished runs and the `prior`'s: ablate_prior), then summarise. Seed by seed: an interrupted
    ablation leaves whole paired seeds behind, and `--seeds` summarises those."""
    cells = {(cond.name, name): (cond, arm) for cond in conditions(cfg)
             for name, arm in arms_at(cfg, arms, cond).items()}
    train, done, restored = train_settings(cfg, out), {}, []
    if prior is not None:  # every refusal before anything is written
        cfg.seeds = check_prior(prior, cfg, cells, train, prior_path)
        done = prior_records(prior, axis(asdict(cfg)))
        check_runs_here(done, cells, out, cfg, prior_path)
        names = [start_file("budget", cond) for cond in conditions(cfg) if not cond.noise]
        restored = restore_budgets(prior, out / "start", names, prior_path)
    out.mkdir(parents=True, exist_ok=True)
    bases = {cond: base_config(cfg, out, cond) for cond in conditions(cfg)}
    plain = {cond: base for cond, base in bases.items() if not cond.noise}  # one per sweep value
    starts = _starts(cfg, plain, out / "start")
    if cfg.preflight_episodes:  # before any arm trains: a start that is never right can learn from neither reward
        for cond, base in plain.items():
            path = out / "start" / start_file("preflight", cond, ".json")
            _preflight(cfg, base, cond, starts[cond.value], path, progress)
    if prior is not None:
        try:
            check_same_start(prior, out / "start", set(cells), prior_path, progress)
        except ConfigError:
            for path in restored:  # a refused prior leaves no budget behind for a later run to take as fixed here
                path.unlink(missing_ok=True)
            raise
    steps = {}  # sweep value -> the grid's steps, fixed by the budget pre-flight before any grid run
    if cfg.budget_gain is not None:
        for cond, base in plain.items():
            steps[cond.value] = _budget(cfg, arms, base, cond, starts[cond.value], out / "start", progress)
    for seed in cfg.seeds:
        for cond, base in bases.items():
            for name, arm in arms_at(cfg, arms, cond).items():
                path = run_dir(out, cond, name, arm, seed)
                finished = (path / "final").is_dir() or (cond.name, name, seed) in done
                if finished or (cond.noise and not calls_coach(arm)):
                    continue  # the outcome arm calls no coach: its noise-free run stands for it; a prior run is done
                progress(f"{cond.name + ' ' if cond.name else ''}arm {name}, seed {seed} ...")
                t0 = time.perf_counter()
                budget = (f"steps={steps[cond.value]}",) if cond.value in steps else ()
                train_run(arm_config(cfg, base, cond, arm, seed, starts[cond.value], path, budget))
                progress(f"    done in {time.perf_counter() - t0:.0f} s")
    results = {**summarise(cfg, arms, out, done), "start_reports": start_reports(out / "start"), "train": train}
    here = digest(results["start_reports"])
    for record in results["records"]:  # a prior's records name the start they trained from; new ones this one
        record.setdefault("start", here)
    part = out / "results.json.part"  # results.json may be the --prior read: never leave it half written
    part.write_text(json.dumps(results, indent=2))
    os.replace(part, out / "results.json")
    (out / "results.md").write_text(format_table(results))
    plot(results, out / "accuracy_vs_rollouts.png")
    if "conditions" in results:
        plot_differences(results, out)
    return results


def _starts(cfg: AblateConfig, plain: dict, where: Path) -> dict:
    """sweep value -> the model its arms start from (each built once, then reused): one tiny model imitating
    the scripted team of every condition, or with `start_per_value` one per value imitating its own;
    without `warm_start`, the training preset's own model."""
    bases = list(plain.values())
    if not cfg.warm_start:
        return {cond.value: base.model.path for cond, base in plain.items()}
    if cfg.start_per_value and cfg.sweep.key:  # start/depthD/, also when --sweep-values keeps one
        return {cond.value: str(build_start(base, cfg.start, where / cond.name, [base]))
                for cond, base in plain.items()}
    shared = str(build_start(bases[0], cfg.start, where, bases))
    return {cond.value: shared for cond in plain}


def _preflight(cfg: AblateConfig, base, cond: Condition, start: str, path: Path, progress) -> None:
    from mappa_train.experiments.preflight import check_start

    path.parent.mkdir(parents=True, exist_ok=True)
    report = check_start(base, Path(start), cfg.preflight_episodes, cfg.preflight_min_right, path)
    progress(f"pre-flight{cond.where()}: {report['right_share']:.0%} of the "
             f"start's actions right, team success {report['team_success']:.0%} over {report['episodes']} episodes"
             + "".join(f"; {role} {share:.0%}" for role, share in report.get("right_share_by_role", {}).items()))


def _budget(cfg: AblateConfig, arms: dict[str, Arm], base, cond: Condition, start: str, where: Path,
            progress) -> int:
    """The grid's steps at a sweep value, from the budget pre-flight (`preflight.fix_budget`; reused once written)."""
    from mappa_train.experiments.preflight import fix_budget

    name = start_file("budget", cond)
    path = where / f"{name}.json"
    if not path.exists() and cfg.budget_arm not in arms:
        raise ConfigError(f"the budget pre-flight trains arm {cfg.budget_arm!r}, which is not among the arms run "
                          f"({sorted(arms)}); add it to --arms")
    arm = arms.get(cfg.budget_arm)

    def make(steps: int):
        return arm_config(cfg, base, cond, arm, cfg.budget_seed, start, where / name,
                          (f"steps={steps}", f"checkpoint_every={base.eval_every}"))

    report = fix_budget(make, train_run, base.eval_every, cfg.eval_set, cfg.budget_gain, cfg.budget_max_steps,
                        cfg.budget_factor, path)
    progress(f"budget pre-flight{cond.where()}: {cfg.budget_arm} rose {report['start']:.3f} -> {report['reached']:.3f} "
             f"(>= start + {cfg.budget_gain:g}) on {cfg.eval_set} in {report['steps_to_rise']} steps; every arm "
             f"trains {report['budget_steps']} steps")
    return report["budget_steps"]


def train_run(cfg) -> None:
    """Train one run of the grid (with Ray when its config asks for it)."""
    if cfg.ray.enabled:
        from mappa_train.ray_mode import train_with_ray

        train_with_ray(cfg)
    else:
        from mappa_train.train import train

        train(cfg)
