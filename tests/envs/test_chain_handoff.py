"""Chain-v0 pays for the value it hands on: one reading of a hand-off (`stated_value` of the turn's closing
action) is paid, judged against by the next step, and is the team's answer; and the chain scenario refuses,
at make(), a team in which a step is not shown the value it is judged against or has no step."""
import pytest

import mappa_envs
from mappa_envs.chain.env import apply, chain_spec
from mappa_envs.errors import SpecError


def _chain(**kw):
    return mappa_envs.make("Chain-v0", depth=2, num_tasks=1, sandbox="local", coach="rule", **kw)


def _values(env):
    meta = env.unwrapped.episode.task.meta
    return meta["start"], meta["steps"], meta["values"]


def test_the_value_a_step_is_paid_for_is_the_value_the_next_step_is_judged_against():
    env = _chain(max_actions=2)
    try:
        env.reset(seed=0)
        start, steps, values = _values(env)
        # step_1 works in a cell and writes a decoy \boxed{} beside it, then closes with a plain final line
        env.step(f"Working.\n```python\nprint({start})\n```\n\\boxed{{{values[0] + 500}}}")
        env.step(f"Final answer: {values[0]}")
        assert env.unwrapped.last_action.checks["step_correct"] is True  # paid for values[0]
        env.step(f"\\boxed{{{apply(*steps[1], values[0])}}}")  # step_2 works from the paid value
        checks = env.unwrapped.last_action.checks
        assert checks["inputs_ready"] is True
        assert checks["step_correct"] is True
        assert env.unwrapped.outcome.correct is True
        assert env.unwrapped.outcome.details["first_wrong_step"] is None
    finally:
        env.close()


def test_the_team_answer_is_what_the_last_step_hands_on():
    env = _chain(max_actions=2)
    try:
        env.reset(seed=0)
        _, _, values = _values(env)
        env.step(f"\\boxed{{{values[0]}}}")
        # the last step's working action boxes the right value, its closing action states a wrong one
        env.step(f"```python\nprint(1)\n```\n\\boxed{{{values[1]}}}")
        env.step(f"Final answer: {values[1] + 1}")
        assert env.unwrapped.last_action.checks["step_correct"] is False
        assert env.unwrapped.outcome.details["predicted"] == values[1] + 1
        assert env.unwrapped.outcome.correct is False
    finally:
        env.close()


def test_a_role_without_tools_closes_its_turn_with_any_action():
    spec = chain_spec(2)
    spec["roles"][0]["tools"] = False  # its ```python is text, not a cell: the action closes the turn
    env = mappa_envs.make("Team-v0", spec=spec, sandbox="local", coach="rule",
                          scenario_args={"depth": 2, "num_tasks": 1})
    try:
        env.reset(seed=0)
        start, steps, values = _values(env)
        env.step(f"```python\nprint({start})\n```\n\\boxed{{{values[0]}}}")
        assert env.unwrapped.last_action.checks["step_correct"] is True
        assert env.agent_selection == "step_2"
    finally:
        env.close()


def _spec(roles, flow=None):
    spec = chain_spec(len(roles))
    by = {r["name"]: r for r in spec["roles"]}
    spec["roles"] = [by.get(n, {**by["step_1"], "name": n}) if isinstance(n, str) else {**by[n[0]], **n[1]}
                     for n in roles]
    if flow is not None:
        spec["flow"] = flow
    return spec


@pytest.mark.parametrize("spec, message", [
    (_spec([("step_1", {}), ("step_2", {"sees": []})]), "step_2 is judged against the value step_1 hands on"),
    (_spec(["step_2", "step_1"]), "step_2 acts before step_1"),
    (_spec(["step_1", "step_2", "reviewer"], [{"from": "step_1", "to": "step_2"}, {"from": "step_2",
                                                                                   "to": "reviewer"}]),
     r"role\(s\) \['reviewer'\] have no step"),
    (_spec(["step_1", "step_3"]), r"role\(s\) \['step_3'\] have no step"),
    (_spec(["step_1"]), r"role\(s\) \['step_2'\] are missing"),
])
def test_the_chain_scenario_refuses_a_team_it_cannot_judge(spec, message):
    with pytest.raises(SpecError, match=message) as e:
        mappa_envs.make("Team-v0", spec=spec, sandbox="local", scenario_args={"depth": 2, "num_tasks": 1})
    assert "\n" not in str(e.value)
