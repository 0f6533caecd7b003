"""The `mappa` command line: the subcommand table, envs, run (through VectorRunner), progress, --out."""
import json
import subprocess
import sys

import pytest

from mappa_cli.main import COMMANDS, main
from mappa_cli.progress import Progress


def test_every_subcommand_module_has_configure_and_run():
    import importlib

    for name, (module, _) in COMMANDS.items():
        mod = importlib.import_module(module)
        assert callable(mod.configure), name
        assert callable(mod.run), name


def test_envs_lists_every_registered_env(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    assert "MathChat-v0" in out
    assert "DSBench-v0" in out
    assert "Verifier" in out


def test_run_writes_transcripts(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    assert main(["run", "MathChat-v0", "--episodes", "3", "--out", str(out), "--skill", "1.0",
                 "--env-arg", "num_tasks=5", "--batch-size", "2", "--no-progress"]) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["episode"] for r in records) == [0, 1, 2]
    assert sorted(r["seed"] for r in records) == [0, 1, 2]
    for r in records:
        assert [a["role"] for a in r["actions"]][0] == "problem_solver"
        assert r["outcome"]["correct"] is True
        assert r["returns"]["verifier"] > 0
    captured = capsys.readouterr()
    assert "correct 3/3" in captured.out
    assert "MathChat-v0: 3/3 episodes" in captured.err
    assert "episodes/s" in captured.err


def test_run_with_random_policy(tmp_path):
    out = tmp_path / "r.jsonl"
    assert main(["run", "MathChat-v0", "--episodes", "1", "--policy", "random", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["outcome"]["correct"] is False


def test_run_refuses_to_overwrite_transcripts_unless_asked(tmp_path, capsys):
    out = tmp_path / "t.jsonl"
    common = ["run", "MathChat-v0", "--episodes", "1", "--out", str(out), "--no-progress"]
    assert main(common) == 0
    before = out.read_text()
    capsys.readouterr()
    assert main(common) == 2
    assert capsys.readouterr().err.strip() == (f"mappa run: {out} already exists and is not empty; pass --overwrite "
                                               "to replace it, or another --out")
    assert out.read_text() == before
    assert main([*common, "--seed", "5", "--overwrite"]) == 0
    assert json.loads(out.read_text())["seed"] == 5


def test_blame_writes_its_table(tmp_path, capsys):
    assert main(["blame", "--env", "MathChat-v0", "--num-tasks", "1", "--out", str(tmp_path)]) == 0
    table = (tmp_path / "blame.md").read_text()
    assert "| MathChat-v0 | solver_wrong | problem_solver | rule | 1 |" in table
    assert table in capsys.readouterr().out


def test_console_script_help():
    out = subprocess.run([sys.executable, "-m", "mappa_cli", "--help"], capture_output=True, text=True)
    assert out.returncode == 0
    assert "quickstart" in out.stdout
    assert "sandbox" in out.stdout


class Tty:
    """A stream that says it is a terminal, so Progress draws its tqdm bar."""

    def __init__(self):
        self.text = ""

    def isatty(self):
        return True

    def write(self, s):
        self.text += s

    def flush(self):
        pass


def _record(*verdicts):
    return {"actions": [{"coach": v} for v in verdicts]}


def test_progress_plain_lines_and_coach_failures():
    import io

    stream = io.StringIO()
    with Progress(3, "amc", bar=False, every_s=0, stream=stream) as p:
        p.episode(_record({"ok": True, "score": 7}))
        p.episode(_record({"ok": False, "error": "APIConnectionError: Connection error."}, {"ok": True}))
        p.episode({**_record({"ok": False, "error": "APIConnectionError: Connection error."}), "error": "boom"})
    lines = stream.getvalue().splitlines()
    assert lines[0].startswith("amc: 1/3 episodes, ")
    assert "ETA" in lines[0]
    assert lines[1] == "coach: a call failed (APIConnectionError: Connection error.); further failures are counted"
    assert lines[3].startswith("amc: 3/3 episodes (1 failed, coach failed 2/4), ")
    assert "done in" in lines[3]
    assert lines[4] == "coach: 2/4 calls failed (last error: APIConnectionError: Connection error.)"
    assert len(lines) == 5


def test_progress_bar_on_a_terminal():
    tty = Tty()
    with Progress(2, "synthetic:2", stream=tty) as p:
        p.episode(_record({"ok": True}))
        p.episode(_record({"ok": False, "error": "boom"}))
    assert "synthetic:2" in tty.text
    assert "2/2" in tty.text
    assert "episode/s" in tty.text
    assert "coach failed 1/2" in tty.text
    assert "coach: 1/2 calls failed (last error: boom)" in tty.text


@pytest.mark.parametrize("argv", [["run", "MathChat-v0", "--help"], ["eval", "--help"], ["train", "--help"]])
def test_help_exits_cleanly(argv, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 0
    assert "--debug" in capsys.readouterr().out
