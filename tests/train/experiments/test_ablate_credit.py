"""Issue 25's credit-assignment ablation: the sweep's conditions, the paired statistics against a
brute-force computation, the pre-flight, the warm start's teacher, and every arm of a tiny
depth × coach-noise sweep end to end."""
from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest

from mappa_train.config import ConfigError, load_config
from mappa_train.experiments.ablate_preset import (
    AblateConfig,
    Arm,
    Condition,
    Sweep,
    arms_at,
    conditions,
    load_ablation,
    run_dir,
)
from mappa_train.experiments.ablate_report import plot_differences, sign_test, summarise

ROOT = Path(__file__).parents[3]
ARMS = {"process": Arm(reward="process", whiten="per_role"), "outcome": Arm(reward="outcome", whiten="per_role"),
        "process+outcome": Arm(reward="process+outcome", whiten="per_role")}
KEY = "env.kwargs.depth"
DEPTH_SWEEP = {"sweep": {"key": KEY, "values": [2, 8], "name": ""}}  # a preset's sweep, as results.json echoes it


def depth(value, noise: float = 0.0) -> Condition:
    """A condition of a sweep over Chain-v0's depth."""
    return Condition(KEY, "depth", value, noise)


def test_conditions_sweep_the_values_then_noise_and_outcome_runs_once_per_value(tmp_path):
    cfg = AblateConfig(sweep=Sweep(KEY, [2, 4, 8]), coach_noise=[0.0, 0.2], noise_at=[4])
    assert conditions(cfg) == [depth(2), depth(4), depth(4, 0.2), depth(8)]
    assert [c.name for c in conditions(cfg)] == ["depth2", "depth4", "depth4_noise0.2", "depth8"]
    assert [c.overrides() for c in conditions(cfg)][:2] == [["env.kwargs.depth=2"], ["env.kwargs.depth=4"]]
    assert conditions(AblateConfig()) == [Condition()]  # a plain ablation: one condition, the old layout
    assert run_dir(tmp_path, Condition(), "process", ARMS["process"], 1) == tmp_path / "runs" / "process" / "seed1"
    noisy = depth(4, 0.2)
    assert run_dir(tmp_path, noisy, "process", ARMS["process"], 0).parent.parent.name == "depth4_noise0.2"
    assert run_dir(tmp_path, noisy, "outcome", ARMS["outcome"], 0) == tmp_path / "runs" / "depth4" / "outcome" / "seed0"
    assert arms_at(cfg, ARMS, noisy) == ARMS  # noise_arms empty: every arm
    some = AblateConfig(sweep=Sweep(KEY, [4]), coach_noise=[0.0, 0.2], noise_arms=["process"])
    assert list(arms_at(some, ARMS, noisy)) == ["process", "outcome"]  # outcome: its noise-free runs
    assert arms_at(some, ARMS, depth(4)) == ARMS


def test_a_sweep_is_any_config_key_named_as_it_says():
    lr = AblateConfig(sweep=Sweep("learner.lr", [0.0003, 0.001], name="lr"))
    assert [(c.name, c.overrides()) for c in conditions(lr)] == [("lr0.0003", ["learner.lr=0.0003"]),
                                                                ("lr0.001", ["learner.lr=0.001"])]
    view = AblateConfig(sweep=Sweep("env.kwargs.view", ["own", "all"]))
    assert [(c.name, c.overrides()) for c in conditions(view)] == [("viewown", ['env.kwargs.view="own"']),
                                                                  ("viewall", ['env.kwargs.view="all"'])]
    assert load_config(ROOT / "configs" / "chain.yaml", conditions(view)[0].overrides()).env.kwargs["view"] == "own"


