"""`mappa ablate`: arms become the right training configs, curriculum filtering stops doomed episodes,
the summary statistics are right on runs written by hand, and every arm of a tiny ablation runs."""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from mappa_cli.ablate import configure, run
from mappa_train.config import ConfigError, load_config
from mappa_train.experiments.ablate import arm_overrides
from mappa_train.experiments.ablate_preset import Arm, load_ablation
from mappa_train.experiments.ablate_report import format_table, summarise, t_interval

PRESETS = sorted((Path(__file__).parents[3] / "configs" / "ablate").glob("*.yaml"))
TINY_START = {"sft_episodes": 8, "sft_short_steps": 2, "sft_steps": 1, "sft_batch": 4}
TINY_TRAIN = ["steps=1", "eval_every=1", "eval_episodes=2", "eval_samples=1", "checkpoint_every=1",
              "rollout.num_envs=2", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=1",
              "generation.max_new_tokens=12", "env.eval_sets={heldout: {split: eval, num_tasks: 2}}",
              "learner.train_batch_size=8", "learner.micro_batch_size=8", "log.progress=false"]


def test_t_interval_matches_the_closed_form():
    # [1, 2, 3]: mean 2, sample sd 1; t(0.975, 2 dof) = 4.302652729911275 (tables)
    mean, low, high = t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)
    assert (mean, low, high) == pytest.approx((2.0, 2.0 - half, 2.0 + half))
    # 90%: t(0.95, 4 dof) = 2.131846786326649; values 0, 0, 1, 1, 1: mean 0.6, sd sqrt(0.3)
    mean, low, high = t_interval([0, 0, 1, 1, 1], level=0.90)
    assert high - mean == pytest.approx(2.131846786326649 * math.sqrt(0.3) / math.sqrt(5))
    assert t_interval([0.25]) == (0.25, 0.25, 0.25)


def test_arms_map_to_the_reward_machinery():
    base = {"task_source": "synthetic:product_sum", "num_tasks": 64}
    cfgs = {name: load_config(None, arm_overrides(arm, base)) for name, arm in {
        "process": Arm(), "outcome": Arm(reward="outcome"), "both": Arm(reward="process+outcome"),
        "agent": Arm(whiten="per_agent"), "curriculum": Arm(stop_below={"code_executor": 5}),
        "extra": Arm(overrides=["learner.lr=1e-5"])}.items()}
    assert cfgs["process"].env.kwargs == {**base, "reward_mode": "process"}
    assert cfgs["outcome"].env.kwargs["reward_mode"] == "outcome"
    assert cfgs["both"].env.kwargs["reward_mode"] == "process+outcome"
    assert cfgs["agent"].algo.whiten == "per_agent"
    assert cfgs["curriculum"].rollout.stop_below == {"code_executor": 5}
    assert cfgs["extra"].learner.lr == 1e-5
    with pytest.raises(ConfigError, match="reward_mode=outcome"):  # the outcome arm has no coach scores to filter on
        load_config(None, arm_overrides(Arm(reward="outcome", stop_below={"code_executor": 5}), base))


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_presets_load_and_every_arm_is_a_valid_training_config(preset):
    cfg, arms = load_ablation(preset)
    assert len(cfg.seeds) >= 3
    assert {"process", "outcome", "process+outcome"} <= set(arms)
    base = load_config(cfg.train_config, cfg.overrides)
    assert cfg.eval_set in base.env.eval_sets
    assert base.eval_every > 0
    for arm in arms.values():
        load_config(cfg.train_config, [*cfg.overrides, *arm_overrides(arm, base.env.kwargs)])


