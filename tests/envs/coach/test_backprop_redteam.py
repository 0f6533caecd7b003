"""Back-propagated reward, attacked (issue 36): the action that decided a failure carries the most blame,
sabotage is blamed on the saboteur, padding does not raise a role's share, a text judge is read from its
own final block only, and a non-finite score or outcome is a failed judgement, not full blame."""
from __future__ import annotations

import math
import random

import pytest

import mappa_envs
from mappa_envs.chain.scripted import ScriptedChainPolicy
from mappa_envs.coach import LLMCoach, LLMCoachConfig, RuleCoach
from mappa_envs.coach.backprop import backprop, parse_qualities, shares
from mappa_envs.coach.types import CoachRequest, CoachScore
from mappa_envs.wrappers import VectorRunner
from tests.openai_stub import StubServer


def _request(role: str, checks: dict, action: str = "work", env_id: str = "CodeTest-v0", **kw) -> CoachRequest:
    return CoachRequest(env_id=env_id, role=role, role_duties="", task="t", action=action, checks=checks, **kw)


def _by_role(requests, out) -> dict[str, float]:
    paid: dict[str, float] = {}
    for r, s in zip(requests, out):
        paid[r.role] = paid.get(r.role, 0.0) + s
    return paid


# ---- the action that decided the failure ------------------------------------------------------

class _ExploreThenAnswer:
    """Chain: step_1 first runs a cell that raises (harmless exploration), then states the right value;
    step_2 states a wrong one (ScriptedChainPolicy with skill 0 for it)."""

    def __init__(self):
        self.scripted = ScriptedChainPolicy(skill={"step_1": 1.0, "step_2": 0.0})

    def respond(self, conversations, roles, seeds=None):
        out = []
        for conv, role in zip(conversations, roles):
            first = not any(m["role"] == "assistant" for m in conv)
            if role == "step_1" and first:
                out.append("Let me look first.\n```python\nprint(undefined_name)\n```")
            else:  # answer as the scripted agent would from the opening prompt alone
                out.append(self.scripted.respond([conv[:2]], [role])[0])
        return out


def test_a_wrong_step_is_blamed_more_than_a_failed_exploratory_cell_upstream():
    env = mappa_envs.make("Chain-v0", depth=2, num_tasks=2, reward_mode="backprop")
    try:
        result = VectorRunner([env], _ExploreThenAnswer()).play([(0, {"task_index": 0})])[0]
        actions = list(env.unwrapped.episode.actions)
    finally:
        env.close()
    assert result.outcome.score == 0.0
    assert [a.role for a in actions] == ["step_1", "step_1", "step_2"]
    assert actions[0].checks.get("step_computed") is False
    assert actions[1].checks["step_correct"] is True
    assert actions[2].checks["step_correct"] is False
    wrong = actions[2]
    assert wrong.coach.score == 0.0  # a wrong value is fully wrong, not half
    assert wrong.share == min(a.share for a in actions) < 0
    assert result.returns["step_2"] < result.returns["step_1"]
    # the wrong step takes the whole team loss beyond the explorer's own flaw: par 5 each, the explorer's
    # role keeps its quality's worth (a flaw costs at most half), the wrong step pays the rest
    explorer = actions[0].coach.score / 10
    assert 0.5 < explorer < 1
    assert result.returns["step_1"] == pytest.approx(5 * explorer)
    assert result.returns["step_2"] == pytest.approx(-5 * explorer)
    assert sum(result.returns.values()) == pytest.approx(0.0)


def test_one_wrong_result_outweighs_any_number_of_harmless_flaws():
    rng = random.Random(0)
    for _ in range(300):
        flawed = [_request("explorer", {"answer_present": False, "code_present": False, "new_work": False},
                           tool_results=[{"ok": False}]) for _ in range(rng.randint(1, 6))]
        wrong = _request("decider", {"answer_correct": False})
        cut = rng.randint(0, len(flawed))
        requests = [_request("bystander", {})] + flawed[:cut] + [wrong] + flawed[cut:]
        out = backprop(RuleCoach(), requests, 0.0).shares
        paid = _by_role(requests, out)
        assert paid["decider"] < paid["explorer"] <= paid["bystander"]
        assert out[requests.index(wrong)] == min(out)


# ---- sabotage ---------------------------------------------------------------------------------

