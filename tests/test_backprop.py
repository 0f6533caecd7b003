"""Reward back-propagation (reward_mode="backprop"): hand-worked walks, shares summing to the outcome
on real episodes, the rule judge from checks, the LLM judge in one call per episode, failures recorded."""
from __future__ import annotations

import random
import re

import pytest

import mappa_envs
from mappa_envs.coach import LLMCoach, LLMCoachConfig
from mappa_envs.coach.backprop import backprop, parse_qualities, rule_quality, shares
from mappa_envs.coach.types import CoachRequest, CoachScore
from mappa_envs.wrappers import VectorRunner
from mappa_train.evaluation.blame import faulty_team
from tests.openai_stub import Step, StubServer

MATH = dict(task_source="synthetic", num_tasks=3, split="eval", reward_mode="backprop")


def test_hand_worked_walk_blames_the_breaker_and_passes_the_rest_up():
    # q = [1, 1, 0], outcome 0: V3 = 0; the last action broke it, so V2 = 1 and it stays 1 upstream.
    out, values = shares([1.0, 1.0, 0.0], 0.0)
    assert values == [1.0, 1.0, 1.0, 0.0]
    assert out == [5.0, 5.0, -10.0]  # the residual 10 * V0 shared by quality; the breaker takes the shortfall


def test_hand_worked_walk_with_a_recovered_error_and_partial_quality():
    out, values = shares([0.0, 1.0, 1.0], 1.0)  # the first action erred, the team recovered
    assert values == [1.0, 1.0, 1.0, 1.0]
    assert out == [0.0, 5.0, 5.0]
    out, values = shares([1.0, 0.5], 0.0)  # half the fault on the last action: V1 = 1 - 0.5 * 1
    assert values == [0.5, 0.5, 0.0]
    assert out == pytest.approx([10 * 0.5 * (1 / 1.5), -5.0 + 10 * 0.5 * (0.5 / 1.5)])


def test_shares_always_sum_to_ten_times_the_outcome():
    rng = random.Random(0)
    for _ in range(2000):
        n = rng.randint(1, 9)
        q = [rng.choice([0.0, 1.0, rng.random()]) for _ in range(n)]
        s = rng.choice([0.0, 1.0, rng.random()])
        out, values = shares(q, s)
        assert sum(out) == pytest.approx(10 * s, abs=1e-9)
        assert values[-1] == s
        assert all(b <= a + 1e-12 for a, b in zip(values, values[1:]))  # blame only lowers V going forward


def test_all_zero_qualities_share_the_residual_equally():
    out, _ = shares([0.0, 0.0], 0.0)
    assert sum(out) == pytest.approx(0.0)
    assert out[0] == pytest.approx(out[1] + 10.0)  # the last takes the shortfall; V0 = 1 is split equally


def _request(**kw) -> CoachRequest:
    return CoachRequest(**{"env_id": "MathChat-v0", "role": "verifier", "role_duties": "", "task": "t", **kw})


def test_rule_quality_reads_checks_and_excuses_broken_inputs():
    assert rule_quality(_request(action="x", checks={"answer_present": True, "answer_correct": False})) == 0.0
    assert rule_quality(_request(action="x", checks={"answer_present": False, "code_present": False})) == 0.25
    assert rule_quality(_request(action="x", checks={"inputs_ready": False, "submission_valid": False})) == 1.0
    assert rule_quality(_request(action="   ", checks={"answer_correct": True})) == 0.0
    assert rule_quality(_request(action="x", checks={"printed_answer_correct": False})) == 1.0  # a bonus-only check
    assert rule_quality(_request(action="x", tool_results=[{"ok": False}])) == 0.5
    assert rule_quality(_request(action="x", checks={"answer_correct": True})) == 1.0


def _play(fault: str, coach=None, **kw):
    env = mappa_envs.make("MathChat-v0", coach=coach, **{**MATH, **kw})
    try:
        result = VectorRunner([env], faulty_team("MathChat-v0", env, fault)).play([(0, {"task_index": 0})])[0]
        return result, list(env.unwrapped.episode.actions)
    finally:
        env.close()


@pytest.mark.parametrize("fault", ["none", "solver_wrong", "executor_miscopy", "verifier_overrules"])
def test_rule_backprop_episode_pays_ten_times_the_outcome(fault):
    result, actions = _play(fault)
    assert result.error is None
    assert sum(result.returns.values()) == pytest.approx(10 * result.outcome["score"])
    assert sum(a.share for a in actions) == pytest.approx(10 * result.outcome["score"])
    assert result.outcome["backprop"]["ok"] is True
    assert all(a.reward == 0.0 for a in actions)  # nothing is paid per step: the shares come at the end


