"""Blame precision (`mappa blame`): faulty scripted teams, recorded requests, concurrent re-scoring
through `Coach.ascore`, and the three fractions computed from hand-made scores."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mappa_envs.coach import LLMCoach
from mappa_envs.coach.batch import score_many
from mappa_envs.coach.rule import RuleCoach
from mappa_envs.coach.types import CoachRequest
from mappa_envs.coach_eval import blame
from mappa_envs.coach_eval.faults import Faults
from tests.openai_stub import StubServer

ROLES = ["problem_solver", "code_executor", "verifier"]
SHIPPED = ["Chain-v0", "CodeTest-v0", "DSBench-v0", "MathChat-v0"]
TOY = Faults(roles={"none": None, "a_fault": "a"}, team=lambda env, fault: None)


@pytest.fixture
def toy_env():
    """Toy-v0, registered with fault facts of its own (`TOY`) for the length of a test."""
    import mappa_envs

    mappa_envs.register("Toy-v0", "mappa_envs.chain.env:ChainEnv", faults=f"{__name__}:TOY")
    yield "Toy-v0"
    mappa_envs.registry.pop("Toy-v0")


def test_the_rule_coach_blames_each_faulty_math_role_and_spares_the_others(tmp_path):
    rows = blame.measure(["MathChat-v0"], {"rule": RuleCoach()}, env_kwargs={"MathChat-v0": {"num_tasks": 4}},
                         say=lambda m: None)
    by = {r.fault: r for r in rows}
    assert set(by) == set(blame.faults_of("MathChat-v0"))
    assert by["none"].episodes == 4
    assert by["none"].precision is None
    for fault in ("solver_wrong", "executor_miscopy", "verifier_overrules"):
        row = by[fault]
        assert row.faulty_role == blame.faults_of("MathChat-v0")[fault]
        assert (row.episodes, row.lowest, row.spared, row.precision) == (4, 1.0, 1.0, 1.0), row
        assert row.mean_by_role[row.faulty_role] < by["none"].mean_by_role[row.faulty_role]


def test_the_three_fractions_from_hand_made_scores(toy_env):
    base = {"t1": {"a": 8, "b": 8, "c": 8}, "t2": {"a": 8, "b": 8, "c": 8}, "t3": {"a": 8, "b": 8, "c": 8}}
    episodes = {
        "t1": {"a": 2, "b": 8, "c": 8},  # blamed and others spared
        "t2": {"a": 2, "b": 5, "c": 8},  # blamed, but b punished (8 -> 5 is more than the tolerance 1)
        "t3": {"a": 6, "b": 6, "c": 8},  # a ties b: not strictly the lowest; b punished too
    }
    row = blame.blame_row(toy_env, "a_fault", "toy", episodes, base, ["a", "b", "c"], failed=0, tolerance=1.0)
    assert (row.episodes, row.lowest, row.spared, row.precision) == (3, 2 / 3, 1 / 3, 1 / 3)
    assert row.mean_by_role == {"a": 10 / 3, "b": 19 / 3, "c": 8}


def test_an_excused_role_is_neither_blamed_nor_punished(toy_env):
    """The analyst's inputs were broken upstream in t1 (the env excused it): it is left out of both fractions."""
    base = {"t1": {"a": 8, "b": 8, "c": 8}, "t2": {"a": 8, "b": 8, "c": 8}}
    episodes = {"t1": {"a": 2, "b": 8}, "t2": {"a": 2, "b": 8, "c": 1}}
    row = blame.blame_row(toy_env, "a_fault", "toy", episodes, base, ["a", "b", "c"], failed=0, tolerance=1.0,
                          excused_in={"t1": {"c"}})
    assert (row.episodes, row.lowest, row.spared, row.precision, row.excused_episodes) == (2, 0.5, 0.5, 0.5, 1)
    requests = [CoachRequest(env_id="DSBench-v0", role=r, role_duties="", task="t1", action="x",
                             checks={"inputs_ready": ok}) for r, ok in (("b", True), ("c", False), ("c", False))]
    assert blame.excused_roles(requests) == {"t1": {"c"}}


def test_the_rule_coach_with_the_envs_hand_off_check_blames_each_faulty_dsbench_role():
    from mappa_envs.dsbench import builtin_tasks

    three = {"DSBench-v0": {"tasks": builtin_tasks()[:3]}}
    rows = blame.measure(["DSBench-v0"], {"rule": RuleCoach()}, env_kwargs=three, say=lambda m: None)
    for row in rows:
        if row.faulty_role is not None:
            assert (row.lowest, row.spared, row.precision) == (1.0, 1.0, 1.0), row
            assert row.excused_episodes == row.episodes  # the analyst could not succeed in any of them


def request(i: int, role: str = "verifier") -> CoachRequest:
    return CoachRequest(env_id="MathChat-v0", role=role, role_duties="check", task=f"task {i}",
                        action=f"\\boxed{{{i}}}")


def test_score_many_keeps_order_and_bounds_concurrency_through_ascore():
    def respond(body):
        text = json.dumps(body["messages"])
        i = int(text.split("task ")[1].split("\\")[0].split('"')[0].strip())
        return f"SCORE: {i % 11}"

    with StubServer(respond=respond, delay_s=0.05) as stub:
        coach = LLMCoach(model="judge", base_url=stub.url, api_key_env=None, concurrency=64, max_retries=0)
        landed = []
        scores = score_many(coach, [request(i) for i in range(24)], concurrency=4,
                            on_score=lambda i, s: landed.append(i))
        assert [s.score for s in scores] == [float(i % 11) for i in range(24)]
        assert all(s.ok for s in scores)
        assert sorted(landed) == list(range(24))
        assert stub.max_in_flight <= 4
        assert stub.calls == 24
    with pytest.raises(ValueError, match="concurrency"):
        score_many(RuleCoach(), [request(0)], concurrency=0)


