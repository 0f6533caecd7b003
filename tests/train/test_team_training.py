"""Training takes its roles from the env: one LoRA adapter per role on a 16-agent chain; user-written fan-in
and loop specs in every policy mode."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mappa_train.runlog import read_metrics
from tests.train.test_train import SPREAD_SCORES


@pytest.mark.slow
def test_lora_trains_sixteen_adapters_on_chain16(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "mappa_cli", "train", "model.path=tiny", "env.id=Chain-v0",
           "env.kwargs={depth: 16, num_tasks: 8, max_actions: 1}",
           "env.eval_sets={heldout: {task_seed: 1, num_tasks: 2}}",
           "env.sandbox=local", "env.sandbox_kwargs={preimport: []}", "generation.max_new_tokens=4",
           "generation.max_prompt_tokens=1024", "rollout.num_envs=2", "rollout.prompts_per_step=2",
           "rollout.samples_per_prompt=1", "eval_episodes=2", "learner.lr=1e-3", "log.progress=false",
           "algo.mask_length_cut=false",  # a random tiny model rarely stops within 4 tokens
           "algo.mask_excused=false",  # nor states a value, which would excuse every agent after the first
           f"out_dir={out}", "steps=1", "eval_every=0", "checkpoint_every=1", "log.tensorboard=false",
           "log.plot=false", "model.policies=lora", "lora.rank=4"]
    env = {**{k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")},
           "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    roles = [f"step_{k}" for k in range(1, 17)]
    manifest = json.loads((out / "final" / "lora.json").read_text())
    assert manifest["roles"] == {r: r for r in roles}  # one adapter per role, named after it
    (metrics,) = [r for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "train"]
    assert sorted(k.removeprefix("loss/") for k in metrics if k.startswith("loss/")) == sorted(roles)
    assert all(metrics[f"tokens/{r}"] > 0 for r in roles)
    saved = sorted(p.name for p in (out / "checkpoints" / "step_000001").iterdir() if p.is_dir())
    assert [r for r in roles if r in saved] == roles


@pytest.mark.slow
@pytest.mark.parametrize("policies", ["shared", "per_role", "lora"])
@pytest.mark.parametrize("topology", ["fan_in", "loop"])
def test_training_on_a_user_spec_feeds_each_roles_rewards_to_its_learner(tmp_path, monkeypatch, topology, policies):
    """`mappa train` on a spec a user wrote (Team-v0 from a YAML file): every role of the fan-in team and
    of the loop team gets its own rewards, its actions reach the learner its policy mode gives it with
    those rewards in their advantages, and that learner's weights move."""
    import torch

    import mappa_train.train as train_module
    from mappa_train.config import load_config
    from tests.user_specs import write_specs

    spec = dict(zip(("fan_in", "loop"), write_specs(tmp_path)))[topology]
    roles = {"fan_in": ["coder", "reasoner", "judge"], "loop": ["solver", "checker"]}[topology]
    cfg = load_config(None, [
        "model.path=tiny", "env.id=Team-v0", f"env.kwargs={{spec: {spec}, scenario_args: {{num_tasks: 4}}}}",
        "env.eval_sets={heldout: {scenario_args: {split: eval, num_tasks: 2}}}",
        SPREAD_SCORES,
        "env.sandbox=local", "env.sandbox_kwargs={preimport: []}", "generation.max_new_tokens=8",
        "generation.max_prompt_tokens=1024", "rollout.num_envs=2", "rollout.prompts_per_step=2",
        "rollout.samples_per_prompt=1", "learner.lr=1e-2", "log.progress=false", "algo.mask_length_cut=false",
        "algo.mask_excused=false", f"out_dir={tmp_path / 'run'}", "steps=2", "eval_every=0", "checkpoint_every=100",
        "log.tensorboard=false", "log.plot=false", f"model.policies={policies}", "lora.rank=4"])
    steps, real_update = [], train_module.update

    def spying_update(cfg, learners, policy_of, transitions, lr):
        before = {n: {k: v.detach().clone() for k, v in learner.state_dict().items()}
                  for n, learner in learners.items()}
        fed: dict[str, list] = {}
        for name, learner in learners.items():
            def recording(samples, lr, _train=learner.train, _name=name):
                fed.setdefault(_name, []).extend(samples)
                return _train(samples, lr)

            monkeypatch.setattr(learner, "train", recording)
        metrics = real_update(cfg, learners, policy_of, transitions, lr)
        moved = {n: any(not torch.equal(v, before[n][k]) for k, v in learner.state_dict().items())
                 for n, learner in learners.items()}
        steps.append((dict(policy_of), list(transitions), fed, moved))
        return metrics

    monkeypatch.setattr(train_module, "update", spying_update)
    if topology == "loop":  # a random tiny model never writes REVISE: the checker sends the work back every time
        from mappa_envs.core.team import Loop

        monkeypatch.setattr(Loop, "fires", lambda self, text: True)
    train_module.train(cfg)
    assert len(steps) == 2
    spread = set()
    for policy_of, transitions, fed, moved in steps:
        assert sorted(policy_of) == sorted(roles)
        expected = {"shared": {"shared"}, "per_role": set(roles), "lora": set(roles)}[policies]
        assert set(policy_of.values()) == expected  # lora: one adapter per role, named after it
        for role in roles:
            mine = [t for t in transitions if t.role == role and t.coach_ok]
            assert mine, f"{role} has no scored action"
            learner = policy_of[role]
            by_action = {(tuple(s.prompt_ids), tuple(s.action_ids)): s for s in fed[learner]}
            reached = [by_action[(tuple(t.prompt_ids), tuple(t.action_ids))] for t in mine]  # every action
            if len({t.coach_reward for t in mine}) > 1:  # its own rewards, spread: they move its advantages
                assert any(float(s.advantages.abs().max()) > 0 for s in reached)
                spread.add(role)
            assert moved[learner], f"{role}'s learner {learner} did not change"
    assert spread == set(roles)  # every role's own rewards moved its advantages
    if topology == "loop":  # sent back twice, the bound: three rounds of both roles, every one trained on
        assert all(sorted(t.role for t in transitions if t.episode_id == e) == ["checker"] * 3 + ["solver"] * 3
                   for _, transitions, _, _ in steps for e in {t.episode_id for t in transitions})