def test_bad_presets_say_what_is_wrong(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("arms: {process: {reward: teamwork}}\n")
    with pytest.raises(ConfigError, match="reward must be one of"):
        load_ablation(bad)
    bad.write_text("arms: {process: {reward: process}}\nseedz: [1]\n")
    with pytest.raises(ConfigError, match="unknown config key 'seedz'"):
        load_ablation(bad)
    with pytest.raises(ConfigError, match="does not exist"):
        load_ablation(tmp_path / "missing.yaml")

def test_a_preset_extends_another(tmp_path):
    """`extends:` a preset relative to the file: mappings (arms, start) merge key by key, anything else is
    replaced, and each train_config is read against the file that names it."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "base.yaml").write_text("train_config: ../chain.yaml\nseeds: [0, 1, 2]\noverrides: [steps=8]\n"
                                        "start: {sft_steps: 5, sft_batch: 4}\n"
                                        "arms: {process: {reward: process}, outcome: {reward: outcome}}\n")
    child = tmp_path / "sub" / "child.yaml"
    child.write_text("extends: ../base.yaml\nseeds: [7]\nstart: {sft_batch: 2}\n"
                     "arms: {outcome: {reward: outcome, whiten: per_role}, judge: {reward: process}}\n")
    cfg, arms = load_ablation(child)
    assert cfg.train_config == str((tmp_path.parent / "chain.yaml").resolve())
    assert (cfg.seeds, cfg.overrides) == ([7], ["steps=8"])
    assert (cfg.start.sft_steps, cfg.start.sft_batch) == (5, 2)
    assert list(arms) == ["process", "outcome", "judge"]
    assert arms["outcome"].whiten == "per_role"
    (tmp_path / "sub" / "own.yaml").write_text("extends: child.yaml\ntrain_config: mine.yaml\n")
    assert load_ablation(tmp_path / "sub" / "own.yaml")[0].train_config == str(tmp_path / "sub" / "mine.yaml")
    (tmp_path / "base.yaml").write_text("extends: sub/child.yaml\n")
    with pytest.raises(ConfigError, match="which extends it back"):
        load_ablation(child)
    child.write_text("extends: nowhere.yaml\n")
    with pytest.raises(ConfigError, match=r"nowhere.yaml \(extended by .*child.yaml\) does not exist"):
        load_ablation(child)
    child.write_text("- a list\n")
    with pytest.raises(ConfigError, match="a mapping of fields"):
        load_ablation(child)


def test_ablate_cli_bad_arm_is_one_line(capsys):
    from mappa_cli.main import main

    assert main(["ablate", "--config", str(PRESETS[0]), "--arms", "process,teamwork"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mappa ablate: --arms names ['teamwork'], not in the preset")
    assert len(err.splitlines()) == 1


def _fake_run(run_dir: Path, accuracies: list[float], per_step: int = 4, step_s: float = 2.0, actions: int = 10):
    """A finished run as `mappa train` leaves it: config.json and metrics.jsonl (eval every step)."""
    run_dir.mkdir(parents=True)
    config = {"rollout": {"prompts_per_step": per_step, "samples_per_prompt": 1}}
    (run_dir / "config.json").write_text(json.dumps(config))
    rows = [{"kind": "eval", "step": s, "heldout/accuracy": a} for s, a in enumerate(accuracies)]
    rows += [{"kind": "train", "step": s, "time_rollout_s": step_s / 2, "time_update_s": step_s / 2,
              "env_actions": float(actions)} for s in range(1, len(accuracies))]
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_summary_curves_targets_and_ratio_on_handwritten_runs(tmp_path):
    from mappa_train.experiments.ablate_preset import AblateConfig
    from mappa_train.experiments.ablate_report import plot

    curves = {"process": [[0.1, 0.3, 0.5, 0.6], [0.1, 0.5, 0.6, 0.7], [0.1, 0.2, 0.3, 0.5]],
              "outcome": [[0.1, 0.2, 0.3, 0.5], [0.1, 0.2, 0.4, 0.5], [0.1, 0.1, 0.2, 0.3]]}
    for arm, runs in curves.items():
        for seed, accs in enumerate(runs):
            _fake_run(tmp_path / "runs" / arm / f"seed{seed}", accs)
    cfg = AblateConfig(seeds=[0, 1, 2], target_accuracy=0.5)
    results = summarise(cfg, {"process": Arm(), "outcome": Arm(reward="outcome")}, tmp_path)
    p, o = results["arms"]["process"], results["arms"]["outcome"]
    assert [x for x, *_ in p["curve"]] == [0, 4, 8, 12]  # rollouts = step x 4 episodes
    assert p["curve"][1][1:] == pytest.approx(list(t_interval([0.3, 0.5, 0.2])))
    # first reaching 0.5: process at steps 2, 1, 3 -> rollouts 8, 4, 12; outcome at steps 3, 3, never
    assert [r["reached"]["rollouts"] if r["reached"] else None for r in p["seeds"].values()] == [8, 4, 12]
    assert p["to_target"]["rollouts"] == pytest.approx(8)
    assert p["reached_by"] == 3
    assert o["to_target"]["rollouts"] == pytest.approx(12)
    assert o["reached_by"] == 2
    assert p["to_target"]["wall_s"] == pytest.approx(4.0)
    assert p["to_target"]["coach_calls"] == pytest.approx(20)
    assert o["to_target"]["coach_calls"] == 0  # the outcome arm never asks the coach
    assert results["process_over_outcome"] == pytest.approx(8 / 12)
    table = format_table(results)
    assert "| process | process | global |" in table
    assert "2/3" in table
    assert "0.67" in table
    png = plot(results, tmp_path / "a.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_curriculum_filtering_stops_doomed_episodes_before_more_generation(tmp_path):
    """An executor cell that raises scores 3.5 < 5: the episode ends there, the verifier never runs."""
    from transformers import AutoTokenizer

    import mappa_envs
    from mappa_envs.sandbox import make_sandbox
    from mappa_train.factories import stop_rule
    from mappa_train.generation import Generation, SamplingParams
    from mappa_train.rollout import collect
    from mappa_train.tiny_model import build_tiny_model

    tok = AutoTokenizer.from_pretrained(build_tiny_model(tmp_path / "tiny"))
    texts = {"Problem Solver": "\\boxed{1}", "Code Executor": "```python\nprint(answer)\n```", "Verifier": "\\boxed{1}"}

    class Scripted:
        tokenizer = tok
        calls: list[str] = []

        def generate(self, prompts, params):
            out = []
            for p in prompts:
                role = next(r for r in texts if f"You are the {r}" in tok.decode(p))
                self.calls.append(role)
                ids = tok.encode(texts[role], add_special_tokens=False) + [tok.eos_token_id]
                out.append(Generation(ids, [0.0] * len(ids), texts[role], "stop"))
            return out

    sandbox = make_sandbox("local", preimport=())
    envs = [mappa_envs.make("MathChat-v0", num_tasks=4, sandbox=sandbox, executor_max_actions=1) for _ in range(2)]
    gen = Scripted()
    rule = stop_rule({"code_executor": 5.0}, envs[0].possible_agents)
    with pytest.raises(ConfigError, match="roles \\['coder'\\]"):
        stop_rule({"coder": 5.0}, envs[0].possible_agents)
    try:
        params = SamplingParams(max_new_tokens=8)
        out = collect(envs, gen, params, [{"seed": i, "options": {"task_index": i}} for i in range(3)], stop=rule)
        full = collect(envs, gen, params, [{"seed": i, "options": {"task_index": i}} for i in range(1)])
    finally:
        for env in envs:
            env.close()
        sandbox.close()
    assert [e.stopped for e in out.episodes] == ["code_executor scored 3.5 < 5"] * 3
    assert not any(e.correct for e in out.episodes)
    assert [e.actions for e in out.episodes] == [2, 2, 2]  # solver, executor; no verifier
    assert [t.role for t in out.transitions if t.episode_id == 0] == ["problem_solver", "code_executor"]
    assert all(t.outcome_reward == 0.0 for t in out.transitions)
    assert gen.calls.count("Verifier") == 1  # only the unfiltered episode reached the verifier
    assert full.episodes[0].stopped is None
    assert full.episodes[0].actions == 3


@pytest.mark.slow
def test_every_arm_runs_and_the_results_are_complete(tmp_path):
    preset, _ = load_ablation(PRESETS[0])
    spec = tmp_path / "tiny.yaml"
    spec.write_text(json.dumps({
        "train_config": preset.train_config, "overrides": TINY_TRAIN, "seeds": [0], "target_accuracy": 0.0,
        "start": TINY_START, "arms": {name: {"reward": r, **extra} for name, r, extra in [
            ("process", "process", {}), ("outcome", "outcome", {}), ("process+outcome", "process+outcome", {}),
            ("per_role", "process", {"whiten": "per_role"}), ("per_role_turn", "process", {"whiten": "per_role_turn"}),
            ("per_agent", "process", {"whiten": "per_agent"}),
            ("curriculum", "process", {"stop_below": {"code_executor": 5}})]}}))
    parser = argparse.ArgumentParser()
    configure(parser)
    out = tmp_path / "ablate"
    assert run(parser.parse_args(["--config", str(spec), "--out", str(out)])) == 0
    results = json.loads((out / "results.json").read_text())
    assert set(results["arms"]) == {"process", "outcome", "process+outcome", "per_role", "per_role_turn", "per_agent",
                                    "curriculum"}
    for name, arm in results["arms"].items():
        seed = arm["seeds"]["0"]
        assert [x for x, _ in seed["curve"]] == [0, 2]
        assert seed["reached"]["rollouts"] == 0
        assert len(arm["final"]) == 3
        assert arm["reached_by"] == 1
        assert (seed["coach_calls"] == 0) == (name == "outcome")
        assert seed["wall_s"] > 0
    assert results["process_over_outcome"] is None  # both reached the target at 0 rollouts: no ratio to take
    table = (out / "results.md").read_text()
    assert all(f"| {name} |" in table for name in results["arms"])
    assert (out / "accuracy_vs_rollouts.png").read_bytes()[:4] == b"\x89PNG"
    cfg = json.loads((out / "runs" / "curriculum" / "seed0" / "config.json").read_text())
    assert cfg["rollout"]["stop_below"] == {"code_executor": 5}
    assert cfg["model"]["path"] == str(out / "start" / "model")
