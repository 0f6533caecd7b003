"""DSBench pays for models, not artefacts (issue 21 §4): the baseline is the best trivial submission for the
metric, and a submission with no link to the test rows (a constant, a constant with a few rows changed) is
never paid, for every metric `compute_metric` knows. Hand-made tasks here; the real env in
test_dsbench_integrity.py."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mappa_envs.dsbench.metrics import LABEL, METRICS, NUMBER, ORDINAL, PROBABILITY, RANKED_LABELS, better
from mappa_envs.dsbench.reference import baseline_submission, best_trivial_score, trivial_submissions
from mappa_envs.dsbench.scoring import read_answers, score_submission
from mappa_envs.dsbench.tasks import task_from_folder

N_TRAIN, N_TEST = 300, 120


def _target(metric: str, rng: np.random.Generator, x: np.ndarray) -> dict[str, np.ndarray]:
    """Target column(s) for `metric`, driven by the feature x (so a model can do well)."""
    m = METRICS[metric]
    if m.predicts == NUMBER:
        y = 50 + 20 * x + rng.normal(0, 4, len(x))
        return {"y": np.abs(y) + 1} if metric in ("rmsle", "smape") else {"y": y}
    if m.predicts == PROBABILITY:
        if metric == "log_loss":  # two flavours exist; the one-hot multi-class one is tested here
            k = np.digitize(x + rng.normal(0, 0.3, len(x)), [-0.5, 0.5])
            return {f"c{j}": (k == j).astype(int) for j in range(3)}
        return {"y": (x + rng.normal(0, 0.5, len(x)) > 0.3).astype(int)}
    if m.predicts == ORDINAL:
        return {"y": np.digitize(x + rng.normal(0, 0.3, len(x)), [-1, 0, 1])}
    if m.predicts in (LABEL, RANKED_LABELS):
        labels = np.array(["low", "mid", "high", "top"])
        k = np.digitize(x + rng.normal(0, 0.3, len(x)), [-0.8, 0.6, 1.5])
        if metric == "f1":  # binary, imbalanced: 'M' the positive class, about a third of rows
            return {"y": np.where(x + rng.normal(0, 0.4, len(x)) > 0.4, "M", "B")}
        return {"y": labels[k]}
    words = np.array(["good", "bad", "fine", "awful", "great", "meh"])  # text: extract the sentiment word
    return {"y": words[np.digitize(x, [-1, -0.3, 0, 0.4, 1])]}


def _task(tmp_path, metric: str):
    rng = np.random.default_rng(sorted(METRICS).index(metric))
    n = N_TRAIN + N_TEST
    x = rng.normal(0, 1, n)
    frame = pd.DataFrame({"id": [f"r{i}" for i in rng.permutation(n)], "x": x, **_target(metric, rng, x)})
    targets = [c for c in frame.columns if c not in ("id", "x")]
    if METRICS[metric].predicts == "text":
        frame["text"] = [f"the {w} day" for w in frame[targets[0]]]
    train, test = frame.iloc[:N_TRAIN], frame.iloc[N_TRAIN:]
    folder, ans = tmp_path / "data_resplit" / "t", tmp_path / "answers" / "t"
    folder.mkdir(parents=True)
    ans.mkdir(parents=True)
    train.to_csv(folder / "train.csv", index=False)
    test.drop(columns=targets).to_csv(folder / "test.csv", index=False)
    test[["id", *targets]].to_csv(ans / "test_answer.csv", index=False)
    pos = "M" if metric == "f1" else None
    task = task_from_folder(tmp_path, "t", "a task", metric, "id", pos_label=pos)
    read = lambda p: pd.read_csv(p, dtype={"id": str})  # noqa: E731
    return task, read(folder / "train.csv"), read(folder / "test.csv"), read_answers(task)


def _model(task, test: pd.DataFrame, answers: pd.DataFrame, rng: np.random.Generator) -> pd.DataFrame:
    """The answers with 15% of rows swapped among themselves: what a decent, imperfect model writes."""
    sub = answers.set_index("id").loc[test["id"]].reset_index()
    rows = rng.choice(len(sub), int(0.15 * len(sub)), replace=False)
    targets = list(task.target_columns)
    sub.loc[rows, targets] = sub.loc[rng.permutation(rows), targets].to_numpy()
    if task.metric == "map_at_3":
        sub[targets[0]] = sub[targets[0]].astype(str) + " low mid"
    if METRICS[task.metric].predicts == PROBABILITY:  # confident, never certain
        for col in targets:
            sub[col] = sub[col] * 0.8 + 0.2 / len(targets) + rng.uniform(0, 0.01, len(sub))
    return sub


@pytest.mark.parametrize("metric", sorted(METRICS))
def test_no_constant_submission_is_paid_and_the_baseline_is_the_best_trivial(tmp_path, metric):
    task, train, test, answers = _task(tmp_path, metric)
    best = best_trivial_score(task, train, test, answers)
    candidates = trivial_submissions(task, train, test)
    for sub in candidates:
        report = score_submission(task, sub, answers)
        if not report.valid:
            continue
        assert not better(metric, report.score, best)  # the baseline is the best of them
        if metric != "jaccard":  # its trivial submission is the input text itself, not a constant
            assert report.constant, sub.head()
            assert not report.informative
    plain = score_submission(task, baseline_submission(task, train, test), answers)
    assert not better(metric, plain.score, best)
    targets = list(task.target_columns)
    pool = pd.concat([train[targets], answers[targets]])
    for i in range(0, len(pool), max(1, len(pool) // 12)):  # constants drawn from the data, including the answers
        sub = test[["id"]].copy()
        for col in targets:
            sub[col] = pool[col].iloc[i] if task.metric != "map_at_3" else f"{pool[col].iloc[i]} low mid"
        report = score_submission(task, sub, answers)
        if report.valid:
            assert report.constant
            assert not report.informative, (i, report)


@pytest.mark.parametrize("metric", sorted(METRICS))
def test_a_model_is_paid(tmp_path, metric):
    task, train, test, answers = _task(tmp_path, metric)
    report = score_submission(task, _model(task, test, answers, np.random.default_rng(0)), answers)
    assert report.valid, report.error
    assert report.informative, report
    assert better(metric, report.score, best_trivial_score(task, train, test, answers))


@pytest.mark.parametrize("metric", sorted(METRICS))
def test_a_near_constant_submission_is_rarely_paid(tmp_path, metric):
    """The best constant with 3 rows set to another value: each such row helps or hurts by luck, so it beats
    the best constant about half the time; the shuffle test pays it at most about 1 time in 20."""
    task, train, test, answers = _task(tmp_path, metric)
    candidates = [c for c in trivial_submissions(task, train, test) if score_submission(task, c, answers).valid]
    base = max(candidates, key=lambda c: _key(metric, score_submission(task, c, answers).score))
    targets = list(task.target_columns)
    other = {c: answers[c].iloc[0] if answers[c].iloc[0] != base[c].iloc[0] else answers[c].iloc[1] for c in targets}
    paid, beats, best = 0, 0, best_trivial_score(task, train, test, answers)
    rng = np.random.default_rng(1)
    for _ in range(40):
        sub = base.copy()
        rows = rng.choice(len(sub), 3, replace=False)
        for col in targets:
            value = other[col] if task.metric != "map_at_3" else f"{other[col]} low mid"
            sub[col] = sub[col].astype(object)
            sub.loc[rows, col] = value
        report = score_submission(task, sub, answers)
        if report.valid:
            beats += better(metric, report.score, best)
            paid += report.informative and better(metric, report.score, best)
    assert paid <= 6, (paid, beats)


def _key(metric: str, score: float) -> float:
    return score if METRICS[metric].higher_is_better else -score
