"""`mappa ablate`: train one start several ways at the same number of rollouts, several seeds each.

    mappa ablate --config configs/ablate/cpu.yaml --out runs/ablate

A preset names a training preset, the warm start every arm begins from (the quickstart's: a tiny
model imitating a noisy scripted team), the seeds, a target held-out accuracy, and the arms. An arm
is a reward (`process`: the coach's score per action, the paper; `outcome`: the team's 0/1 result
×10 on each role's last action, no coach calls; `process+outcome`: both), an advantage normalisation
(`mappa_train.algo.normalize`), optionally curriculum filtering (`rollout.stop_below`) and any other
training overrides. Every arm × seed trains for the same steps × episodes per step from the same
start, evaluating on the held-out set every `eval_every` steps.

A preset may also sweep conditions (issue 25, configs/ablate/credit_cpu.yaml): `depths` (Chain-v0's
env.kwargs.depth; one warm start imitating the scripted team at every depth, or with `start_per_depth` one
start per depth imitating its own) and `coach_noise`
(the rule coach wrong at rate ε, `rule:noise=ε,seed=<training seed>`; the outcome arm calls no
coach, so its noise-free runs stand for it at every ε). A `preflight_episodes` pre-flight plays the
start before any arm trains and stops the ablation if too few of its actions pass their checks: a
start that is never right cannot learn from either reward.

Issue 39, a fair comparison where curves can rise. The outcome arms credit the team's result to every
action of each agent (`algo.outcome_credit` every_action); an arm with `outcome_credit: last_action`
(the result on each role's last action only) is a labelled ablation. `baseline` may list several outcome
variants: in each condition the strongest at the budget is the one every arm is paired with. With
`budget_gain` a budget pre-flight trains `budget_arm` (the process arm) at `budget_seed`, a seed outside
the grid, `eval_every` steps at a time until its `eval_set` accuracy rises by `budget_gain` over its start,
says so, and fixes every arm's steps at that depth to `budget_factor` × the steps it took
(`start/budget[_depthD].json`, reused: the budget is fixed before the grid runs); if it never rises within
`budget_max_steps` the ablation stops, since flat curves compare nothing. The report gives the cost to
start + each of `target_gains` and the rollouts ratio with its paired bootstrap interval (ablate_report).
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
import time
from dataclasses import dataclass, field
from pathlib import Path

from mappa_envs.core.pipeline import RewardMode
from mappa_train.config import ConfigError, Normalization, doc, load_config, load_section
from mappa_train.config.schema import OutcomeCredit
from mappa_train.experiments.ablate_report import format_table, plot, plot_differences, summarise
from mappa_train.experiments.warm_start import StartConfig, build_start


@dataclass
class Arm:
    reward: RewardMode = doc("process", "process (coach score per action), outcome (team result ×10), process+outcome "
                                    "or backprop (team result ×10 split over the actions by blame)")
    whiten: Normalization = doc("global", "advantage normalisation")
    outcome_credit: OutcomeCredit = doc("every_action", "which actions the outcome reaches (algo.outcome_credit): "
                                                        "every action of each agent, or its last only (an ablation)")
    stop_below: dict = doc({}, "curriculum filtering: rollout.stop_below, role -> coach score")
    overrides: list = doc([], "other training overrides, key=value; {seed} is replaced by the training seed")


@dataclass
class AblateConfig:
    train_config: str = doc("quickstart.yaml",
                            "training preset every arm starts from (a path relative to the preset file)")
    overrides: list = doc([], "training overrides for every arm, key=value")
    seeds: list = doc([0, 1, 2], "training seeds; every arm runs each")
    target_accuracy: float = doc(0.5, "held-out accuracy whose first crossing is reported per arm")
    eval_set: str = doc("heldout", "which of the training config's env.eval_sets is the held-out set")
    warm_start: bool = doc(True, "start from the quickstart's tiny warm start (`start`); false: from the training "
                                 "preset's own model.path")
    start: StartConfig = field(default_factory=StartConfig)
    arms: dict = doc({}, "arm name -> Arm fields")
    target_gain: float | None = doc(None, "if set, each run's target is its start accuracy plus this (rollouts to "
                                          "a target relative to the start); else target_accuracy")
    baseline: str | list = doc("outcome", "the arm every other arm is paired with, seed by seed; or a list of arms "
                                          "(the outcome variants), of which the strongest in each condition at the "
                                          "budget (highest mean accuracy after the start) is the one")
    target_gains: list = doc([0.1, 0.2], "gains over each run's start whose first crossing is costed per arm "
                                         "(rollouts, coach calls, tokens, wall) and compared as a rollouts ratio")
    budget_gain: float | None = doc(None, "if set, the budget pre-flight: `budget_arm` trains until its accuracy "
                                          "rises by this over its start, and the grid's steps are fixed from it")
    budget_arm: str = doc("process", "the arm the budget pre-flight trains")
    budget_seed: int = doc(1000, "the budget pre-flight's training seed (outside the grid's seeds)")
    budget_max_steps: int = doc(48, "the budget pre-flight gives up (and stops the ablation) after this many steps")
    budget_factor: float = doc(2.0, "the grid's steps: this × the steps the budget pre-flight took to rise, rounded "
                                    "up to whole evaluations")
    depths: list = doc([], "Chain-v0 depths (env.kwargs.depth), a condition each; empty: the preset's env as it is")
    coach_noise: list = doc([0.0], "rule-coach error rates, a condition each (0: the plain coach)")
    noise_depths: list = doc([], "the depths at which the noisy coaches run; empty: every depth")
    noise_arms: list = doc([], "the arms trained with the noisy coaches; empty: every arm (the outcome arm's "
                               "noise-free runs stand for it)")
    start_per_depth: bool = doc(False, "a warm start per depth, each imitating its own depth's team (start/depthD/); "
                                       "false: one start imitating every depth")
    preflight_episodes: int = doc(0, "training episodes the start plays before any arm trains (0: no pre-flight)")
    preflight_min_right: float = doc(0.05, "the least share of the start's actions passing all their checks")


@dataclass(frozen=True)
class Condition:
    """One cell of the sweep: a chain depth (None: the preset's env) and the coach's error rate."""

    depth: int | None = None
    noise: float = 0.0

    @property
    def name(self) -> str:
        """Its folder under runs/ ("" for the plain preset, so that single-condition ablations keep their layout)."""
        depth = [] if self.depth is None else [f"depth{self.depth}"]
        return "_".join(depth + ([f"noise{self.noise:g}"] if self.noise else []))


def conditions(cfg: AblateConfig) -> list[Condition]:
    """Every depth with the plain coach, then the noisy coaches at `noise_depths` (or every depth)."""
    out = []
    for depth in cfg.depths or [None]:
        out += [Condition(depth, float(e)) for e in cfg.coach_noise
                if e == 0 or not cfg.noise_depths or depth in cfg.noise_depths]
    return out


def calls_coach(arm: Arm) -> bool:
    """Whether the arm's reward asks the coach (every mode but the plain outcome does)."""
    return arm.reward != "outcome"


def arms_at(cfg: AblateConfig, arms: dict[str, Arm], cond: Condition) -> dict[str, Arm]:
    """The arms of a condition: all of them with the plain coach; with a noisy one `noise_arms` (or all) and
    the outcome arms, whose noise-free runs stand for them."""
    if not cond.noise or not cfg.noise_arms:
        return arms
    return {n: a for n, a in arms.items() if n in cfg.noise_arms or not calls_coach(a)}


def run_dir(out: Path, cond: Condition, name: str, arm: Arm, seed: int) -> Path:
    """A run's folder. The outcome arm asks no coach: its noise-free run stands for it at every error rate."""
    if not calls_coach(arm):
        cond = Condition(cond.depth)
    return out / "runs" / cond.name / name / f"seed{seed}"


def load_ablation(path: str | Path) -> tuple[AblateConfig, dict[str, Arm]]:
    path = Path(path)
    cfg = load_section(AblateConfig, _read_preset(path), str(path))
    if not cfg.arms or not all(isinstance(v, dict) for v in cfg.arms.values()):
        raise ConfigError(f"{path}: arms must map arm names to their fields (reward, whiten, stop_below, overrides)")
    arms = {name: load_section(Arm, spec, f"{path}: arms.{name}") for name, spec in cfg.arms.items()}
    if len(cfg.seeds) < 1 or not all(isinstance(s, int) for s in cfg.seeds):
        raise ConfigError(f"{path}: seeds must be a non-empty list of integers, got {cfg.seeds!r}")
    _check_sweep(cfg, arms, path)
    return cfg, arms


def _read_preset(path: Path, children: tuple[Path, ...] = ()) -> dict:
    """A preset's fields, on top of those of the preset it `extends` (a path relative to it): mappings
    (`arms`, `start`) are merged key by key, anything else replaced; `train_config` is resolved against
    the file that names it."""
    import yaml

    if not path.is_file():
        where = f" (extended by {children[-1]})" if children else ""
        raise ConfigError(f"ablation preset {path}{where} does not exist (presets: configs/ablate/*.yaml)")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: an ablation preset is a mapping of fields, got {type(data).__name__}")
    if "train_config" in data:
        data["train_config"] = str((path.parent / str(data["train_config"])).resolve())
    parent = data.pop("extends", None)
    if parent is None:
        data.setdefault("train_config", str((path.parent / AblateConfig.train_config).resolve()))
        return data
    base_path = (path.parent / str(parent)).resolve()
    if base_path in (*children, path.resolve()):
        raise ConfigError(f"{path}: extends {parent!r}, which extends it back (a cycle)")
    base = _read_preset(base_path, (*children, path.resolve()))
    return {key: {**base[key], **value} if isinstance(value, dict) and isinstance(base.get(key), dict) else value
            for key, value in {**base, **data}.items()}


def _check_sweep(cfg: AblateConfig, arms: dict[str, Arm], path: Path) -> None:
    if not all(isinstance(d, int) and not isinstance(d, bool) and d >= 1 for d in cfg.depths):
        raise ConfigError(f"{path}: depths must be integers >= 1, got {cfg.depths!r}")
    if not cfg.coach_noise or 0 not in cfg.coach_noise or not all(
            isinstance(e, (int, float)) and 0 <= e <= 1 for e in cfg.coach_noise):
        raise ConfigError(f"{path}: coach_noise must be rates in [0, 1] including 0 (the plain coach), "
                          f"got {cfg.coach_noise!r}")
    if not set(cfg.noise_depths) <= set(cfg.depths):
        raise ConfigError(f"{path}: noise_depths {cfg.noise_depths} must be among depths {cfg.depths}")
    if cfg.preflight_episodes < 0 or not 0 <= cfg.preflight_min_right <= 1:
        raise ConfigError(f"{path}: preflight_episodes must be >= 0 and preflight_min_right in [0, 1]")
    from mappa_train.experiments.ablate_report import baselines

    if not baselines(cfg) or not set(baselines(cfg)) <= set(arms):
        raise ConfigError(f"{path}: baseline {cfg.baseline!r} must name one or more of the arms {sorted(arms)}")
    if not cfg.target_gains or not all(isinstance(g, (int, float)) and not isinstance(g, bool) and g > 0
                                       for g in cfg.target_gains):
        raise ConfigError(f"{path}: target_gains must be a non-empty list of gains > 0, got {cfg.target_gains!r}")
    if cfg.budget_gain is not None and (cfg.budget_gain <= 0 or cfg.budget_arm not in arms
                                        or cfg.budget_max_steps < 1 or cfg.budget_factor < 1):
        raise ConfigError(f"{path}: the budget pre-flight needs budget_gain > 0, budget_arm among the arms "
                          f"{sorted(arms)}, budget_max_steps >= 1 and budget_factor >= 1; got {cfg.budget_gain}, "
                          f"{cfg.budget_arm!r}, {cfg.budget_max_steps}, {cfg.budget_factor}")
    if not set(cfg.noise_arms) <= set(arms):
        raise ConfigError(f"{path}: noise_arms {cfg.noise_arms} must be among the arms {sorted(arms)}")


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
    """The training config of one run: the preset's, the condition's depth and coach, the arm, the start."""
    coach = [f"env.coach=rule:noise={cond.noise:g},seed={seed}"] if cond.noise else []
    return load_config(cfg.train_config, [
        *cfg.overrides, *_depth(cond), *arm_overrides(arm, base.env.kwargs, seed), *coach,
        f"model.path={start}", f"seed={seed}", f"out_dir={path}", *extra])


# ---- running ---------------------------------------------------------------------------------------

def base_config(cfg: AblateConfig, out: Path, cond: Condition = Condition()):
    """The training config every arm of a condition shares, checked for what the ablation reads from it."""
    base = load_config(cfg.train_config, [*cfg.overrides, *_depth(cond), f"out_dir={out / 'start'}"])
    if base.eval_every == 0 or cfg.eval_set not in base.env.eval_sets:
        raise ConfigError(f"the ablation reads held-out accuracy from env.eval_sets.{cfg.eval_set} every eval_every "
                          f"steps; the training preset has eval sets {sorted(base.env.eval_sets)} and eval_every="
                          f"{base.eval_every}")
    if cond.noise and base.env.coach != "rule":
        raise ConfigError(f"coach_noise wraps the rule coach (rule:noise=EPS); the training preset's coach is "
                          f"{base.env.coach!r}: set env.coach=rule or coach_noise: [0]")
    return base


def _depth(cond: Condition) -> list[str]:
    return [] if cond.depth is None else [f"env.kwargs.depth={cond.depth}"]


def ablate(cfg: AblateConfig, arms: dict[str, Arm], out: Path, progress=print) -> dict:
    """Build the start (reused) and pre-flight it at each depth, train every seed × condition × arm (skipping
    finished runs), then summarise. Seed by seed: an interrupted ablation leaves whole paired seeds behind,
    and `--seeds` summarises those."""
    out.mkdir(parents=True, exist_ok=True)
    bases = {cond: base_config(cfg, out, cond) for cond in conditions(cfg)}
    depth_bases = {cond.depth: base for cond, base in bases.items()}
    starts = _starts(cfg, depth_bases, out / "start")
    if cfg.preflight_episodes:  # before any arm trains: a start that is never right can learn from neither reward
        for depth, base in depth_bases.items():
            _preflight(cfg, base, starts[depth], out / "start" / ("preflight.json" if depth is None else
                                                                  f"preflight_depth{depth}.json"), progress)
    steps = {}  # depth -> the grid's steps, fixed by the budget pre-flight before any grid run
    if cfg.budget_gain is not None:
        for depth, base in depth_bases.items():
            steps[depth] = _budget(cfg, arms, base, Condition(depth), starts[depth], out / "start", progress)
    for seed in cfg.seeds:
        for cond, base in bases.items():
            for name, arm in arms_at(cfg, arms, cond).items():
                path = run_dir(out, cond, name, arm, seed)
                if (cond.noise and not calls_coach(arm)) or (path / "final").is_dir():
                    continue  # the outcome arm calls no coach: its noise-free run stands for it
                progress(f"{cond.name + ' ' if cond.name else ''}arm {name}, seed {seed} ...")
                t0 = time.perf_counter()
                budget = (f"steps={steps[cond.depth]}",) if cond.depth in steps else ()
                _train(arm_config(cfg, base, cond, arm, seed, starts[cond.depth], path, budget))
                progress(f"    done in {time.perf_counter() - t0:.0f} s")
    results = summarise(cfg, arms, out)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "results.md").write_text(format_table(results))
    plot(results, out / "accuracy_vs_rollouts.png")
    if "conditions" in results:
        plot_differences(results, out)
    return results


