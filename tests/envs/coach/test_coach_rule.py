"""RuleCoach: deterministic scores from tool results and env checks, exactly as documented."""
import pytest

from mappa_envs.coach import CoachRequest, RuleCoach
from mappa_envs.coach.rule import CHECK_WEIGHTS

pytestmark = pytest.mark.unit

OK = {"stdout": "42\n", "stderr": "", "ok": True, "timed_out": False, "error": None}


def req(action="Let me compute. \\boxed{42}", tool_results=(), checks=None, **kw) -> CoachRequest:
    return CoachRequest(env_id="MathChat-v0", role="code_executor", role_duties="Run code.", task="6*7?",
                        action=action, tool_results=list(tool_results), checks=checks or {}, **kw)


def score(**kw) -> float:
    return RuleCoach().score(req(**kw)).score


def test_tool_signals():
    assert score() == 5.0  # no signals: the midpoint
    assert score(tool_results=[OK]) == 7.0  # ran (+1.5) and printed (+0.5)
    assert score(tool_results=[{**OK, "stdout": ""}]) == 6.5
    assert score(tool_results=[OK, {**OK, "ok": False, "error": "NameError: x"}]) == 3.0
    assert score(tool_results=[{**OK, "ok": False, "timed_out": True}]) == 2.0


def test_empty_action_scores_zero():
    assert score(action="  \n", tool_results=[OK], checks={"answer_correct": True}) == 0.0


@pytest.mark.parametrize("check", sorted(CHECK_WEIGHTS))
def test_each_check_weight(check):
    bonus, penalty = CHECK_WEIGHTS[check]
    assert score(checks={check: True}) == min(10.0, 5.0 + bonus)
    assert score(checks={check: False}) == max(0.0, 5.0 - penalty)  # a penalty past the base clips at 0


def test_unknown_checks_and_clipping():
    assert score(checks={"something_else": True}) == 5.5
    best = {"answer_present": True, "answer_correct": True, "submission_valid": True, "beats_baseline": True}
    assert score(tool_results=[OK], checks=best) == 10.0
    worst = {k: False for k in CHECK_WEIGHTS}
    assert score(tool_results=[{**OK, "ok": False, "timed_out": True}], checks=worst) == 0.0


def test_deterministic_and_blind_to_prose():
    a = RuleCoach().score(req(action="brilliant reasoning \\boxed{42}", tool_results=[OK],
                              checks={"answer_correct": True}))
    b = RuleCoach().score(req(action="nonsense", tool_results=[OK], checks={"answer_correct": True}))
    assert a == b
    assert a.ok
    assert "answer_correct=True" in a.rationale


def test_answer_correct_reported_only_when_asked():
    assert RuleCoach().score(req(checks={"answer_correct": True}, ask_answer_correct=True)).answer_correct is True
    assert RuleCoach().score(req(checks={"answer_correct": True})).answer_correct is None
