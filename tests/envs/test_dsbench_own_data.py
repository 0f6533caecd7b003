"""Bringing your own DSBench data (issue 27): a folder laid out as DSBench ships it, with your own task
list and descriptions, loads through `make("DSBench-v0", tasks=..., metadata=..., prompts=...)` (the
worked example of docs/dsbench.md), and `mappa eval --sets dsbench:DIR` runs on an eval-only folder."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import mappa_envs
from mappa_envs.dsbench.tasks import PROMPTS_FILE, SPLIT_FILES
from mappa_envs.errors import EnvArgumentError, TaskDataNotFoundError
from mappa_envs.wrappers import VectorRunner

ROOT = Path(__file__).resolve().parents[2]
TASK = "churn-mini"
DESCRIPTION = "Predict whether a customer churns (Exited, 0 or 1) from age and balance. Metric: accuracy."


def own_dsbench(base: Path) -> Path:
    """~/DSBench as DSBench ships it (data_modeling/data/{data_resplit,answers}/<task>/), one task of
    ours in it, and our own task list and descriptions beside the data. Returns the data folder."""
    data = base / "DSBench" / "data_modeling" / "data"
    rng = np.random.default_rng(0)
    age, balance = rng.integers(18, 80, 60), rng.normal(50, 20, 60).round(2)
    frame = pd.DataFrame({"CustomerId": range(1000, 1060), "Age": age, "Balance": balance,
                          "Exited": (age > 50).astype(int)})
    folder, answers = data / "data_resplit" / TASK, data / "answers" / TASK
    folder.mkdir(parents=True)
    answers.mkdir(parents=True)
    frame[:40].to_csv(folder / "train.csv", index=False)
    frame[40:].drop(columns="Exited").to_csv(folder / "test.csv", index=False)
    frame[40:][["CustomerId"]].assign(Exited=0).to_csv(folder / "sample_submission.csv", index=False)
    frame[40:][["CustomerId", "Exited"]].to_csv(answers / "test_answer.csv", index=False)
    (data / "my_tasks.jsonl").write_text(json.dumps({"prompt": DESCRIPTION, "metadata": {"task_id": TASK}}) + "\n")
    (data / "my_prompts.json").write_text(json.dumps({TASK: {
        "cleaned_prompt": DESCRIPTION, "metric": "accuracy", "id_column": "CustomerId", "target_column": "Exited"}}))
    return data


@pytest.fixture
def data(tmp_path, monkeypatch):
    monkeypatch.delenv("MAPPA_DSBENCH_META", raising=False)
    return own_dsbench(tmp_path)


def test_make_with_your_own_task_list_and_descriptions(data, tmp_path):
    env = mappa_envs.make("DSBench-v0", tasks=data.parents[1], metadata=data / "my_tasks.jsonl",
                          prompts=data / "my_prompts.json", cache_dir=tmp_path / "cache", sandbox="local")
    try:
        (task,) = env.unwrapped.scenario.task_list
        assert (task.id, task.metric, task.id_column, task.target_columns) == (TASK, "accuracy", "CustomerId",
                                                                             ("Exited",))
        assert task.description == DESCRIPTION
        assert task.train_csv == data / "data_resplit" / TASK / "train.csv"
        team = mappa_envs.spec("DSBench-v0").scripted_policy
        policy = mappa_envs.registration.load_callable(team)(env)
        (result,) = VectorRunner([env], policy).run(1, seed=0)
        assert result.outcome.details["submission_valid"] is True
        assert result.outcome.details["metric"] == "accuracy"
    finally:
        env.close()


def test_without_a_task_list_the_error_names_the_arguments_make_takes(data):
    with pytest.raises(TaskDataNotFoundError, match=r"make\('DSBench-v0', tasks=\.\.\., metadata=SPLIT_FILE, "
                                                    r"prompts=PROMPTS_FILE\)"):
        mappa_envs.make("DSBench-v0", tasks=data, split="eval")


def test_metadata_without_a_folder_is_refused():
    with pytest.raises(EnvArgumentError, match="describe the tasks of a DSBench data folder"):
        mappa_envs.make("DSBench-v0", metadata="my_tasks.jsonl")


def test_mappa_eval_on_an_eval_only_folder(data, tmp_path):
    """The CLI way: the files under DSBench's names beside the data; no training split is needed."""
    (data / SPLIT_FILES["eval"]).write_text((data / "my_tasks.jsonl").read_text())
    (data / PROMPTS_FILE).write_text((data / "my_prompts.json").read_text())
    env = {k: v for k, v in os.environ.items() if k != "MAPPA_DSBENCH_META"}
    env.update(PYTHONPATH=str(ROOT), MAPPA_DSBENCH_CACHE=str(tmp_path / "cache"))
    result = subprocess.run(
        [sys.executable, "-m", "mappa_cli", "eval", "--team", "scripted:0.5", "--name", "own", "--sets",
         f"dsbench:{data}", "--out", str(tmp_path / "out"), "--no-plots", "--no-progress"],
        capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "own" / "results.json").read_text())
    (summary,) = results["sets"].values()
    assert summary["episodes"] == 1
    assert "overlap" not in summary  # no training split beside the data: nothing to check against


def test_the_documented_command_with_a_folder_under_home(tmp_path, monkeypatch):
    """docs/dsbench.md's `--sets dsbench:~/DSBench/data_modeling/data`: the shell leaves a `~` after `dsbench:` as
    it is, so mappa expands it."""
    monkeypatch.delenv("MAPPA_DSBENCH_META", raising=False)
    data = own_dsbench(tmp_path / "home")
    (data / SPLIT_FILES["eval"]).write_text((data / "my_tasks.jsonl").read_text())
    (data / PROMPTS_FILE).write_text((data / "my_prompts.json").read_text())
    env = {k: v for k, v in os.environ.items() if k != "MAPPA_DSBENCH_META"}
    env.update(PYTHONPATH=str(ROOT), HOME=str(tmp_path / "home"), MAPPA_DSBENCH_CACHE=str(tmp_path / "cache"))
    result = subprocess.run(
        [sys.executable, "-m", "mappa_cli", "eval", "--team", "scripted:0.5", "--name", "own", "--sets",
         "dsbench:~/DSBench/data_modeling/data", "--out", str(tmp_path / "out"), "--no-plots", "--no-progress"],
        capture_output=True, text=True, env=env, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    (summary,) = json.loads((tmp_path / "out" / "own" / "results.json").read_text())["sets"].values()
    assert summary["episodes"] == 1
