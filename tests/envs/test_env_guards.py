"""Misuse of the env API gets the project's one-line error, not a bare KeyError or a silent surprise
(issue 27): step/last after the episode ended, bad reset options, observe of an unknown agent,
render without a render_mode; and `gymnasium.make("mappa/<id>")` gives the single-stream TextEnv."""
from __future__ import annotations

import warnings

import gymnasium
import pytest

import mappa_envs
from mappa_envs.errors import EnvArgumentError, ResetNeededError, UnknownTaskError
from mappa_envs.mathchat.tasks import synthetic_tasks
from mappa_envs.wrappers import TextEnv

TASKS = synthetic_tasks(4, seed=0)


@pytest.fixture
def env():
    env = mappa_envs.make("MathChat-v0", tasks=TASKS, sandbox="local")
    yield env
    env.close()


def play_out(env) -> None:
    """Every role answers at once (no code), then every agent is stepped out: the episode is over."""
    env.reset(seed=0, options={"task_index": 0})
    for _ in env.agent_iter():
        _, _, terminated, truncated, _ = env.last()
        env.step(None if terminated or truncated else "The answer is \\boxed{1}.")
    assert env.agents == []


def test_step_after_the_episode_ended_says_reset(env):
    play_out(env)
    with pytest.raises(ResetNeededError, match="the episode is over; call reset\\(\\) before step\\(\\)"):
        env.step("more")


def test_last_after_the_episode_ended_says_reset(env):
    play_out(env)
    with pytest.raises(ResetNeededError, match="the episode is over; call reset\\(\\) before last\\(\\)"):
        env.last()


def test_reset_after_the_end_plays_again(env):
    play_out(env)
    env.reset(seed=1)
    assert env.agent_selection == "problem_solver"


def test_task_index_out_of_range_is_refused_not_wrapped(env):
    with pytest.raises(UnknownTaskError, match="task_index 1000000 is out of range; this env has 4 tasks"):
        env.reset(options={"task_index": 10**6})
    with pytest.raises(UnknownTaskError, match="out of range"):
        env.reset(options={"task_index": -1})


def test_task_index_that_is_not_an_int(env):
    with pytest.raises(EnvArgumentError, match="takes an int, got 'abc'"):
        env.reset(options={"task_index": "abc"})
    with pytest.raises(EnvArgumentError, match="takes an int, got 1.0"):
        env.reset(options={"task_index": 1.0})


def test_task_index_picks_that_task(env):
    env.reset(options={"task_index": 3})
    assert env.infos["problem_solver"]["task_id"] == TASKS[3].id


def test_both_task_selectors_at_once(env):
    with pytest.raises(EnvArgumentError, match="both task_id and task_index"):
        env.reset(options={"task_index": 0, "task_id": TASKS[1].id})


def test_unknown_reset_option_is_said(env):
    # a warning, since PettingZoo's api_test resets with a made-up option and requires it to pass
    with pytest.warns(UserWarning, match=r"ignores unknown key\(s\) \['task'\]; it reads only"):
        env.reset(options={"task": 3})


def test_observe_of_an_unknown_agent(env):
    env.reset(seed=0)
    with pytest.raises(EnvArgumentError, match="observe\\('nobody'\\): no such agent; its agents are"):
        env.observe("nobody")
    assert env.observe("verifier") == {"prompt": ""}  # a real agent not yet prompted still observes


def test_render_without_render_mode_warns_and_returns_none(env):
    env.reset(seed=0)
    with pytest.warns(UserWarning, match="without a render_mode; pass render_mode='ansi'"):
        assert env.render() is None


def test_render_ansi_returns_the_transcript():
    env = mappa_envs.make("MathChat-v0", tasks=TASKS, sandbox="local", render_mode="ansi")
    try:
        env.reset(seed=0, options={"task_index": 1})
        env.step("The answer is \\boxed{5}.")
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no warning with a render mode
            text = env.render()
        assert "--- problem_solver (action 1)" in text
    finally:
        env.close()


@pytest.mark.parametrize("env_id", ["MathChat-v0", "DSBench-v0"])
def test_gymnasium_make_gives_the_text_env(env_id):
    env = gymnasium.make(f"mappa/{env_id}", sandbox="local")
    try:
        assert isinstance(env.unwrapped, TextEnv)
        obs, info = env.reset(seed=0)
        assert info["role"] == env.unwrapped.env.possible_agents[0]
        assert obs == env.unwrapped.env.observe(info["role"])["prompt"]
        _, reward, terminated, truncated, info = env.step("I have nothing to add.")
        assert info["last_role"] == env.unwrapped.env.possible_agents[0]
        assert 0.0 <= reward <= 10.0
        assert not terminated
        assert not truncated
    finally:
        env.close()


def test_gymnasium_make_passes_env_kwargs_and_render_mode():
    env = gymnasium.make("mappa/MathChat-v0", tasks=TASKS, sandbox="local", render_mode="ansi")
    try:
        _, info = env.reset(seed=0, options={"task_index": 2})
        assert info["task_id"] == TASKS[2].id
        env.step("The answer is \\boxed{3}.")
        assert env.render().startswith(f"=== MathChat-v0 task {TASKS[2].id}")
    finally:
        env.close()


def test_gymnasium_make_refuses_an_unknown_kwarg():
    with pytest.raises(EnvArgumentError, match="unknown keyword argument"):
        gymnasium.make("mappa/MathChat-v0", no_such_option=1)


def test_text_env_render_without_mode_warns():
    env = TextEnv(mappa_envs.make("MathChat-v0", tasks=TASKS, sandbox="local"))
    try:
        env.reset(seed=0)
        with pytest.warns(UserWarning, match="without a render_mode"):
            assert env.render() is None
    finally:
        env.close()
