"""Fault facts are registered with the env: an env registered with its own gets `mappa blame` and
`mappa coach-eval` with no edit anywhere else, and one registered without them is a one-line error."""
from __future__ import annotations

import json

import pytest

import mappa_envs
from mappa_envs.chain.scripted import ScriptedChainPolicy
from mappa_envs.coach.rule import RuleCoach
from mappa_envs.coach_eval import blame
from mappa_envs.coach_eval.faults import Faults, faults, measured_envs
from mappa_envs.errors import InputError


def _two_step_team(env, fault: str) -> ScriptedChainPolicy:
    return ScriptedChainPolicy(skill={"step_2": 0.0} if fault == "last_slips" else 1.0)


TOY = Faults(roles={"none": None, "last_slips": "step_2"}, team=_two_step_team,
             kwargs={"depth": 2, "num_tasks": 3, "task_seed": 1})
NOT_FAULTS = {"none": None}


@pytest.fixture
def register():
    """`mappa_envs.register` for the length of a test (the ids are removed again afterwards)."""
    added = []

    def add(env_id: str, **kwargs):
        mappa_envs.register(env_id, "mappa_envs.chain.env:ChainEnv", **kwargs)
        added.append(env_id)

    yield add
    for env_id in added:
        mappa_envs.registry.pop(env_id)


def test_an_env_registered_with_its_faults_gets_coach_eval_from_the_command_line(tmp_path, register):
    from mappa_cli.main import main

    register("ToyChain-v0", faults=f"{__name__}:TOY", depth=2)
    assert "ToyChain-v0" in measured_envs()
    out = tmp_path / "card"
    assert main(["coach-eval", "--env", "ToyChain-v0", "--probe-tasks", "1", "--no-backprop", "--out", str(out)]) == 0
    (row,) = json.loads((out / "results.json").read_text())["rows"]
    assert row["step_blame"]["ToyChain-v0/last_slips"]["episodes"] == 3  # TOY's own task set: 3 tasks
    assert row["agent_blame"]["ToyChain-v0/last_slips"]["precision"] == 1.0  # the rule coach blames step_2 alone
    transcripts = [json.loads(line) for line in (out / "transcripts.jsonl").read_text().splitlines()]
    assert {t["faulty_role"] for t in transcripts if t["fault"] == "last_slips"} == {"step_2"}
    rows = blame.measure(["ToyChain-v0"], {"rule": RuleCoach()}, say=lambda m: None)
    assert [(r.fault, r.faulty_role, r.episodes) for r in rows] == [("none", None, 3), ("last_slips", "step_2", 3)]


def test_an_env_without_fault_facts_is_a_one_line_error_naming_the_registry_field(tmp_path, register, capsys):
    from mappa_cli.main import main

    register("BareChain-v0")
    register("OddChain-v0", faults=f"{__name__}:NOT_FAULTS")
    assert "BareChain-v0" not in measured_envs()
    with pytest.raises(InputError, match=r"BareChain-v0 registers no fault facts \(EnvSpec.faults\)"):
        blame.measure(["BareChain-v0"], {"rule": RuleCoach()}, say=lambda m: None)
    with pytest.raises(InputError, match="must be a mappa_envs.coach_eval.faults.Faults"):
        faults("OddChain-v0")
    assert main(["coach-eval", "--env", "BareChain-v0", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "invalid choice: 'BareChain-v0'" in err
    assert "\n" not in err
    assert not (tmp_path / "out").exists()


def test_the_shipped_envs_register_their_faults():
    assert measured_envs() == ["MathChat-v0", "DSBench-v0", "CodeTest-v0", "Chain-v0"]
    for env_id in measured_envs():
        assert faults(env_id).roles["none"] is None
        assert len(faults(env_id).roles) == 4  # the fault-free team and three faults
