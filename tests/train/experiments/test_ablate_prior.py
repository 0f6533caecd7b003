"""`mappa ablate --prior`: an ablation extended from the results.json of an earlier one whose run folders are
gone, with its runs kept, not retrained, and a prior of another setting or start refused before anything trains."""
from __future__ import annotations

import json
import shutil

import pytest

from mappa_cli.main import main
from mappa_train.config import ConfigError
from mappa_train.experiments.ablate_preset import load_ablation
from mappa_train.experiments.ablate_prior import check_prior, check_same_start, load_prior, restore_budgets

from .test_ablate_credit import tiny_sweep

ARMS = {"process": {"reward": "process"}, "outcome": {"reward": "outcome"}}


def _prior(cfg, records=(), **start_reports) -> dict:
    from dataclasses import asdict

    return {"config": asdict(cfg), "records": list(records), "start_reports": start_reports}


@pytest.mark.slow
def test_a_prior_on_a_lost_machine_is_extended_by_new_seeds_without_retraining_it(tmp_path):
    spec = tiny_sweep(tmp_path, seeds=[0], arms=ARMS)
    first = tmp_path / "first"
    assert main(["ablate", "--config", str(spec), "--out", str(first), "--sweep-values", "2"]) == 0
    committed = tmp_path / "committed.json"
    shutil.copy(first / "results.json", committed)
    before = json.loads(committed.read_text())
    assert set(before["start_reports"]) == {"preflight_depth2"}
    shutil.rmtree(first)  # the machine is gone: only results.json is left

    again = tmp_path / "again"
    assert main(["ablate", "--config", str(spec), "--out", str(again), "--sweep-values", "2", "--seeds", "1",
                 "--prior", str(committed)]) == 0
    runs = again / "runs" / "depth2"
    assert sorted(p.name for p in (runs / "process").iterdir()) == ["seed1"]  # seed 0 was not trained again
    assert (runs / "outcome" / "seed1" / "final").is_dir()
    results = json.loads((again / "results.json").read_text())
    assert results["seeds"] == [0, 1]
    old = {(r["arm"], r["seed"]): r for r in before["records"]}
    new = {(r["arm"], r["seed"]): r for r in results["records"]}
    assert set(new) == {(a, s) for a in ARMS for s in (0, 1)}
    assert all(new[key] == old[key] for key in old)  # the prior's records, figure for figure
    assert results["start_reports"] == before["start_reports"]  # the rebuilt start played the pre-flight alike
    assert len({r["start"] for r in results["records"]}) == 1  # every seed from one start
    (pair,) = results["paired"]
    assert pair["seeds"] == [0, 1]
    assert pair["arm"] == "process"

    # a start that plays otherwise, where a prior seed lacks an arm (its run would pair two starts), is refused
    # before any arm trains, and the prior file is untouched
    torn = json.loads(committed.read_text())
    torn["start_reports"]["preflight_depth2"]["right_share"] += 0.25
    torn["records"] = [r for r in torn["records"] if r["arm"] == "process"]
    committed.write_text(json.dumps(torn))
    other = tmp_path / "other"
    assert main(["ablate", "--config", str(spec), "--out", str(other), "--sweep-values", "2", "--seeds", "2",
                 "--prior", str(committed)]) == 2
    assert not (other / "runs").exists()
    assert json.loads(committed.read_text()) == torn


def test_a_prior_of_another_setting_or_outside_the_grid_is_refused(tmp_path):
    spec = tiny_sweep(tmp_path, seeds=[0], arms=ARMS)
    cfg, _ = load_ablation(spec)
    record = {"condition": "depth2", "depth": 2, "coach_noise": 0.0, "arm": "process", "reward": "process", "seed": 3}
    grid = {("depth2", "process"), ("depth2", "outcome")}
    assert check_prior(_prior(cfg, [record]), cfg, grid, "p.json") == [0, 3]  # the prior's seed joins the grid

    changed = _prior(cfg, [record])
    changed["config"]["overrides"] = [*changed["config"]["overrides"], "learner.lr=1e-3"]
    changed["config"]["arms"]["process"] = {"reward": "process", "whiten": "global"}
    with pytest.raises(ConfigError, match=r"was run with other settings \(overrides, arms.process\)"):
        check_prior(changed, cfg, grid, "p.json")
    with pytest.raises(ConfigError, match=r"holds runs outside this grid .*\('depth3', 'process'\)"):
        check_prior(_prior(cfg, [{**record, "condition": "depth3", "depth": 3}]), cfg, grid, "p.json")
    cfg.preflight_episodes = 0
    with pytest.raises(ConfigError, match="set preflight_episodes"):
        check_prior(_prior(cfg, [record]), cfg, grid, "p.json")


