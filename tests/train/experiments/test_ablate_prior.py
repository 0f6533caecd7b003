"""`mappa ablate --prior`: an ablation extended from the results.json of an earlier one whose run folders are
gone, with its runs kept, not retrained, and a prior of another setting or start refused before anything trains."""
from __future__ import annotations

import json
import os
import re
import shutil

import pytest

from mappa_cli.main import main
from mappa_train.config import ConfigError
from mappa_train.experiments.ablate import train_settings
from mappa_train.experiments.ablate_preset import arms_at, conditions, load_ablation
from mappa_train.experiments.ablate_prior import check_prior, check_same_start, load_prior, restore_budgets

from .test_ablate_credit import tiny_sweep

ARMS = {"process": {"reward": "process"}, "outcome": {"reward": "outcome"}}


PREFLIGHT = {"right_share": 0.5, "team_success": 0.25, "episodes": 2}
BUDGET = {"eval_set": "heldout", "gain": 0.1, "start": 0.0, "reached": 0.5, "steps_to_rise": 2, "factor": 2.0,
          "budget_steps": 4}


def _prior(cfg, records=(), **start_reports) -> dict:
    from dataclasses import asdict

    return {"config": asdict(cfg), "records": list(records), "start_reports": start_reports}


def _record(arm="process", seed=3, **figures) -> dict:
    """A run's record as `mappa ablate` writes it, at depth 2 of tiny_sweep."""
    return {"condition": "depth2", "depth": 2, "coach_noise": 0.0, "arm": arm, "reward": arm, "seed": seed,
            "curve": [[0, 0.5], [2, 1.0]], "reached": None, "target": 0.6, "to_gain": {"0.1": None},
            "wall_s": 1.0, "coach_calls": 2.0, "generated_tokens": 20.0, "rollouts": 2, "start_accuracy": 0.5,
            "auc": 1.0, "final_accuracy": 1.0, **figures}