def _starts(cfg: AblateConfig, depth_bases: dict, where: Path) -> dict:
    """depth -> the model its arms start from (each built once, then reused): one tiny model imitating the
    scripted team at every depth of the sweep, or with `start_per_depth` one per depth imitating its own;
    without `warm_start`, the training preset's own model."""
    bases = list(depth_bases.values())
    if not cfg.warm_start:
        return {depth: base.model.path for depth, base in depth_bases.items()}
    if cfg.start_per_depth and None not in depth_bases:  # start/depthD/, also when --depths keeps one
        return {depth: str(build_start(base, cfg.start, where / f"depth{depth}", [base]))
                for depth, base in depth_bases.items()}
    shared = str(build_start(bases[0], cfg.start, where, bases))
    return dict.fromkeys(depth_bases, shared)


def _preflight(cfg: AblateConfig, base, start: str, path: Path, progress) -> None:
    from mappa_train.experiments.preflight import check_start

    path.parent.mkdir(parents=True, exist_ok=True)
    report = check_start(base, Path(start), cfg.preflight_episodes, cfg.preflight_min_right, path)
    depth = base.env.kwargs.get("depth")
    progress(f"pre-flight{'' if depth is None else f' at depth {depth}'}: {report['right_share']:.0%} of the "
             f"start's actions right, team success {report['team_success']:.0%} over {report['episodes']} episodes"
             + "".join(f"; {role} {share:.0%}" for role, share in report.get("right_share_by_role", {}).items()))


