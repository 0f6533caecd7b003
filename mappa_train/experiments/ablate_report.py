"""`mappa ablate`'s summary: records per condition × arm × seed, curves over seeds, the paired comparison
with the baseline arm, results.md and the plots.

The primary measure (issue 25) is per seed: an arm's mean held-out accuracy over the evaluations after
the start (the area under its curve, per evaluation) minus the baseline arm's at the same seed, which
shares its start and its evaluation seeds. Over seeds: the mean difference with a Student-t 95%
interval and a two-sided sign test (ties dropped). Secondary: the final accuracy's difference, and
the rollouts each run needed to first reach its target (`target_gain` above its own start, or
`target_accuracy`), whose ratio arm / baseline the paper puts at ~0.6 for process / outcome.

Issue 39: the baseline may be several outcome variants; in each condition the strongest of them at the
same budget (the highest mean accuracy after the start over seeds) is the one every arm is paired with,
and the others are reported as ablations. For every `target_gains` g (start + 0.10 and start + 0.2 by
default) each run's rollouts, coach calls, trained tokens and training wall time to first reach its
start + g, and per arm the ratio arm / baseline of mean rollouts to it over the seeds where both reached
it, with a paired percentile bootstrap interval over those seeds (`evaluation.stats.ratio_bootstrap`);
the seeds where only one reached it are counted beside it, since leaving them out favours neither arm.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

from mappa_train.experiments.ablate_preset import Sweep, arms_at, baselines, calls_coach, conditions, run_dir


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


TIE = 1e-9


def sign_test(diffs: list[float]) -> dict:
    """Two-sided exact sign test of "the median difference is 0": zero differences are dropped, and p is
    twice the binomial(n, 1/2) tail at the rarer sign (at most 1). A difference within TIE of 0 is a tie:
    equal accuracies averaged in another order differ by float rounding (2.8e-17), not by a problem."""
    pos, neg = sum(d > TIE for d in diffs), sum(d < -TIE for d in diffs)
    n = pos + neg
    p = min(1.0, 2 * sum(math.comb(n, k) for k in range(min(pos, neg) + 1)) / 2**n) if n else 1.0
    return {"positive": pos, "negative": neg, "ties": len(diffs) - n, "p": p}


COSTS = ("rollouts", "coach_calls", "generated_tokens", "wall_s")  # what reaching a target cost, cumulative


def first_reach(evals: dict[int, float], costs: dict[int, dict], target: float) -> dict | None:
    """The costs (`COSTS`) at the first evaluation whose accuracy is >= `target` ({step: accuracy},
    {step: costs after that step}), or None if none is."""
    hit = next((step for step, acc in sorted(evals.items()) if acc >= target - 1e-12), None)
    return None if hit is None else dict(costs[hit])


def run_summary(run_dir: Path, eval_set: str, target: float, coached: bool, target_gain: float | None = None,
                gains: tuple = ()) -> dict:
    """One run's held-out accuracy per rollouts, its costs, and the cost of its first reaching its target
    (`target`, or its start accuracy + `target_gain`) and its start + each of `gains` (`to_gain`)."""
    from mappa_train.runlog import METRICS_FILE, read_metrics

    rows = read_metrics(run_dir / METRICS_FILE)
    config = json.loads((run_dir / "config.json").read_text())
    per_step = config["rollout"]["prompts_per_step"] * config["rollout"]["samples_per_prompt"]
    key = f"{eval_set}/accuracy"
    evals = {r["step"]: r[key] for r in rows if r["kind"] == "eval" and key in r}
    train = sorted((r for r in rows if r["kind"] == "train"), key=lambda r: r["step"])
    wall, calls, tokens = 0.0, 0.0, 0.0
    cost = {0: dict.fromkeys(COSTS, 0.0)}
    for r in train:  # cumulative training cost after each step (evaluation not counted)
        wall += r.get("time_rollout_s", 0.0) + r.get("time_update_s", 0.0) + r.get("time_sync_s", 0.0)
        calls += r.get("env_actions", 0.0) if coached else 0.0
        tokens += r.get("action_tokens", 0.0)
        cost[r["step"]] = {"rollouts": float(r["step"] * per_step), "coach_calls": calls, "generated_tokens": tokens,
                           "wall_s": wall}
    curve = [[step * per_step, acc] for step, acc in sorted(evals.items())]
    start = curve[0][1] if curve else None
    if target_gain is not None and start is not None:
        target = start + target_gain
    hit = first_reach(evals, cost, target)
    reached = None if hit is None else {k: hit[k] for k in ("rollouts", "wall_s", "coach_calls")}
    to_gain = {f"{g:g}": None if start is None else first_reach(evals, cost, start + g) for g in gains}
    after = [acc for x, acc in curve[1:]]
    return {"curve": curve, "reached": reached, "target": target, "to_gain": to_gain, "wall_s": wall,
            "coach_calls": calls,
            "generated_tokens": tokens, "rollouts": len(train) * per_step, "start_accuracy": start,
            "auc": sum(after) / len(after) if after else None,
            "final_accuracy": curve[-1][1] if curve else None}


def run_figures(cfg, out: Path, cond, name: str, arm, seed: int) -> dict:
    """`run_summary` of one run of the grid, with the preset's eval set, targets and gains."""
    return run_summary(run_dir(out, cond, name, arm, seed), cfg.eval_set, cfg.target_accuracy,
                       coached=calls_coach(arm), target_gain=cfg.target_gain, gains=tuple(cfg.target_gains))


