"""`mappa coach-eval`: the report card's metrics against brute force and hand-made episodes with known
answers, the card on real scripted episodes, and bad specs / failed coach calls."""
from __future__ import annotations

import itertools
import json
import random

import pytest

from mappa_envs.coach import LLMCoach, LLMCoachConfig, RuleCoach
from mappa_envs.coach.types import CoachScore
from mappa_envs.coach_eval import metrics as cm
from mappa_envs.coach_eval.card import PROBES, evaluate, mark_faults, play, record_all
from tests.openai_stub import StubServer

MATH = {"task_source": "synthetic", "num_tasks": 3, "split": "eval"}


def _brute_auroc(scores, labels):
    pos = [s for s, y in zip(scores, labels) if y]
    neg = [s for s, y in zip(scores, labels) if not y]
    wins = sum(1.0 if p > n else 0.5 if p == n else 0.0 for p, n in itertools.product(pos, neg))
    return wins / (len(pos) * len(neg))


def test_auroc_matches_brute_force_with_ties():
    rng = random.Random(1)
    for _ in range(300):
        n = rng.randint(2, 30)
        scores = [rng.choice(range(11)) for _ in range(n)]  # many ties, as 0-10 scores have
        labels = [rng.random() < 0.5 for _ in range(n)]
        if all(labels) or not any(labels):
            assert cm.auroc(scores, labels) is None
            continue
        assert cm.auroc(scores, labels) == pytest.approx(_brute_auroc(scores, labels))


def test_auroc_known_values():
    assert cm.auroc([1, 2, 3, 4], [False, False, True, True]) == 1.0
    assert cm.auroc([4, 3, 2, 1], [False, False, True, True]) == 0.0
    assert cm.auroc([5, 5, 5, 5], [False, True, False, True]) == 0.5


def test_roc_points_run_from_origin_to_one():
    pts = cm.roc_points([0.9, 0.1], [True, False])
    assert pts[0] == (0.0, 0.0)
    assert pts[-1] == (1.0, 1.0)
    assert (0.0, 1.0) in pts


def S(role, index, value, excused=False):
    return cm.Step(role, index, value, excused)


CLEAN = [S("a", 0, 8), S("b", 0, 8), S("c", 0, 8)]


def test_step_blame_on_hand_made_episodes():
    right = ([S("a", 0, 8), S("b", 0, 2), S("c", 0, 7.5)], [1], CLEAN)  # b lowest, c within 1 of its 8
    punished = ([S("a", 0, 8), S("b", 0, 2), S("c", 0, 6)], [1], CLEAN)  # c fell 2 below its fault-free 8
    missed = ([S("a", 0, 1), S("b", 0, 2), S("c", 0, 8)], [1], CLEAN)  # a is lower than the faulty b
    tie = ([S("a", 0, 2), S("b", 0, 2), S("c", 0, 8)], [1], CLEAN)  # not strictly lowest
    excused = ([S("a", 0, 8), S("b", 0, 2), S("c", 0, 0, excused=True)], [1], CLEAN)  # c left out
    unscored = ([S("a", 0, None), S("b", 0, 2), S("c", 0, 8)], [1], CLEAN)  # does not count
    two = ([S("a", 0, 8), S("b", 0, 6), S("b", 1, 2), S("c", 0, 8)], [1, 2], CLEAN)  # the turn's worst is lowest
    r = cm.step_blame([right, punished, missed, tie, excused, unscored, two], tolerance=1.0)
    assert r.episodes == 6
    assert r.lowest == pytest.approx(4 / 6)  # right, punished, excused, two
    assert r.spared == pytest.approx(3 / 6)  # right, excused, two (in missed and tie, a fell far below its 8)
    assert r.precision == pytest.approx(3 / 6)  # right, excused, two


def test_master_key_and_calibration_on_hand_made_values():
    assert cm.master_key_rate([0, 4.9, 5, 10]) == 0.5
    assert cm.master_key_rate([]) is None
    cal = cm.calibration([9, 7, 3, 1, 8], [True, True, False, False, True], ["reg", "cls", "reg", "cls", "cls"])
    assert cal["right"] == {"cls": {"mean": 7.5, "n": 2}, "reg": {"mean": 9.0, "n": 1}}
    assert cal["gap"]["right"] == pytest.approx(1.5)
    assert cal["gap"]["wrong"] == pytest.approx(2.0)


