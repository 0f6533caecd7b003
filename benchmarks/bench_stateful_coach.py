"""The stateful coach against an injected bias, on real scripted DSBench episodes.

    python benchmarks/bench_stateful_coach.py --out runs/stateful [--tasks 10] [--epochs 8] [--bias 2]

The episodes of `mappa blame` / `mappa coach-eval` (the scripted DSBench team, every fault, the first
`--tasks` built-in tasks) are recorded once. Three coaches then score the same stream, the recorded
actions shuffled and repeated `--epochs` times as a training run would meet them:

- unbiased: the rule coach;
- biased: the rule coach + `--bias` on regression tasks (clipped to 10): the paper's DSBench coach;
- stateful: `StatefulCoach(biased)` with recentering (the defaults of `BalanceConfig`).

Reported, on the last epoch (after the corrections settled): the residual injected bias (regression
minus classification of mean(coach - unbiased)), the coach's own gap at equal check outcome, and the
step- and agent-level blame precision of each coach (`mappa_envs.coach_eval.metrics`). Writes results.json,
stateful.md, corrections.png (offsets and raw gaps over time) and bias.png (residual bias per epoch).
"""
from __future__ import annotations

import argparse
import json
import random
from pathlib import Path

from mappa_envs.coach.rule import RuleCoach
from mappa_envs.coach.stateful import BalanceConfig, StatefulCoach, plot_corrections, task_type
from mappa_envs.coach.types import CoachScore
from mappa_envs.coach_eval.blame import faults_of
from mappa_envs.coach_eval.card import card, mark_faults, play


class BiasedRule:
    """The rule coach plus `bias` points for regression tasks."""

    def __init__(self, bias: float):
        self.rule, self.bias = RuleCoach(), bias

    def score(self, request) -> CoachScore:
        s = self.rule.score(request)
        extra = self.bias if task_type(request) == "regression" else 0.0
        return CoachScore(score=min(10.0, max(0.0, s.score + extra)), rationale=s.rationale)

    async def ascore(self, request) -> CoachScore:
        return self.score(request)


def residual(served: list[float], truth: list[float], kinds: list[str]) -> float | None:
    """Regression minus classification of the mean (served - unbiased)."""
    by: dict[str, list[float]] = {}
    for s, t, k in zip(served, truth, kinds):
        by.setdefault(k, []).append(s - t)
    if "regression" not in by or "classification" not in by:
        return None
    mean = {k: sum(v) / len(v) for k, v in by.items()}
    return mean["regression"] - mean["classification"]


def main() -> None:
    from mappa_envs.dsbench import builtin_tasks

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", type=Path, default=Path("runs/stateful"))
    p.add_argument("--tasks", type=int, default=10, help="the first N built-in DSBench tasks")
    p.add_argument("--epochs", type=int, default=8)
    p.add_argument("--bias", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    kwargs = {"tasks": builtin_tasks()[: args.tasks]}
    episodes = [ep for fault in faults_of("DSBench-v0") for ep in play("DSBench-v0", kwargs, fault)]
    mark_faults(episodes)
    actions = [(e, k) for e in range(len(episodes)) for k in range(len(episodes[e].requests))]
    print(f"{len(episodes)} episodes, {len(actions)} actions; "
          f"task types {sorted({ep.task_type for ep in episodes})}", flush=True)

    unbiased, biased = RuleCoach(), BiasedRule(args.bias)
    stateful = StatefulCoach(BiasedRule(args.bias), BalanceConfig())
    truth = {a: unbiased.score(episodes[a[0]].requests[a[1]]).score for a in actions}
    per_epoch, last = _epochs(stateful, episodes, actions, truth, args.epochs, args.seed)
    raw_first = residual([biased.score(episodes[e].requests[k]).score for e, k in actions],
                         [truth[a] for a in actions], [episodes[e].task_type for e, _ in actions])

    def scored(coach_scores) -> list[list[CoachScore]]:
        return [[coach_scores[(e, k)] for k in range(len(ep.requests))] for e, ep in enumerate(episodes)]

    rows = {
        "unbiased": card("rule", episodes, scored({a: unbiased.score(episodes[a[0]].requests[a[1]]) for a in actions})),
        "biased": card(f"rule +{args.bias:g} regression", episodes,
                       scored({a: biased.score(episodes[a[0]].requests[a[1]]) for a in actions})),
        "stateful": card("stateful(biased), last epoch", episodes, scored(last)),
    }
    gaps = stateful.gaps("served")
    result = {
        "episodes": len(episodes), "actions": len(actions), "epochs": args.epochs, "bias": args.bias,
        "injected_bias_before": raw_first, "residual_by_epoch": per_epoch, "residual_last_epoch": per_epoch[-1],
        "raw_gaps": stateful.gaps("raw"), "served_gaps_equal_outcome": gaps, "corrections": stateful.corrections,
        "blame": {k: {"step": r["step_blame"]["overall"]["precision"],
                      "agent": r["agent_blame"]["overall"]["precision"]} for k, r in rows.items()},
    }
    (args.out / "results.json").write_text(json.dumps(result, indent=2))
    plot_corrections(stateful, args.out / "corrections.png", f"stateful coach, +{args.bias:g} on regression")
    _plot_bias(per_epoch, raw_first, args.out / "bias.png")
    lines = _table(result)
    (args.out / "stateful.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    print(f"corrections: {len(stateful.corrections)}, first at score {stateful.corrections[0]['at']}"
          if stateful.corrections else "no corrections")


def _epochs(stateful: StatefulCoach, episodes: list, actions: list[tuple[int, int]], truth: dict, epochs: int,
            seed: int) -> tuple[list, dict]:
    """Serve every action once per epoch in a fresh random order: the residual bias after each epoch,
    and the last epoch's served scores."""
    rng = random.Random(seed)
    per_epoch, last = [], {}
    for _ in range(epochs):
        order = actions[:]
        rng.shuffle(order)
        served = {a: stateful.score(episodes[a[0]].requests[a[1]]) for a in order}
        keys = list(served)
        per_epoch.append(residual([served[a].score for a in keys], [truth[a] for a in keys],
                                  [episodes[a[0]].task_type for a in keys]))
        last = served
    return per_epoch, last


def _table(result: dict) -> list[str]:
    blame = result["blame"]
    lines = ["| coach | residual regression bias | step blame | agent blame |", "|---|---|---|---|"]
    lines.append(f"| unbiased rule | 0.00 | {_pct(blame['unbiased']['step'])} | {_pct(blame['unbiased']['agent'])} |")
    lines.append(f"| biased (+{result['bias']:g}) | {result['injected_bias_before']:+.2f} "
                 f"| {_pct(blame['biased']['step'])} | {_pct(blame['biased']['agent'])} |")
    lines.append(f"| stateful(biased), epoch {result['epochs']} | {result['residual_last_epoch']:+.2f} "
                 f"| {_pct(blame['stateful']['step'])} | {_pct(blame['stateful']['agent'])} |")
    return lines


def _pct(x) -> str:
    return "–" if x is None else f"{100 * x:.0f}%"


def _plot_bias(per_epoch, before, path) -> None:
    from mappa_train.evaluation.plots import _pyplot

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5, 3.2))
    ax.plot(range(1, len(per_epoch) + 1), per_epoch, "o-", label="stateful(biased)")
    ax.axhline(before, color="C3", linestyle="--", label="biased, uncorrected")
    ax.axhspan(-0.2, 0.2, color="grey", alpha=0.2, label="±0.2")
    ax.set(xlabel="epoch over the recorded actions", ylabel="regression bias (points)",
           title="residual injected bias")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    main()
