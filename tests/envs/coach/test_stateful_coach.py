"""StatefulCoach on a synthetic biased stream (known bias, known answer), its checkpoint, its prompt note,
its spec, and the trainer's checkpoint hook."""
from __future__ import annotations

import json
import random

import pytest

from mappa_envs.coach import CoachConfigError, make_coach
from mappa_envs.coach.rule import RuleCoach
from mappa_envs.coach.stateful import (
    BalanceConfig,
    StatefulCoach,
    check_outcome,
    coach_metrics,
    load_coach_state,
    plot_corrections,
    plot_run_corrections,
    save_coach_state,
    task_type,
)
from mappa_envs.coach.types import CoachRequest, CoachScore

METRIC = {"regression": "rmse", "classification": "accuracy"}


def _req(kind: str, right: bool, role: str = "modeler") -> CoachRequest:
    return CoachRequest(env_id="DSBench-v0", role=role, role_duties="Model.", task=f"a {kind} task", action="work",
                        metrics={"metric": METRIC[kind]}, checks={"submission_valid": right})


class Biased:
    """Right work 7, wrong work 3 (with noise), and +`bias` for regression tasks: the paper's DSBench coach."""

    def __init__(self, bias: float = 2.0, seed: int = 0):
        self.bias, self.rng, self.seen = bias, random.Random(seed), []

    def score(self, request: CoachRequest) -> CoachScore:
        self.seen.append(request)
        base = 7.0 if request.checks.get("submission_valid") else 3.0
        extra = self.bias if task_type(request) == "regression" else 0.0
        return CoachScore(score=min(10.0, max(0.0, base + extra + self.rng.gauss(0, 0.5))))

    async def ascore(self, request):
        return self.score(request)


def _stream(n: int, seed: int = 1) -> list[CoachRequest]:
    rng = random.Random(seed)
    return [_req(rng.choice(["regression", "classification"]), rng.random() < 0.5, rng.choice(["a", "b"]))
            for _ in range(n)]


def _gap(scores, requests) -> float:
    """Mean regression-minus-classification score at equal check outcome (averaged over the two outcomes)."""
    diffs = []
    for right in (True, False):
        by = {k: [s for s, r in zip(scores, requests) if task_type(r) == k and r.checks["submission_valid"] == right]
              for k in METRIC}
        reg, cls = by["regression"], by["classification"]
        diffs.append(sum(reg) / len(reg) - sum(cls) / len(cls))
    return sum(diffs) / 2


def test_defaults_group_by_task_kind_and_check_outcome():
    assert task_type(_req("regression", True)) == "regression"
    assert task_type(_req("classification", True)) == "classification"
    math = CoachRequest(env_id="MathChat-v0", role="r", role_duties="", task="t", action="a")
    assert task_type(math) == "MathChat-v0"
    assert check_outcome(_req("regression", True)) == "right"
    assert check_outcome(_req("regression", False)) == "wrong"
    assert check_outcome(CoachRequest(env_id="X", role="r", role_duties="", task="t", action="a")) == "unknown"


def test_an_injected_bias_is_detected_and_recentred():
    coach = StatefulCoach(Biased(2.0), BalanceConfig(threshold=0.5, min_count=20, every=25))
    stream = _stream(3000)
    scores = [coach.score(r).score for r in stream]
    raw = coach.gaps("raw")
    assert raw["regression"] - raw["classification"] == pytest.approx(2.0, abs=0.15)  # it sees the bias
    assert coach.corrections, "no correction was made"
    first = coach.corrections[0]
    assert first["at"] <= 200  # found early
    assert first["offsets"]["regression"] < 0 == first["offsets"]["classification"]  # the favoured type is lowered
    late = slice(1000, None)  # after the correction settled
    assert abs(_gap(scores[late], stream[late])) <= 0.2  # the residual bias
    assert abs(_gap([coach.inner.score(r).score for r in stream[:400]], stream[:400])) > 1.5  # raw: still biased


