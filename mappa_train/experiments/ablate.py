"""`mappa ablate`: train one start several ways at the same number of rollouts, several seeds each.

    mappa ablate --config configs/ablate/cpu.yaml --out runs/ablate

A preset names a training preset, the warm start every arm begins from (the quickstart's: a tiny
model imitating a noisy scripted team), the seeds, a target held-out accuracy, and the arms. An arm
is a reward (`process`: the coach's score per action, the paper; `outcome`: the team's 0/1 result
×10 on each role's last action, no coach calls; `process+outcome`: both), an advantage normalisation
(`mappa_train.algo.normalize`), optionally curriculum filtering (`rollout.stop_below`) and any other
training overrides. Every arm × seed trains for the same steps × episodes per step from the same
start, evaluating on the held-out set every `eval_every` steps.

Written to --out: `runs/<arm>/seed<N>/` (each a resumable `mappa train` run: a re-run only trains
what is missing), `results.json`, `results.md` (the table) and `accuracy_vs_rollouts.png`. Per arm:
held-out accuracy against rollouts (mean and a 95% Student-t interval over seeds), and the rollouts,
training wall time and coach calls each seed needed to first reach the target; then the ratio of
rollouts-to-target of process over outcome (the paper reports ~0.6).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from mappa_train.config import ConfigError, doc, load_config, load_section
from mappa_train.experiments.warm_start import StartConfig, build_start

Reward = Literal["process", "outcome", "process+outcome", "backprop"]  # the env's reward_mode


@dataclass
class Arm:
    reward: Reward = doc("process", "process (coach score per action), outcome (team result ×10), process+outcome "
                                    "or backprop (team result ×10 split over the actions by blame)")
    whiten: Literal["global", "per_role", "per_role_turn", "per_agent"] = doc("global", "advantage normalisation")
    stop_below: dict = doc({}, "curriculum filtering: rollout.stop_below, role -> coach score")
    overrides: list = doc([], "other training overrides, key=value")


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


def load_ablation(path: str | Path) -> tuple[AblateConfig, dict[str, Arm]]:
    import yaml

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"ablation preset {path} does not exist (presets: configs/ablate/*.yaml)")
    data = yaml.safe_load(path.read_text()) or {}
    cfg = load_section(AblateConfig, data, str(path))
    if not cfg.arms or not all(isinstance(v, dict) for v in cfg.arms.values()):
        raise ConfigError(f"{path}: arms must map arm names to their fields (reward, whiten, stop_below, overrides)")
    arms = {name: load_section(Arm, spec, f"{path}: arms.{name}") for name, spec in cfg.arms.items()}
    if len(cfg.seeds) < 1 or not all(isinstance(s, int) for s in cfg.seeds):
        raise ConfigError(f"{path}: seeds must be a non-empty list of integers, got {cfg.seeds!r}")
    cfg.train_config = str((path.parent / cfg.train_config).resolve())
    return cfg, arms


def arm_overrides(arm: Arm, env_kwargs: dict) -> list[str]:
    """The training overrides that make an arm: the env's reward mode (its outcome bonus is 10 × the 0/1
    result, paid on each role's last action), the normalisation, the curriculum."""
    kwargs = {**env_kwargs, "reward_mode": arm.reward}
    out = [f"env.kwargs={json.dumps(kwargs)}", f"algo.whiten={arm.whiten}"]
    if arm.stop_below:
        out.append(f"rollout.stop_below={json.dumps(arm.stop_below)}")
    return out + [str(o) for o in arm.overrides]


# ---- running ---------------------------------------------------------------------------------------

def base_config(cfg: AblateConfig, out: Path):
    """The training config every arm shares, checked for what the ablation reads from it."""
    base = load_config(cfg.train_config, [*cfg.overrides, f"out_dir={out / 'start'}"])
    if base.eval_every == 0 or cfg.eval_set not in base.env.eval_sets:
        raise ConfigError(f"the ablation reads held-out accuracy from env.eval_sets.{cfg.eval_set} every eval_every "
                          f"steps; the training preset has eval sets {sorted(base.env.eval_sets)} and eval_every="
                          f"{base.eval_every}")
    return base


def ablate(cfg: AblateConfig, arms: dict[str, Arm], out: Path, progress=print) -> dict:
    """Build the shared start, train every arm × seed (skipping finished runs), then summarise."""
    out.mkdir(parents=True, exist_ok=True)
    base = base_config(cfg, out)
    start = build_start(base, cfg.start, out / "start") if cfg.warm_start else base.model.path
    for name, arm in arms.items():
        for seed in cfg.seeds:
            run_dir = out / "runs" / name / f"seed{seed}"
            if (run_dir / "final").is_dir():
                continue
            progress(f"arm {name}, seed {seed} ...")
            t0 = time.perf_counter()
            _train(load_config(cfg.train_config, [*cfg.overrides, *arm_overrides(arm, base.env.kwargs),
                                                  f"model.path={start}", f"seed={seed}", f"out_dir={run_dir}"]))
            progress(f"    done in {time.perf_counter() - t0:.0f} s")
    results = summarise(cfg, arms, out)
    (out / "results.json").write_text(json.dumps(results, indent=2))
    (out / "results.md").write_text(format_table(results))
    plot(results, out / "accuracy_vs_rollouts.png")
    return results


def _train(cfg) -> None:
    if cfg.ray.enabled:
        from mappa_train.ray_mode import train_with_ray

        train_with_ray(cfg)
    else:
        from mappa_train.train import train

        train(cfg)


# ---- summarising -----------------------------------------------------------------------------------

