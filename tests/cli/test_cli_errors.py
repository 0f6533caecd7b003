"""Every bad input of issue 15 through the real CLI: exit status != 0, one short line that names the problem,
no traceback (`--debug` / MAPPA_DEBUG=1 bring it back)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mappa_cli.main import main
from mappa_envs.errors import InputError, UnknownEnvError

ROOT = Path(__file__).resolve().parents[2]
FAST = ["--no-plots", "--preimport", "", "--no-progress"]


def fails(argv: list[str], capsys, status: int = 2) -> str:
    """Run `mappa ARGV` in-process; assert it failed with `status` in one short line; return that line."""
    rc = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if not line.startswith("== ")]  # the eval's per-team header
    assert rc == status, err
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith(f"mappa {argv[0]}: ")
    return lines[0]


def run_cli(*argv: str, **env: str) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-m", "mappa_cli", *argv], capture_output=True, text=True, env=environ,
                          timeout=300)


@pytest.fixture
def out(tmp_path):
    return ["--out", str(tmp_path / "out")]


def test_unknown_env_id(capsys):
    assert "unknown env id 'Nope-v0'" in fails(["run", "Nope-v0"], capsys)


def test_unknown_eval_set(capsys, out):
    assert "unknown eval set 'gsm8k'" in fails(["eval", "--team", "scripted", "--sets", "gsm8k", *out], capsys)


@pytest.mark.parametrize("team, message", [
    ("gpt", "unknown team spec 'gpt'"),
    ("openai:just-a-model", "expected openai:MODEL@BASE_URL"),
    ("solver=scripted", "the team names the roles ['solver'], but MathChat-v0 has"),
    ("nosuchmodule:factory", "cannot import nosuchmodule"),
    ("scripted:7", "SKILL in [0, 1]"),
])
def test_bad_team_spec(team, message, capsys, out):
    assert message in fails(["eval", "--team", team, "--sets", "synthetic:1", *FAST, *out], capsys)


def test_bad_coach_spec(capsys, out):
    assert "unknown coach 'gpt5'" in fails(["eval", "--team", "scripted", "--coach", "gpt5", *out], capsys)


@pytest.mark.parametrize("argv, message", [
    (["eval", "--team", "scripted", "--k", "0"], "argument --k: must be >= 1, got 0"),
    (["eval", "--team", "scripted", "--batch-size", "x"], "argument --batch-size: expected an integer, got 'x'"),
    (["eval", "--team", "scripted", "--top-p", "0"], "--top-p must lie in (0, 1]"),
    (["eval"], "one of the arguments --team --compare --leaderboard --list-sets is required"),
    (["run", "MathChat-v0", "--skill", "7"], "argument --skill: must lie in [0, 1], got 7"),
    (["run", "MathChat-v0", "--episodes", "0"], "argument --episodes: must be >= 1, got 0"),
    (["run", "MathChat-v0", "--env-arg", "novalue"], "expected KEY=VALUE"),
    (["run", "MathChat-v0", "--policy", "nosuch"], "expected 'scripted', 'random' or 'module:factory'"),
    (["sandbox", "check", "--cells", "-1"], "argument --cells: must be >= 1, got -1"),
    (["blame", "--num-tasks", "0"], "--num-tasks, --batch and --concurrency must be >= 1"),
    (["blame", "--dsbench-tasks", "11"], "--dsbench-tasks must be between 1 and 10 (the built-in tasks), got 11"),
])
def test_out_of_range_and_malformed_arguments(argv, message, capsys):
    line = fails(argv, capsys)
    assert message in line
    assert "usage:" not in line


def test_missing_data_directory(tmp_path, capsys, out, monkeypatch):
    missing = str(tmp_path / "nope")
    line = fails(["eval", "--team", "scripted", "--sets", "aime2025", "--data-dir", missing, *out], capsys)
    assert f"--data-dir {tmp_path / 'nope'} is not a folder" in line
    monkeypatch.delenv("MAPPA_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)  # no data/bench here
    line = fails(["eval", "--team", "scripted", "--sets", "aime2025", *out], capsys)
    assert "needs aime_2025.json: no data directory was given; pass --data-dir DIR" in line


def test_malformed_dsbench_folder(tmp_path, capsys, out):
    (tmp_path / "ds").mkdir()
    line = fails(["eval", "--team", "scripted", "--sets", f"dsbench:{tmp_path / 'ds'}", *FAST, *out], capsys)
    assert f"{tmp_path / 'ds'} is not a DSBench data folder" in line


def test_unreachable_endpoint(capsys, out):
    line = fails(["eval", "--team", "openai:m@http://127.0.0.1:1/v1", "--sets", "synthetic:1", *FAST, *out], capsys,
                 status=1)
    assert "http://127.0.0.1:1/v1" in line
    assert "Connection error" in line
    assert "is the server running" in line


def test_unreachable_coach_is_a_failed_run_not_low_scores(capsys, tmp_path):
    rc = main(["eval", "--team", "scripted", "--sets", "synthetic:1", "--coach", "judge@http://127.0.0.1:1/v1",
               "--coach-set", "max_retries=0", "--coach-set", "api_key_env=none", "--out", str(tmp_path), *FAST])
    err = capsys.readouterr().err
    assert rc == 1
    assert "Traceback" not in err
    assert "coach: a call failed (APIConnectionError: Connection error." in err
    assert "coach: 4/4 calls failed (last error: APIConnectionError: Connection error." in err
    assert err.strip().splitlines()[-1].startswith("mappa eval: every coach call failed")


def test_failing_episodes_are_one_line_warnings_then_one_error(tmp_path):
    """A coach that must not fail (on_failure=raise) at a dead endpoint: each failed episode is a warning
    line (the driver goes on), three in a row stop the run with one error line. In a subprocess: the
    warnings go through logging, which pytest would capture."""
    result = run_cli("eval", "--team", "scripted", "--sets", "synthetic:4", "--coach", "judge@http://127.0.0.1:1/v1",
                     "--coach-set", "on_failure=raise", "--coach-set", "max_retries=0", "--coach-set",
                     "api_key_env=none", "--batch-size", "1", "--out", str(tmp_path), *FAST)
    lines = [line for line in result.stderr.strip().splitlines() if not line.startswith("== ")]
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert [line.split(" failed and is skipped: ")[0] for line in lines[:3]] == [
        f"warning: episode {i} (env 0, task None)" for i in range(3)]
    assert all("CoachError: judge at http://127.0.0.1:1/v1: APIConnectionError" in line for line in lines)
    assert lines[3].startswith("mappa eval: 3 episodes in a row failed")
    assert len(lines) == 4


def test_bad_yaml_names_line_and_column(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("seed: 0\nlearner:\n  lr: 1e-5\n    steps: 3\n")
    line = fails(["train", "--config", str(bad)], capsys)
    assert line.startswith(f"mappa train: {bad}: not valid YAML at line 4, column 10: mapping values are not allowed")
    line = fails(["train", "steps=[1"], capsys)
    assert line.startswith("mappa train: override 'steps=[1': not valid YAML")


def test_yaml_errors_that_reach_the_cli_name_line_and_column():
    import yaml

    from mappa_cli.errors import explain

    try:
        yaml.safe_load("seed: 0\nlearner:\n  lr: [1\nsteps: 3\n")
    except yaml.YAMLError as e:
        message, status = explain(e)
    assert status == 2
    assert message == ("invalid YAML at line 4, column 6: expected ',' or ']', but got ':' "
                       "(while parsing a flow sequence that starts at line 3, column 7)")


def test_train_config_errors_keep_their_wording(capsys):
    line = fails(["train", "lerner.lr=1e-5"], capsys)
    assert line.startswith("mappa train: unknown config key 'lerner.lr': the top level has out_dir, seed")
    assert fails(["train", "learner.lr=fast"], capsys) == "mappa train: learner.lr must be float, got 'fast' (str)"


def test_malformed_json_data_file(tmp_path, capsys, out):
    broken = tmp_path / "broken.json"
    broken.write_text('[\n  {"prompt": "What is 1 + 1?", "answer": "2"},\n  {"prompt": "2 + 2?" "answer": "4"}\n]\n')
    line = fails(["eval", "--team", "scripted", "--sets", str(broken), *FAST, *out], capsys)
    assert str(broken) in line
    assert "JSON" in line


def test_hf_team_with_a_path_that_does_not_exist(tmp_path, capsys, out):
    missing = tmp_path / "models" / "tiny"
    line = fails(["eval", "--team", f"hf:{missing}", "--sets", "synthetic:1", *FAST, *out], capsys)
    assert f"the path {missing} does not exist" in line
    assert "Repo id" not in line


def test_hub_id_offline_says_the_hub_is_unreachable(tmp_path):
    result = run_cli("eval", "--team", "hf:SomeOrg/some-model", "--sets", "synthetic:1", *FAST,
                     "--out", str(tmp_path / "out"), HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    line = result.stderr.strip().splitlines()[-1]
    assert "not in the local cache while the hub is switched off (HF_HUB_OFFLINE=1)" in line
    assert "`hf download SomeOrg/some-model`" in line


def test_empty_task_file_is_an_error(tmp_path, capsys, out):
    empty = tmp_path / "empty.json"
    empty.write_text("[]")
    line = fails(["eval", "--team", "scripted", "--sets", str(empty), *FAST, *out], capsys)
    assert "empty" in line


def test_eval_out_resumes_the_same_run_and_refuses_another(tmp_path, capsys):
    common = ["eval", "--sets", "synthetic:2", "--name", "run", "--out", str(tmp_path), *FAST]
    assert main([*common, "--team", "scripted"]) == 0
    transcripts = (tmp_path / "run" / "transcripts.jsonl").read_text()
    capsys.readouterr()
    assert main([*common, "--team", "scripted"]) == 0  # the same settings: resumes (nothing left to play)
    assert "synthetic:2: 2/2 episodes already done (resuming)" in capsys.readouterr().err
    line = fails([*common, "--team", "scripted:0.5"], capsys)
    assert f"{tmp_path / 'run'} holds a run with other settings (team: 'scripted' then, 'scripted:0.5' now)" in line
    assert (tmp_path / "run" / "transcripts.jsonl").read_text() == transcripts  # nothing overwritten


def test_eval_names_and_settings_that_escape_or_say_nothing_are_refused(tmp_path, capsys, out):
    for name in ("../escaped", str(tmp_path / "abs"), "", "."):
        line = fails(["eval", "--team", "scripted", "--sets", "synthetic:1", "--name", name, *FAST, *out], capsys)
        assert "--name: must be a folder name" in line
    line = fails(["eval", "--team", "scripted", "--sets", "synthetic:1", "--temperature", "nan", *FAST, *out], capsys)
    assert "expected a finite number, got 'nan'" in line
    line = fails(["eval", "--team", "problem_solver=scripted;verifier=scripted;verifier=scripted:0.1",
                  "--sets", "synthetic:1", *FAST, *out], capsys)
    assert "gives role 'verifier' twice" in line
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_train_never_writes_into_a_folder_that_is_not_its_run(tmp_path, capsys):
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    line = fails(["train", f"out_dir={tmp_path / 'model'}", "steps=1"], capsys)
    assert "holds files but no mappa run" in line
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["config.json"]
    assert (tmp_path / "model" / "config.json").read_text() == '{"architectures": ["LlamaForCausalLM"]}'


def test_unknown_command():
    result = run_cli("trian")
    assert result.returncode == 2
    from mappa_cli.main import COMMANDS

    assert result.stderr.strip() == f"mappa: unknown command 'trian'; choose one of {', '.join(COMMANDS)}"
    assert {"train", "eval", "coach-eval", "export"} <= set(COMMANDS)


@pytest.mark.parametrize("how", ["flag-before", "flag-after", "env"])
def test_debug_shows_the_traceback(how):
    argv = {"flag-before": ["--debug", "run", "Nope-v0"], "flag-after": ["run", "Nope-v0", "--debug"],
            "env": ["run", "Nope-v0"]}[how]
    result = run_cli(*argv, **({"MAPPA_DEBUG": "1"} if how == "env" else {}))
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert "unknown env id 'Nope-v0'" in result.stderr


def test_without_debug_the_real_process_prints_one_line():
    result = run_cli("run", "Nope-v0")
    assert result.returncode == 2
    assert result.stdout == ""
    import mappa_envs

    assert result.stderr.strip().splitlines() == [
        f"mappa run: unknown env id 'Nope-v0'; registered ids: {', '.join(sorted(mappa_envs.registry))}"]


def test_json_decode_errors_carry_their_real_position():
    from mappa_cli.errors import explain

    try:
        json.loads('[\n  1,\n  2 3\n]')
    except json.JSONDecodeError as e:
        assert explain(e) == ("invalid JSON at line 3, column 5: Expecting ',' delimiter", 2)


def _raised(exc: BaseException, cause: BaseException) -> BaseException:
    try:
        raise exc from cause
    except BaseException as e:  # noqa: BLE001 - building a chained exception to explain
        return e


@pytest.mark.parametrize("exc, expected", [
    (KeyboardInterrupt(), ("interrupted", 130)),
    (PermissionError(13, "Permission denied", "/runs/out"), ("/runs/out: permission denied", 1)),
    (FileNotFoundError(2, "No such file or directory", "cfg.yaml"), ("cfg.yaml: no such file or directory", 2)),
    (ModuleNotFoundError("No module named 'torch'", name="torch"),
     ("this needs the Python package 'torch', which is not installed: pip install 'mappa[train]'", 1)),
    (UnknownEnvError("unknown env id 'X-v0'"), ("unknown env id 'X-v0'", 2)),  # no KeyError quotes
    (ConnectionRefusedError(111, "Connection refused"), ("connection failed: [Errno 111] Connection refused", 1)),
    (_raised(RuntimeError("3 episodes in a row failed; the last: boom"), InputError("boom")),
     ("3 episodes in a row failed; the last: boom", 2)),
])
def test_explain(exc, expected):
    from mappa_cli.errors import explain

    assert explain(exc) == expected


@pytest.mark.parametrize("exc", [RuntimeError("a bug"), TypeError("a bug"), ModuleNotFoundError("x", name="mappa_x")])
def test_bugs_keep_their_traceback(exc):
    from mappa_cli.errors import explain

    assert explain(exc) is None


@pytest.mark.parametrize("exc", [KeyError("role"), ValueError("bug"), _raised(RuntimeError("wrap"), KeyError("x"))])
def test_a_bare_key_or_value_error_is_a_bug(exc):
    """Only the project's error types are bad input; a KeyError or ValueError from code is a bug."""
    from mappa_cli.errors import explain

    assert explain(exc) is None


