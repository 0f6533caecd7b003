"""`mappa train` into an out_dir holding a run compares the configs before writing anything (issue 27):
a change the checkpoints cannot load with is one line and leaves the run untouched; a change to what
is learnt needs --allow-config-change; a resume says "resuming from step N". Through the real CLI."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from mappa_train.config import ConfigError, load_config, to_dict
from mappa_train.resume_config import check_changes, config_changes
from mappa_train.runlog import read_metrics
from tests.train.test_train import TINY

ROOT = Path(__file__).resolve().parents[2]
QUIET = ["eval_every=0", "log.tensorboard=false", "log.plot=false"]


def train(out: Path, *overrides: str, flag: bool = False) -> subprocess.CompletedProcess:
    dist_vars = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {**{k: v for k, v in os.environ.items() if k not in dist_vars}, "DS_ACCELERATOR": "cpu",
           "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "mappa_cli", "train", *TINY, *QUIET, f"out_dir={out}", *overrides]
    return subprocess.run(argv + (["--allow-config-change"] if flag else []), capture_output=True, text=True,
                          env=env, timeout=1200)


@pytest.fixture
def run_dir(tmp_path):
    """A run stopped after step 2: its config.json and a complete checkpoint marker (the refusals below
    happen before any checkpoint is read)."""
    out = tmp_path / "run"
    (out / "checkpoints" / "step_000002").mkdir(parents=True)
    (out / "checkpoints" / "step_000002" / "state.json").write_text('{"step": 2}')
    cfg = load_config(None, [*TINY, *QUIET, f"out_dir={out}", "steps=4"])
    (out / "config.json").write_text(json.dumps(to_dict(cfg), indent=2))
    return out


def last_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr
    return result.stderr.strip().splitlines()[-1]


def test_another_model_is_refused_in_one_line_and_nothing_is_written(run_dir):
    before = (run_dir / "config.json").read_bytes()
    result = train(run_dir, "steps=4", "model.path=smollm2-135m", flag=True)  # no flag allows a model change
    assert result.returncode == 2
    assert last_line(result) == (
        f"mappa train: {run_dir} holds a run at step 2 whose checkpoints cannot load with model.path 'tiny' -> "
        f"'smollm2-135m'; train into another out_dir, or delete {run_dir} to start over")
    assert (run_dir / "config.json").read_bytes() == before
    assert sorted(p.name for p in run_dir.iterdir()) == ["checkpoints", "config.json"]


def test_another_policy_layout_is_refused(run_dir):
    result = train(run_dir, "steps=4", "model.policies=per_role")
    assert result.returncode == 2
    assert "whose checkpoints cannot load with model.policies 'shared' -> 'per_role';" in last_line(result)


def test_the_lora_shape_is_fixed_only_where_adapters_are_trained(tmp_path):
    lora = load_config(None, ["model.policies=lora"])
    with pytest.raises(ConfigError, match="cannot load with lora.rank 16 -> 8;"):
        check_changes(replace(lora, lora=replace(lora.lora, rank=8)), to_dict(lora), tmp_path, 3)
    shared = load_config(None, [])
    assert check_changes(replace(shared, lora=replace(shared.lora, rank=8)), to_dict(shared), tmp_path, 3) == {}


def test_another_learning_rate_needs_the_flag(run_dir):
    before = (run_dir / "config.json").read_bytes()
    result = train(run_dir, "steps=4", "learner.lr=1e-4", "rollout.num_envs=4")
    assert result.returncode == 2
    assert last_line(result) == (
        f"mappa train: {run_dir} holds a run at step 2 trained with another config: learner.lr 0.001 -> 0.0001, "
        "rollout.num_envs 2 -> 4; to resume it with these changes pass --allow-config-change "
        "(allow_config_change=true), or train into another out_dir")
    assert (run_dir / "config.json").read_bytes() == before


def test_env_kwargs_are_compared_key_by_key():
    old = to_dict(load_config(None, ["env.kwargs={task_source: synthetic, num_tasks: 16}"]))
    new = to_dict(load_config(None, ["env.kwargs={task_source: synthetic, num_tasks: 32}"]))
    assert config_changes(old, new) == {"env.kwargs.num_tasks": (16, 32)}
    assert config_changes(old, old) == {}


@pytest.mark.slow
def test_resume_says_its_step_and_an_allowed_change_keeps_the_old_config(tmp_path):
    out = tmp_path / "run"
    first = train(out, "steps=1")
    assert first.returncode == 0, first.stderr[-3000:]
    assert "resuming" not in first.stdout
    longer = train(out, "steps=2")  # running on is no change to what is learnt: no flag needed
    assert longer.returncode == 0, longer.stderr[-3000:]
    assert f"mappa train: resuming from step 1 of {out} with steps 1 -> 2" in longer.stdout
    changed = train(out, "steps=3", "learner.lr=1e-4", flag=True)
    assert changed.returncode == 0, changed.stderr[-3000:]
    assert f"resuming from step 2 of {out} with learner.lr 0.001 -> 0.0001, steps 2 -> 3" in changed.stdout
    assert json.loads((out / "config.before_step_2.json").read_text())["learner"]["lr"] == 1e-3
    assert json.loads((out / "config.json").read_text())["learner"]["lr"] == 1e-4
    steps = [r["step"] for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "train"]
    assert steps == [1, 2, 3]


@pytest.mark.slow
def test_running_on_keeps_the_last_evaluation_instead_of_repeating_it(tmp_path):
    """The budget pre-flight runs a run on a few steps at a time: the evaluation at the step it resumes from
    was taken on that checkpoint's weights, so it is kept, not paid for again (at depth 4, minutes each)."""
    out = tmp_path / "run"
    first = train(out, "steps=1", "eval_every=1")
    assert first.returncode == 0, first.stderr[-3000:]
    before = [r for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "eval"]
    longer = train(out, "steps=2", "eval_every=1")
    assert longer.returncode == 0, longer.stderr[-3000:]
    evals = [r for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "eval"]
    assert [r["step"] for r in evals] == [0, 1, 2]  # each step evaluated once
    assert evals[:2] == before
    episodes = [json.loads(line)["step"] for line in (out / "eval_episodes.jsonl").read_text().splitlines()]
    assert episodes.count(1) == episodes.count(0) == episodes.count(2) > 0  # step 1 was not played again