def t_interval(values: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the Student-t interval for the mean of `values` (n − 1 degrees of freedom);
    with one value the interval is that value."""
    import numpy as np
    from scipy import stats

    x = np.asarray(values, dtype=float)
    mean = float(x.mean())
    if x.size < 2:
        return mean, mean, mean
    half = float(stats.t.ppf(0.5 + level / 2, x.size - 1) * x.std(ddof=1) / np.sqrt(x.size))
    return mean, mean - half, mean + half


def run_summary(run_dir: Path, eval_set: str, target: float, coached: bool) -> dict:
    """One run's held-out accuracy per rollouts, and the cost of its first reaching `target`."""
    from mappa_train.metrics import METRICS_FILE, read_metrics

    rows = read_metrics(run_dir / METRICS_FILE)
    config = json.loads((run_dir / "config.json").read_text())
    per_step = config["rollout"]["prompts_per_step"] * config["rollout"]["samples_per_prompt"]
    key = f"{eval_set}/accuracy"
    evals = {r["step"]: r[key] for r in rows if r["kind"] == "eval" and key in r}
    train = sorted((r for r in rows if r["kind"] == "train"), key=lambda r: r["step"])
    wall, calls, cost = 0.0, 0.0, {0: (0.0, 0.0)}
    for r in train:  # cumulative training cost after each step (evaluation not counted)
        wall += r.get("time_rollout_s", 0.0) + r.get("time_update_s", 0.0) + r.get("time_sync_s", 0.0)
        calls += r.get("env_actions", 0.0) if coached else 0.0
        cost[r["step"]] = (wall, calls)
    curve = [[step * per_step, acc] for step, acc in sorted(evals.items())]
    hit = next((step for step, acc in sorted(evals.items()) if acc >= target), None)
    reached = None if hit is None else {"rollouts": hit * per_step, "wall_s": cost[hit][0], "coach_calls": cost[hit][1]}
    return {"curve": curve, "reached": reached, "wall_s": wall, "coach_calls": calls,
            "final_accuracy": curve[-1][1] if curve else None}


def summarise(cfg: AblateConfig, arms: dict[str, Arm], out: Path) -> dict:
    summary = {}
    for name, arm in arms.items():
        seeds = {s: run_summary(out / "runs" / name / f"seed{s}", cfg.eval_set, cfg.target_accuracy,
                                coached=arm.reward != "outcome") for s in cfg.seeds}
        points = sorted({x for r in seeds.values() for x, _ in r["curve"]})
        curve = []
        for x in points:
            accs = [acc for r in seeds.values() for rx, acc in r["curve"] if rx == x]
            curve.append([x, *t_interval(accs)])
        reached = [r["reached"] for r in seeds.values() if r["reached"]]
        to_target = {k: (t_interval([r[k] for r in reached])[0] if reached else None)
                     for k in ("rollouts", "wall_s", "coach_calls")}
        summary[name] = {"arm": asdict(arm), "seeds": {str(s): r for s, r in seeds.items()},
                         "curve": curve, "final": list(t_interval([r["final_accuracy"] for r in seeds.values()])),
                         "reached_by": len(reached), "to_target": to_target}
    return {"target_accuracy": cfg.target_accuracy, "seeds": list(cfg.seeds), "eval_set": cfg.eval_set,
            "config": asdict(cfg), "arms": summary, "process_over_outcome": _ratio(summary)}


def _ratio(summary: dict) -> float | None:
    """Mean rollouts to target of the process arm over the outcome arm (both must have reached it)."""
    p, o = (summary.get(a, {}).get("to_target", {}).get("rollouts") for a in ("process", "outcome"))
    return p / o if p and o else None


def format_table(results: dict) -> str:
    n = len(results["seeds"])
    lines = [f"Held-out accuracy ({results['eval_set']}) over {n} seeds: mean [95% t-interval]; cost to first "
             f"reach accuracy {results['target_accuracy']:.2f} (mean over the seeds that reached it).", "",
             "| arm | reward | normalisation | curriculum | accuracy at start | final accuracy | reached | "
             "rollouts to target | wall s to target | coach calls to target |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, a in results["arms"].items():
        first = a["curve"][0] if a["curve"] else [0, float("nan")]
        mean, lo, hi = a["final"]
        t = a["to_target"]
        fmt = lambda v, spec: "—" if v is None else format(v, spec)  # noqa: E731
        stop = ", ".join(f"{r} < {v:g}" for r, v in a["arm"]["stop_below"].items()) or "—"
        lines.append(f"| {name} | {a['arm']['reward']} | {a['arm']['whiten']} | {stop} | {first[1]:.3f} | "
                     f"{mean:.3f} [{lo:.3f}, {hi:.3f}] | {a['reached_by']}/{n} | {fmt(t['rollouts'], '.0f')} | "
                     f"{fmt(t['wall_s'], '.0f')} | {fmt(t['coach_calls'], '.0f')} |")
    ratio = results["process_over_outcome"]
    lines += ["", "Rollouts to target, process / outcome: " + (f"{ratio:.2f}" if ratio else
              "not defined (an arm did not reach the target)") + " (the paper reports ~0.6)."]
    return "\n".join(lines) + "\n"


def plot(results: dict, out_png: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for name, a in results["arms"].items():
        if a["curve"]:
            x, mean, lo, hi = zip(*a["curve"])
            (line,) = ax.plot(x, mean, marker="o", markersize=3, label=name)
            ax.fill_between(x, lo, hi, alpha=0.15, color=line.get_color())
    ax.axhline(results["target_accuracy"], color="grey", linestyle=":", linewidth=1)
    ax.set_xlabel("training rollouts (episodes)")
    ax.set_ylabel(f"{results['eval_set']} accuracy")
    ax.set_title(f"MAPPA ablation: mean and 95% interval over {len(results['seeds'])} seeds")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png