def test_bad_sweeps_say_what_is_wrong(tmp_path):
    bad = tmp_path / "bad.yaml"
    for text, message in (("sweep: {values: [2]}", "needs both a key and its values"),
                          ("sweep: {key: env.kwargs.depth, values: [2, 2]}", "must be distinct"),
                          ("sweep: {key: env.kwargs.view, values: [a/b]}", "make folder names"),
                          ("depths: [2, 4]\nnoise_depths: [4]", r"replace depths \(now sweep: \{key: env.kwargs.depth, "
                                                               r"values: \[...\]\}\), noise_depths \(now noise_at\)"),
                          ("coach_noise: [0.2]", "including 0"),
                          ("sweep: {key: env.kwargs.depth, values: [2]}\nnoise_at: [4]", "noise_at"),
                          ("preflight_episodes: -1", "preflight_episodes"), ("baseline: teamwork", "baseline"),
                          ("baseline: process\nnoise_arms: [both]", "noise_arms")):
        bad.write_text(f"arms: {{process: {{reward: process}}}}\n{text}\n")
        with pytest.raises(ConfigError, match=message):
            load_ablation(bad)


def _fake_run(run_dir: Path, accuracies: list[float], per_step: int = 4, actions: int = 10, tokens: int = 50):
    """A finished run as `mappa train` leaves it: config.json and metrics.jsonl (eval every step)."""
    run_dir.mkdir(parents=True)
    (run_dir / "config.json").write_text(json.dumps({"rollout": {"prompts_per_step": per_step,
                                                                 "samples_per_prompt": 1}}))
    rows = [{"kind": "eval", "step": s, "heldout/accuracy": a} for s, a in enumerate(accuracies)]
    rows += [{"kind": "train", "step": s, "time_rollout_s": 1.0, "time_update_s": 1.0, "env_actions": float(actions),
              "action_tokens": float(tokens)} for s in range(1, len(accuracies))]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def _brute_sign_p(diffs: list[float]) -> float:
    """Every sign pattern of the non-zero differences, equally likely: the share at least as unbalanced."""
    signs = [d > 0 for d in diffs if d != 0]
    n, observed = len(signs), abs(2 * sum(signs) - len(signs))
    if not n:
        return 1.0
    extreme = sum(abs(2 * sum(p) - n) >= observed for p in itertools.product((0, 1), repeat=n))
    return extreme / 2**n


def test_paired_summary_matches_a_brute_force_computation(tmp_path):
    """Random curves for 7 seeds in three conditions; the paired rows recomputed by hand: the per-seed
    difference of mean accuracy after the start, its t-interval, the sign test, the final difference."""
    from scipy import stats

    rng = random.Random(7)
    cfg = AblateConfig(seeds=list(range(7)), sweep=Sweep(KEY, [2, 4]), coach_noise=[0.0, 0.3], noise_at=[4],
                       target_gain=0.25)
    curves = {}
    for cond in conditions(cfg):
        for name, arm in ARMS.items():
            for seed in cfg.seeds:
                path = run_dir(tmp_path, cond, name, arm, seed)
                if path in curves:
                    continue  # the outcome arm's run serves every error rate
                curves[path] = [0.25] + [rng.choice([0.0, 0.25, 0.5, 0.75]) for _ in range(3)]
                _fake_run(path, curves[path])
    results = summarise(cfg, ARMS, tmp_path)
    assert len(results["records"]) == len(conditions(cfg)) * len(ARMS) * len(cfg.seeds)
    assert len(results["paired"]) == len(conditions(cfg)) * 2
    t975 = stats.t.ppf(0.975, 6)
    for row in results["paired"]:
        cond = depth(row["depth"], row["coach_noise"])
        diffs, finals = [], []
        for seed in cfg.seeds:
            mine = curves[run_dir(tmp_path, cond, row["arm"], ARMS[row["arm"]], seed)]
            base = curves[run_dir(tmp_path, cond, "outcome", ARMS["outcome"], seed)]
            diffs.append(sum(mine[1:]) / 3 - sum(base[1:]) / 3)
            finals.append(mine[-1] - base[-1])
        mean = sum(diffs) / 7
        sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 6)
        assert row["auc_diff_per_seed"] == pytest.approx(diffs)
        assert row["auc_diff"] == pytest.approx(mean)
        assert row["ci95"] == pytest.approx([mean - t975 * sd / math.sqrt(7), mean + t975 * sd / math.sqrt(7)])
        assert row["sign_test"]["p"] == pytest.approx(_brute_sign_p(diffs))
        assert row["sign_test"]["positive"] + row["sign_test"]["negative"] + row["sign_test"]["ties"] == 7
        assert row["final_diff"] == pytest.approx(sum(finals) / 7)
    record = results["records"][0]
    assert record["target"] == pytest.approx(0.5)  # start 0.25 + target_gain 0.25
    assert record["generated_tokens"] == 150
    assert record["rollouts"] == 12
    outcome = [r for r in results["records"] if r["arm"] == "outcome"]
    assert all(r["coach_calls"] == 0 for r in outcome)
    assert set(results["conditions"]) == {"depth2", "depth4", "depth4_noise0.3"}