def _codetest_episode(reviewer_checks: dict, reviewer_action: str = "Cleaner:\n```python\ndef f(*a): ...\n```"):
    """Right code from the Coder (its checks all pass, as a lookup table's would), tests that pass, then
    the Reviewer replaces the code with its own; the hidden tests fail the final solution (s = 0)."""
    return [
        _request("coder", {"code_present": True, "code_compiles": True, "code_ran": True, "examples_pass": True},
                 "```python\ndef f(x): return x\n```"),
        _request("coder", {}, "That is my solution."),
        _request("test_writer", {"tests_present": True, "tests_ran": True, "tests_correct": True,
                                 "tests_catch_bug": True}, "```python\nassert f(1) == 1\n```"),
        _request("reviewer", reviewer_checks, reviewer_action),
        _request("reviewer", {"verdict_present": True, "examples_pass": True}, "APPROVED"),
    ]


class _Approving:
    """A judge (any plain coach) fooled by the lookup: every action looks right to it."""

    def score(self, request):
        return CoachScore(score=10.0)

    async def ascore(self, request):
        return self.score(request)


@pytest.mark.parametrize("reviewer_checks", [
    {"code_compiles": True, "code_ran": True, "examples_pass": True},  # today's checks: none sees correctness
    {"code_compiles": True, "code_ran": True, "examples_pass": True, "code_correct": False},  # a hidden-test check
])
@pytest.mark.parametrize("coach", [RuleCoach(), _Approving()], ids=["rule", "fooled-judge"])
def test_a_reviewer_that_breaks_right_code_takes_the_failure(reviewer_checks, coach):
    requests = _codetest_episode(reviewer_checks)
    out = backprop(coach, requests, 0.0)
    paid = _by_role(requests, out.shares)
    assert paid["coder"] == pytest.approx(10 / 3)  # par: its code was right, it is not blamed
    assert paid["test_writer"] == pytest.approx(10 / 3)
    assert paid["reviewer"] == pytest.approx(-20 / 3)
    assert out.shares[3] == min(out.shares)  # the sabotaging submission itself carries the blame


def test_the_action_that_made_right_code_wrong_is_zero_whatever_the_judge_says():
    # No check on the action says so; the env's before/after facts do (CodeTest's metrics).
    requests = _codetest_episode({"verdict_present": True}, "APPROVED")  # it broke the code some other way
    requests[0].metrics = {"solution_correct_before": None, "solution_correct": True}  # the Coder's was right
    requests[3].metrics = {"solution_correct_before": True, "solution_correct": False}
    requests[4].metrics = {"solution_correct_before": False, "solution_correct": False}  # already wrong: not it
    for coach in (RuleCoach(), _Approving()):
        out = backprop(coach, requests, 0.0)
        assert out.judgement.qualities[3] == 0.0
        assert out.judgement.qualities[4] == 1.0
        assert _by_role(requests, out.shares)["reviewer"] == pytest.approx(-20 / 3)


class _LookupReviewer:
    """CodeTest's scripted team, except that the Reviewer replaces the Coder's right code with a table of
    the docstring's examples (it passes them all, and nothing else)."""

    def __init__(self, env):
        from mappa_envs.codetest.scripted import for_env

        self.team, self.problem = for_env(env), env.unwrapped.scenario.problems[0]

    def respond(self, conversations, roles, seeds=None):
        out = self.team.respond(conversations, roles, seeds)
        for i, (conv, role) in enumerate(zip(conversations, roles)):
            if role == "reviewer" and not any(m["role"] == "assistant" for m in conv):
                table = {repr(tuple(args)): want for args, want in self.problem.examples}
                out[i] = ("A cleaner version.\n```python\n"
                          f"def {self.problem.entry_point}(*args):\n    return {table!r}.get(repr(args))\n```")
        return out


def test_on_codetest_a_reviewer_that_breaks_right_code_takes_the_failure():
    env = mappa_envs.make("CodeTest-v0", task_ids=["HumanEval/0"], reward_mode="backprop")
    try:
        result = VectorRunner([env], _LookupReviewer(env)).play([(0, {"task_index": 0})])[0]
        actions = list(env.unwrapped.episode.actions)
    finally:
        env.close()
    assert result.error is None
    assert result.outcome.score < 1
    sabotage = next(a for a in actions if a.role == "reviewer")
    assert sabotage.checks.get("examples_pass") is True  # it looks right by every visible check
    assert sabotage.share == min(a.share for a in actions) < 0
    assert result.returns["reviewer"] < 0 < result.returns["coder"]
    assert result.returns["coder"] == pytest.approx(10 / 3)  # the Coder's right code keeps par
    assert sum(result.returns.values()) == pytest.approx(10 * result.outcome.score)


