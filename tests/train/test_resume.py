"""A run killed with SIGKILL and restarted resumes after its last checkpoint and logs the same next
metrics as the uninterrupted run (seeded, CPU): no experience lost or repeated."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from mappa_train.runlog import read_metrics
from tests.train.test_train import TINY

pytestmark = pytest.mark.slow
STEPS = 4


def _cmd(out) -> list[str]:
    return [sys.executable, "-m", "mappa_cli", "train", *TINY, f"out_dir={out}", f"steps={STEPS}",
            "eval_every=0", "checkpoint_every=1", f"keep_checkpoints={STEPS}", "log.tensorboard=false",
            "log.plot=false"]


def same_metrics(a: dict, b: dict) -> None:
    """Two runs' metric rows match: timings (wall, CPU) aside, floats to 1e-5 relative. A logprob_gap_* is itself a
    difference of two float32 computations (a few ulps, ~1e-7): its exact value is rounding noise that
    can move by an ulp between runs, so it matches to 1e-5 absolute, far below the 1e-3 a stale weight shows."""
    keys = {k for k in a if not k.startswith(("time_", "cpu_"))}
    assert keys == {k for k in b if not k.startswith(("time_", "cpu_"))}
    for k in keys:
        if isinstance(b[k], float):
            tol = {"abs": 1e-5} if k.startswith("logprob_gap") else {"rel": 1e-5, "abs": 1e-7}
            assert a[k] == pytest.approx(b[k], **tol), k
        else:
            assert a[k] == b[k], k


def test_sigkill_then_resume_matches_uninterrupted(tmp_path):
    # a world-of-one set up earlier in this pytest process leaves RANK/MASTER_PORT in os.environ: two
    # children inheriting them would race for the same rendezvous port
    dist_vars = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
    env = {**{k: v for k, v in os.environ.items() if k not in dist_vars}, "DS_ACCELERATOR": "cpu"}
    full = subprocess.Popen(_cmd(tmp_path / "full"), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    log = (tmp_path / "killed.log").open("w")
    killed = subprocess.Popen(_cmd(tmp_path / "killed"), env=env, stdout=subprocess.DEVNULL, stderr=log)
    marker = tmp_path / "killed" / "checkpoints" / "step_000001" / "state.json"
    deadline = time.monotonic() + 900
    while not marker.exists() and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), ("the run never wrote its first checkpoint:\n"
                             + (tmp_path / "killed.log").read_text()[-3000:])
    killed.send_signal(signal.SIGKILL)
    assert killed.wait() == -signal.SIGKILL, "the run finished before it could be killed"
    resumed = subprocess.run(_cmd(tmp_path / "killed"), env=env, capture_output=True, text=True, timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert full.wait(timeout=900) == 0, full.stderr.read()[-3000:]
    a = [r for r in read_metrics(tmp_path / "full" / "metrics.jsonl") if r["kind"] == "train"]
    b = [r for r in read_metrics(tmp_path / "killed" / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in b] == list(range(1, STEPS + 1))  # each step logged once
    for x, y in zip(a, b):
        same_metrics(x, y)