@pytest.fixture(scope="module")
def math_episodes():
    return record_all(["MathChat-v0"], {"MathChat-v0": MATH}, probe_tasks=1, batch=2, say=lambda m: None)


class Lazy:
    """A master-keyable coach: 8 for anything."""

    def score(self, request):
        return CoachScore(score=8.0)

    async def ascore(self, request):
        return self.score(request)


def test_probe_episodes_put_the_no_work_text_in_the_probed_role(math_episodes):
    probes = [e for e in math_episodes if e.fault.startswith("probe:")]
    assert len(probes) == len(PROBES) * 3  # five probes x three roles x one task
    bare = next(e for e in probes if e.fault == "probe:bare_claim:verifier")
    assert [bare.requests[k].action for k in bare.probe_steps] == ["Correct."]
    asked = next(e for e in probes if e.fault == "probe:question_repeated:problem_solver")
    assert asked.requests[asked.probe_steps[0]].action == asked.requests[0].task


def test_the_rule_coach_card_on_scripted_math(math_episodes):
    rule, lazy = evaluate(math_episodes, {"rule": RuleCoach(), "lazy": Lazy()}, with_backprop=False,
                          say=lambda m: None)
    assert rule["step_blame"]["overall"]["precision"] == 1.0
    assert rule["agent_blame"]["overall"]["precision"] == 1.0
    assert rule["action_auroc"] == 1.0  # it reads the same checks as the ground truth: the ceiling
    assert rule["master_key_rate"] == 0.0
    assert lazy["master_key_rate"] == 1.0  # every no-work action scored 8
    assert lazy["action_auroc"] == 0.5
    assert lazy["step_blame"]["overall"]["precision"] == 0.0  # a flat coach never finds the faulty step
    assert lazy["master_key_n"] == rule["master_key_n"] > 0


def test_backprop_rows_compare_on_step_blame(math_episodes):
    rows = evaluate(math_episodes, {"rule": RuleCoach()}, say=lambda m: None)
    back = rows[1]
    assert back["coach"] == "rule (backprop)"
    assert back["step_blame"]["overall"]["precision"] is not None
    assert back["episode_auroc"] is None  # the shares sum to 10 x outcome: an episode AUROC would be trivial
    assert back["master_key_rate"] is None


def test_failed_coach_calls_are_counted_unscored(math_episodes):
    real = [e for e in math_episodes if not e.fault.startswith("probe:")][:3]
    with StubServer(reply="no idea") as stub:
        coach = LLMCoach(LLMCoachConfig(model="m", base_url=stub.url, api_key_env=None, max_retries=0))
        row = evaluate(real, {"broken": coach}, with_backprop=False, say=lambda m: None)[0]
    assert row["unscored"] == row["actions"] == sum(len(e.requests) for e in real)
    assert row["action_auroc"] is None


def test_faulty_steps_are_the_actions_whose_checks_the_fault_changed():
    eps = play("MathChat-v0", MATH, "none", batch=1) + play("MathChat-v0", MATH, "executor_miscopy", batch=1)
    mark_faults(eps)
    for ep in eps[3:]:
        (k,) = ep.faulty_steps
        assert ep.requests[k].role == "code_executor"
        assert ep.requests[k].checks.get("answer_correct") is False  # the mis-copied answer, not the code that ran
    assert all(not ep.faulty_steps for ep in eps[:3])