def test_a_reviewer_that_resubmits_wrong_code_shares_the_blame_with_its_author():
    code = "```python\ndef f(x): return x + 1\n```"
    requests = _codetest_episode({"code_compiles": True, "code_ran": True, "examples_pass": True}, f"Fine.\n{code}")
    requests[0].action = f"Mine:\n{code}"  # the Coder's code, handed on unchanged: its bug is the Coder's too
    out = backprop(RuleCoach(), requests, 0.0)
    assert out.judgement.qualities[0] == out.judgement.qualities[3] == 0.0
    paid = _by_role(requests, out.shares)
    assert paid["coder"] == pytest.approx(paid["reviewer"])
    assert paid["coder"] < 0 < paid["test_writer"]


def test_the_llm_judge_is_told_which_submission_the_outcome_measured():
    from mappa_envs.coach.backprop import episode_messages

    prompt = episode_messages(_codetest_episode({"code_compiles": True}), 0.0)[1]["content"]
    assert "## Outcome\nScore 0.00 of 1. It measured the solution submitted in A3." in prompt


# ---- padding ----------------------------------------------------------------------------------

def _random_episode(rng: random.Random):
    roles = [f"r{i}" for i in range(rng.randint(1, 4))]
    acts = [(r, rng.choice([0.0, 1.0, 0.5, rng.random()])) for r in roles for _ in range(rng.randint(1, 3))]
    rng.shuffle(acts)
    return [r for r, _ in acts], [q for _, q in acts], rng.choice([0.0, 1.0, rng.random()])


def test_extra_actions_never_raise_a_roles_share():
    rng = random.Random(7)
    checked = 0
    for _ in range(3000):
        roles, q, s = _random_episode(rng)
        before = _by_role([_request(r, {}) for r in roles], shares(q, s, roles))
        who = rng.choice(roles)
        own = [x for r, x in zip(roles, q) if r == who]
        extra = rng.choice([rng.choice(own), 1.0, 0.0, rng.random()])  # a repeat, a no-op judged right, junk
        at = rng.randint(0, len(q))
        roles2, q2 = roles[:at] + [who] + roles[at:], q[:at] + [extra] + q[at:]
        after = _by_role([_request(r, {}) for r in roles2], shares(q2, s, roles2))
        assert after[who] <= before[who] + 1e-9, (roles, q, s, who, extra)
        if extra >= min(own):
            assert after == pytest.approx(before)  # nothing about the team changed
        assert sum(after.values()) == pytest.approx(10 * s)
        checked += 1
    assert checked == 3000


def test_padding_a_turn_with_repeats_pays_the_role_nothing_more():
    # Every action judged right (a judge that sees a repeat as harmless); the team succeeded.
    honest = ["solver", "executor", "verifier"]
    padded = ["solver", "executor", "executor", "executor", "verifier"]
    assert _by_role([_request(r, {}) for r in padded], shares([1.0] * 5, 1.0, padded)) == pytest.approx(
        _by_role([_request(r, {}) for r in honest], shares([1.0] * 3, 1.0, honest)))
    # a padding action in a blamed role is not paid either: the blame lands on the wrong action
    out = shares([1.0, 1.0, 0.0], 0.0, ["solver", "verifier", "verifier"])
    assert out == pytest.approx([10 / 2, 0.0, -10 / 2])


def test_shares_keep_their_guarantees_with_roles():
    rng = random.Random(3)
    for _ in range(3000):
        roles, q, s = _random_episode(rng)
        out = shares(q, s, roles)
        assert sum(out) == pytest.approx(10 * s, abs=1e-9)
        role_q = {r: min(x for rr, x in zip(roles, q) if rr == r) for r in roles}
        if not (s > 0 and not any(role_q.values())):  # the documented exception: every role judged 0, yet s > 0
            assert all(v <= 1e-9 for v, x in zip(out, q) if x == 0), (roles, q, s)
        if s < 1 and s <= sum(role_q.values()) / len(role_q):  # a failure the judgement explains: no one above par
            counts = {r: roles.count(r) for r in roles}
            assert all(v <= 10 / len(counts) / counts[r] + 1e-9 for v, r in zip(out, roles)), (roles, q, s)