def test_a_balanced_coach_is_left_alone():
    coach = StatefulCoach(Biased(0.0), BalanceConfig(threshold=0.5, min_count=20, every=25))
    stream = _stream(1500)
    served = [coach.score(r).score for r in stream]
    assert coach.corrections == []
    assert coach.offsets == {}
    inner = Biased(0.0)
    assert served == [inner.score(r).score for r in stream]  # untouched, score for score


def test_state_dict_round_trip_continues_exactly():
    stream = _stream(1200)
    whole = StatefulCoach(Biased(2.0, seed=3))
    expected = [whole.score(r).score for r in stream]
    first = StatefulCoach(Biased(2.0, seed=3))
    got = [first.score(r).score for r in stream[:600]]
    state = json.loads(json.dumps(first.state_dict()))  # as a checkpoint stores it
    second = StatefulCoach(first.inner)  # the same inner coach (its random stream goes on)
    second.load_state_dict(state)
    got += [second.score(r).score for r in stream[600:]]
    assert got == expected
    assert second.corrections == whole.corrections


def test_damaged_states_and_bad_settings_are_one_line_errors():
    coach = StatefulCoach(RuleCoach())
    with pytest.raises(CoachConfigError, match="not a version-1 coach state"):
        coach.load_state_dict({"version": 99})
    with pytest.raises(CoachConfigError, match="damaged"):
        coach.load_state_dict({"version": 1, "raw": [["a"]], "served": [], "offsets": {}, "corrections": [], "seen": 0})
    with pytest.raises(CoachConfigError, match="threshold"):
        BalanceConfig(threshold=-1)
    with pytest.raises(CoachConfigError, match="mode"):
        BalanceConfig(mode="shout")
    with pytest.raises(CoachConfigError, match="stateful:rule"):
        make_coach("stateful:")


def test_note_mode_tells_the_judge_and_does_not_recentre():
    inner = Biased(2.0)
    coach = StatefulCoach(inner, BalanceConfig(mode="note"))
    for r in _stream(600):
        out = coach.score(r)
    assert coach.corrections
    last = inner.seen[-1]
    if task_type(last) == "regression":
        assert "Calibration note: you have scored regression tasks +" in last.role_duties
    assert out.rationale == ""  # nothing recentred in note mode
    assert coach.note("regression").startswith("Calibration note: you have scored regression tasks +")


def test_failures_pass_through_uncounted():
    class Failing:
        def score(self, request):
            return CoachScore(score=None, ok=False, error="down")

        async def ascore(self, request):
            return self.score(request)

    coach = StatefulCoach(Failing())
    assert coach.score(_req("regression", True)).error == "down"
    assert coach.seen == 0


def test_spec_wraps_any_coach_and_checkpoint_files_round_trip(tmp_path):
    coach = make_coach("stateful:rule")
    assert isinstance(coach, StatefulCoach)
    assert isinstance(coach.inner, RuleCoach)
    for r in _stream(50):
        coach.score(r)
    save_coach_state(coach, tmp_path)
    fresh = make_coach("stateful:rule")
    load_coach_state(fresh, tmp_path)
    assert fresh.state_dict() == coach.state_dict()
    save_coach_state(RuleCoach(), tmp_path / "plain")  # a stateless coach writes nothing
    assert not (tmp_path / "plain").exists()


def test_corrections_plot(tmp_path):
    coach = StatefulCoach(Biased(2.0))
    for r in _stream(800):
        coach.score(r)
    plot_corrections(coach, tmp_path / "c.png")
    assert (tmp_path / "c.png").stat().st_size > 0


def test_the_trainer_checkpoints_a_stateful_coach(tmp_path):
    from mappa_train.checkpoints import save_checkpoint

    coach = make_coach("stateful:rule")
    coach.score(_req("regression", True))
    save_checkpoint(tmp_path, 1, {}, keep=2, coach=coach)
    saved = json.loads((tmp_path / "checkpoints" / "step_000001" / "coach_state.json").read_text())
    assert saved["seen"] == 1


