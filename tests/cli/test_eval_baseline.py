"""`mappa eval --team scripted:SKILL` is a baseline whose score follows its skill (issue 27), on MathChat too,
where the Code Executor would otherwise compute the gold answer and put every skill at 1.000. Through the
real CLI, in a subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def accuracy(team: str, out: Path) -> float:
    result = subprocess.run(
        [sys.executable, "-m", "mappa_cli", "eval", "--team", team, "--name", "run", "--sets", "synthetic:12",
         "--out", str(out), "--no-plots", "--no-progress", "--preimport", ""],
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600)
    assert result.returncode == 0, result.stderr
    (summary,) = json.loads((out / "run" / "results.json").read_text())["sets"].values()
    return summary["avg@k"]["mean"]


def test_the_noisy_mathchat_team_scores_by_its_skill(tmp_path):
    none, half, full = (accuracy(f"scripted:{s}", tmp_path / s) for s in ("0.0", "0.5", "1.0"))
    assert none == 0.0
    assert 0.0 < half < 1.0
    assert full == 1.0
