"""MathChat-v0 episodes played with hand-written actions, through the public AEC API."""
import json

import pytest

import mappa_envs
from mappa_envs.core.pipeline import EpisodeLimits, Task
from mappa_envs.mathchat.scripted import ScriptedMathPolicy

TASK = Task(id="t1", prompt="What is $6 \\times 7$?", answer="42")


def make_env(**kwargs):
    kwargs.setdefault("tasks", [TASK])
    kwargs.setdefault("sandbox", "local")
    return mappa_envs.make("MathChat-v0", **kwargs)


def play(env, script: dict[str, list], seed=0):
    """Step the env with `script[agent]` actions in order; return per-step (agent, reward, info)."""
    env.reset(seed=seed)
    steps, queues = [], {a: list(v) for a, v in script.items()}
    env.final_returns = {}
    for agent in env.agent_iter(max_iter=50):
        _, reward, terminated, truncated, _ = env.last()
        if terminated or truncated:
            env.final_returns[agent] = reward
            env.step(None)
            continue
        env.step(queues[agent].pop(0))
        steps.append((agent, env.rewards[agent], env.infos[agent]))
    return steps


GOOD = {
    "problem_solver": ["6 times 7 is 42. \\boxed{42}"],
    "code_executor": ["```python\nx = 6 * 7\nprint(x)\n```", "The code printed 42. \\boxed{42}"],
    "verifier": ["Both agree. \\boxed{42}"],
}


def test_correct_answer_episode():
    env = make_env()
    steps = play(env, GOOD)
    assert [a for a, _, _ in steps] == ["problem_solver", "code_executor", "code_executor", "verifier"]
    executor_cell = steps[1][2]["action"]["tool_results"][0]
    assert executor_cell["ok"]
    assert executor_cell["stdout"] == "42\n"
    outcome = env.episode.outcome
    assert outcome.correct
    assert outcome.score == 1.0
    assert outcome.details["predicted"] == "42"
    assert all(r > 5 for _, r, _ in steps)  # the rule coach rewards verified, correct work
    assert steps[-1][2]["action"]["checks"] == {"answer_present": True, "answer_correct": True}
    env.close()


def test_wrong_answer_episode_is_scored_lower():
    env = make_env()
    wrong = {**GOOD, "verifier": ["I think it is \\boxed{41}"]}
    steps = play(env, wrong)
    assert env.episode.outcome.correct is False
    assert steps[-1][2]["outcome"]["predicted"] == "41"
    assert steps[-1][1] < play(make_env(), GOOD)[-1][1]
    env.close()


def test_code_that_raises_is_reported_and_the_turn_goes_on():
    env = make_env()
    steps = play(env, {**GOOD, "code_executor": ["```python\n1/0\n```", "```python\nprint(6*7)\n```", "\\boxed{42}"]})
    first = steps[1][2]["action"]["tool_results"][0]
    assert not first["ok"]
    assert "ZeroDivisionError" in first["error"]
    assert steps[2][2]["action"]["tool_results"][0]["stdout"] == "42\n"  # the session survived
    assert steps[1][1] < steps[2][1]
    assert "ZeroDivisionError" in steps[2][2]["messages"][-3]["content"] or any(
        "ZeroDivisionError" in m["content"] for m in steps[2][2]["messages"])
    env.close()


def test_code_that_loops_past_the_timeout():
    env = make_env(limits=EpisodeLimits(cell_timeout_s=1.0))
    steps = play(env, {**GOOD, "code_executor": ["```python\nwhile True:\n    pass\n```",
                                                   "```python\nprint('alive')\n```", "done \\boxed{42}"]})
    looped = steps[1][2]["action"]["tool_results"][0]
    assert looped["timed_out"]
    assert not looped["ok"]
    assert steps[2][2]["action"]["tool_results"][0]["stdout"] == "alive\n"
    env.close()