def test_scores_from_many_threads_are_all_counted():
    from concurrent.futures import ThreadPoolExecutor

    coach = StatefulCoach(Biased(2.0))
    stream = _stream(2000)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(coach.score, stream))
    assert coach.seen == 2000
    assert sum(r.n for r in coach.raw.values()) == 2000
    assert sum(r.n for r in coach.served.values()) == 2000


@pytest.mark.slow
def test_training_checkpoints_and_resumes_the_coach_state(tmp_path):
    from mappa_train.config import load_config
    from mappa_train.runlog import read_metrics
    from mappa_train.train import train
    from tests.train.test_train import TINY

    base = TINY + [f"out_dir={tmp_path}", "env.coach=stateful:rule", "eval_every=0", "checkpoint_every=1"]
    train(load_config(None, base + ["steps=1"]))
    first = json.loads((tmp_path / "checkpoints" / "step_000001" / "coach_state.json").read_text())
    assert first["seen"] > 0
    train(load_config(None, base + ["steps=2"]))  # resumes after step 1, with the coach's statistics
    second = json.loads((tmp_path / "checkpoints" / "step_000002" / "coach_state.json").read_text())
    (row,) = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r["kind"] == "train" and r["step"] == 2]
    assert second["seen"] == first["seen"] + row["actions"]  # counted on from the checkpoint, not from zero


def test_coach_metrics_report_the_offsets_per_group_and_the_plot_is_written(tmp_path):
    coach = StatefulCoach(Biased(2.0))
    assert coach_metrics(RuleCoach()) == {}  # a coach without state adds nothing to the metrics
    for r in _stream(50):
        coach.score(r)
    early = coach_metrics(coach)
    assert early == {"coach_offset/classification": 0.0, "coach_offset/regression": 0.0, "coach_corrections": 0.0}
    for r in _stream(1500, seed=2):
        coach.score(r)
    m = coach_metrics(coach)
    assert m["coach_corrections"] == len(coach.corrections) >= 1
    assert m["coach_offset/regression"] == coach.offsets["regression"]
    # the +2 regression bias is being taken back out, half from each side of the gap
    assert m["coach_offset/classification"] - m["coach_offset/regression"] == pytest.approx(2.0, abs=0.3)
    plot_run_corrections(RuleCoach(), tmp_path)
    assert not (tmp_path / "coach_corrections.png").exists()
    plot_run_corrections(coach, tmp_path)
    assert (tmp_path / "coach_corrections.png").stat().st_size > 0


@pytest.mark.slow
def test_training_logs_the_coach_offsets_each_step_and_plots_them(tmp_path):
    from mappa_train.config import load_config
    from mappa_train.runlog import read_metrics
    from mappa_train.train import train
    from tests.train.test_train import TINY

    cfg = TINY + [f"out_dir={tmp_path}", "env.coach=stateful:rule", "eval_every=0", "checkpoint_every=1", "steps=2"]
    train(load_config(None, cfg))
    rows = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:  # each step's metrics carry the coach state that step's checkpoint saved
        state = json.loads((tmp_path / "checkpoints" / f"step_{row['step']:06d}" / "coach_state.json").read_text())
        logged = {k.split("/", 1)[1]: v for k, v in row.items() if k.startswith("coach_offset/")}
        assert logged
        assert logged == {k: state["offsets"].get(k, 0.0) for k in {key[1] for key in state["raw"]}}
        assert row["coach_corrections"] == len(state["corrections"])
    assert (tmp_path / "coach_corrections.png").stat().st_size > 0


def _trained_state() -> dict:
    coach = StatefulCoach(Biased(2.0))
    for r in _stream(400):
        coach.score(r)
    assert coach.offsets  # a state with a correction in it
    return json.loads(json.dumps(coach.state_dict()))