def _grid(tmp_path, arms=ARMS, **fields):
    """tiny_sweep's preset at depth 2 (--sweep-values 2), its cells ((condition, arm) -> (Condition, Arm)) and
    resolved training config."""
    cfg, arms = load_ablation(tiny_sweep(tmp_path, seeds=[0], arms=arms, **fields))
    cfg.sweep.values = [2]
    cells = {(c.name, n): (c, a) for c in conditions(cfg) for n, a in arms_at(cfg, arms, c).items()}
    return cfg, cells, train_settings(cfg, tmp_path / "out")


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

    # carried on in place (--prior its own results.json): the runs there are the prior's, nothing trains, and
    # results.json is replaced whole; a record that disagrees with a run finished there is refused
    listing = sorted(p.relative_to(again) for p in again.rglob("*"))
    assert main(["ablate", "--config", str(spec), "--out", str(again), "--sweep-values", "2", "--seeds", "1",
                 "--prior", str(again / "results.json")]) == 0
    assert sorted(p.relative_to(again) for p in again.rglob("*")) == listing
    assert json.loads((again / "results.json").read_text())["records"] == results["records"]
    assert results["train"]["learner"]["lr"] > 0  # the resolved training config, for the next --prior to compare
    disagreeing = json.loads((again / "results.json").read_text())
    disagreeing["records"][-1]["curve"][0][1] = 0.0 if disagreeing["records"][-1]["curve"][0][1] else 1.0
    (tmp_path / "disagreeing.json").write_text(json.dumps(disagreeing))
    assert main(["ablate", "--config", str(spec), "--out", str(again), "--sweep-values", "2", "--seeds", "1",
                 "--prior", str(tmp_path / "disagreeing.json")]) == 2
    assert json.loads((again / "results.json").read_text())["records"] == results["records"]

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
    cfg, cells, train = _grid(tmp_path)
    good = _prior(cfg, [_record()], preflight_depth2=PREFLIGHT)
    assert check_prior(good, cfg, cells, train, "p.json") == [0, 3]  # the prior's seed joins the grid

    changed = _prior(cfg, [_record()], preflight_depth2=PREFLIGHT)
    changed["config"]["overrides"] = [*changed["config"]["overrides"], "learner.lr=1e-3"]
    changed["config"]["arms"]["process"] = {"reward": "process", "whiten": "global"}
    with pytest.raises(ConfigError, match=r"was run with other settings \(overrides, arms.process\)"):
        check_prior(changed, cfg, cells, train, "p.json")
    edited = {**good, "train": {**train, "learner": {**train["learner"], "lr": 1.0}}}  # the training preset edited
    with pytest.raises(ConfigError, match=r"other settings \(train.learner.lr\)"):
        check_prior(edited, cfg, cells, train, "p.json")
    assert check_prior({**good, "train": train}, cfg, cells, train, "p.json") == [0, 3]
    # a learning rate given on the command line then and set by the preset now: the same resolved setting
    moved = {**good, "train": train, "config": {**good["config"], "overrides": ["learner.lr=2.5e-5"]}}
    assert check_prior(moved, cfg, cells, train, "p.json") == [0, 3]
    with pytest.raises(ConfigError, match=r"other settings \(train.learner.lr\)"):
        check_prior({**moved, "train": edited["train"]}, cfg, cells, train, "p.json")
    # a prior from before a setting existed ran it at its default: the same setting while it holds that here
    older = {key: value for key, value in train["algo"].items() if key != "whiten_unit"}
    assert check_prior({**good, "train": {**train, "algo": older}}, cfg, cells, train, "p.json") == [0, 3]
    mine = {**train, "algo": {**train["algo"], "whiten_unit": "action"}}
    with pytest.raises(ConfigError, match=r"other settings \(train.algo.whiten_unit\)"):
        check_prior({**good, "train": {**train, "algo": older}}, cfg, cells, mine, "p.json")
    for field, value in [("sweep", None), ("arms", ["process"]), ("from_a_newer_version", 1)]:
        odd = _prior(cfg, [_record()], preflight_depth2=PREFLIGHT)
        odd["config"][field] = value
        with pytest.raises(ConfigError, match=f"other settings .*{field}"):
            check_prior(odd, cfg, cells, train, "p.json")
    with pytest.raises(ConfigError, match=r"holds runs outside this grid .*\('depth3', 'process'\)"):
        check_prior(_prior(cfg, [_record(condition="depth3", depth=3)]), cfg, cells, {}, "p.json")
    # a record placed otherwise than its condition and arm place it
    for wrong, says in [({"depth": 3}, "depth 3"), ({"reward": "outcome"}, "reward 'outcome'"),
                        ({"coach_noise": 0.5}, "coach_noise 0.5")]:
        with pytest.raises(ConfigError, match=f"depth2/process/seed3 has {says}"):
            check_prior(_prior(cfg, [_record(**wrong)], preflight_depth2=PREFLIGHT), cfg, cells, train, "p.json")
    with pytest.raises(ConfigError, match=r"not the reports .*\(preflight_depth2 in start_reports\)"):
        check_prior(_prior(cfg, [_record()]), cfg, cells, train, "p.json")
    cfg.preflight_episodes = 0
    with pytest.raises(ConfigError, match="set preflight_episodes"):
        check_prior(_prior(cfg, [_record()], preflight_depth2=PREFLIGHT), cfg, cells, train, "p.json")


def test_which_arms_the_noisy_coaches_train_is_the_grids_extent_not_a_setting(tmp_path):
    # a noise curve added to a preset after its records were committed: those records still pair, while a
    # noisy run of an arm the preset no longer crosses with the noisy coaches falls outside the grid
    cfg, cells, train = _grid(tmp_path, arms={**ARMS, "both": {"reward": "process+outcome"}}, coach_noise=[0.0, 0.1],
                              noise_at=[2], noise_arms=["process"])
    before = _prior(cfg, [_record()], preflight_depth2=PREFLIGHT)
    before["config"].update(coach_noise=[0.0], noise_at=[], noise_arms=[])
    assert check_prior(before, cfg, cells, train, "p.json") == [0, 3]
    noisy = _record(arm="both", reward="process+outcome", condition="depth2_noise0.1", coach_noise=0.1)
    with pytest.raises(ConfigError, match=r"outside this grid .*\('depth2_noise0.1', 'both'\)"):
        check_prior(_prior(cfg, [noisy], preflight_depth2=PREFLIGHT), cfg, cells, train, "p.json")