def test_an_llm_coach_is_measured_like_the_rule_coach(tmp_path):
    """A judge that always blames the verifier: right for one fault only, and it punishes the verifier
    when another role is at fault."""
    def respond(body):
        return "SCORE: 1" if "You are the Verifier" in json.dumps(body["messages"]) else "SCORE: 8"

    with StubServer(respond=respond) as stub:
        coach = LLMCoach(model="judge", base_url=stub.url, api_key_env=None, max_retries=0)
        rows = blame.measure(["MathChat-v0"], {"stub": coach}, env_kwargs={"MathChat-v0": {"num_tasks": 3}},
                             say=lambda m: None)
    by = {r.fault: r for r in rows}
    assert by["verifier_overrules"].lowest == 1.0
    assert by["solver_wrong"].lowest == 0.0
    assert by["executor_miscopy"].lowest == 0.0


@pytest.mark.slow
def test_the_command_writes_results_and_a_table_for_both_envs(tmp_path):
    from mappa_cli.main import main

    assert main(["blame", "--out", str(tmp_path), "--num-tasks", "3"]) == 0
    rows = json.loads((tmp_path / "results.json").read_text())
    assert {(r["env_id"], r["fault"]) for r in rows} == {(e, f) for e in SHIPPED for f in blame.faults_of(e)}
    table = (tmp_path / "blame.md").read_text()
    assert table.count("\n") == 2 + len(rows)
    assert "engineer_missing_file" in table


def test_the_command_passes_coach_settings_to_llm_coaches_and_rejects_bad_ones(tmp_path, capsys):
    from mappa_cli.blame import measured_envs
    from mappa_cli.main import main

    assert measured_envs() == SHIPPED  # every env registered with fault facts, and only those
    seen = []

    def respond(body):
        seen.append(body.get("max_tokens"))
        return "SCORE: 5"

    with StubServer(respond=respond) as stub:
        rc = main(["blame", "--env", "MathChat-v0", "--num-tasks", "1", "--out", str(tmp_path), "--coach", "rule",
                   "--coach", f"judge@{stub.url}", "--coach-set", "max_tokens=77", "--coach-set", "max_retries=0"])
    assert rc == 0
    assert seen
    assert set(seen) == {77}
    assert main(["blame", "--coach-set", "max_tokens"]) == 2
    assert "expected KEY=VALUE" in capsys.readouterr().err


def test_blame_on_user_written_fan_in_and_loop_specs(tmp_path, capsys):
    """`mappa blame --spec PATH`: the spec's own scripted team with one role always wrong per fault; the
    coach sees the topology, the loop runs, and the rule coach blames each faulty role alone."""
    from mappa_cli.main import main
    from tests.user_specs import write_specs

    fan_in, loop = write_specs(tmp_path)
    assert main(["blame", "--spec", fan_in, "--spec", loop, "--num-tasks", "3", "--out", str(tmp_path / "out")]) == 0
    rows = json.loads((tmp_path / "out" / "results.json").read_text())
    faults = {(r["env_id"], r["fault"]): r for r in rows}
    assert set(faults) == {(f"spec:{fan_in}", f) for f in ("none", "coder_wrong", "reasoner_wrong", "judge_wrong")} \
        | {(f"spec:{loop}", f) for f in ("none", "solver_wrong", "checker_wrong")}
    for (_, fault), row in faults.items():
        assert row["episodes"] == 3
        assert row["faulty_role"] == (None if fault == "none" else fault.removesuffix("_wrong"))
        assert row["precision"] == (None if fault == "none" else 1.0)

    fan_requests = blame.record(f"spec:{fan_in}", "none", {"scenario_args": {"num_tasks": 1}})
    assert all("judge (after coder, reasoner; sees coder, reasoner)" in r.team for r in fan_requests)
    looped = blame.record(f"spec:{loop}", "solver_wrong", {"scenario_args": {"num_tasks": 1}})
    assert [r.role for r in looped] == ["solver", "checker"] * 3  # sent back twice, the bound
    assert all("The checker may send the work back to the solver up to 2 time(s)" in r.team for r in looped)


def test_bad_specs_for_blame_are_one_line(tmp_path, capsys):
    from mappa_cli.main import main

    no_script = tmp_path / "no_script.yaml"
    no_script.write_text("scenario: mappa_envs.mathchat.env:make_scenario\nroles: [{name: a, prompt: x}]\n")
    for spec, message in ((str(no_script), "names no scripted team"), ("mathchat", "cannot take skill={role: rate}"),
                          (str(tmp_path / "missing.yaml"), "neither a YAML file nor a shipped spec")):
        assert main(["blame", "--spec", spec, "--out", str(tmp_path / "out")]) == 2
        err = capsys.readouterr().err.strip()
        assert message in err
        assert "\n" not in err
    assert not (tmp_path / "out").exists()


def test_a_spec_naming_a_registered_scenario_is_cut_to_its_first_tasks(tmp_path):
    # blame resolves a spec's scenario as make() does: a registered name, not only "module:attr"
    text = (Path(__file__).parents[3] / "mappa_envs" / "teams" / "review.yaml").read_text()
    spec = tmp_path / "review_by_name.yaml"
    spec.write_text(text.replace("scenario: mappa_envs.mathchat.env:make_scenario", "scenario: mathchat"))
    kwargs = blame.first_tasks_kwargs(f"spec:{spec}", {}, 3)
    assert kwargs["scenario_args"]["num_tasks"] == 3