def summarise(cfg, arms: dict, out: Path, done: dict | None = None) -> dict:
    """results.json: per condition the arms' curves and targets, every run's record, and the paired summary
    (a record, block and pair carries its sweep value under the sweep's name, e.g. "depth": 2). `done`:
    (condition, arm, seed) -> the figures of runs whose folders are elsewhere (`mappa ablate --prior`)."""
    done = done or {}
    conds, records, blocks = conditions(cfg), [], {}
    gains = tuple(cfg.target_gains)
    for cond in conds:
        summary = {}
        for name, arm in arms_at(cfg, arms, cond).items():
            seeds = {s: done.get((cond.name, name, s)) or run_figures(cfg, out, cond, name, arm, s) for s in cfg.seeds}
            records += [{**place(cond, name, arm), "seed": s, **r} for s, r in seeds.items()]
            summary[name] = _arm_block(arm, seeds, gains)
        base = strongest(summary, baselines(cfg))
        blocks[cond.name] = {**cond.coordinate(), "coach_noise": cond.noise, "arms": summary, "baseline": base,
                             "process_over_outcome": _ratio(summary, base)}
    chosen = {name: block["baseline"] for name, block in blocks.items()}
    results = {"target_accuracy": cfg.target_accuracy, "target_gain": cfg.target_gain, "target_gains": list(gains),
               "seeds": list(cfg.seeds), "eval_set": cfg.eval_set, "baseline": cfg.baseline,
               "baselines_chosen": chosen, "config": asdict(cfg), "records": records,
               "paired": paired(records, chosen, gains, axis(asdict(cfg)))}
    if len(conds) == 1:  # a single-condition ablation keeps its flat layout
        return {**results, **{k: v for k, v in blocks[conds[0].name].items() if k in ("arms", "process_over_outcome")}}
    return {**results, "conditions": blocks}


def place(cond, name: str, arm) -> dict:
    """A record's place in the grid: its condition (and sweep value), coach noise, arm and reward."""
    return {"condition": cond.name, **cond.coordinate(), "coach_noise": cond.noise, "arm": name, "reward": arm.reward}


def axis(config: dict) -> str | None:
    """The sweep's name in records and tables (e.g. "depth"), from a preset as results.json echoes it; None
    without a sweep."""
    sweep = Sweep(**config["sweep"])
    return sweep.axis if sweep.key else None


def strongest(summary: dict, candidates: list[str]) -> str:
    """Of the candidate arms present, the one with the highest mean accuracy after the start over seeds (the
    first listed on a tie or when none has a curve): the fair baseline is the best outcome arm at this budget."""
    present = [c for c in candidates if c in summary]
    if not present:
        return candidates[0]

    def mean_auc(name: str) -> float:
        aucs = [r["auc"] for r in summary[name]["seeds"].values() if r["auc"] is not None]
        return sum(aucs) / len(aucs) if aucs else -math.inf

    return max(present, key=lambda c: (mean_auc(c), -present.index(c)))


