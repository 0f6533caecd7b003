"""The `mappa` command line: envs, run, and its errors."""
import json
import subprocess
import sys

import pytest

from mappa_envs.cli import main


def test_envs_lists_every_registered_env(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert "MathChat-v0" in out and "DSBench-v0" in out and "Verifier" in out


def test_run_writes_transcripts(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    assert main(["run", "MathChat-v0", "--episodes", "3", "--out", str(out), "--skill", "1.0",
                 "--env-arg", "num_tasks=5"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 3
    for r in records:
        assert [a["role"] for a in r["actions"]][0] == "problem_solver"
        assert r["outcome"]["correct"] is True and r["returns"]["verifier"] > 0
    assert "correct 3/3" in capsys.readouterr().out


def test_run_with_random_policy(tmp_path):
    out = tmp_path / "r.jsonl"
    assert main(["run", "MathChat-v0", "--episodes", "1", "--policy", "random", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["outcome"]["correct"] is False


@pytest.mark.parametrize("argv, message", [
    (["run", "Nope-v0"], "unknown env id 'Nope-v0'"),
    (["run", "MathChat-v0", "--episodes", "0"], "--episodes must be >= 1"),
    (["run", "MathChat-v0", "--env-arg", "novalue"], "expected KEY=VALUE"),
])
def test_run_bad_input(argv, message):
    with pytest.raises((SystemExit, KeyError), match=message):
        main(argv)


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "mappa_envs.cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0 and "quickstart" in out.stdout and "sandbox" in out.stdout
