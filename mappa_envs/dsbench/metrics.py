"""Every metric the DSBench modeling tasks name, as `compute_metric(name, y_true, y_pred) -> float`.

Inputs are array-likes. A 2-D input (rows x target columns) means a multi-target task; how the
columns combine follows the Kaggle competitions that use the metric:

- regression metrics, ROC-AUC and Spearman/Pearson on several columns: the mean of per-column
  scores ("mean column-wise RMSLE", "mean column-wise ROC AUC", ...); MCRMSE is this for RMSE;
- log loss on several columns: multi-class log loss, `y_true` one-hot (or indicator) columns and
  `y_pred` per-class probabilities, each row rescaled to sum to 1 and clipped to [1e-15, 1 - 1e-15];
- MAP@3: `y_true` single labels, `y_pred` strings of up to 3 space-separated labels, best first;
- Jaccard: word-level Jaccard between strings (tweet-sentiment-extraction), averaged over rows.

scikit-learn and scipy do the work where they have the metric; this module adds only SMAPE,
normalized Gini, MAP@3, the string Jaccard and the column-wise means. Bad input raises ValueError
with the reason (the scorer turns it into a failed-submission record, never a fake score).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import stats
from sklearn import metrics as skm

from mappa_envs.errors import InputError

# What a metric's predictions are; the submission validator checks them accordingly.
LABEL, ORDINAL, PROBABILITY, NUMBER, RANKED_LABELS, TEXT = "label", "ordinal", "probability", "number", "ranked", "text"


@dataclass(frozen=True)
class Metric:
    name: str
    fn: Callable[..., float]
    higher_is_better: bool
    predicts: str  # one of LABEL, ORDINAL, PROBABILITY, NUMBER, RANKED_LABELS, TEXT


def _columns(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    """Both as 2-D arrays of equal shape (rows x columns)."""
    t, p = np.asarray(y_true), np.asarray(y_pred)
    if t.size == 0 or p.size == 0:
        raise ValueError("no rows to score")
    t = t.reshape(len(t), -1) if t.ndim != 2 else t
    p = p.reshape(len(p), -1) if p.ndim != 2 else p
    if t.shape != p.shape:
        raise ValueError(f"y_true has shape {t.shape} but y_pred has shape {p.shape}")
    return t, p


def _numeric(a: np.ndarray, what: str) -> np.ndarray:
    try:
        a = a.astype(float)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be numbers") from None
    if not np.isfinite(a).all():
        raise ValueError(f"{what} contains NaN or infinite values")
    return a


def _column_mean(score: Callable[[np.ndarray, np.ndarray], float]) -> Callable[..., float]:
    """A per-column numeric metric averaged over the target columns."""

    def fn(y_true, y_pred, **_) -> float:
        t, p = _columns(y_true, y_pred)
        t, p = _numeric(t, "y_true"), _numeric(p, "y_pred")
        return float(np.mean([score(t[:, j], p[:, j]) for j in range(t.shape[1])]))

    return fn


def _labels_1d(y_true, y_pred) -> tuple[np.ndarray, np.ndarray]:
    t, p = _columns(y_true, y_pred)
    if t.shape[1] != 1:
        raise ValueError(f"this metric scores one label column, got {t.shape[1]}")
    return t[:, 0], p[:, 0]


def _rmsle(t: np.ndarray, p: np.ndarray) -> float:
    if (p < 0).any() or (t < 0).any():
        raise ValueError("RMSLE needs non-negative values (log1p of a negative prediction is undefined); "
                         f"{int((p < 0).sum())} predictions are negative")
    return skm.root_mean_squared_log_error(t, p)


def _smape(t: np.ndarray, p: np.ndarray) -> float:
    """Symmetric MAPE in percent (0-200) as Kaggle computes it: a row where both are 0 counts 0."""
    denom = (np.abs(t) + np.abs(p)) / 2
    ratio = np.divide(np.abs(p - t), denom, out=np.zeros_like(denom), where=denom != 0)
    return float(100 * ratio.mean())


def _roc_auc(t: np.ndarray, p: np.ndarray) -> float:
    if len(np.unique(t)) != 2:
        raise ValueError("ROC-AUC needs both classes present in y_true")
    return skm.roc_auc_score(t, p)


def _correlation(fn) -> Callable[[np.ndarray, np.ndarray], float]:
    def score(t: np.ndarray, p: np.ndarray) -> float:
        if np.ptp(t) == 0 or np.ptp(p) == 0:  # undefined; Kaggle scores a constant column as 0
            return 0.0
        return float(fn(t, p)[0])

    return score


def _normalized_gini(y_true, y_pred, **_) -> float:
    """Gini(actual, pred) / Gini(actual, actual), the Porto Seguro definition.

    For a 0/1 target this equals 2*AUC - 1, which scikit-learn computes with ties counted half (the
    cumulative formula would order tied predictions by row, so a constant submission would not score 0).
    """
    t, p = _columns(y_true, y_pred)
    t, p = _numeric(t, "y_true")[:, 0], _numeric(p, "y_pred")[:, 0]
    if set(np.unique(t)) <= {0.0, 1.0}:
        return 2 * _roc_auc(t, p) - 1

    def gini(order_by: np.ndarray) -> float:
        order = np.lexsort((np.arange(len(t)), -order_by))  # descending, ties by row order (as Kaggle)
        cum = np.cumsum(t[order]) / t.sum()
        return float(cum.sum() / len(t) - (len(t) + 1) / (2 * len(t)))

    if t.sum() == 0:
        raise ValueError("normalized Gini is undefined when every y_true is 0")
    return gini(p) / gini(t)


def _log_loss(y_true, y_pred, **_) -> float:
    t, p = _columns(y_true, y_pred)
    p = _numeric(p, "y_pred")
    if t.shape[1] == 1:  # binary: probability of the positive class
        return float(skm.log_loss(_numeric(t, "y_true")[:, 0], np.clip(p[:, 0], 1e-15, 1 - 1e-15), labels=[0, 1]))
    t = _numeric(t, "y_true")
    if (p < 0).any():
        raise ValueError("probabilities must be non-negative")
    sums = p.sum(axis=1, keepdims=True)
    if (sums == 0).any():
        raise ValueError("a row of class probabilities sums to 0")
    p = np.clip(p / sums, 1e-15, 1 - 1e-15)
    return float(-(t * np.log(p)).sum(axis=1).mean())


def _f1(average: str) -> Callable[..., float]:
    def fn(y_true, y_pred, pos_label=1, **_) -> float:
        t, p = _labels_1d(y_true, y_pred)
        if average == "binary":
            return float(skm.f1_score(t, p, average="binary", pos_label=pos_label))
        return float(skm.f1_score(t, p, average=average))

    return fn


def _accuracy(y_true, y_pred, **_) -> float:
    t, p = _columns(y_true, y_pred)
    return float((t == p).all(axis=1).mean())


def _qwk(y_true, y_pred, **_) -> float:
    t, p = _labels_1d(y_true, y_pred)
    t, p = _numeric(t, "y_true"), _numeric(p, "y_pred")
    if (t != np.round(t)).any() or (p != np.round(p)).any():
        raise ValueError("quadratic weighted kappa needs integer class labels")
    if len(np.union1d(t, p)) == 1:
        return 1.0  # one class everywhere: perfect agreement (sklearn would divide by zero)
    return float(skm.cohen_kappa_score(t.astype(int), p.astype(int), weights="quadratic"))


def _map_at_3(y_true, y_pred, **_) -> float:
    t, p = _labels_1d(y_true, y_pred)
    total = 0.0
    for truth, ranked in zip(t, p):
        guesses = str(ranked).split()
        if len(guesses) > 3:
            raise ValueError(f"MAP@3 takes at most 3 space-separated labels per row, got {ranked!r}")
        for k, guess in enumerate(guesses):
            if guess == str(truth):
                total += 1.0 / (k + 1)
                break
    return total / len(t)


def _jaccard(y_true, y_pred, **_) -> float:
    t, p = _labels_1d(y_true, y_pred)

    def one(a: str, b: str) -> float:
        a_words, b_words = set(str(a).lower().split()), set(str(b).lower().split())
        if not a_words and not b_words:
            return 1.0
        return len(a_words & b_words) / len(a_words | b_words)

    return float(np.mean([one(a, b) for a, b in zip(t, p)]))


METRICS: dict[str, Metric] = {
    m.name: m
    for m in (
        Metric("accuracy", _accuracy, True, LABEL),
        Metric("f1", _f1("binary"), True, LABEL),
        Metric("f1_micro", _f1("micro"), True, LABEL),
        Metric("f1_macro", _f1("macro"), True, LABEL),
        Metric("f1_weighted", _f1("weighted"), True, LABEL),
        Metric("roc_auc", _column_mean(_roc_auc), True, PROBABILITY),
        Metric("log_loss", _log_loss, False, PROBABILITY),
        Metric("normalized_gini", _normalized_gini, True, PROBABILITY),
        Metric("rmse", _column_mean(skm.root_mean_squared_error), False, NUMBER),
        Metric("mcrmse", _column_mean(skm.root_mean_squared_error), False, NUMBER),
        Metric("rmsle", _column_mean(_rmsle), False, NUMBER),
        Metric("mse", _column_mean(skm.mean_squared_error), False, NUMBER),
        Metric("mae", _column_mean(skm.mean_absolute_error), False, NUMBER),
        Metric("medae", _column_mean(skm.median_absolute_error), False, NUMBER),
        Metric("r2", _column_mean(skm.r2_score), True, NUMBER),
        Metric("smape", _column_mean(_smape), False, NUMBER),
        Metric("pearson", _column_mean(_correlation(stats.pearsonr)), True, NUMBER),
        Metric("spearman", _column_mean(_correlation(stats.spearmanr)), True, NUMBER),
        Metric("quadratic_weighted_kappa", _qwk, True, ORDINAL),
        Metric("map_at_3", _map_at_3, True, RANKED_LABELS),
        Metric("jaccard", _jaccard, True, TEXT),
    )
}

ALIASES = {
    "qwk": "quadratic_weighted_kappa", "kappa": "quadratic_weighted_kappa", "f1_binary": "f1",
    "auc": "roc_auc", "logloss": "log_loss", "map@3": "map_at_3", "map3": "map_at_3", "gini": "normalized_gini",
    "r_squared": "r2", "median_absolute_error": "medae", "mean_absolute_error": "mae",
}


def get_metric(name: str) -> Metric:
    key = name.strip().lower().replace("-", "_").replace(" ", "_")
    key = ALIASES.get(key, key)
    if key not in METRICS:
        raise InputError(f"unknown metric {name!r}; known: {', '.join(sorted(METRICS))} "
                         f"(aliases: {', '.join(sorted(ALIASES))})")
    return METRICS[key]


def compute_metric(name: str, y_true, y_pred, **options) -> float:
    """Score predictions with the named metric; `options` (e.g. `pos_label` for binary F1) pass through."""
    return float(get_metric(name).fn(y_true, y_pred, **options))


def better(name: str, a: float, b: float) -> bool:
    """Is score `a` strictly better than `b` under this metric?"""
    return a > b if get_metric(name).higher_is_better else a < b