def _arm_block(arm, seeds: dict[int, dict], gains: tuple = ()) -> dict:
    points = sorted({x for r in seeds.values() for x, _ in r["curve"]})
    curve = []
    for x in points:
        accs = [acc for r in seeds.values() for rx, acc in r["curve"] if rx == x]
        curve.append([x, *t_interval(accs)])
    reached = [r["reached"] for r in seeds.values() if r["reached"]]
    to_target = {k: (t_interval([r[k] for r in reached])[0] if reached else None)
                 for k in ("rollouts", "wall_s", "coach_calls")}
    costs = {k: t_interval([r[k] for r in seeds.values()])[0] for k in ("rollouts", "coach_calls", "generated_tokens",
                                                                          "wall_s")}
    to_gain = {}
    for g in map("{:g}".format, gains):
        hits = [r["to_gain"][g] for r in seeds.values() if r["to_gain"].get(g)]
        to_gain[g] = {"reached_by": len(hits), **{k: (sum(h[k] for h in hits) / len(hits) if hits else None)
                                                  for k in COSTS}}
    return {"arm": asdict(arm), "seeds": {str(s): r for s, r in seeds.items()}, "curve": curve,
            "final": list(t_interval([r["final_accuracy"] for r in seeds.values()])),
            "reached_by": len(reached), "to_target": to_target, "to_gain": to_gain, "cost_per_seed": costs}


def paired(records: list[dict], baseline: str | dict[str, str], gains: tuple = (),
           axis: str | None = None) -> list[dict]:
    """Each arm against the baseline (one arm, or condition name -> arm) in each condition, seed by seed: the
    difference in mean held-out accuracy after the start (primary) and in final accuracy, and the
    rollouts-to-target ratios (`rollouts_ratio` per gain: `gain_ratio`). The baseline's noise-free record
    stands for it at every coach error rate when it asks no coach (the outcome arm). `axis`: the sweep's
    name, under which each record carries its sweep value (None: no sweep)."""
    out = []
    for cond in dict.fromkeys((r["condition"], r.get(axis), r["coach_noise"]) for r in records):
        name, value, noise = cond
        arm_b = baseline if isinstance(baseline, str) else baseline[name]
        base = {(r.get(axis), r["coach_noise"], r["seed"]): r for r in records if r["arm"] == arm_b}
        mine = [r for r in records if r["condition"] == name and r["arm"] != arm_b]
        for arm in dict.fromkeys(r["arm"] for r in mine):
            pairs = [(r, base.get((value, noise, r["seed"])) or base.get((value, 0.0, r["seed"])))
                     for r in mine if r["arm"] == arm]
            pairs = [(a, b) for a, b in pairs if b is not None and a["auc"] is not None and b["auc"] is not None]
            if not pairs:
                continue
            diffs = [a["auc"] - b["auc"] for a, b in pairs]
            finals = [a["final_accuracy"] - b["final_accuracy"] for a, b in pairs]
            mean, lo, hi = t_interval(diffs)
            fmean, flo, fhi = t_interval(finals)
            reach = [(a["reached"], b["reached"]) for a, b in pairs]
            arm_r = [a["rollouts"] for a, _ in reach if a]
            base_r = [b["rollouts"] for _, b in reach if b]
            ratio = None
            if arm_r and base_r and sum(base_r):
                ratio = (sum(arm_r) / len(arm_r)) / (sum(base_r) / len(base_r))
            out.append({"condition": name, **({axis: value} if axis else {}), "coach_noise": noise, "arm": arm,
                        "baseline": arm_b,
                        "seeds": [a["seed"] for a, _ in pairs], "auc_diff_per_seed": diffs,
                        "auc_diff": mean, "ci95": [lo, hi], "sign_test": sign_test(diffs),
                        "final_diff": fmean, "final_diff_ci95": [flo, fhi],
                        "reached": [len(arm_r), len(base_r)], "rollouts_to_target_ratio": ratio,
                        "rollouts_ratio": {f"{g:g}": gain_ratio(pairs, f"{g:g}") for g in gains}})
    return out