def test_a_budget_prior_needs_its_budget_and_no_run_of_the_budget_seed(tmp_path):
    cfg, cells, train = _grid(tmp_path, budget_gain=0.1)
    with pytest.raises(ConfigError, match=r"budget_depth2 in start_reports"):
        check_prior(_prior(cfg, [_record()], preflight_depth2=PREFLIGHT), cfg, cells, train, "p.json")
    biased = _prior(cfg, [_record(seed=cfg.budget_seed)], preflight_depth2=PREFLIGHT, budget_depth2=BUDGET)
    with pytest.raises(ConfigError, match=f"runs of seed {cfg.budget_seed}, the budget pre-flight's"):
        check_prior(biased, cfg, cells, train, "p.json")


def test_the_prior_budget_is_restored_before_the_start_is_built_and_a_different_one_here_is_refused(tmp_path):
    cfg, _, _ = _grid(tmp_path)
    prior = _prior(cfg, budget_depth2=BUDGET, budget_depth3={**BUDGET, "budget_steps": 6}, preflight_depth2=PREFLIGHT)
    start = tmp_path / "start"
    assert restore_budgets(prior, start, ["budget_depth2"], "p.json") == [start / "budget_depth2.json"]
    assert json.loads((start / "budget_depth2.json").read_text()) == BUDGET
    assert not (start / "budget_depth3.json").exists()  # only the grid's conditions are restored
    assert restore_budgets(prior, start, ["budget_depth2"], "p.json") == []  # the same budget there: kept
    (start / "budget_depth2.json").write_text(json.dumps({**BUDGET, "budget_steps": 6}))
    with pytest.raises(ConfigError, match="fixed 6 steps, the prior 4"):
        restore_budgets(prior, start, ["budget_depth2", "budget_depth3"], "p.json")
    assert not (start / "budget_depth3.json").exists()  # refused before anything was written


def test_another_start_keeps_the_prior_seeds_apart_or_is_refused_where_a_seed_would_mix_starts(tmp_path):
    spec = tiny_sweep(tmp_path, seeds=[0], arms=ARMS)
    cfg, _ = load_ablation(spec)
    (tmp_path / "start").mkdir()
    (tmp_path / "start" / "preflight_depth2.json").write_text(json.dumps(PREFLIGHT))
    grid = {("depth2", "process"), ("depth2", "outcome")}
    records = [{"condition": "depth2", "arm": arm, "seed": 0} for arm in ("process", "outcome")]
    said = []
    same = _prior(cfg, records, preflight_depth2=PREFLIGHT)
    check_same_start(same, tmp_path / "start", grid, "p.json", said.append)
    assert said == []
    other = _prior(cfg, records, preflight_depth2={**PREFLIGHT, "right_share": 0.75})
    check_same_start(other, tmp_path / "start", grid, "p.json", said.append)
    assert said == ["note: the start built here plays differently from the prior's (preflight_depth2: 0.500 of "
                    "actions right against 0.750); the prior's seeds keep their start, new seeds train from this one"]
    other["records"] = records[:1]  # seed 0's outcome run would train here, from another start than its process run
    with pytest.raises(ConfigError, match=r"its seeds \[0\] lack arms of this grid"):
        check_same_start(other, tmp_path / "start", grid, "p.json", said.append)


def _results(**changes) -> dict:
    return {"config": {}, "records": [_record()], "start_reports": {"preflight_depth2": PREFLIGHT}, **changes}


BAD_RECORDS = [
    ({"auc": "0.5"}, "auc must be null or a number in [0, 1]"),
    ({"auc": -5}, "auc must be null or a number in [0, 1]"),
    ({"final_accuracy": 7}, "final_accuracy must be"),
    ({"curve": [["x"]]}, "curve must be a list of [rollouts, accuracy]"),
    ({"curve": [[0, 1.5]]}, "curve must be"),
    ({"seed": 2**70}, "seed must be an integer in [0, 2**63)"),
    ({"seed": -1}, "seed must be"),
    ({"seed": True}, "seed must be"),
    ({"reached": {"rollouts": -2}}, "reached must be"),
    ({"to_gain": []}, "to_gain must be"),
    ({"arm": ""}, "arm must be an arm's name"),
]


@pytest.mark.parametrize("change, says", BAD_RECORDS)
def test_a_record_the_summary_cannot_read_is_refused_when_the_prior_is_read(tmp_path, change, says):
    path = tmp_path / "p.json"
    path.write_text(json.dumps(_results(records=[_record(**change)])))
    with pytest.raises(ConfigError, match=f"record 0: {re.escape(says)}"):
        load_prior(path)


