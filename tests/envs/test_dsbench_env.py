"""DSBench-v0 end to end through env.step(): the scripted team on every built-in task, failure cascades,
the coach's evidence, hidden answers, and PettingZoo's api_test. Uses the real local sandbox."""
import shutil

import pytest
from pettingzoo.test import api_test

import mappa_envs
from mappa_envs.coach.rule import RuleCoach
from mappa_envs.dsbench.builtin import SPECS
from mappa_envs.dsbench.env import DSBenchEnv
from mappa_envs.dsbench.scripted import ScriptedDSPolicy, analyst_code, engineer_code, modeler_code
from mappa_envs.sandbox import make_sandbox
from tests.envs.test_dsbench_tasks import BENCH, META_FILES, fake_dsbench, needs_bench


class RecordingCoach(RuleCoach):
    """The rule coach, keeping every request it scored."""

    def __init__(self):
        self.requests = []

    def score(self, request):
        self.requests.append(request)
        return super().score(request)


@pytest.fixture(scope="module")
def sandbox():
    sb = make_sandbox("local", timeout_s=120)
    yield sb
    sb.close()


def play(env, task_id, policy=None):
    """One episode with the scripted team; returns the outcome and the infos at the end."""
    policy = policy or ScriptedDSPolicy(env.scenario.task_list)
    env.reset(options={"task_id": task_id})
    final_infos = {}
    for agent in env.agent_iter():
        _, _, term, trunc, _ = env.last()
        if term or trunc:
            if not final_infos:
                final_infos = {a: {**env.infos[a], "reward": env.rewards[a]} for a in env.agents}
            env.step(None)
            continue
        conversation = env.infos[agent]["messages"]
        env.step(policy.respond([conversation], [agent])[0])
    return env.episode.outcome, final_infos


def check_solved(env, task_id):
    outcome, infos = play(env, task_id)
    d = outcome.details
    assert d["submission_valid"], (task_id, d)
    assert d["failure"] is None, (task_id, d)
    assert outcome.correct, (task_id, d)
    assert 0 < outcome.score <= 1, (task_id, d)  # beats the baseline
    assert env.episode.file_owners["submission.csv"] == "analyst"
    assert infos["analyst"]["outcome"]["metric_value"] == d["metric_value"]
    return infos


def test_scripted_team_solves_a_task_and_every_action_is_coached(sandbox):
    coach = RecordingCoach()
    env = DSBenchEnv(sandbox=sandbox, coach=coach)
    try:
        infos = check_solved(env, "wine-cultivar")
        owners = env.episode.file_owners
        assert owners == {"train.csv": "task", "test.csv": "task", "sample_submission.csv": "task",
                          "X_train.csv": "data_engineer", "y_train.csv": "data_engineer",
                          "X_test.csv": "data_engineer", "model.pkl": "modeler", "submission.csv": "analyst"}
        assert [r.role for r in coach.requests] == ["data_engineer"] * 2 + ["modeler"] * 2 + ["analyst"] * 2
        first = coach.requests[0]
        assert first.checks == {"code_present": True, "expected_files_present": True, "features_consistent": True}
        final = coach.requests[-1]
        assert final.is_final_action
        assert final.checks["submission_valid"]
        assert final.checks["beats_baseline"]
        assert final.metrics["outcome"]["metric"] == "accuracy"
        assert final.files == owners
        assert final.metrics["submission"]["valid"]
        # the modeler sees the engineer's turn, tool output included
        assert "X_train (125, 14)" in infos["modeler"]["messages"][1]["content"]
        # the hidden answers never enter the workspace, and under bubblewrap the host copy is out of reach
        assert "test_answer.csv" not in env.episode.session.list_files()
        if sandbox.isolation == "bwrap":
            answers = env.scenario._ds["wine-cultivar"].answers_csv
            probe = env.episode.session.run(f"import os; print(os.path.exists({str(answers)!r}))", kernel="analyst")
            assert probe.stdout == "False\n"
    finally:
        env.close()


@pytest.mark.parametrize("task_id", [s.id for s in SPECS])
def test_scripted_team_solves_every_builtin_task(sandbox, task_id):
    env = DSBenchEnv(sandbox=sandbox)
    try:
        check_solved(env, task_id)
    finally:
        env.close()