def gain_ratio(pairs: list[tuple[dict, dict]], gain: str) -> dict:
    """Arm / baseline mean rollouts to start + `gain` over the seeds where both reached it, with its paired
    bootstrap interval (None when no seed pair did, or the baseline reached it at 0 rollouts), and how many
    seeds only one of them, or neither, reached it within the budget."""
    from mappa_train.evaluation.stats import ratio_bootstrap

    hits = [(a["to_gain"].get(gain), b["to_gain"].get(gain)) for a, b in pairs]
    both = [(a["rollouts"], b["rollouts"]) for a, b in hits if a and b]
    counts = {"both": len(both), "arm_only": sum(bool(a) and not b for a, b in hits),
              "baseline_only": sum(bool(b) and not a for a, b in hits),
              "neither": sum(not a and not b for a, b in hits)}
    if not both or not all(b > 0 for _, b in both):
        return {**counts, "ratio": None, "low": None, "high": None}
    ci = ratio_bootstrap([a for a, _ in both], [b for _, b in both])
    return {**counts, "ratio": ci.ratio, "low": ci.low, "high": ci.high, "exhaustive": ci.exhaustive}


def _ratio(summary: dict, baseline: str = "outcome") -> float | None:
    """Mean rollouts to target of the process arm over the baseline arm (both must have reached it)."""
    p, o = (summary.get(a, {}).get("to_target", {}).get("rollouts") for a in ("process", baseline))
    return p / o if p and o else None
def format_table(results: dict) -> str:
    """results.md: the arms' table (one per condition), then the paired comparison with the baseline."""
    if "conditions" not in results:
        return (_arms_table(results, results["arms"], results["process_over_outcome"]) + format_paired(results)
                + format_gains(results))
    parts, swept = [], axis(results["config"])
    for name, block in results["conditions"].items():
        noise = f"rule coach wrong at rate {block['coach_noise']:g}" if block["coach_noise"] else "plain rule coach"
        setting = f"{swept} {block[swept]}, " if swept else ""
        parts.append(f"## {name}: {setting}{noise}\n\n"
                     + _arms_table(results, block["arms"], block["process_over_outcome"]))
    return "\n".join(parts) + format_paired(results) + format_gains(results)


def format_gains(results: dict) -> str:
    """Per condition and arm, what reaching start + g cost (mean over the seeds that reached it), and each arm's
    rollouts-to-g ratio against the condition's baseline with its paired bootstrap interval."""
    gains = [f"{g:g}" for g in results.get("target_gains", [])]
    if not gains:
        return ""
    chosen = results.get("baselines_chosen", {})
    flat = {next(iter(chosen), ""): {"arms": results.get("arms", {})}}  # one condition (e.g. one sweep value)
    blocks = results.get("conditions") or flat
    lines = ["", "Cost to first reach start + g (mean over the seeds that reached it; coach calls 0 for an arm that "
             "asks no coach), and rollouts to it, arm / baseline, over the seeds where both reached it [95% paired "
             "bootstrap interval] (both, arm only, baseline only, neither).", "",
             "| condition | arm | g | reached | rollouts | coach calls | trained tokens | wall s | rollouts ratio "
             "[95% CI] | seeds (both / arm / baseline / neither) |", "|---|---|---|---|---|---|---|---|---|---|"]
    ratios = {(r["condition"], r["arm"]): r.get("rollouts_ratio", {}) for r in results["paired"]}
    fmt = lambda v, spec: "—" if v is None else format(v, spec)  # noqa: E731
    n = len(results["seeds"])
    for name, block in blocks.items():
        for arm, a in block["arms"].items():
            label = f"{arm} (baseline)" if chosen.get(name) == arm else arm
            for g in gains:
                t = a["to_gain"][g]
                r = ratios.get((name, arm), {}).get(g)
                ratio = "—" if not r or r["ratio"] is None else f"{r['ratio']:.2f} [{r['low']:.2f}, {r['high']:.2f}]"
                seeds = "—" if not r else f"{r['both']} / {r['arm_only']} / {r['baseline_only']} / {r['neither']}"
                lines.append(f"| {name or '—'} | {label} | +{g} | {t['reached_by']}/{n} | "
                             f"{fmt(t['rollouts'], '.0f')} | {fmt(t['coach_calls'], '.0f')} | "
                             f"{fmt(t['generated_tokens'], '.0f')} | "
                             f"{fmt(t['wall_s'], '.0f')} | {ratio} | {seeds} |")
    return "\n".join(lines) + "\n"