def _budget(cfg: AblateConfig, arms: dict[str, Arm], base, cond: Condition, start: str, where: Path,
            progress) -> int:
    """The grid's steps at a depth, from the budget pre-flight (`preflight.fix_budget`; reused once written)."""
    from mappa_train.experiments.preflight import fix_budget

    name = "budget" if cond.depth is None else f"budget_depth{cond.depth}"
    path = where / f"{name}.json"
    if not path.exists() and cfg.budget_arm not in arms:
        raise ConfigError(f"the budget pre-flight trains arm {cfg.budget_arm!r}, which is not among the arms run "
                          f"({sorted(arms)}); add it to --arms")
    arm = arms.get(cfg.budget_arm)

    def make(steps: int):
        return arm_config(cfg, base, cond, arm, cfg.budget_seed, start, where / name,
                          (f"steps={steps}", f"checkpoint_every={base.eval_every}"))

    report = fix_budget(make, base.eval_every, cfg.eval_set, cfg.budget_gain, cfg.budget_max_steps,
                        cfg.budget_factor, path)
    depth = "" if cond.depth is None else f" at depth {cond.depth}"
    progress(f"budget pre-flight{depth}: {cfg.budget_arm} rose {report['start']:.3f} -> {report['reached']:.3f} "
             f"(>= start + {cfg.budget_gain:g}) on {cfg.eval_set} in {report['steps_to_rise']} steps; every arm "
             f"trains {report['budget_steps']} steps")
    return report["budget_steps"]


def _train(cfg) -> None:
    if cfg.ray.enabled:
        from mappa_train.ray_mode import train_with_ray

        train_with_ray(cfg)
    else:
        from mappa_train.train import train

        train(cfg)