def test_outcome_reward_mode_pays_every_agent_the_relative_quality(sandbox):
    env = DSBenchEnv(sandbox=sandbox, reward_mode="outcome")
    try:
        outcome, infos = play(env, "diabetes-progression")
        assert 0 < outcome.score <= 1  # above the baseline, at most the reference (the draw of the tasks decides which)
        assert {a: i["reward"] for a, i in infos.items()} == {a: 10 * outcome.score for a in infos}
        assert infos["modeler"]["outcome"]["files"]["model.pkl"] == "modeler"
        assert all(a.coach is None for a in env.episode.actions)
    finally:
        env.close()


def test_engineer_forgets_test_features_and_the_blame_reaches_the_outcome_and_the_coach(sandbox):
    coach = RecordingCoach()
    env = DSBenchEnv(sandbox=sandbox, coach=coach, reward_mode="process+outcome")
    try:
        tasks = env.scenario.task_list
        outcome, infos = play(env, "diabetes-progression", ScriptedDSPolicy(tasks, forget=("X_test.csv",)))
        d = outcome.details
        assert outcome.score == 0.0
        assert outcome.correct is False
        assert not d["submission_valid"]
        assert d["missing_files"] == {"X_test.csv": "data_engineer", "submission.csv": "analyst"}
        assert d["failure"]["error"] == "submission.csv was not written"
        assert d["failure"]["root_cause"] == {"file": "X_test.csv", "owner": "data_engineer", "reason": "missing"}
        assert infos["data_engineer"]["outcome"]["failure"]["root_cause"]["owner"] == "data_engineer"

        engineer_end = [r for r in coach.requests if r.role == "data_engineer"][-1]
        assert engineer_end.checks["expected_files_present"] is False
        assert engineer_end.metrics["missing_files"] == {"X_test.csv": "data_engineer"}
        analyst_cell, analyst_end = [r for r in coach.requests if r.role == "analyst"]
        assert "X_test.csv" in analyst_cell.tool_results[0]["error"]  # FileNotFoundError in the analyst's cell
        assert analyst_end.is_final_action
        assert analyst_end.checks["submission_valid"] is False
        assert analyst_end.metrics["missing_files"]["X_test.csv"] == "data_engineer"
        assert analyst_end.metrics["expected_files"]["X_test.csv"] == {"owner": "data_engineer", "present": False,
                                                                        "written_by": None}
        assert analyst_end.metrics["outcome"]["failure"]["root_cause"]["file"] == "X_test.csv"
        assert "X_test.csv" not in analyst_end.files
        assert analyst_end.files["model.pkl"] == "modeler"
        # the modeler did its part and the rule coach sees that
        assert all(r.checks.get("expected_files_present") for r in coach.requests if r.role == "modeler")
        # the modeler needs no test features: it is judged; the analyst could not succeed: it is excused
        assert all(r.checks["inputs_ready"] for r in coach.requests if r.role == "modeler")
        assert [r.checks["inputs_ready"] for r in (analyst_cell, analyst_end)] == [False, False]
        assert analyst_end.metrics["inputs_problem"] == "missing X_test.csv"
        assert all("inputs_ready" not in r.checks for r in coach.requests if r.role == "data_engineer")
    finally:
        env.close()


def test_the_hand_off_is_judged_before_the_next_role_can_touch_it(sandbox):
    """An analyst that deletes an input it was given whole is not excused: the hand-off was fine."""
    env = DSBenchEnv(sandbox=sandbox, max_actions=1)
    try:
        env.reset(options={"task_id": "wine-cultivar"})
        task = next(t for t in env.scenario.task_list if t.id == "wine-cultivar")
        env.step(f"```python\n{engineer_code(task)}\n```")
        env.step(f"```python\n{modeler_code(task)}\n```")
        env.step("```python\nimport os\nos.remove('X_test.csv')\nos.remove('model.pkl')\n```")
        modeler, analyst = env.episode.actions[1], env.episode.actions[2]
        assert modeler.checks["inputs_ready"] is True
        assert analyst.checks["inputs_ready"] is True  # judged: deleting its inputs is its own doing
        assert analyst.checks["submission_valid"] is False
    finally:
        env.close()


