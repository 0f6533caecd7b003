"""`--policy random` is a baseline that plays the game (issue 27): short, well-formed actions from the env's
own vocabulary (answers, cells with the task's numbers, the files its prompt names), seeded per action."""
from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

from mappa_envs.random_policy import RandomPolicy, random_action

ROOT = Path(__file__).resolve().parents[2]
MATH = [{"role": "system", "content": "You are the Problem Solver."},
        {"role": "user", "content": "What is 47 * 85 + 12?"}]
DS = [{"role": "user", "content": "Read `X_test.csv` and `model.pkl`, then write submission.csv with columns "
                                  "`id` and `Exited`, as in sample_submission.csv."}]


def test_actions_come_from_the_conversation():
    texts = [random_action(MATH[1]["content"], random.Random(i)) for i in range(200)]
    boxed = [t for t in texts if t.startswith("The answer is \\boxed{")]
    cells = [t for t in texts if "```python" in t]
    assert boxed
    assert cells
    assert {t[len("The answer is \\boxed{"):-2] for t in boxed} <= {"47", "85", "12"}
    assert all(len(t) < 400 for t in texts)
    assert all(t.isascii() for t in texts)
    for cell in cells:  # every computing cell is valid Python over the task's numbers
        code = cell.split("```python\n")[1].split("```")[0]
        compile(code, "<cell>", "exec")
        assert set(re.findall(r"\d+", code.split("print")[0])) <= {"47", "85", "12", "0", "1", "2", "3"}


def test_files_the_prompt_names_are_read_and_written():
    texts = [random_action(DS[0]["content"], random.Random(i)) for i in range(200)]
    assert any("pd.read_csv('X_test.csv')" in t for t in texts)
    assert any(".to_csv('submission.csv', index=False)" in t for t in texts)
    assert any("df['Exited'].head()" in t for t in texts)


def test_seeded_per_action_whatever_the_batch():
    policy = RandomPolicy(seed=3)
    alone = policy.respond([MATH], ["problem_solver"], seeds=[11])
    batched = RandomPolicy(seed=3).respond([DS, MATH, MATH], ["analyst", "problem_solver", "x"], seeds=[5, 11, 12])
    assert batched[1] == alone[0]


def test_mappa_run_random_writes_plausible_transcripts(tmp_path):
    out = tmp_path / "t.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run([sys.executable, "-m", "mappa_cli", "run", "MathChat-v0", "--policy", "random",
                             "--episodes", "3", "--out", str(out), "--no-progress"],
                            capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stderr
    actions = [a for line in out.read_text().splitlines() for a in json.loads(line)["actions"]]
    assert actions
    assert max(len(a["text"]) for a in actions) < 400
    assert any("```python" in a["text"] for a in actions)
    assert any(a.get("tool_results") for a in actions)  # its cells reached the sandbox
