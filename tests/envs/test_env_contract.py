"""The env's contract with its callers: arguments checked at make() time with one-line errors, the
reset-first rule, typed records, task arguments in every accepted spelling, and envs that pickle."""
import copy
import json
import multiprocessing
import pickle

import pytest

import mappa_envs
from mappa_envs.core.pipeline import ActionRecord, EpisodeLimits, Outcome, Task
from mappa_envs.errors import (
    EnvArgumentError,
    MappaError,
    ResetNeededError,
    TaskDataError,
    UnknownEnvError,
    UnknownTaskError,
)
from mappa_envs.mathchat.scripted import for_env

TASKS = [Task("a", "What is 6 times 7?", "42"), Task("b", "What is 2 plus 2?", "4")]


def make(**kwargs):
    kwargs.setdefault("tasks", TASKS)
    return mappa_envs.make("MathChat-v0", **kwargs)


def play(env, seed=0):
    env.reset(seed=seed)
    policy = for_env(env)
    for agent in env.agent_iter(max_iter=50):
        _, _, term, trunc, info = env.last()
        env.step(None if term or trunc else policy.respond([info["messages"]], [agent])[0])
    return env.unwrapped.outcome


def one_line(error: BaseException) -> str:
    text = str(error)
    assert text, text
    assert "\n" not in text, text
    assert len(text) < 400, text
    return text


@pytest.mark.parametrize("env_id, kwargs, message", [
    ("MathChat-v0", {"coach": "gpt-4"}, "only coach named by a string is 'rule'"),
    ("MathChat-v0", {"coach": 3}, "coach must be"),
    ("MathChat-v0", {"sandbox": "dokker"}, "not a backend"),
    ("MathChat-v0", {"sandbox": 1.5}, "sandbox must be"),
    ("MathChat-v0", {"reward_mode": "dense"}, "reward_mode='dense' is not one of"),
    ("MathChat-v0", {"render_mode": "rgb"}, "render_mode"),
    ("MathChat-v0", {"timings_in_infos": "yes"}, "timings_in_infos"),
    ("MathChat-v0", {"limits": {"max_total_action": 3}}, r"unknown field\(s\) \['max_total_action'\]"),
    ("MathChat-v0", {"limits": {"cell_timeout_s": -1}}, "limits.cell_timeout_s must be a finite number > 0"),
    ("Chain-v0", {"limits": {"cell_timeout_s": float("inf")}}, "limits.cell_timeout_s must be a finite number > 0"),
    ("Chain-v0", {"limits": {"max_wall_s": float("inf")}}, "limits.max_wall_s must be a finite number > 0"),
    ("MathChat-v0", {"limits": {"max_total_actions": 2.5}}, "must be an integer > 0"),
    ("MathChat-v0", {"limits": "fast"}, "limits must be"),
    ("MathChat-v0", {"tasks": 7}, "tasks must be"),
    ("MathChat-v0", {"tasks": [TASKS[0], "b"]}, "a list of Task, str"),
    ("MathChat-v0", {"tasks": []}, "empty list"),
    ("MathChat-v0", {"tasks": [{"prompt": "x"}]}, r"tasks\[0\] has no 'answer'"),
    ("MathChat-v0", {"tasks": "synthetic", "task_source": "synthetic"}, "not both"),
    ("MathChat-v0", {"split": "test"}, "split='test'"),
    ("MathChat-v0", {"executor_max_actions": 0}, "executor_max_actions"),
    ("MathChat-v0", {"num_tasks": "many", "tasks": "synthetic"}, "num_tasks"),
    ("MathChat-v0", {"bogus": 1}, r"unknown keyword argument\(s\) \['bogus'\]; it accepts \[.*'coach'.*'tasks'"),
    ("DSBench-v0", {"tasks": 3}, "tasks must be 'builtin', a DSBench data folder or a list of DSTask"),
    ("DSBench-v0", {"tasks": TASKS}, "got a list of Task"),
    ("DSBench-v0", {"max_actions": 0}, "max_actions"),
    ("DSBench-v0", {"split": "dev"}, "split='dev'"),
    ("DSBench-v0", {"task_seed": "x"}, "seed must be an integer"),
    ("DSBench-v0", {"coach": "rulez"}, "only coach named by a string"),
    ("DSBench-v0", {"tasks": "/nonexistent/dsbench"}, "does not exist"),
    ("DSBench-v0", {"bogus": 1}, r"unknown keyword argument\(s\) \['bogus'\]; it accepts \[.*'cache_dir'"),
])
def test_bad_arguments_fail_at_make_with_one_line(env_id, kwargs, message):
    with pytest.raises(MappaError, match=message) as e:
        mappa_envs.make(env_id, **kwargs)
    one_line(e.value)


