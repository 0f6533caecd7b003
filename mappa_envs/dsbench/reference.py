"""The two fixed points of the relative-quality scale, computed once per task on the host.

- baseline: the best trivial submission for the metric, scored on the answers: the best of the
  training mean, median and geometric mean (numbers), the class prior and 0.5 (probabilities), every
  one of the (up to 30) most frequent training classes written on every row (labels: so binary F1
  takes the better of all-negative and all-positive), the most frequent three classes (MAP@3), the
  input text unchanged (text). `baseline_submission` is the plain one (mean or median, majority,
  prior), written as the sample submission, so the agents never see which candidate won;
- reference: a strong, generic model (histogram gradient boosting on ordinal-encoded columns, log
  target for RMSLE) fitted on up to `max_rows` training rows.

Both are written in the submission format and scored by `score_submission`, exactly as agents are.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from mappa_envs.dsbench.metrics import LABEL, NUMBER, ORDINAL, PROBABILITY, RANKED_LABELS, better, get_metric
from mappa_envs.dsbench.scoring import binary_truth, read_answers, score_submission
from mappa_envs.dsbench.tasks import DSTask
from mappa_envs.errors import InputError, TaskDataError


def _features(train: pd.DataFrame, test: pd.DataFrame, task: DSTask) -> tuple[np.ndarray, np.ndarray]:
    cols = [c for c in test.columns if c != task.id_column and c in train.columns and c not in task.target_columns]
    both = pd.concat([train[cols], test[cols]], ignore_index=True)
    for c in cols:
        if not pd.api.types.is_numeric_dtype(both[c]):
            both[c] = both[c].astype("category").cat.codes.replace(-1, np.nan)
    X = both.to_numpy(dtype=float)
    return X[: len(train)], X[len(train):]


def baseline_submission(task: DSTask, train: pd.DataFrame, test: pd.DataFrame) -> pd.DataFrame:
    metric = get_metric(task.metric)
    out = pd.DataFrame({task.id_column: test[task.id_column]})
    for col in task.target_columns:
        y = train[col].dropna()
        if metric.predicts == NUMBER:
            out[col] = y.median() if metric.name in ("mae", "medae") else y.mean()
        elif metric.predicts == PROBABILITY:
            multi_log_loss = len(task.target_columns) > 1 and metric.name == "log_loss"
            out[col] = y.mean() if multi_log_loss else binary_truth(y, task.pos_label).mean()
        elif metric.predicts in (LABEL, ORDINAL):
            out[col] = y.mode().iloc[0]
        elif metric.predicts == RANKED_LABELS:
            out[col] = " ".join(map(str, y.value_counts().index[:3]))
        else:  # text extraction: the whole input text
            text_col = next((c for c in test.columns
                             if c != task.id_column and not pd.api.types.is_numeric_dtype(test[c])), None)
            out[col] = test[text_col].fillna("") if text_col else ""
    return out


BASELINE_VERSION = "best-trivial-1"  # part of the cached scores' stamp: bump when the candidates change
MAX_CLASS_CANDIDATES = 30


def trivial_submissions(task: DSTask, train: pd.DataFrame, test: pd.DataFrame) -> list[pd.DataFrame]:
    """Every candidate for the best trivial submission (see the module docstring); the plain one first."""
    metric = get_metric(task.metric)
    plain = baseline_submission(task, train, test)
    out = [plain]

    def constant(values: dict) -> pd.DataFrame:
        sub = plain.copy()
        for col, value in values.items():
            sub[col] = value
        return sub

    targets = list(task.target_columns)
    ys = {c: train[c].dropna() for c in targets}
    if metric.predicts == NUMBER:
        out += [constant({c: ys[c].mean() for c in targets}), constant({c: ys[c].median() for c in targets})]
        if all((ys[c] >= 0).all() for c in targets):
            out.append(constant({c: float(np.expm1(np.log1p(ys[c]).mean())) for c in targets}))
    elif metric.predicts == PROBABILITY:
        out.append(constant({c: 0.5 for c in targets}))
    elif metric.predicts in (LABEL, ORDINAL) and len(targets) == 1:
        col = targets[0]
        out += [constant({col: value}) for value in ys[col].value_counts().index[:MAX_CLASS_CANDIDATES]]
    return out


def best_trivial_score(task: DSTask, train: pd.DataFrame, test: pd.DataFrame, answers: pd.DataFrame) -> float:
    """The best metric any `trivial_submissions` candidate reaches on the answers."""
    metric = get_metric(task.metric)
    best = None
    for candidate in trivial_submissions(task, train, test):
        report = score_submission(task, candidate, answers)
        if report.valid and (best is None or better(metric.name, report.score, best)):
            best = report.score
    if best is None:
        raise TaskDataError(f"task {task.id!r}: no trivial submission is valid "
                         f"({score_submission(task, baseline_submission(task, train, test), answers).error})")
    return best


def reference_submission(task: DSTask, train: pd.DataFrame, test: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

    metric = get_metric(task.metric)
    if metric.predicts not in (NUMBER, PROBABILITY, LABEL, ORDINAL, RANKED_LABELS):
        raise InputError(f"no generic reference model for {metric.name} tasks")
    X, X_test = _features(train, test, task)
    out = pd.DataFrame({task.id_column: test[task.id_column]})
    targets = list(task.target_columns)
    if metric.name == "log_loss" and len(targets) > 1:  # one-hot class columns: one multi-class model
        y = train[targets].to_numpy(dtype=float).argmax(axis=1)
        model = HistGradientBoostingClassifier(random_state=seed).fit(X, y)
        proba = np.zeros((len(X_test), len(targets)))
        proba[:, model.classes_] = model.predict_proba(X_test)
        out[targets] = proba
        return out
    for col in targets:
        keep = train[col].notna().to_numpy()
        y = train[col][keep]
        if metric.predicts == NUMBER:
            log = metric.name == "rmsle"
            model = HistGradientBoostingRegressor(random_state=seed).fit(X[keep], np.log1p(y) if log else y)
            pred = model.predict(X_test)
            out[col] = np.clip(np.expm1(pred), 0, None) if log else pred
        elif metric.predicts == PROBABILITY:
            model = HistGradientBoostingClassifier(random_state=seed).fit(X[keep], binary_truth(y, task.pos_label))
            out[col] = model.predict_proba(X_test)[:, 1]
        else:
            model = HistGradientBoostingClassifier(random_state=seed).fit(X[keep], y.astype(str))
            if metric.predicts == RANKED_LABELS:
                top = np.argsort(-model.predict_proba(X_test), axis=1)[:, :3]
                out[col] = [" ".join(model.classes_[row]) for row in top]
            else:
                out[col] = _restore_type(model.predict(X_test), y)
    return out


def _restore_type(pred: np.ndarray, y: pd.Series) -> pd.Series:
    """Labels predicted as strings back in the training column's type (ints stay ints)."""
    if pd.api.types.is_bool_dtype(y):
        return pd.Series(pred == "True")
    if pd.api.types.is_numeric_dtype(y):
        return pd.Series(pd.to_numeric(pred))
    return pd.Series(pred)


def reference_scores(task: DSTask, max_rows: int = 50_000, seed: int = 0) -> tuple[float, float | None, str | None]:
    """(baseline score, reference score or None, why the reference failed or None)."""
    train = pd.read_csv(task.train_csv, dtype={task.id_column: str})
    if len(train) > max_rows:
        train = train.sample(max_rows, random_state=seed)
    test = pd.read_csv(task.test_csv, dtype={task.id_column: str})
    missing = [c for c in task.target_columns if c not in train.columns]
    if missing:
        raise TaskDataError(f"task {task.id!r}: train.csv lacks the target column(s) {missing}")
    answers = read_answers(task)
    base = best_trivial_score(task, train, test, answers)
    try:
        with threadpool_limits(1):  # a few threads on a shared machine are slower than one
            ref = score_submission(task, reference_submission(task, train, test, seed), answers)
    except ValueError as e:
        return base, None, str(e)
    return base, (ref.score if ref.valid else None), ref.error