def test_a_record_lacking_a_figure_twice_or_a_report_that_could_leave_start_is_refused(tmp_path):
    path = tmp_path / "p.json"
    lacking = _record()
    del lacking["to_gain"]
    cases = [(_results(records=[lacking]), "record 0: lacks to_gain"),
             (_results(records=[_record(), _record(auc=0.0)]), "records hold depth2/process/seed3 twice"),
             (_results(start_reports={"budget_depth2/../../escaped": BUDGET}), "is not a pre-flight or budget"),
             (_results(start_reports={"budget_depth2\u0000": BUDGET}), "is not a pre-flight or budget"),
             (_results(start_reports={"budget_depth2": {**BUDGET, "budget_steps": -4}}), "budget_steps must be"),
             (_results(start_reports={"budget_depth2": {**BUDGET, "budget_steps": "lots"}}), "budget_steps must be"),
             (_results(start_reports={"budget_depth2": {"budget_steps": 4}}), "lacks start"),
             (_results(start_reports={"preflight_depth2": {"team_success": 0.1}}), "lacks right_share"),
             (_results(train=["lr"]), "its config, records, start_reports or train is not as")]
    for results, says in cases:
        path.write_text(json.dumps(results))
        with pytest.raises(ConfigError, match=re.escape(says)):
            load_prior(path)


def test_a_file_that_is_not_strict_json_of_bounded_size_is_refused_without_reading_it_all(tmp_path):
    good = json.dumps(_results())
    texts = {"dupkeys.json": good[:-1] + ', "records": []}', "nan.json": good.replace('"auc": 1.0', '"auc": NaN'),
             "inf.json": good.replace('"auc": 1.0', '"auc": Infinity'), "deep.json": "[" * 100_000,
             "bigint.json": "1" * 5000, "latin1.json": None}
    for name, text in texts.items():
        if text is None:
            (tmp_path / name).write_bytes(b'{"config": "\xe9"}')
        else:
            (tmp_path / name).write_text(text)
        with pytest.raises(ConfigError, match="is not readable JSON"):
            load_prior(tmp_path / name)
    with pytest.raises(ConfigError, match="key 'records' appears twice"):
        load_prior(tmp_path / "dupkeys.json")
    huge = tmp_path / "huge.json"
    with huge.open("wb") as f:
        f.truncate(65 << 20)  # sparse: costs no disk
    with pytest.raises(ConfigError, match="over the 64 MiB"):
        load_prior(huge)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # nothing writes it: a read would block forever
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_prior(fifo)
    with pytest.raises(ConfigError, match="is not a regular file"):
        load_prior(tmp_path)
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    with pytest.raises(ConfigError, match="cannot be read"):
        load_prior(loop)


def test_bad_prior_files_are_one_line_errors_and_nothing_is_written(tmp_path, capsys):
    spec = tiny_sweep(tmp_path, seeds=[0], arms=ARMS)
    (tmp_path / "notjson.json").write_text("{oops")
    (tmp_path / "other.json").write_text(json.dumps({"records": []}))
    shell = {"config": {}, "start_reports": {}}
    (tmp_path / "torn.json").write_text(json.dumps({**shell, "records": [{"condition": "", "arm": "process"}]}))
    (tmp_path / "flat.json").write_text(json.dumps({**shell, "records": "none"}))
    (tmp_path / "elsewhere.json").write_text(json.dumps({**_results(), "config": {"overrides": []}}))
    for name, says in [("missing.json", "no such file"), ("notjson.json", "is not readable JSON"),
                       ("other.json", "is not a results.json with config, records and start_reports"),
                       ("torn.json", "record 0: lacks reward"),
                       ("flat.json", "its config, records, start_reports or train is not as"),
                       ("elsewhere.json", "was run with other settings"), ("", "--prior is empty")]:
        out = tmp_path / "out"
        assert main(["ablate", "--config", str(spec), "--out", str(out), "--prior",
                     str(tmp_path / name) if name else ""]) == 2
        err = capsys.readouterr().err.strip()
        assert says in err
        assert len(err.splitlines()) == 1
        assert not out.exists()  # refused before --out was made
    with pytest.raises(ConfigError, match="no such file"):
        load_prior(tmp_path / "missing.json")