def test_executor_without_code_ends_its_turn():
    env = make_env()
    steps = play(env, {**GOOD, "code_executor": ["I trust the solver: \\boxed{42}"]})
    assert [a for a, _, _ in steps] == ["problem_solver", "code_executor", "verifier"]
    assert steps[1][2]["action"]["checks"]["code_present"] is False
    env.close()


@pytest.mark.parametrize("code,credited", [
    ("print(6 * 7)", True), ("print('x =', 1)\nprint(6 * 7)", True),  # the last printed line counts
    ("print(41)", False), ("y = 6 * 7", False), ("print(6 * 7)\nraise ValueError", False),
    ("print(42)", False), ("x = '42'\nprint(x)", False), ("print(40 + 2)", False),  # copied, not computed
])
def test_the_executor_is_credited_when_its_code_prints_the_answer(code, credited):
    """`printed_answer_correct` gives the coach the cell's own result: +2 when it computed the right
    answer, no penalty otherwise."""
    env = make_env(executor_max_actions=1)
    steps = play(env, {**GOOD, "code_executor": [f"```python\n{code}\n```"]})
    checks = steps[1][2]["action"]["checks"]
    assert checks["printed_answer_correct"] is credited
    ran, printed = "raise" not in code, "print" in code and "raise" not in code
    expected = 5 + 0.5 + (1.5 + 0.5 * printed if ran else -2) + 2 * credited
    assert steps[1][1] == pytest.approx(expected)
    env.close()


def test_two_action_executor_keeps_interpreter_state():
    env = make_env()
    steps = play(env, {**GOOD, "code_executor": ["```python\nsecret = 6 * 7\n```", "```python\nprint(secret)\n```",
                                                 "\\boxed{42}"]})
    assert steps[2][2]["action"]["tool_results"][0]["stdout"] == "42\n"
    # its second prompt is its first plus its action and the tool output, appended
    second_prompt = steps[2][2]["messages"]
    assert second_prompt[-2] == {"role": "assistant", "content": "```python\nprint(secret)\n```"} or \
        second_prompt[-4]["content"] == "```python\nsecret = 6 * 7\n```"
    env.close()


def test_code_inside_think_is_not_run():
    env = make_env()
    steps = play(env, {**GOOD, "code_executor": ["<think>```python\nprint('hidden')\n```</think> \\boxed{42}"]})
    assert steps[1][2]["action"]["tool_results"] == []
    env.close()


def test_executor_action_limit():
    env = make_env(executor_max_actions=2)
    cell = "```python\nprint(1)\n```"
    steps = play(env, {**GOOD, "code_executor": [cell, cell, cell]})
    assert [a for a, _, _ in steps].count("code_executor") == 2
    env.close()


def test_verifier_sees_upstream_outputs_and_tool_output():
    env = make_env()
    steps = play(env, GOOD)
    verifier_prompt = steps[-1][2]["messages"][-1]["content"]
    assert "## Output of the problem_solver" in verifier_prompt
    assert "## Output of the code_executor" in verifier_prompt
    assert "[cell 1] ok\n    42" in verifier_prompt  # cell output indented under its header
    env.close()


@pytest.mark.parametrize("bad, error", [
    (123, "must be a str"), (None, "must be a str"), ("", "empty action"), ("   \n", "empty action"),
    ("x" * 100_000, "cut to max_action_chars"), ("nul\x00bytes", "NUL"),
])
def test_bad_actions_never_crash(bad, error):
    env = make_env()
    env.reset(seed=0)
    env.step(bad)
    info = env.infos["problem_solver"]["action"]
    assert error in info["input_error"]
    assert env.agent_selection == "code_executor"  # the episode continues
    env.close()


def test_garbage_text_is_an_action_like_any_other():
    env = make_env()
    steps = play(env, {a: ["\u2603\ufffd```python\n\x07 garbage ((\n```"] * 3 for a in GOOD})
    assert env.episode.outcome.correct is False
    assert steps[1][2]["action"]["tool_results"][0]["ok"] is False  # SyntaxError, reported
    env.close()