def test_invalid_submission_is_a_failed_record_naming_the_error(sandbox):
    env = DSBenchEnv(sandbox=sandbox, max_actions=1)
    try:
        env.reset(options={"task_id": "wine-cultivar"})
        env.step("Nothing to engineer.")
        env.step("Nothing to model.")
        env.step("```python\nimport pandas as pd\npd.read_csv('test.csv')[['id']].assign(cultivar='Barolo')"
                 ".iloc[:10].to_csv('submission.csv', index=False)\n```")
        d = env.episode.outcome.details
        assert not d["submission_valid"]
        assert "10 rows for 53 test ids" in d["failure"]["error"]
        assert d["failure"]["owner"] == "analyst"
        assert d["failure"]["root_cause"]["file"] == "X_train.csv"
        assert env.episode.actions[-1].checks["submission_valid"] is False
        assert [a.checks["inputs_ready"] for a in env.episode.actions[1:]] == [False, False]  # nothing was handed on
    finally:
        env.close()


def test_inconsistent_features_are_blamed_on_the_engineer(sandbox):
    coach = RecordingCoach()
    env = DSBenchEnv(sandbox=sandbox, coach=coach, max_actions=1)
    try:
        env.reset(options={"task_id": "wine-cultivar"})
        task = next(t for t in env.scenario.task_list if t.id == "wine-cultivar")
        truncated = engineer_code(task) + "\nX_test.iloc[:20].to_csv('X_test.csv', index=False)"
        for code in (truncated, modeler_code(task), analyst_code(task)):
            env.step(f"```python\n{code}\n```")
        engineer = coach.requests[0]
        assert engineer.checks["features_consistent"] is False
        assert engineer.metrics["features_problem"] == {"file": "X_test.csv",
                                                        "problem": "X_test.csv has 20 rows, test.csv has 53"}
        d = env.episode.outcome.details
        assert "20 rows for 53 test ids" in d["failure"]["error"]
        assert d["failure"]["root_cause"] == {"file": "X_test.csv", "owner": "data_engineer",
                                              "reason": "X_test.csv has 20 rows, test.csv has 53"}
        modeler, analyst = coach.requests[1], coach.requests[2]
        assert modeler.checks["inputs_ready"] is True  # it trains on X_train alone
        assert analyst.checks["inputs_ready"] is False
        assert analyst.metrics["inputs_problem"] == "X_test.csv: X_test.csv has 20 rows, test.csv has 53"
    finally:
        env.close()


def test_bad_arguments():
    with pytest.raises(ValueError, match="max_actions"):
        DSBenchEnv(max_actions=0)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        DSBenchEnv(tasks="/nonexistent/dsbench")


def test_api_test_passes_for_the_registered_env():
    env = mappa_envs.make("DSBench-v0")
    try:
        api_test(env, num_cycles=10)
    finally:
        env.close()


@needs_bench
def test_a_dsbench_folder_plays_end_to_end(sandbox, tmp_path):
    root = fake_dsbench(tmp_path / "dsbench", rows=40)
    for name in META_FILES:
        shutil.copy(BENCH / name, root / name)
    env = DSBenchEnv(tasks=root, split="eval", cache_dir=tmp_path / "cache", sandbox=sandbox)
    try:
        assert len(env.scenario.tasks()) == 8
        outcome, _ = play(env, "playground-series-s4e1")
        assert outcome.details["submission_valid"], outcome.details
        assert outcome.details["metric"] == "roc_auc"
        assert outcome.details["baseline_score"] == 0.5
        # no sample_submission.csv in the folder: the baseline's is placed in the workspace
        sample = env.episode.session.read_file("sample_submission.csv").decode().splitlines()
        assert sample[0] == "id,Exited"
        assert len(sample) == 41
        assert (tmp_path / "cache" / "dsbench-scores" / "playground-series-s4e1.json").is_file()
    finally:
        env.close()


def test_scripted_team_error_rate_and_factory(sandbox):
    from mappa_envs.dsbench.scripted import for_env

    env = DSBenchEnv(sandbox=sandbox)
    try:
        sloppy = for_env(env, skill=0.0, seed=3)
        outcome, _ = play(env, "wine-cultivar", sloppy)
        assert outcome.details["failure"]["root_cause"]["owner"] == "data_engineer"
        assert outcome.details["failure"]["root_cause"]["reason"] == "missing"
    finally:
        env.close()