def _damaged(path: str, value):
    state = _trained_state()
    *parents, last = path.split(".")
    node = state
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node[key]
    if last == "*":  # every value of a mapping
        for k in node:
            node[k] = value
    else:
        node[int(last) if isinstance(node, list) else last] = value
    return state


@pytest.mark.parametrize("path, value, says", [
    ("offsets.*", float("nan"), "offsets"),  # issue 36: loaded, then every score was served as 0.0
    ("offsets.*", float("inf"), "offsets"),
    ("offsets.*", 40.0, "offsets"),
    ("offsets.*", "-1", "offsets"),
    ("raw.0.4", float("nan"), "raw row 0 mean"),
    ("raw.0.4", 12.5, "raw row 0 mean"),
    ("served.0.5", -1.0, "served row 0 m2"),
    ("raw.0.3", -5, "raw row 0 n"),
    ("raw.0.3", 2.5, "raw row 0 n"),
    ("raw.0.3", True, "raw row 0 n"),
    ("raw.0.2", "sideways", "outcome"),
    ("seen", 10**6, "seen"),
    ("seen", float("nan"), "seen"),
    ("corrections.0.offsets.*", float("nan"), "corrections[0].offsets"),
    ("corrections.0.at", -1, "corrections[0].at"),
    ("corrections", {"a": 1}, "corrections must be a list"),
])
def test_a_damaged_state_is_refused_in_one_line_and_the_coach_is_unchanged(path, value, says):
    coach = StatefulCoach(Biased(2.0, seed=5))
    for r in _stream(300, seed=9):
        coach.score(r)
    before = json.dumps(coach.state_dict())
    with pytest.raises(CoachConfigError, match="damaged coach state") as err:
        coach.load_state_dict(_damaged(path, value))
    assert says in str(err.value)
    assert "\n" not in str(err.value)
    assert json.dumps(coach.state_dict()) == before
    probe = _req("regression", True)
    assert 0.0 < coach.score(probe).score <= 10.0  # still serving real scores


def test_a_repeated_statistics_row_is_refused():
    state = _trained_state()
    state["raw"].append(state["raw"][0])
    with pytest.raises(CoachConfigError, match="repeats"):
        StatefulCoach(RuleCoach()).load_state_dict(state)


def test_a_checkpoint_file_that_is_not_json_is_one_line_and_saving_never_leaves_half_a_file(tmp_path):
    coach = make_coach("stateful:rule")
    (tmp_path / "coach_state.json").write_text('{"version": 1, "raw": [')
    with pytest.raises(CoachConfigError, match="coach_state.json: not a coach state") as err:
        load_coach_state(coach, tmp_path)
    assert "\n" not in str(err.value)
    coach.score(_req("regression", True))
    save_coach_state(coach, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["coach_state.json"]
    fresh = make_coach("stateful:rule")
    load_coach_state(fresh, tmp_path)
    assert fresh.state_dict() == coach.state_dict()


def test_scores_off_the_scale_are_passed_on_uncounted():
    class Wild:
        def score(self, request):
            return CoachScore(score=15.0)

        async def ascore(self, request):
            return self.score(request)

    coach = StatefulCoach(Wild())
    assert coach.score(_req("regression", True)).score == 15.0
    assert coach.seen == 0  # so the state it saves always loads again


def test_every_state_the_coach_writes_loads_again_even_at_the_edges_of_the_scale():
    class Extreme:
        def __init__(self):
            self.k = 0

        def score(self, request):
            self.k += 1
            return CoachScore(score=10.0 if self.k % 2 else 0.0)

        async def ascore(self, request):
            return self.score(request)

    config = BalanceConfig(min_count=2, every=3, threshold=0.0)
    coach = StatefulCoach(Extreme(), config)
    for r in _stream(301):
        coach.score(r)
    state = json.loads(json.dumps(coach.state_dict()))
    fresh = StatefulCoach(RuleCoach(), config)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == coach.state_dict()