def format_paired(results: dict) -> str:
    rows = results["paired"]
    if not rows:
        return ""
    chosen = sorted(set(results.get("baselines_chosen", {}).values())) or [results["baseline"]]
    swept = axis(results["config"])
    lines = ["", f"Paired with `{', '.join(chosen)}` (the strongest of the baseline arms {results['baseline']} in "
             "each condition) seed by seed (same start, evaluation seeds and rollouts): "
             "difference in mean held-out accuracy after the start (primary), 95% t-interval over seeds, "
             "two-sided sign test; final accuracy's difference; rollouts to target, arm / baseline.", "",
             f"| {swept or 'sweep'} | coach error rate | arm | seeds | difference [95% CI] | + / − / tie | "
             "sign-test p | final difference [95% CI] | reached (arm, baseline) | rollouts ratio |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lo, hi = r["ci95"]
        flo, fhi = r["final_diff_ci95"]
        s = r["sign_test"]
        ratio = "—" if r["rollouts_to_target_ratio"] is None else f"{r['rollouts_to_target_ratio']:.2f}"
        lines.append(f"| {r[swept] if swept else '—'} | {r['coach_noise']:g} | {r['arm']} | "
                     f"{len(r['seeds'])} | {r['auc_diff']:+.3f} [{lo:+.3f}, {hi:+.3f}] | {s['positive']} / "
                     f"{s['negative']} / {s['ties']} | {s['p']:.3f} | "
                     f"{r['final_diff']:+.3f} [{flo:+.3f}, {fhi:+.3f}] | "
                     f"{r['reached'][0]}, {r['reached'][1]} | {ratio} |")
    return "\n".join(lines) + "\n"


def _arms_table(results: dict, arms: dict, ratio: float | None) -> str:
    n = len(results["seeds"])
    target = (f"its start accuracy + {results['target_gain']:.2f}" if results.get("target_gain") is not None
              else f"accuracy {results['target_accuracy']:.2f}")
    lines = [f"Held-out accuracy ({results['eval_set']}) over {n} seeds: mean [95% t-interval]; cost to first "
             f"reach {target} (mean over the seeds that reached it).", "",
             "| arm | reward | normalisation | curriculum | accuracy at start | final accuracy | reached | "
             "rollouts to target | wall s to target | coach calls to target |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for name, a in arms.items():
        first = a["curve"][0] if a["curve"] else [0, float("nan")]
        mean, lo, hi = a["final"]
        t = a["to_target"]
        fmt = lambda v, spec: "—" if v is None else format(v, spec)  # noqa: E731
        stop = ", ".join(f"{r} < {v:g}" for r, v in a["arm"]["stop_below"].items()) or "—"
        reward = a["arm"]["reward"]
        if a["arm"].get("outcome_credit") == "last_action" and "outcome" in reward:
            reward += " (on each role's last action only: ablation)"
        lines.append(f"| {name} | {reward} | {a['arm']['whiten']} | {stop} | {first[1]:.3f} | "
                     f"{mean:.3f} [{lo:.3f}, {hi:.3f}] | {a['reached_by']}/{n} | {fmt(t['rollouts'], '.0f')} | "
                     f"{fmt(t['wall_s'], '.0f')} | {fmt(t['coach_calls'], '.0f')} |")
    lines += ["", "Rollouts to target, process / outcome: " + (f"{ratio:.2f}" if ratio else
              "not defined (an arm did not reach the target)") + " (the paper reports ~0.6).", "",
              "Cost per seed (mean): " + "; ".join(
                  f"{name} {c['rollouts']:.0f} rollouts, {c['coach_calls']:.0f} coach calls, "
                  f"{c['generated_tokens']:.0f} trained tokens, {c['wall_s']:.0f} s training"
                  for name, c in ((n_, a["cost_per_seed"]) for n_, a in arms.items())) + "."]
    return "\n".join(lines) + "\n"


def plot(results: dict, out_png: Path) -> Path:
    """Accuracy vs rollouts, mean and 95% interval over seeds: one panel, or one per sweep value (plain coach)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    swept = axis(results["config"])
    panels = ({"": {"arms": results["arms"]}} if "conditions" not in results else
              {k: b for k, b in results["conditions"].items() if not b["coach_noise"]})
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels) + 3, 5), squeeze=False)
    for ax, block in zip(axes[0], panels.values()):
        for name, a in block["arms"].items():
            if a["curve"]:
                x, mean, lo, hi = zip(*a["curve"])
                (line,) = ax.plot(x, mean, marker="o", markersize=3, label=name)
                ax.fill_between(x, lo, hi, alpha=0.15, color=line.get_color())
        if results.get("target_gain") is None:
            ax.axhline(results["target_accuracy"], color="grey", linestyle=":", linewidth=1)
        ax.set_xlabel("training rollouts (episodes)")
        ax.set_ylabel(f"{results['eval_set']} accuracy")
        if swept in block:
            ax.set_title(f"{swept} {block[swept]}")
        ax.legend(fontsize=8)
    fig.suptitle(f"MAPPA ablation: mean and 95% interval over {len(results['seeds'])} seeds")
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return out_png


def difference_lines(rows: list[dict], x_key: str, swept: str) -> tuple[dict[str, list[dict]], dict[str, dict]]:
    """The paired rows of one difference plot, along the sweep (`x_key` == `swept`, the sweep's name) or the
    coach's error rate ("coach_noise"): lines of two points or more by label, and on the noise axis
    references, an arm trained only with the plain coach at a sweep value the noise sweep ran at (a real
    judge's arm), drawn across the plot to be read against the curve. One point is a table row, not a trend."""
    groups: dict = {}
    for r in rows:
        if x_key == swept and r["coach_noise"]:
            continue
        label = r["arm"] if x_key == swept else f"{r['arm']}, {swept} {r[swept]}"
        groups.setdefault(label, []).append(r)
    lines = {k: sorted(v, key=lambda r: r[x_key]) for k, v in groups.items() if len(v) > 1}
    noisy = {rs[0][swept] for rs in lines.values()} if x_key == "coach_noise" else set()
    references = {k: v[0] for k, v in groups.items() if len(v) == 1 and v[0][swept] in noisy}
    return lines, references


def plot_differences(results: dict, out: Path) -> list[Path]:
    """The paired difference (arm − baseline, mean after the start, 95% CI) vs the sweep's values (plain coach;
    difference_vs_<sweep name>.png) and vs the coach's error rate (one line per sweep value the noise sweep
    ran at, and `difference_lines`' references). A plot is written only when it has a line (a stale one from
    an earlier sweep in `out` is removed)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    swept = axis(results["config"])
    if swept is None:  # no sweep: nothing to draw along, and no trend of one noise level (a stale plot goes)
        (out / "difference_vs_noise.png").unlink(missing_ok=True)
        return []
    rows, made = results["paired"], []
    for name, x_key in ((f"difference_vs_{swept}.png", swept), ("difference_vs_noise.png", "coach_noise")):
        lines, references = difference_lines(rows, x_key, swept)
        (out / name).unlink(missing_ok=True)
        if not lines:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for label, rs in lines.items():
            x = [r[x_key] for r in rs]
            y = [r["auc_diff"] for r in rs]
            err = [[r["auc_diff"] - r["ci95"][0] for r in rs], [r["ci95"][1] - r["auc_diff"] for r in rs]]
            ax.errorbar(x, y, yerr=err, marker="o", capsize=3, label=label)
        for i, (label, r) in enumerate(references.items(), start=len(lines)):  # colours go on after the lines'
            ax.axhline(r["auc_diff"], color=f"C{i}", linestyle="--", label=f"{label} (no noise sweep)")
            ax.axhspan(*r["ci95"], color=f"C{i}", alpha=0.12)
        ax.axhline(0, color="grey", linewidth=1)
        ax.set_xlabel(results["config"]["sweep"]["key"] if x_key == swept else "coach error rate ε")
        ax.set_ylabel(f"{results['eval_set']} accuracy after the start, arm − {results['baseline']}")
        ax.set_title(f"paired over {len(results['seeds'])} seeds, 95% t-interval")
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / name, dpi=100)
        plt.close(fig)
        made.append(out / name)
    return made