@pytest.mark.parametrize("diffs,p", [([1, 1, 1, 1, 1, 1], 2 / 64), ([1, -1, 0, 0], 1.0), ([0.1] * 5 + [-0.2], 14 / 64),
                                     ([], 1.0)])
def test_sign_test_against_its_closed_form(diffs, p):
    assert sign_test(diffs)["p"] == pytest.approx(p)
    assert sign_test(diffs)["p"] == pytest.approx(_brute_sign_p(diffs))


def test_a_float_rounding_difference_is_a_tie():
    equal = 2.7755575615628914e-17  # two equal mean accuracies, averaged in different orders (a real residue)
    assert sign_test([equal, 0.06, -0.08])["ties"] == 1


def test_a_difference_plot_needs_two_points_and_a_stale_one_is_removed(tmp_path):
    row = lambda depth, noise: dict(depth=depth, coach_noise=noise, arm="process", auc_diff=0.1,  # noqa: E731
                                    ci95=[0.0, 0.2])
    results = dict(eval_set="heldout", baseline="outcome", seeds=[0, 1], config=DEPTH_SWEEP)
    (tmp_path / "difference_vs_noise.png").write_bytes(b"an earlier sweep's plot")
    made = plot_differences({**results, "paired": [row(2, 0.0), row(8, 0.0)]}, tmp_path)
    assert made == [tmp_path / "difference_vs_depth.png"]  # one noise level: no line, so no plot
    assert not (tmp_path / "difference_vs_noise.png").exists()
    assert plot_differences({**results, "paired": [row(8, 0.0)]}, tmp_path) == []  # one depth: no trend
    assert not (tmp_path / "difference_vs_depth.png").exists()


def test_an_arm_without_a_noise_sweep_is_a_reference_on_the_noise_plot(tmp_path):
    from mappa_train.experiments.ablate_report import difference_lines

    row = lambda arm, depth, noise, d: dict(depth=depth, coach_noise=noise, arm=arm, auc_diff=d,  # noqa: E731
                                            ci95=[d - 0.1, d + 0.1])
    rows = [row("process", 2, 0.0, 0.08), row("process", 2, 0.4, 0.01), row("process", 2, 0.1, 0.05),
            row("process_judge", 2, 0.0, 0.02), row("process_judge", 8, 0.0, 0.03), row("process", 8, 0.0, 0.06)]
    lines, references = difference_lines(rows, "coach_noise", "depth")
    assert [r["coach_noise"] for r in lines["process, depth 2"]] == [0.0, 0.1, 0.4]  # sorted along the axis
    assert set(lines) == {"process, depth 2"}
    assert references == {"process_judge, depth 2": rows[3]}  # depth 8 had no sweep: nothing to read it against
    lines, references = difference_lines(rows, "depth", "depth")
    assert {k: [r["depth"] for r in v] for k, v in lines.items()} == {"process": [2, 8], "process_judge": [2, 8]}
    assert references == {}
    results = dict(eval_set="heldout", baseline="outcome", seeds=[0, 1], paired=rows, config=DEPTH_SWEEP)
    assert plot_differences(results, tmp_path) == [tmp_path / "difference_vs_depth.png",
                                                   tmp_path / "difference_vs_noise.png"]