def test_cli_writes_the_card_and_bad_specs_are_one_line(tmp_path, capsys):
    from mappa_cli.main import main

    assert main(["coach-eval", "--coach", "nonsense-coach", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("mappa coach-eval: unknown coach 'nonsense-coach'")
    assert "\n" not in err
    assert main(["coach-eval", "--dsbench-tasks", "0", "--out", str(tmp_path)]) == 2
    assert "--dsbench-tasks" in capsys.readouterr().err
    out = tmp_path / "card"
    assert main(["coach-eval", "--env", "MathChat-v0", "--num-tasks", "2", "--probe-tasks", "1",
                 "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    assert [r["coach"] for r in data["rows"]] == ["rule", "rule (backprop)"]
    assert (out / "roc.png").stat().st_size > 0
    assert (out / "calibration.png").stat().st_size > 0
    assert "master key" in (out / "coach_eval.md").read_text()
    rows = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
    assert len(rows) == data["episodes"]
    assert all(set(a["coaches"]) == {"rule"} for r in rows for a in r["actions"])  # backprop shares are not scores


def test_transcripts_hold_every_action_with_its_fault_label_and_each_coachs_verdict(math_episodes, tmp_path):
    from mappa_envs.coach_eval.card import action_right, transcript_rows, write_transcripts

    scored: dict = {}
    evaluate(math_episodes, {"rule": RuleCoach(), "lazy": Lazy()}, with_backprop=False, say=lambda m: None,
             scored=scored)
    rows = transcript_rows(math_episodes, scored)
    assert [(r["env_id"], r["task_id"], r["fault"]) for r in rows] == \
        [(e.env_id, e.task_id, e.fault) for e in math_episodes]
    for r, ep, rule in zip(rows, math_episodes, scored["rule"]):
        assert [a["text"] for a in r["actions"]] == [q.action for q in ep.requests]
        assert [k for k, a in enumerate(r["actions"]) if a["faulty"]] == sorted(set(ep.faulty_steps + ep.probe_steps))
        assert [a["right"] for a in r["actions"]] == [action_right(ep, k) for k in range(len(ep.requests))]
        assert [a["coaches"]["lazy"]["score"] for a in r["actions"]] == [8.0] * len(ep.requests)
        assert [a["coaches"]["rule"]["score"] for a in r["actions"]] == [s.score for s in rule]
        if ep.fault.startswith("probe:"):
            assert r["faulty_role"] == ep.fault.split(":")[2]
    faulty = [r for r in rows if r["fault"] != "none" and not r["fault"].startswith("probe:")]
    assert faulty
    assert all(r["faulty_role"] for r in faulty)
    assert any(a["faulty"] for r in faulty for a in r["actions"])
    path = tmp_path / "transcripts.jsonl"
    path.write_text("the previous run's records\n")
    with pytest.raises(KeyError):  # a coach whose scores are missing: nothing is written, the old file stays
        write_transcripts(path, math_episodes, {"rule": scored["rule"], "gone": {}})
    assert path.read_text() == "the previous run's records\n"
    assert [p.name for p in tmp_path.iterdir()] == ["transcripts.jsonl"]
    write_transcripts(path, math_episodes, scored)
    assert [json.loads(line) for line in path.read_text().splitlines()] == json.loads(json.dumps(rows))


ONE_TASK = {"MathChat-v0": {"num_tasks": 1}, "CodeTest-v0": {"num_tasks": 1}, "Chain-v0": {"num_tasks": 1}}


@pytest.mark.parametrize("env_id", ["Chain-v0", "CodeTest-v0", "MathChat-v0",
                                    pytest.param("DSBench-v0", marks=pytest.mark.slow)])  # ~1 min of sandboxed cells
def test_record_all_runs_every_env_with_its_own_task_kwargs(env_id):
    # `mappa coach-eval` without --env plays all four; the probe step once passed `tasks=` to envs that
    # take only `num_tasks` (Chain, CodeTest) and crashed. Each env must record faults and probes.
    from mappa_envs.dsbench import builtin_tasks

    kwargs = {**ONE_TASK, "DSBench-v0": {"tasks": builtin_tasks()[:1]}}
    eps = record_all([env_id], kwargs, probe_tasks=1, batch=2, say=lambda m: None)
    probes = [e for e in eps if e.fault.startswith("probe:")]
    assert probes
    assert all(e.requests for e in eps)
    assert len({e.task_id for e in probes}) == 1  # the probe step kept to the one task


def test_coach_eval_on_user_written_fan_in_and_loop_specs(tmp_path, capsys):
    """`mappa coach-eval --spec PATH`: faults, probes and back-propagation on teams the user wrote; a spec
    whose scripted team cannot take a fault is one line, before anything is played."""
    from mappa_cli.main import main
    from tests.user_specs import write_specs

    assert main(["coach-eval", "--spec", "mathchat", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err.strip()
    assert "mathchat: its scripted team mappa_envs.mathchat.scripted:for_env cannot take skill" in err
    assert "\n" not in err
    assert not (tmp_path / "bad").exists()
    fan_in, loop = write_specs(tmp_path)
    out = tmp_path / "card"
    assert main(["coach-eval", "--spec", fan_in, "--spec", loop, "--num-tasks", "1", "--probe-tasks", "1",
                 "--batch", "1", "--out", str(out)]) == 0
    data = json.loads((out / "results.json").read_text())
    rule, back = data["rows"]
    faults = [f"spec:{fan_in}/{r}_wrong" for r in ("coder", "reasoner", "judge")] \
        + [f"spec:{loop}/{r}_wrong" for r in ("solver", "checker")]
    for row in (rule, back):
        assert sorted(k for k in row["step_blame"] if k != "overall") == sorted(faults)
    assert all(rule["step_blame"][f]["precision"] == rule["agent_blame"][f]["precision"] == 1.0 for f in faults)
    assert rule["master_key_rate"] == 0.0
    assert rule["master_key_n"] == 5 * (3 + 2)  # five probes in every role of both teams, one task each
    assert rule["unscored"] == back["unscored"] == 0


def test_env_set_reaches_the_env_and_a_bad_one_is_one_line(tmp_path, capsys):
    """`--env-set KEY=VALUE` (coach-eval and blame): keywords for the --env envs, so a coach can be measured
    in the setting it trains in (Chain-v0's own view, issue 25). A bad keyword or value is one line, before
    anything is played or written."""
    from mappa_cli.main import main

    for argv, message in [
        (["--env-set", "view=own"], "--env-set needs --env"),
        (["--env", "Chain-v0", "--env-set", "view=mine"], "--env-set for Chain-v0: view='mine' is not one of"),
        (["--env", "Chain-v0", "--env-set", "colour=1"], "unknown keyword argument(s) ['colour']"),
        (["--env", "Chain-v0", "--env-set", "view"], "expected KEY=VALUE"),
    ]:
        for command in ("coach-eval", "blame"):
            assert main([command, *argv, "--out", str(tmp_path / "bad")]) == 2
            err = capsys.readouterr().err.strip()
            assert message in err
            assert "\n" not in err
    assert not (tmp_path / "bad").exists()
    out = tmp_path / "card"
    assert main(["coach-eval", "--env", "Chain-v0", "--env-set", "view=own", "--env-set", "num_tasks=1",
                 "--probe-tasks", "1", "--no-backprop", "--out", str(out)]) == 0
    assert json.loads((out / "results.json").read_text())["episodes"] == 4 + 5 * 4  # 4 faults, 5 probes x 4 roles


def test_the_own_view_reaches_the_coach():
    eps = {view: record_all(["Chain-v0"], {"Chain-v0": {"num_tasks": 1, "view": view}}, probe_tasks=1, batch=1,
                            say=lambda m: None) for view in ("all", "own")}
    last = {view: e[0].requests[-1].context for view, e in eps.items()}
    assert "Start value:" in last["all"]
    assert "Start value:" not in last["own"]
    assert "Your step (step 4 of 4)" in last["own"]


def test_coach_set_goes_to_the_llm_coaches_not_the_noisy_rule_coach():
    # `--coach rule:noise=0.2 --coach qwen@URL --coach-set max_tokens=200` once failed: the settings went to
    # every coach but the plain rule one, and the noisy rule coach takes none.
    from mappa_cli.blame import make_coaches

    coaches = make_coaches(["rule", "rule:noise=0.2", "qwen@http://127.0.0.1:9/v1"], ["max_tokens=200"])
    assert coaches["qwen@http://127.0.0.1:9/v1"].config.max_tokens == 200
    assert coaches["rule:noise=0.2"].epsilon == 0.2