def test_unknown_env_id_and_bad_reset_options():
    with pytest.raises(UnknownEnvError, match="unknown env id 'MathChat-v9'") as e:
        mappa_envs.make("MathChat-v9")
    assert isinstance(e.value, KeyError)
    assert one_line(e.value).startswith("unknown")  # no KeyError quotes
    env = make()
    try:
        with pytest.raises(UnknownTaskError, match="no task with id 'zz'"):
            env.reset(options={"task_id": "zz"})
        with pytest.raises(EnvArgumentError, match="takes a dict"):
            env.reset(options=["task_id"])
    finally:
        env.close()


@pytest.mark.parametrize("spelling", ["path", "pathlike", "tasks", "dicts", "source", "alias"])
def test_task_arguments_in_every_accepted_spelling(tmp_path, spelling):
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps({"id": t.id, "prompt": t.prompt, "answer": t.answer}) for t in TASKS))
    kwargs = {"path": {"tasks": str(path), "split": "all"}, "pathlike": {"tasks": path, "split": "all"},
              "tasks": {"tasks": TASKS}, "source": {"tasks": "synthetic", "num_tasks": 2},
              "dicts": {"tasks": [{"id": t.id, "problem": t.prompt, "answer": t.answer} for t in TASKS]},
              "alias": {"task_source": str(path), "split": "all"}}[spelling]
    env = mappa_envs.make("MathChat-v0", **kwargs)
    try:
        assert len(env.tasks) == 2
        assert all(isinstance(t, Task) for t in env.tasks)
        if spelling != "source":
            assert [(t.id, t.prompt, t.answer) for t in env.tasks] == [(t.id, t.prompt, t.answer) for t in TASKS]
    finally:
        env.close()


def test_empty_and_broken_task_files_are_errors_at_make(tmp_path):
    empty = tmp_path / "empty.json"
    empty.write_text("")
    with pytest.raises(TaskDataError, match="is empty") as e:
        make(tasks=str(empty))
    one_line(e.value)
    broken = tmp_path / "broken.json"
    broken.write_text('[\n  {"prompt": "a", "answer": 1},\n  {"prompt": "b", "answer": }\n]\n')
    with pytest.raises(TaskDataError, match="broken.json: line 3, column 29: Expecting value"):
        make(tasks=str(broken))
    with pytest.raises(TaskDataError, match="does not exist") as e:
        make(tasks=str(tmp_path / "nope.json"))
    assert isinstance(e.value, FileNotFoundError)


@pytest.mark.parametrize("call", ["step", "observe", "last", "render", "agent_iter"])
def test_use_before_reset_says_call_reset_first(call):
    env = make()
    try:
        with pytest.raises(ResetNeededError, match=r"call reset\(\) before"):
            {"step": lambda: env.step("hi"), "observe": lambda: env.observe("verifier"), "last": env.last,
             "render": env.render, "agent_iter": lambda: next(iter(env.agent_iter()))}[call]()
    finally:
        env.close()


def test_typed_records_match_the_info_dicts():
    env = make()
    try:
        assert env.unwrapped.tasks == tuple(TASKS)
        assert env.env_id == "MathChat-v0"
        env.reset(options={"task_id": "a"})
        assert env.last_action is None
        assert env.outcome is None
        env.step("It is \\boxed{42}.")
        record = env.last_action
        assert isinstance(record, ActionRecord)
        assert (record.role, record.index, record.env_errors) == ("problem_solver", 0, [])
        assert env.infos["problem_solver"]["action"] == record.to_info()
        assert record.checks == {"answer_present": True, "answer_correct": True}
        outcome = play(env)
        assert isinstance(outcome, Outcome)
        assert env.transcript()["outcome"] == outcome.to_info()
        with pytest.raises(AttributeError):
            env.tasks = ()  # a read-only view
    finally:
        env.close()


def test_env_pickles_and_copies_before_and_after_reset():
    env = make(limits=EpisodeLimits(max_total_actions=9))
    try:
        for clone in (pickle.loads(pickle.dumps(env)), copy.deepcopy(env)):
            assert clone.tasks == env.tasks
            assert clone.limits.max_total_actions == 9
            assert play(clone).correct
            clone.close()
        play(env)
        after = pickle.loads(pickle.dumps(env))  # mid-life: the copy carries the config, not the episode
        with pytest.raises(ResetNeededError):
            after.step("x")
        assert play(after).correct
        after.close()
    finally:
        env.close()


def _play_in_child(blob: bytes) -> tuple[bool, int]:
    env = pickle.loads(blob)
    try:
        outcome = play(env, seed=1)
        return outcome.correct, len(env.episode.actions)
    finally:
        env.close()


def test_a_pickled_env_plays_in_a_spawned_process():
    env = make()  # never reset here: the child makes its own sandbox
    blob = pickle.dumps(env)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        correct, actions = pool.apply(_play_in_child, (blob,))
    assert correct
    assert actions == 4
    assert env._sandbox is None  # nothing was started in this process
    env.close()