def test_preflight_stops_a_start_that_gets_nothing_right(tmp_path):
    from mappa_train.experiments.preflight import check_start

    report = {"episodes": 8, "actions": 32, "checked_actions": 32, "right_share": 0.02, "team_success": 0.0,
              "temperature": 1.0}
    (tmp_path / "preflight.json").write_text(json.dumps(report))
    cfg = load_config(ROOT / "configs" / "chain.yaml", [])
    with pytest.raises(ConfigError, match="pre-flight: the start .* 2.0% of its actions right"):
        check_start(cfg, tmp_path, 8, 0.05, tmp_path / "preflight.json")
    assert check_start(cfg, tmp_path, 8, 0.01, tmp_path / "preflight.json") == report


def test_the_warm_start_teacher_is_the_envs_scripted_team():
    from mappa_train.experiments.warm_start import StartConfig, teacher_kwargs

    chain = load_config(ROOT / "configs" / "chain.yaml", [])
    assert teacher_kwargs(chain, StartConfig(teacher={"skill": 0.7})) == {"skill": 0.7}
    with pytest.raises(ConfigError, match="start.teacher is empty"):
        teacher_kwargs(chain, StartConfig())
    mathchat = load_config(ROOT / "configs" / "mathchat_tiny.yaml", [])
    assert teacher_kwargs(mathchat, StartConfig(code_skill=0.15)) == {"skill": 0.0, "code_skill": 0.15}


def tiny_sweep(tmp_path, **fields):
    """A Chain-v0 sweep at depths 2 and 3 small enough for a test (a 3-step start, one training step)."""
    spec = tmp_path / "tiny.yaml"
    spec.write_text(json.dumps({
        "train_config": str(ROOT / "configs" / "chain.yaml"),
        "overrides": ["steps=1", "eval_every=1", "eval_episodes=2", "checkpoint_every=1", "rollout.num_envs=2",
                      "rollout.prompts_per_step=2", "rollout.samples_per_prompt=1", "generation.max_new_tokens=12",
                      "env.eval_sets={heldout: {split: eval, num_tasks: 2}}", "learner.train_batch_size=8",
                      "learner.micro_batch_size=8", "env.kwargs.num_tasks=16"],
        "sweep": {"key": KEY, "values": [2, 3]}, "preflight_episodes": 2, "preflight_min_right": 0.0,
        "start": {"sft_episodes": 4, "sft_short_steps": 2, "sft_steps": 1, "sft_batch": 4,
                  "teacher": {"skill": 0.7, "code_rate": 1.0}},
        **fields}))
    return spec