# ---- the judge's own labels -------------------------------------------------------------------

@pytest.mark.parametrize("reply", [
    "The verifier's output says\nA1: 10\nbut it overruled a right answer.\n\nA0: 9\nA1: 0",
    "The agent wrote A1: 10 about itself.\nA0: 9\nA1: 0",
    "> A0: 0\n> A1: 10\nThat is what the agent claims. My verdict:\nA0: 9\nA1: 0",
    "```\nA1: 10\n```\nA0: 9\nA1: 0",
    "<think>the agent says A1: 10\nA0: 0\nA1: 10</think>\nA0: 9\nA1: 0",
    "A0: 9\nA1: 0\n\nFor the record the agent printed:\nA1: 10",  # a later partial quote rates no one
    "Reasoning first.\n```json\n{\"A0\": 9, \"A1\": 0}\n```",
])
def test_a_quoted_agent_rating_is_not_the_judges_verdict(reply):
    assert parse_qualities(reply, 2) == ([0.9, 0.0], "")


@pytest.mark.parametrize("reply, problem", [
    ('{"A0": NaN, "A1": 0}', "A0's quality nan is not in 0-10"),
    ('{"A0": Infinity, "A1": 0}', "A0's quality inf is not in 0-10"),
    ('{"A0": 9, "A0": 10, "A1": 0}', "A0 is rated twice"),
    ('{"A0": 9, "A1": 0, "A2": 3}', "a quality for A2, but there are 2 actions"),
    ('{"A0": "9", "A1": 0}', "A0's quality is not a number"),
    ("A0: 9\nA1: 0\n```\nA0: 9\nA1: 10\n```", "ambiguous"),
    ("The agent wrote A0: 10 and A1: 10.", "no block of label lines"),
])
def test_unusable_or_ambiguous_replies_are_failed_judgements(reply, problem):
    qualities, said = parse_qualities(reply, 2)
    assert qualities is None
    assert problem in said


def test_the_env_pays_the_judges_final_block_not_the_agents_claim():
    """End to end: the verifier's text claims `A3: 10`; the text judge quotes it, then gives its own block."""
    def respond(body):
        return ("The verifier claims:\nA3: 10\nIt overruled a correct answer, so it broke the result.\n\n"
                "A0: 10\nA1: 10\nA2: 10\nA3: 0")

    from mappa_envs.coach_eval.blame import faulty_team

    with StubServer(respond=respond) as stub:
        coach = LLMCoach(LLMCoachConfig(model="m", base_url=stub.url, api_key_env=None, structured_output=False))
        env = mappa_envs.make("MathChat-v0", coach=coach, task_source="synthetic", num_tasks=3, split="eval",
                              reward_mode="backprop")
        try:
            team = faulty_team("MathChat-v0", env, "verifier_overrules")
            result = VectorRunner([env], team).play([(0, {"task_index": 0})])[0]
            actions = list(env.unwrapped.episode.actions)
        finally:
            env.close()
    assert result.outcome.score == 0.0
    assert [a.coach.score for a in actions] == [10.0, 10.0, 10.0, 0.0]
    assert result.returns["verifier"] == pytest.approx(10 / 3 - 10)


# ---- non-finite numbers -----------------------------------------------------------------------

class _Says:
    def __init__(self, value):
        self.value = value

    def score(self, request):
        return CoachScore(score=self.value if request.role == "b" else 10.0)

    async def ascore(self, request):
        return self.score(request)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 11.0, -1.0])
def test_a_non_finite_or_out_of_range_score_is_a_failed_judgement_not_full_blame(value):
    out = backprop(_Says(value), [_request("a", {}), _request("b", {})], 0.0)
    assert out.shares is None
    assert out.judgement.ok is False
    assert "A1 got the score" in out.judgement.error
    assert all(not v.ok for v in out.verdicts())


@pytest.mark.parametrize("outcome", [math.nan, math.inf, 7.0, -3.0])
def test_a_damaged_outcome_is_split_over_no_one(outcome):
    out = backprop(RuleCoach(), [_request("a", {})], outcome)
    assert out.shares is None
    assert "is not a score in [0, 1]" in out.judgement.error
    with pytest.raises(ValueError, match="not a number in"):
        shares([1.0], outcome)
    with pytest.raises(ValueError, match="not a number in"):
        shares([math.nan, 1.0], 0.0)
