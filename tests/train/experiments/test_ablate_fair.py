"""Issue 39's ablation machinery: rollouts to start + g and their ratio interval against brute force, the
strongest outcome variant as the baseline, the budget pre-flight, and the arms' reward overrides."""
from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import numpy as np
import pytest

from mappa_train.config import ConfigError, load_config
from mappa_train.evaluation.stats import ratio_bootstrap
from mappa_train.experiments.ablate import arm_overrides
from mappa_train.experiments.ablate_preset import AblateConfig, Arm, Condition, Sweep, load_ablation, run_dir
from mappa_train.experiments.ablate_report import format_table, summarise

ARMS = {"process": Arm(whiten="per_role"), "outcome": Arm(reward="outcome", whiten="per_role"),
        "outcome_last": Arm(reward="outcome", whiten="per_role", outcome_credit="last_action")}
PER_STEP, STEP_S, ACTIONS, TOKENS = 4, 3.0, 6, 40


def _fake_run(path: Path, accuracies: list[float]) -> None:
    """A finished run as `mappa train` leaves it: config.json and metrics.jsonl, an evaluation every step."""
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"rollout": {"prompts_per_step": PER_STEP, "samples_per_prompt": 1}}))
    rows = [{"kind": "eval", "step": s, "indist/accuracy": a} for s, a in enumerate(accuracies)]
    rows += [{"kind": "train", "step": s, "time_rollout_s": STEP_S, "env_actions": float(ACTIONS),
              "action_tokens": float(TOKENS)} for s in range(1, len(accuracies))]
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _brute_first(curve: list[float], gain: float) -> int | None:
    for step, acc in enumerate(curve):
        if acc >= curve[0] + gain - 1e-12:
            return step
    return None


def _brute_ratio_interval(a: list[float], b: list[float]) -> tuple[float, float, float]:
    ratios = []
    for pick in itertools.product(range(len(a)), repeat=len(a)):  # every resample of the seed pairs
        ratios.append(sum(a[i] for i in pick) / sum(b[i] for i in pick))
    low, high = np.quantile(ratios, [0.025, 0.975])
    return sum(a) / sum(b), float(low), float(high)


def test_rollouts_to_each_gain_and_their_ratio_interval_match_a_brute_force_computation(tmp_path):
    rng = random.Random(39)
    cfg = AblateConfig(seeds=list(range(5)), eval_set="indist", target_gains=[0.1, 0.2], baseline=["outcome"],
                       target_gain=0.1)
    curves = {}
    for name, arm in ARMS.items():
        for seed in cfg.seeds:
            start = rng.choice([0.0, 0.1, 0.2])
            curves[name, seed] = [start] + [round(start + rng.choice([-0.1, 0.0, 0.1, 0.2, 0.3]), 2) for _ in range(5)]
            _fake_run(run_dir(tmp_path, Condition(), name, arm, seed), curves[name, seed])
    results = summarise(cfg, ARMS, tmp_path)
    for gain in ("0.1", "0.2"):
        for name in ARMS:
            hits = [_brute_first(curves[name, s], float(gain)) for s in cfg.seeds]
            for seed, hit in zip(cfg.seeds, hits):
                got = results["arms"][name]["seeds"][str(seed)]["to_gain"][gain]
                calls = hit * ACTIONS * (name == "process") if hit is not None else None  # outcome asks no coach
                want = None if hit is None else {"rollouts": hit * PER_STEP, "coach_calls": calls,
                                                 "generated_tokens": hit * TOKENS, "wall_s": hit * STEP_S}
                assert got == (None if want is None else pytest.approx(want))
            block = results["arms"][name]["to_gain"][gain]
            reached = [h for h in hits if h is not None]
            assert block["reached_by"] == len(reached)
            if reached:
                assert block["rollouts"] == pytest.approx(sum(reached) * PER_STEP / len(reached))
        row = next(r for r in results["paired"] if r["arm"] == "process")
        assert row["baseline"] == "outcome"
        pairs = [(_brute_first(curves["process", s], float(gain)), _brute_first(curves["outcome", s], float(gain)))
                 for s in cfg.seeds]
        both = [(a * PER_STEP, b * PER_STEP) for a, b in pairs if a is not None and b is not None]
        got = row["rollouts_ratio"][gain]
        assert got["both"] == len(both)
        assert got["arm_only"] == sum(a is not None and b is None for a, b in pairs)
        assert got["baseline_only"] == sum(b is not None and a is None for a, b in pairs)
        assert got["neither"] == sum(a is None and b is None for a, b in pairs)
        if both and all(b for _, b in both):
            ratio, low, high = _brute_ratio_interval([a for a, _ in both], [b for _, b in both])
            assert (got["ratio"], got["low"], got["high"]) == pytest.approx((ratio, low, high))
            assert got["exhaustive"]
    table = format_table(results)
    assert "outcome (on each role's last action only: ablation)" in table
    assert "| — | outcome (baseline) | +0.1 |" in table
    ratio = row["rollouts_ratio"]["0.1"]
    shown = f"{ratio['ratio']:.2f} [{ratio['low']:.2f}, {ratio['high']:.2f}]"
    assert shown in table  # the cost table reads the paired ratio
    cfg.sweep = Sweep("env.kwargs.depth", [2])  # one depth of a sweep keeps the flat layout, its condition depth2
    for name, arm in ARMS.items():
        for seed in cfg.seeds:
            _fake_run(run_dir(tmp_path, Condition("env.kwargs.depth", "depth", 2), name, arm, seed), curves[name, seed])
    table = format_table(summarise(cfg, ARMS, tmp_path))
    assert "| depth2 | outcome (baseline) | +0.1 |" in table
    assert shown in table  # before, a one-depth run looked its ratio up under "" and showed none