def test_rule_backprop_puts_the_lowest_share_on_the_faulty_action():
    for fault, faulty in [("solver_wrong", "problem_solver"), ("verifier_overrules", "verifier")]:
        _, actions = _play(fault)
        lowest = min(actions, key=lambda a: a.share)
        assert lowest.role == faulty
        assert sum(a.share == lowest.share for a in actions) == 1


def _stub_reply(body: dict) -> str:
    """An LLM judge that blames every verifier action and credits the rest."""
    text = body["messages"][-1]["content"]
    actions = re.findall(r"## Action A(\d+) by (\w+)", text)
    return "{" + ", ".join(f'"A{i}": {0 if role == "verifier" else 10}' for i, role in actions) + "}"


def test_llm_backprop_is_one_structured_call_per_episode():
    with StubServer(respond=_stub_reply) as stub:
        coach = LLMCoach(LLMCoachConfig(model="m", base_url=stub.url, api_key_env=None, structured_output=True))
        result, actions = _play("verifier_overrules", coach=coach)
        assert stub.calls == 1
        assert stub.requests[0]["response_format"]["json_schema"]["name"] == "episode_credit"
    assert sum(a.share for a in actions) == pytest.approx(10 * result.outcome["score"])
    assert [a.coach.score for a in actions] == [10.0, 10.0, 10.0, 0.0]
    assert actions[-1].share == pytest.approx(-10.0)


def test_a_failed_llm_judgement_is_recorded_and_pays_nothing():
    with StubServer(reply="I think they all did fine") as stub:
        coach = LLMCoach(LLMCoachConfig(model="m", base_url=stub.url, api_key_env=None, max_retries=0))
        result, actions = _play("none", coach=coach)
        assert stub.calls == 2  # the call and its one format retry
    info = result.outcome["backprop"]
    assert info["ok"] is False
    assert "no usable credit" in info["error"]
    assert "\n" not in info["error"]
    assert all(a.share is None and a.coach.ok is False for a in actions)  # the trainer drops them
    assert sum(result.returns.values()) == 0.0


def test_an_unreachable_judge_is_a_recorded_failure_not_a_crash():
    with StubServer() as stub:
        stub.script(*[Step(status=500)] * 3)
        coach = LLMCoach(LLMCoachConfig(model="m", base_url=stub.url, api_key_env=None, max_retries=1, backoff_s=0))
        result, actions = _play("none", coach=coach)
    assert result.error is None
    assert result.outcome["backprop"]["ok"] is False
    assert "gave up" in result.outcome["backprop"]["error"]


class _Raising:
    def score(self, request):
        raise RuntimeError("judge on fire")

    async def ascore(self, request):
        raise RuntimeError("judge on fire")


def test_a_coach_that_raises_is_recorded_per_episode():
    out = backprop(_Raising(), [_request(action="a")], 1.0)
    assert out.shares is None
    assert out.judgement.error == "RuntimeError: judge on fire"
    assert [v.ok for v in out.verdicts()] == [False]


class _Fixed:
    """Any other Coach: judged by its per-action scores."""

    def score(self, request):
        return CoachScore(score=0.0 if request.role == "verifier" else 10.0)

    async def ascore(self, request):
        return self.score(request)


def test_a_plain_coach_is_judged_by_its_action_scores():
    out = backprop(_Fixed(), [_request(action="a"), _request(action="b", role="solver")], 0.0)
    assert out.judgement.qualities == [0.0, 1.0]
    assert sum(out.shares) == pytest.approx(0.0)


def test_parse_qualities_needs_every_action_in_range():
    assert parse_qualities('{"A0": 7, "A1": 3}', 2) == ([0.7, 0.3], "")
    assert parse_qualities("A0: 7\nA1: 10", 2) == ([0.7, 1.0], "")
    assert parse_qualities('{"A0": 7}', 2)[0] is None
    assert parse_qualities('{"A0": 11, "A1": 3}', 2) == (None, "a quality outside 0-10")
    assert parse_qualities("", 1) == (None, "empty reply")


def test_backprop_is_a_reward_mode_and_bad_modes_stay_one_line():
    from mappa_envs.errors import EnvArgumentError

    with pytest.raises(EnvArgumentError, match="backprop"):
        mappa_envs.make("MathChat-v0", reward_mode="blame")


@pytest.mark.slow
def test_a_training_step_learns_from_backprop_shares(tmp_path):
    from mappa_train.config import load_config
    from mappa_train.metrics import read_metrics
    from mappa_train.train import train
    from tests.test_train import TINY

    overrides = [o for o in TINY if not o.startswith("env.kwargs=")]
    overrides += ["env.kwargs={task_source: synthetic, num_tasks: 16, executor_max_actions: 2, reward_mode: backprop}",
                  f"out_dir={tmp_path}", "steps=1", "eval_every=0"]
    train(load_config(None, overrides))
    (row,) = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert row["actions"] > 0
    assert row["coach_failures"] == 0