def test_reward_modes():
    process = play(make_env(reward_mode="process"), GOOD)
    outcome_env = make_env(reward_mode="outcome")
    outcome = play(outcome_env, GOOD)
    assert [r for _, r, _ in outcome[:-1]] == [0.0, 0.0, 0.0]
    assert outcome[-1][1] == 10.0
    assert outcome_env.final_returns == {"problem_solver": 10.0, "code_executor": 10.0, "verifier": 10.0}
    both = play(make_env(reward_mode="process+outcome"), GOOD)
    assert both[-1][1] == pytest.approx(process[-1][1] + 10.0)
    with pytest.raises(ValueError, match="reward_mode"):
        make_env(reward_mode="dense")


def test_reward_is_readable_through_last():
    env = make_env()
    env.reset(seed=0)
    env.step(GOOD["problem_solver"][0])
    solver_reward = env.rewards["problem_solver"]
    env.step(GOOD["code_executor"][0])
    executor_reward = env.rewards["code_executor"]
    assert env.agent_selection == "code_executor"
    assert env.last()[1] == executor_reward  # its previous action's reward
    env.step(GOOD["code_executor"][1])
    env.step(GOOD["verifier"][0])
    assert env.agent_selection == "problem_solver"
    assert env.terminations["problem_solver"]
    assert env.last()[1] == solver_reward
    env.close()


def test_truncation_on_action_limit_and_transcript():
    env = make_env(limits=EpisodeLimits(max_total_actions=2))
    env.reset(seed=0)
    env.step(GOOD["problem_solver"][0])
    env.step(GOOD["code_executor"][0])
    assert all(env.truncations.values())
    assert not any(env.terminations.values())
    assert env.episode.outcome.correct is False
    record = env.transcript()
    json.dumps(record)
    assert record["task_id"] == "t1"
    assert len(record["actions"]) == 2
    assert "code_executor (action 1)" in make_env_render(env)
    env.close()


def make_env_render(env):
    env.render_mode = "ansi"
    return env.render()


def test_scripted_team_solves_synthetic_tasks():
    env = mappa_envs.make("MathChat-v0", num_tasks=10, sandbox="local")
    policy = ScriptedMathPolicy(env.scenario.tasks(), skill=0.0)  # the solver is always wrong ...
    correct = 0
    for i in range(10):
        env.reset(options={"task_index": i})
        for agent in env.agent_iter():
            _, _, term, trunc, info = env.last()
            env.step(None if term or trunc else policy.respond([info["messages"]], [agent])[0])
        correct += env.episode.outcome.correct
    assert correct == 10  # ... but the executor's computation and the verifier rescue every task
    env.close()


def test_reset_options_pick_tasks():
    env = mappa_envs.make("MathChat-v0", num_tasks=5, sandbox="local")
    env.reset(options={"task_id": "synthetic-train-0-3"})
    assert env.episode.task.id == "synthetic-train-0-3"
    env.reset(seed=1)
    first = env.episode.task.id
    env.reset(seed=1)
    assert env.episode.task.id == first
    with pytest.raises(KeyError, match="no task with id"):
        env.reset(options={"task_id": "nope"})
    env.close()


def test_a_limit_reached_by_the_final_action_still_terminates():
    env = make_env(limits=EpisodeLimits(max_total_actions=3))
    play(env, {**GOOD, "code_executor": ["I trust the solver: \\boxed{42}"]})
    assert env.episode.outcome.correct
    assert len(env.episode.actions) == 3
    assert env.infos == {}  # every agent stepped out after terminating
    env.reset(seed=0)
    for action in ("\\boxed{42}", "\\boxed{42}", "\\boxed{42}"):
        env.step(action)
    assert all(env.terminations.values())
    assert not any(env.truncations.values())
    env.close()
