"""Reward back-propagation (reward_mode="backprop"): hand-worked splits, the incentive properties over
random cases, shares summing to the outcome on real episodes, the rule judge from checks, the LLM judge in
one call per episode, failures recorded."""
from __future__ import annotations

import random
import re

import pytest

import mappa_envs
from mappa_envs.coach import LLMCoach, LLMCoachConfig
from mappa_envs.coach.backprop import backprop, parse_qualities, rule_quality, shares
from mappa_envs.coach.types import CoachRequest, CoachScore
from mappa_envs.coach_eval.blame import faulty_team
from mappa_envs.wrappers import VectorRunner
from tests.openai_stub import Step, StubServer

MATH = dict(task_source="synthetic", num_tasks=3, split="eval", reward_mode="backprop")


def test_hand_worked_failures_blame_every_wrong_action_and_pay_no_one_above_par():
    # The reviewer's cases. q = [0, 1, 0], s = 0: the shortfall 10 split by (1 - q) = [1, 0, 1]; the
    # right action keeps par 10/3; the upstream error is blamed as much as the downstream one.
    assert shares([0.0, 1.0, 0.0], 0.0) == pytest.approx([10 / 3 - 5, 10 / 3, 10 / 3 - 5])
    # q = [1, 1, 0], s = 0: the right actions keep par (not 5, more than the all-right 10/3).
    assert shares([1.0, 1.0, 0.0], 0.0) == pytest.approx([10 / 3, 10 / 3, -20 / 3])
    # q = [0, 0, 0], s = 0: nothing earned, nothing paid for wrong work.
    assert shares([0.0, 0.0, 0.0], 0.0) == pytest.approx([0.0, 0.0, 0.0])
    # Half the fault on the last action: par 5 less 10 * (1 - q_t) / 1.5.
    assert shares([1.0, 0.5], 0.0) == pytest.approx([5.0, 5.0 - 10.0])
    assert shares([0.5, 0.5], 0.5) == pytest.approx([2.5, 2.5])  # s = mean q: both regimes give 10 q / n
    assert shares([1.0, 1.0, 1.0], 1.0) == pytest.approx([10 / 3] * 3)  # all right: par each


def test_hand_worked_surplus_shares_the_outcome_by_quality():
    assert shares([0.0, 1.0, 1.0], 1.0) == pytest.approx([0.0, 5.0, 5.0])  # recovered: the error earns 0
    assert shares([0.0, 0.0], 0.5) == pytest.approx([2.5, 2.5])  # every q = 0 yet s > 0: evenly (documented)
    assert shares([1.0, 1.0], 0.5) == pytest.approx([2.5, 2.5])  # no one judged at fault: evenly


def _cases(seed: int, count: int = 3000):
    rng = random.Random(seed)
    for _ in range(count):
        n = rng.randint(1, 9)
        q = [rng.choice([0.0, 1.0, rng.random()]) for _ in range(n)]
        yield q, rng.choice([0.0, 1.0, rng.random()])


def test_shares_always_sum_to_ten_times_the_outcome():
    for q, s in _cases(0):
        assert sum(shares(q, s)) == pytest.approx(10 * s, abs=1e-9)


def test_a_zero_quality_action_never_gets_a_positive_share():
    for q, s in _cases(1):
        if sum(q) == 0 and s > 0:
            continue  # the one documented exception: every action q = 0 yet the team scored
        assert all(x <= 1e-9 for x, qt in zip(shares(q, s), q) if qt == 0), (q, s)


def test_blame_of_a_shortfall_is_in_proportion_to_one_minus_quality_when_no_action_broke_the_result():
    for q, s in _cases(2):
        n = len(q)
        if not (s < 1 and s <= sum(q) / n and any(x < 1 for x in q)) or 0.0 in q:
            continue
        loss = [10 / n - x for x in shares(q, s)]
        for lt, qt in zip(loss, q):  # loss against par = 10 (1 - s) (1 - q_t) / sum(1 - q)
            assert lt == pytest.approx(10 * (1 - s) * (1 - qt) / sum(1 - x for x in q), abs=1e-9)


def test_the_actions_that_broke_the_result_pay_what_the_qualities_leave_unexplained():
    for q, s in _cases(4):
        n = len(q)
        if not (s <= sum(q) / n and 0.0 in q and any(q)):
            continue
        out = shares(q, s)
        for x, v in zip(q, out):  # the others keep their quality's worth of par
            assert v == pytest.approx(10 * x / n if x else -10 * (sum(q) / n - s) / q.count(0.0), abs=1e-9)


def test_no_share_in_a_failed_episode_exceeds_the_all_right_share():
    # Monotonicity: the same actions, all right, score 1 and pay par 10/n each; in a failed episode
    # whose judgement explains the outcome (s <= mean q) no action gets more than that.
    checked = 0
    for q, s in _cases(3):
        if s >= 1 or s > sum(q) / len(q):
            continue
        par = shares([1.0] * len(q), 1.0)
        assert all(x <= p + 1e-9 for x, p in zip(shares(q, s), par)), (q, s)
        checked += 1
    assert checked > 500