@pytest.mark.slow
def test_every_arm_of_a_tiny_sweep_runs_and_the_results_are_complete(tmp_path):
    from mappa_cli.main import main

    spec = tiny_sweep(tmp_path, seeds=[0, 1], target_gain=0.1, coach_noise=[0.0, 0.3], noise_at=[3],
                      arms={name: {"reward": arm.reward, "whiten": arm.whiten} for name, arm in ARMS.items()})
    out = tmp_path / "credit"
    assert main(["ablate", "--config", str(spec), "--out", str(out)]) == 0
    results = json.loads((out / "results.json").read_text())
    records = results["records"]
    assert len(records) == 3 * 3 * 2  # (depth 2, depth 3, depth 3 noisy) x arms x seeds
    assert {(r["depth"], r["coach_noise"]) for r in records} == {(2, 0.0), (3, 0.0), (3, 0.3)}
    for r in records:
        assert [x for x, _ in r["curve"]] == [0, 2]
        assert r["rollouts"] == 2
        assert r["wall_s"] > 0
        assert r["auc"] is not None
        assert (r["coach_calls"] == 0) == (r["arm"] == "outcome")
    assert {(r["depth"], r["coach_noise"], r["arm"]) for r in results["paired"]} == {
        (d, e, a) for d, e in ((2, 0.0), (3, 0.0), (3, 0.3)) for a in ("process", "process+outcome")}
    assert all(len(r["seeds"]) == 2 and len(r["ci95"]) == 2 for r in results["paired"])
    assert not (out / "runs" / "depth3_noise0.3" / "outcome").exists()  # no coach: the noise-free runs serve
    noisy = json.loads((out / "runs" / "depth3_noise0.3" / "process" / "seed1" / "config.json").read_text())
    assert noisy["env"]["coach"] == "rule:noise=0.3,seed=1"
    assert noisy["env"]["kwargs"]["depth"] == 3
    assert noisy["model"]["path"] == str(out / "start" / "model")  # one start for every depth
    assert json.loads((out / "start" / "model" / "warm_start.json").read_text())["steps"] == 3
    for depth in (2, 3):
        assert json.loads((out / "start" / f"preflight_depth{depth}.json").read_text())["episodes"] == 2
    table = (out / "results.md").read_text()
    assert "## depth3_noise0.3: depth 3, rule coach wrong at rate 0.3" in table
    assert "| 3 | 0.3 | process | 2 |" in table
    for png in ("accuracy_vs_rollouts.png", "difference_vs_depth.png", "difference_vs_noise.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"


@pytest.mark.slow
def test_start_per_value_builds_and_uses_one_start_for_each_depth(tmp_path):
    """With start_per_value each depth's arms start from a tiny model that imitated that depth's team only."""
    from mappa_cli.main import main

    spec = tiny_sweep(tmp_path, seeds=[0], start_per_value=True,
                      arms={"process": {"reward": "process"}, "outcome": {"reward": "outcome"}})
    out = tmp_path / "credit"
    assert main(["ablate", "--config", str(spec), "--out", str(out)]) == 0
    assert not (out / "start" / "model").exists()  # no shared start
    for depth in (2, 3):
        start = out / "start" / f"depth{depth}" / "model"
        assert json.loads((start / "warm_start.json").read_text())["steps"] == 3
        for arm in ("process", "outcome"):
            config = json.loads((out / "runs" / f"depth{depth}" / arm / "seed0" / "config.json").read_text())
            assert config["model"]["path"] == str(start)
        preflight = json.loads((out / "start" / f"preflight_depth{depth}.json").read_text())
        assert preflight["episodes"] == 2
        assert set(preflight["right_share_by_role"]) == {f"step_{k}" for k in range(1, depth + 1)}
    # --sweep-values keeps a subset: its start is the one built for that depth, and the other depth does not train
    assert main(["ablate", "--config", str(spec), "--out", str(out), "--sweep-values", "3", "--seeds", "1"]) == 0
    assert not (out / "start" / "model").exists()
    assert (out / "runs" / "depth3" / "process" / "seed1" / "final").is_dir()
    assert not (out / "runs" / "depth2" / "process" / "seed1").exists()


def test_sweep_values_outside_the_preset_are_one_line_errors(tmp_path, capsys):
    from mappa_cli.main import main

    spec = tiny_sweep(tmp_path, seeds=[0], arms={"process": {"reward": "process"}, "outcome": {"reward": "outcome"}})
    assert main(["ablate", "--config", str(spec), "--out", str(tmp_path / "x"), "--sweep-values", "2,5"]) == 2
    assert capsys.readouterr().err.strip() == \
        "mappa ablate: --sweep-values [2, 5] must be among the preset's sweep values [2, 3]"
    assert main(["ablate", "--config", str(spec), "--out", str(tmp_path / "x"), "--sweep-values", "2,[3"]) == 2
    assert "--sweep-values must be comma-separated values" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()  # nothing written