def test_the_prior_budget_is_restored_and_a_different_one_here_is_refused(tmp_path):
    spec = tiny_sweep(tmp_path, seeds=[0], arms=ARMS)
    cfg, _ = load_ablation(spec)
    budget = {"eval_set": "heldout", "gain": 0.1, "factor": 2.0, "budget_steps": 4, "run": "/elsewhere"}
    prior = _prior(cfg, budget_depth2=budget, preflight_depth2={"right_share": 0.5})
    restore_budgets(prior, tmp_path / "start")
    assert json.loads((tmp_path / "start" / "budget_depth2.json").read_text()) == budget
    check_same_start(prior, tmp_path / "start", set(), "p.json")  # the same budget, and no pre-flight here yet: fine
    (tmp_path / "start" / "budget_depth2.json").write_text(json.dumps({**budget, "budget_steps": 6}))
    restore_budgets(prior, tmp_path / "start")  # never overwrites what is there
    with pytest.raises(ConfigError, match="fixed 6 steps, the prior 4"):
        check_same_start(prior, tmp_path / "start", set(), "p.json")


def test_another_start_keeps_the_prior_seeds_apart_or_is_refused_where_a_seed_would_mix_starts(tmp_path):
    spec = tiny_sweep(tmp_path, seeds=[0], arms=ARMS)
    cfg, _ = load_ablation(spec)
    (tmp_path / "start").mkdir()
    (tmp_path / "start" / "preflight_depth2.json").write_text(json.dumps({"right_share": 0.5, "team_success": 0.25}))
    grid = {("depth2", "process"), ("depth2", "outcome")}
    records = [{"condition": "depth2", "arm": arm, "seed": 0} for arm in ("process", "outcome")]
    said = []
    same = _prior(cfg, records, preflight_depth2={"right_share": 0.5, "team_success": 0.25})
    check_same_start(same, tmp_path / "start", grid, "p.json", said.append)
    assert said == []
    other = _prior(cfg, records, preflight_depth2={"right_share": 0.75, "team_success": 0.25})
    check_same_start(other, tmp_path / "start", grid, "p.json", said.append)
    assert said == ["note: the start built here plays differently from the prior's (preflight_depth2: 0.500 of "
                    "actions right against 0.750); the prior's seeds keep their start, new seeds train from this one"]
    other["records"] = records[:1]  # seed 0's outcome run would train here, from another start than its process run
    with pytest.raises(ConfigError, match=r"its seeds \[0\] lack arms of this grid"):
        check_same_start(other, tmp_path / "start", grid, "p.json", said.append)


def test_bad_prior_files_are_one_line_errors_and_nothing_is_written(tmp_path, capsys):
    spec = tiny_sweep(tmp_path, seeds=[0], arms=ARMS)
    (tmp_path / "notjson.json").write_text("{oops")
    (tmp_path / "other.json").write_text(json.dumps({"records": []}))
    shell = {"config": {}, "start_reports": {}}
    (tmp_path / "torn.json").write_text(json.dumps({**shell, "records": [{"condition": "", "arm": "process"}]}))
    (tmp_path / "flat.json").write_text(json.dumps({**shell, "records": "none"}))
    for name, says in [("missing.json", "no such file"), ("notjson.json", "is not readable JSON"),
                       ("other.json", "is not a results.json with config, records and start_reports"),
                       ("torn.json", "record 0 is not as `mappa ablate` writes it"),
                       ("flat.json", "its config, records or start_reports is not as")]:
        out = tmp_path / "out"
        assert main(["ablate", "--config", str(spec), "--out", str(out), "--prior", str(tmp_path / name)]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err
        assert len(err.splitlines()) == 1
        assert not out.exists()
    with pytest.raises(ConfigError, match="no such file"):
        load_prior(tmp_path / "missing.json")