def test_the_documented_gap_a_failed_surplus_episode_can_pay_above_par():
    # s < 1 but s > mean q: sum = 9, q = 0 gets <= 0, so two actions cannot both stay <= 10/3.
    out = shares([0.0, 1.0, 1.0], 0.9)
    assert out == pytest.approx([0.0, 4.5, 4.5])
    assert max(out) > 10 / 3


def _request(**kw) -> CoachRequest:
    return CoachRequest(**{"env_id": "MathChat-v0", "role": "verifier", "role_duties": "", "task": "t", **kw})


def test_rule_quality_reads_checks_and_excuses_broken_inputs():
    assert rule_quality(_request(action="x", checks={"answer_present": True, "answer_correct": False})) == 0.0
    # two flaws cost less than half: only a decisive check (a wrong result) zeroes the quality
    assert rule_quality(_request(action="x", checks={"answer_present": False, "code_present": False})) == 0.625
    assert rule_quality(_request(action="x", checks={"inputs_ready": False, "submission_valid": False})) == 1.0
    assert rule_quality(_request(action="   ", checks={"answer_correct": True})) == 0.0
    assert rule_quality(_request(action="x", checks={"printed_answer_correct": False})) == 1.0  # a bonus-only check
    assert rule_quality(_request(action="x", tool_results=[{"ok": False}])) == 0.75
    assert rule_quality(_request(action="x", checks={"step_correct": False})) == 0.0  # Chain: a wrong value
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
    assert sum(result.returns.values()) == pytest.approx(10 * result.outcome.score)
    assert sum(a.share for a in actions) == pytest.approx(10 * result.outcome.score)
    assert result.outcome.details["backprop"]["ok"] is True
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
    assert sum(a.share for a in actions) == pytest.approx(10 * result.outcome.score)
    assert [a.coach.score for a in actions] == [10.0, 10.0, 10.0, 0.0]
    assert [a.role for a in actions] == ["problem_solver", "code_executor", "code_executor", "verifier"]
    # the outcome failed (s = 0); the lone wrong role takes the whole shortfall against par 10/3, and the
    # executor's par is split over its two actions
    assert [a.share for a in actions] == pytest.approx([10 / 3, 5 / 3, 5 / 3, -20 / 3])


def test_a_failed_llm_judgement_is_recorded_and_pays_nothing():
    with StubServer(reply="I think they all did fine") as stub:
        coach = LLMCoach(LLMCoachConfig(model="m", base_url=stub.url, api_key_env=None, max_retries=0))
        result, actions = _play("none", coach=coach)
        assert stub.calls == 2  # the call and its one format retry
    info = result.outcome.details["backprop"]
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
    assert result.outcome.details["backprop"]["ok"] is False
    assert "gave up" in result.outcome.details["backprop"]["error"]


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
    assert parse_qualities('{"A0": 11, "A1": 3}', 2) == (None, "A0's quality 11 is not in 0-10")
    assert parse_qualities("", 1) == (None, "empty reply")


def test_backprop_is_a_reward_mode_and_bad_modes_stay_one_line():
    from mappa_envs.errors import EnvArgumentError

    with pytest.raises(EnvArgumentError, match="backprop"):
        mappa_envs.make("MathChat-v0", reward_mode="blame")


@pytest.mark.slow
def test_a_training_step_learns_from_backprop_shares(tmp_path):
    from mappa_train.config import load_config
    from mappa_train.runlog import read_metrics
    from mappa_train.train import train
    from tests.train.test_train import TINY

    overrides = [o for o in TINY if not o.startswith("env.kwargs=")]
    overrides += ["env.kwargs={task_source: synthetic, num_tasks: 16, executor_max_actions: 2, reward_mode: backprop}",
                  f"out_dir={tmp_path}", "steps=1", "eval_every=0"]
    train(load_config(None, overrides))
    (row,) = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert row["actions"] > 0
    assert row["coach_failures"] == 0


def test_the_episode_prompt_names_the_topology_of_a_user_spec(tmp_path):
    """The back-propagation judge sees the fan-in and the loop it assigns credit along, as the per-action
    coach does (`CoachRequest.team`)."""
    from mappa_envs.coach.backprop import episode_messages
    from mappa_envs.coach_eval.blame import record
    from tests.user_specs import write_specs

    fan_in, loop = write_specs(tmp_path)
    for spec, words in ((fan_in, "judge (after coder, reasoner; sees coder, reasoner)"),
                        (loop, "The checker may send the work back to the solver up to 2 time(s)")):
        requests = record(f"spec:{spec}", "none", {"scenario_args": {"num_tasks": 1}})
        prompt = episode_messages(requests, 1.0)[1]["content"]
        assert "## The team\nAgents act in this order: " in prompt
        assert words in prompt