def test_a_key_error_from_code_reaches_the_user_with_its_traceback(monkeypatch):
    import mappa_cli.run

    def broken(args):
        return {}["missing"]

    monkeypatch.setattr(mappa_cli.run, "run", broken)
    with pytest.raises(KeyError, match="missing"):
        main(["run", "MathChat-v0"])


def test_http_errors_of_an_endpoint():
    import httpx
    import openai

    from mappa_cli.errors import explain

    request = httpx.Request("POST", "http://127.0.0.1:8000/v1/chat/completions")
    refused = openai.APIConnectionError(request=request)
    assert explain(refused) == ("cannot reach http://127.0.0.1:8000/v1/chat/completions (Connection error.); "
                                "is the server running, and is the URL right?", 1)
    denied = openai.AuthenticationError("bad key", response=httpx.Response(401, request=request), body=None)
    assert explain(denied) == ("http://127.0.0.1:8000/v1/chat/completions answered HTTP 401: bad key", 1)


def test_an_unfinished_run_as_a_team_points_at_its_checkpoint_export(tmp_path):
    """`run:DIR` needs final/; a run stopped early has checkpoints, and one command makes them models."""
    run = tmp_path / "run"
    (run / "checkpoints" / "step_000002").mkdir(parents=True)
    (run / "checkpoints" / "step_000002" / "state.json").write_text('{"step": 2}')
    (run / "config.json").write_text('{"env": {"id": "MathChat-v0", "kwargs": {}}}')
    result = run_cli("eval", "--team", f"run:{run}", "--sets", "synthetic:1", "--out", str(tmp_path / "out"), *FAST)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"mappa eval: team spec 'run:{run}': {run / 'final'} holds no trained model; a finished `mappa train` run "
        f"writes final/<policy>/, this one has checkpoints of steps [2]: `mappa export checkpoint {run} --out DIR` "
        "makes the newest one models, then --team hf:DIR/<policy>")