def test_the_ratio_interval_of_many_seeds_is_a_random_bootstrap_close_to_the_exact_one():
    rng = random.Random(3)
    a = [rng.choice([8, 16, 24, 32]) for _ in range(6)]
    b = [rng.choice([16, 24, 32, 48]) for _ in range(6)]
    exact = _brute_ratio_interval(a, b)  # 6^6 = 46656 resamples
    sampled = ratio_bootstrap(a, b, n_boot=20_000)
    assert not sampled.exhaustive
    assert sampled.ratio == pytest.approx(exact[0])
    assert (sampled.low, sampled.high) == pytest.approx(exact[1:], abs=0.03)
    with pytest.raises(ValueError, match="denominators must be > 0"):
        ratio_bootstrap([1.0], [0.0])


def test_the_strongest_outcome_variant_is_the_baseline_in_each_condition(tmp_path):
    cfg = AblateConfig(seeds=[0, 1], eval_set="indist", sweep=Sweep("env.kwargs.depth", [1, 2]),
                       baseline=["outcome", "outcome_last"])
    auc = {("outcome", 1): 0.5, ("outcome_last", 1): 0.3, ("outcome", 2): 0.2, ("outcome_last", 2): 0.4,
           ("process", 1): 0.6, ("process", 2): 0.6}
    for (name, depth), level in auc.items():
        for seed in cfg.seeds:
            _fake_run(run_dir(tmp_path, Condition("env.kwargs.depth", "depth", depth), name, ARMS[name], seed),
                      [0.0, level, level])
    results = summarise(cfg, ARMS, tmp_path)
    assert results["baselines_chosen"] == {"depth1": "outcome", "depth2": "outcome_last"}
    rows = {(r["depth"], r["arm"]): r for r in results["paired"]}
    assert rows[1, "process"]["baseline"] == "outcome"
    assert rows[1, "process"]["auc_diff"] == pytest.approx(0.1)
    assert rows[2, "process"]["auc_diff"] == pytest.approx(0.2)
    assert (2, "outcome_last") not in rows  # the baseline is not paired with itself
    assert rows[2, "outcome"]["auc_diff"] == pytest.approx(-0.2)


