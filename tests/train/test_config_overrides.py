"""`key=value` overrides reach inside mapping-valued settings key by key (issue 27): env.kwargs.KEY=VALUE
sets that one keyword and keeps the others, as `mappa train --help` says."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mappa_train.config import ConfigError, load_config

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_one_env_kwarg_is_set_and_the_others_kept():
    cfg = load_config(None, ["env.kwargs={task_source: synthetic, num_tasks: 8}", "env.kwargs.split=eval"])
    assert cfg.env.kwargs == {"task_source": "synthetic", "num_tasks": 8, "split": "eval"}


def test_a_later_override_replaces_one_key_only():
    cfg = load_config(None, ["env.kwargs={task_source: synthetic, num_tasks: 8}", "env.kwargs.num_tasks=16"])
    assert cfg.env.kwargs == {"task_source": "synthetic", "num_tasks": 16}


def test_nested_mappings_are_made_as_needed():
    cfg = load_config(None, ["env.eval_sets.heldout.num_tasks=4", "env.eval_sets.heldout.split=eval",
                             "rollout.stop_below.code_executor=4"])
    assert cfg.env.eval_sets == {"eval": {"split": "eval"}, "heldout": {"num_tasks": 4, "split": "eval"}}
    assert cfg.rollout.stop_below == {"code_executor": 4}


def test_yaml_preset_then_one_key(tmp_path):
    preset = tmp_path / "p.yaml"
    preset.write_text("env:\n  kwargs:\n    task_source: synthetic\n    num_tasks: 8\n")
    assert load_config(preset, ["env.kwargs.num_tasks=32"]).env.kwargs == {"task_source": "synthetic",
                                                                          "num_tasks": 32}


def test_a_key_the_env_does_not_take_is_still_refused():
    with pytest.raises(ConfigError, match="no_such_kwarg"):
        load_config(None, ["env.kwargs.no_such_kwarg=1"])


def test_going_into_a_value_that_is_not_a_mapping():
    with pytest.raises(ConfigError, match="env.kwargs.split is 'eval', not a mapping; set it whole"):
        load_config(None, ["env.kwargs={split: eval}", "env.kwargs.split.x=1"])


def test_through_the_cli():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "mappa_cli", "train", "--print-config",
                             "env.kwargs={task_source: synthetic}", "env.kwargs.num_tasks=8"],
                            capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(result.stdout)["env"]["kwargs"] == {"task_source": "synthetic", "num_tasks": 8}
