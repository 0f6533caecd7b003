"""CachedCoach: persistent replay with zero HTTP calls, keys, failures not cached, thread safety."""
from __future__ import annotations

import asyncio
import sqlite3
from concurrent.futures import ThreadPoolExecutor

import pytest

from mappa_envs.coach import CachedCoach, CoachRequest, CoachScore, LLMCoach, LLMCoachConfig, RuleCoach
from tests.openai_stub import Step, StubServer


def llm(url: str, model: str = "stub-model") -> LLMCoach:
    return LLMCoach(LLMCoachConfig(model=model, base_url=url, api_key_env=None, backoff_s=0.01, max_retries=0))


def request(i: int, env_id: str = "MathChat-v0") -> CoachRequest:
    return CoachRequest(env_id=env_id, role="problem_solver", role_duties="Solve it.", task=f"Compute {i} squared.",
                        action=f"\\boxed{{{i * i}}}", ground_truth=str(i * i), checks={"answer_correct": True})


def test_replay_gives_identical_scores_with_zero_http_calls(tmp_path):
    path = tmp_path / "coach.sqlite"
    def reply(body):
        return f"RATIONALE: checked\nSCORE: {len(body['messages'][1]['content']) % 11}"

    with StubServer(respond=reply) as stub:
        with CachedCoach(llm(stub.url), path) as cached:
            first = [cached.score(request(i)) for i in range(5)]
            assert (cached.hits, cached.misses, stub.calls) == (0, 5, 5)
            assert cached.score(request(0)).cached
            assert stub.calls == 5  # a repeat in the same run
        dead_url = stub.url
    # The server is gone: a replay must not need it.
    with CachedCoach(llm(dead_url), path) as replay:
        again = [replay.score(request(i)) for i in range(5)]
        assert (replay.hits, replay.misses) == (5, 0)
        assert replay.stats()["entries"] == 5
    def verdicts(scores):
        return [(s.score, s.rationale, s.answer_correct) for s in scores]

    assert verdicts(again) == verdicts(first)
    assert all(s.cached and s.ok and s.attempts == 0 and s.cost_usd == 0 and s.prompt_tokens == 0 for s in again)
    assert not any(s.cached for s in first)


def test_key_depends_on_model_template_and_request(tmp_path):
    with StubServer() as stub:
        a = CachedCoach(llm(stub.url, "model-a"), tmp_path / "c.sqlite")
        b = CachedCoach(llm(stub.url, "model-b"), tmp_path / "c.sqlite")
        assert a.key(request(1)) == a.key(request(1))
        assert a.key(request(1)) != a.key(request(2))
        assert a.key(request(1)) != b.key(request(1))  # another model
        assert a.key(request(1)) != a.key(request(1, env_id="DSBench-v0"))  # another template (and env)
        a.score(request(1))
        b.score(request(1))
        assert stub.calls == 2
        assert a.misses == b.misses == 1


def test_failures_are_not_cached(tmp_path):
    with StubServer() as stub:
        stub.script(Step(status=500))
        cached = CachedCoach(llm(stub.url), tmp_path / "c.sqlite")
        assert not cached.score(request(3)).ok
        later = cached.score(request(3))
        assert later.ok
        assert not later.cached
        assert stub.calls == 2
        assert cached.score(request(3)).cached
        assert stub.calls == 2


def test_async_path_uses_the_cache(tmp_path):
    with StubServer(reply="SCORE: 8") as stub:
        cached = CachedCoach(llm(stub.url), tmp_path / "c.sqlite")

        async def run():
            return await asyncio.gather(*(cached.ascore(request(i)) for i in range(4)))

        first, second = asyncio.run(run()), asyncio.run(run())
        assert [s.score for s in first] == [s.score for s in second] == [8.0] * 4
        assert all(s.cached for s in second)
        assert stub.calls == 4


def test_thread_safe_under_a_worker_pool(tmp_path):
    cached = CachedCoach(RuleCoach(), tmp_path / "c.sqlite")
    requests = [request(i % 20) for i in range(400)]
    with ThreadPoolExecutor(8) as pool:
        scores = list(pool.map(cached.score, requests))
    direct = [RuleCoach().score(r).score for r in requests]
    assert [s.score for s in scores] == direct
    assert cached.hits + cached.misses == 400
    assert cached.stats()["entries"] == 20
    assert cached.misses >= 20


def test_two_handles_on_one_file_see_each_other(tmp_path):
    one, two = CachedCoach(RuleCoach(), tmp_path / "c.sqlite"), CachedCoach(RuleCoach(), tmp_path / "c.sqlite")
    one.score(request(7))
    assert two.score(request(7)).cached
    rows = sqlite3.connect(tmp_path / "c.sqlite").execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]
    assert rows == 1


class PlainCoach:  # a user's coach without cache_identity
    def score(self, request: CoachRequest) -> CoachScore:
        return CoachScore(score=1.0)

    async def ascore(self, request: CoachRequest) -> CoachScore:
        return self.score(request)


def test_a_coach_without_identity_needs_a_namespace(tmp_path):
    with pytest.raises(ValueError, match="namespace"):
        CachedCoach(PlainCoach(), tmp_path / "c.sqlite")
    cached = CachedCoach(PlainCoach(), tmp_path / "c.sqlite", namespace="plain-v1")
    assert cached.score(request(1)).score == 1.0
    assert cached.score(request(1)).cached
    other = CachedCoach(PlainCoach(), tmp_path / "c.sqlite", namespace="plain-v2")
    assert cached.key(request(1)) != other.key(request(1))
