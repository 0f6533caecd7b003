"""Training takes its roles from the env: `mappa train` with one LoRA adapter per role on a 16-agent chain."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mappa_train.runlog import read_metrics


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