def test_the_budget_preflight_trains_until_the_process_arm_rises_and_fixes_the_grid(tmp_path):
    from mappa_train.experiments.preflight import fix_budget

    curve = [0.1, 0.1, 0.15, 0.2, 0.25, 0.3, 0.3, 0.3, 0.3]  # one evaluation per step: +0.10 at step 3
    trained = []

    def fake_train(cfg):  # what `mappa train` would log into out_dir, resumed up to cfg.steps
        trained.append(cfg.steps)
        out = Path(cfg.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        rows = [{"kind": "eval", "step": s, "indist/accuracy": curve[s]} for s in range(cfg.steps + 1)]
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def make(steps):
        return load_config("configs/chain.yaml", [f"steps={steps}", f"out_dir={tmp_path / 'run'}"])

    report = fix_budget(make, fake_train, 2, "indist", 0.1, 8, 2.0, tmp_path / "budget.json")
    assert trained == [2, 4]  # two evaluations at a time, stopped once it rose
    assert (report["start"], report["reached"], report["steps_to_rise"]) == (0.1, 0.2, 3)
    assert report["budget_steps"] == 6  # 2 × 3, rounded up to whole evaluations
    again = fix_budget(make, fake_train, 2, "indist", 0.1, 8, 2.0, tmp_path / "budget.json")
    assert again == report  # reused, not retrained
    assert trained == [2, 4]
    with pytest.raises(ConfigError, match="fixed the budget with eval_set indist, gain 0.1"):  # not moved silently
        fix_budget(make, fake_train, 2, "indist", 0.5, 8, 2.0, tmp_path / "budget.json")
    with pytest.raises(ConfigError, match=r"did not rise by 0.5 .* within 8 steps \(0.100 -> best 0.300"):
        fix_budget(make, fake_train, 2, "indist", 0.5, 8, 2.0, tmp_path / "never.json")
    assert not (tmp_path / "never.json").exists()
    # an interrupted pre-flight goes on from its last checkpoint (step 2 here), not from step 0
    (tmp_path / "run" / "checkpoints" / "step_000002").mkdir(parents=True)
    (tmp_path / "run" / "checkpoints" / "step_000002" / "state.json").write_text('{"step": 2}')
    trained.clear()
    resumed = fix_budget(make, fake_train, 2, "indist", 0.1, 8, 3.0, tmp_path / "again.json")
    assert resumed["budget_steps"] == 10  # 3 × 3 -> 10
    assert trained == [4]


def test_the_budget_pre_flight_is_not_fixed_by_one_lucky_evaluation(tmp_path):
    from mappa_train.experiments.preflight import fix_budget

    curve = [0.1, 0.1, 0.25, 0.1, 0.1, 0.2, 0.2, 0.3, 0.3]  # a blip at step 2; risen from step 5 on
    trained = []

    def fake_train(cfg):
        trained.append(cfg.steps)
        out = Path(cfg.out_dir)
        out.mkdir(parents=True, exist_ok=True)
        rows = [{"kind": "eval", "step": s, "indist/accuracy": curve[s]} for s in range(cfg.steps + 1)]
        (out / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))

    def make(steps):
        return load_config("configs/chain.yaml", [f"steps={steps}", f"out_dir={tmp_path / 'run'}"])

    report = fix_budget(make, fake_train, 2, "indist", 0.1, 8, 2.0, tmp_path / "budget.json")
    assert trained == [2, 4, 6]  # the blip alone did not stop it
    assert (report["steps_to_rise"], report["reached"], report["budget_steps"]) == (5, 0.2, 10)
    curve[:] = [0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.1, 0.25]  # risen only at the last evaluation: not confirmed
    with pytest.raises(ConfigError, match="at two evaluations in a row"):
        fix_budget(make, fake_train, 2, "indist", 0.1, 8, 2.0, tmp_path / "flat.json")


def test_arm_overrides_decide_the_outcome_credit_and_fill_in_the_seed():
    base = {"depth": 2}
    arm = Arm(reward="outcome", outcome_credit="last_action", overrides=["env.coach=rule:noise=0.5,seed={seed}"])
    cfg = load_config("configs/chain.yaml", arm_overrides(arm, base, seed=4))
    assert (cfg.env.kwargs["reward_mode"], cfg.algo.outcome_credit) == ("outcome", "last_action")
    assert cfg.env.coach == "rule:noise=0.5,seed=4"
    assert load_config(None, arm_overrides(Arm(reward="outcome"), {})).algo.outcome_credit == "every_action"


def test_the_fair_outcome_preset_loads_and_a_bad_baseline_or_budget_is_one_line(tmp_path):
    cfg, arms = load_ablation("configs/ablate/fair_outcome_cpu.yaml")
    assert cfg.baseline == ["outcome"]
    assert ("outcome_last" in arms, cfg.budget_gain) == (True, 0.1)
    for text, message in (("baseline: [outcome, teamwork]", "baseline"), ("target_gains: [0]", "target_gains"),
                          ("budget_gain: 0.1\nbudget_arm: judge", "budget pre-flight")):
        bad = tmp_path / "bad.yaml"
        bad.write_text(f"arms: {{process: {{reward: process}}, outcome: {{reward: outcome}}}}\n{text}\n")
        with pytest.raises(ConfigError, match=message) as err:
            load_ablation(bad)
        assert "\n" not in str(err.value)
