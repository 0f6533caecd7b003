"""Submission validation and scoring: join to the hidden answers by id, score every target column.

A submission that cannot be scored fairly (unreadable, wrong columns, missing or duplicate or
unknown ids, NaN, values of the wrong type) gets `valid=False` and an error that says exactly what is
wrong — never a zero that looks like a score. `relative_quality` puts scores of different metrics on
one [0, 1] scale between a trivial baseline and a strong reference.

A valid submission is also tested for carrying information about the test rows (`informative`): its score
must strictly beat the score of its own predictions shuffled across the rows, in each of `SHUFFLES`
seeded shuffles. Shuffling keeps everything a submission could write without looking at the inputs (its
values, their mix) and destroys only the link to the rows, so a constant submission (`constant`), a
constant with a few rows changed, or any fixed mix of values fails it, whatever the metric; a fitted model
passes by a wide margin. The env pays (`correct`, `beats_baseline`, quality) only informative submissions.
"""
from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from mappa_envs.dsbench.csvread import read_csv_bounded
from mappa_envs.dsbench.metrics import LABEL, NUMBER, ORDINAL, PROBABILITY, better, compute_metric, get_metric
from mappa_envs.dsbench.tasks import DSTask


@dataclass
class SubmissionReport:
    """The verdict on one submission file."""

    valid: bool
    metric: str
    score: float | None = None
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    rows: int = 0
    constant: bool = False  # every row predicts the same (per target column)
    informative: bool = False  # beats every shuffle of its own predictions across the rows (module docstring)

    def to_dict(self) -> dict:
        return asdict(self)


def read_table(data: bytes | str | pd.DataFrame, id_column: str, what: str) -> pd.DataFrame:
    """A CSV as a DataFrame with the id column as stripped strings (so 7 and "7" join); ValueError if unreadable."""
    if isinstance(data, pd.DataFrame):
        df = data.copy()
    else:
        raw = data.encode() if isinstance(data, str) else data
        df = read_csv_bounded(raw, what, dtype={id_column: str}, keep_default_na=True)  # shapes that stall: refused
    if id_column in df.columns:
        df[id_column] = df[id_column].astype("string").str.strip()
    return df


def read_answers(task: DSTask) -> pd.DataFrame:
    answers = read_table(task.answers_csv.read_bytes(), task.id_column, str(task.answers_csv))
    if answers[task.id_column].isna().any() or answers[task.id_column].duplicated().any():
        raise ValueError(f"{task.answers_csv}: the id column {task.id_column!r} has empty or duplicate values")
    return answers


def canonical_labels(values: pd.Series) -> np.ndarray:
    """Labels as strings that compare equal however pandas parsed them: True/"True", 3/3.0/"3"."""
    if pd.api.types.is_bool_dtype(values):
        return np.where(values.to_numpy(dtype=bool), "True", "False").astype(object)
    if pd.api.types.is_numeric_dtype(values):
        v = values.to_numpy(dtype=float)
        integral = np.isfinite(v) & (v == np.round(v))
        out = v.astype(str).astype(object)
        out[integral] = v[integral].astype(np.int64).astype(str)
        return out
    return values.astype(str).str.strip().to_numpy(dtype=object)


def binary_truth(values: pd.Series, pos_label=None) -> np.ndarray:
    """0/1 targets for probability metrics, from 0/1, booleans, or string labels with `pos_label`."""
    labels = canonical_labels(values)
    classes = set(labels)
    if pos_label is not None:
        return (labels == canonical_labels(pd.Series([pos_label]))[0]).astype(float)
    if classes <= {"0", "1"}:
        return labels.astype(float)
    if classes <= {"False", "True"}:
        return (labels == "True").astype(float)
    raise ValueError(f"probability metrics need 0/1 targets; got labels {sorted(classes)[:5]} "
                     "(set the task's pos_label)")


def _examples(ids, n: int = 3) -> str:
    ids = list(ids)
    return repr(ids[:n])[:-1] + (", ...]" if len(ids) > n else "]")


def score_submission(task: DSTask, submission: bytes | str | pd.DataFrame,
                     answers: pd.DataFrame | None = None) -> SubmissionReport:
    """Validate `submission` against the task's answers (joined by id) and score it."""
    metric = get_metric(task.metric)
    report = SubmissionReport(valid=False, metric=metric.name)
    answers = read_answers(task) if answers is None else answers
    try:
        sub = read_table(submission, task.id_column, "submission.csv")
        report.rows = len(sub)
        y_true, y_pred = _align(task, sub, answers, report.warnings)
        options = {"pos_label": _pos_label(task, answers)} if metric.name == "f1" else {}
        report.score = compute_metric(metric.name, y_true, y_pred, **options)
    except ValueError as e:
        report.error = str(e)
        return report
    report.valid = bool(np.isfinite(report.score))
    if not report.valid:
        report.error = f"the metric {metric.name} is undefined for this submission (got {report.score})"
        return report
    report.constant = len(y_pred) > 1 and all(len(pd.unique(y_pred[:, j])) == 1 for j in range(y_pred.shape[1]))
    report.informative = not report.constant and _beats_its_shuffles(metric.name, y_true, y_pred, report.score,
                                                                     options)
    return report


SHUFFLES = 19  # a submission with no link to the rows beats all 19 with probability at most 1/20


def _beats_its_shuffles(metric: str, y_true: np.ndarray, y_pred: np.ndarray, score: float, options: dict) -> bool:
    """Does `score` strictly beat the metric of `y_pred` with its rows shuffled, every time? Seeded by the
    predictions, so a verdict is reproducible; a shuffle the metric cannot score counts as beaten."""
    seed = int.from_bytes(hashlib.sha256(pd.util.hash_array(y_pred.ravel().astype(str)).tobytes()).digest()[:8],
                          "little")
    rng = np.random.default_rng(seed)
    for _ in range(SHUFFLES):
        try:
            shuffled = compute_metric(metric, y_true, y_pred[rng.permutation(len(y_pred))], **options)
        except ValueError:
            continue
        if np.isfinite(shuffled) and not better(metric, score, shuffled):
            return False
    return True


def _pos_label(task: DSTask, answers: pd.DataFrame) -> str:
    if task.pos_label is not None:
        return canonical_labels(pd.Series([task.pos_label]))[0]
    classes = set(canonical_labels(answers[task.target_columns[0]]))
    for pos in ("1", "True"):
        if pos in classes:
            return pos
    raise ValueError(f"binary F1 needs a positive class; labels are {sorted(classes)} (set the task's pos_label)")


def _align(task: DSTask, sub: pd.DataFrame, answers: pd.DataFrame,
           warnings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Check the submission's shape and ids; return (y_true, y_pred) in the answers' row order."""
    idc, targets = task.id_column, list(task.target_columns)
    expected = [idc, *targets]
    missing_cols = [c for c in expected if c not in sub.columns]
    if missing_cols:
        raise ValueError(f"submission.csv is missing column(s) {missing_cols}: it has {list(sub.columns)}, "
                         f"the expected header is {','.join(expected)}")
    extra = [c for c in sub.columns if c not in expected]
    if extra:
        warnings.append(f"ignored extra column(s) {extra}")
    if sub.empty:
        raise ValueError("submission.csv has a header but no rows")
    if sub[idc].isna().any():
        raise ValueError(f"submission.csv has {int(sub[idc].isna().sum())} row(s) with an empty {idc!r}")
    dupes = sub[idc][sub[idc].duplicated()].unique()
    if len(dupes):
        raise ValueError(f"submission.csv has {len(dupes)} duplicated {idc!r} value(s), e.g. {_examples(dupes)}: "
                         "write one row per test id")
    want, have = set(answers[idc]), set(sub[idc])
    unknown, absent = sorted(have - want), sorted(want - have)
    if unknown or absent:
        parts = [f"submission.csv has {len(sub)} rows for {len(answers)} test ids"]
        if absent:
            parts.append(f"{len(absent)} test id(s) have no prediction, e.g. {_examples(absent)}")
        if unknown:
            hint = ""
            if all(_as_int_id(u) in want for u in unknown[:20]):
                hint = " (they look like the test ids written as floats: keep the id column as in test.csv)"
            parts.append(f"{len(unknown)} id(s) are not in the test set, e.g. {_examples(unknown)}{hint}")
        raise ValueError("; ".join(parts))
    sub = sub.set_index(idc).loc[answers[idc]]
    for col in targets:
        n_nan = int(sub[col].isna().sum())
        if n_nan:
            first = sub.index[sub[col].isna()][0]
            raise ValueError(f"column {col!r} has {n_nan} empty/NaN value(s) (first at {idc}={first!r})")
    return _values(task, sub[targets].reset_index(drop=True), answers[targets].reset_index(drop=True), warnings)


def _as_int_id(value: str) -> str | None:
    try:
        f = float(value)
    except ValueError:
        return None
    return str(int(f)) if f.is_integer() else None


def _values(task: DSTask, pred: pd.DataFrame, truth: pd.DataFrame,
            warnings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    metric = get_metric(task.metric)
    if metric.predicts in (NUMBER, PROBABILITY, ORDINAL):
        for col in pred.columns:
            numeric = pd.to_numeric(pred[col], errors="coerce")
            bad = numeric.isna() | ~np.isfinite(numeric.astype(float))
            if bad.any():
                raise ValueError(f"column {col!r} must hold numbers; {int(bad.sum())} value(s) are not, "
                                 f"e.g. {_examples(pred[col][bad].astype(str))}")
            pred[col] = numeric.astype(float)
        if metric.name == "log_loss" and ((pred < 0) | (pred > 1)).any().any():
            raise ValueError("log loss needs probabilities in [0, 1]; some predictions are outside")
        one_hot = metric.name == "log_loss" and len(pred.columns) > 1  # answers are 0/1 class columns already
        if metric.predicts == PROBABILITY and not one_hot:
            y_true = np.column_stack([binary_truth(truth[c], task.pos_label) for c in truth.columns])
        else:
            y_true = truth.apply(pd.to_numeric, errors="raise").to_numpy(dtype=float)
        return y_true, pred.to_numpy(dtype=float)
    y_true = np.column_stack([canonical_labels(truth[c]) for c in truth.columns])
    if metric.predicts == LABEL:
        y_pred = np.column_stack([canonical_labels(pred[c]) for c in pred.columns])
        known = set(y_true.ravel())
        unseen = sorted(set(y_pred.ravel()) - known)
        if unseen and not set(y_pred.ravel()) & known:
            raise ValueError(f"none of the predicted labels are classes of this task: got e.g. {unseen[:5]}, "
                             f"the classes look like {sorted(known)[:5]} (write labels as in train.csv)")
        if unseen:
            warnings.append(f"{len(unseen)} predicted label(s) never occur in the answers, e.g. {unseen[:3]}")
        return y_true, y_pred
    return y_true, pred.astype(str).to_numpy(dtype=object)  # ranked labels ("a b c") and text


def relative_quality(metric: str, score: float, baseline: float, reference: float | None) -> float:
    """Where `score` sits between the baseline (0) and the reference (1), clipped to [0, 1].

    When no reference beats the baseline the scale is undefined: strictly beating the baseline counts 1.
    """
    if reference is None or not better(metric, reference, baseline):
        return 1.0 if better(metric, score, baseline) else 0.0
    return float(np.clip((score - baseline) / (reference - baseline), 0.0, 1.0))
