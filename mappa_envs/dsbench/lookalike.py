"""Built-in tasks shaped like public datasets, and the check that the public copy reveals nothing about them.

Six built-in tasks carry the column names of small datasets that ship with scikit-learn and statsmodels,
which code in the sandbox can import. Their rows are generated (`generators.py`), so no row can be
looked up; but a generated table could still, by chance, tie its features to its target the way the
public table does, and then joining each test row to its nearest public row would predict the answers
better than chance. `reveals` runs that join (on the columns both share, standardized); the generator
draws again until it does not (`builtin.py`), and tests/envs/test_dsbench_leaks.py checks the cached tasks.
"""
from __future__ import annotations

import functools
from collections.abc import Callable

import numpy as np
import pandas as pd

from mappa_envs.dsbench.metrics import LABEL, RANKED_LABELS, better, compute_metric, get_metric

_DIABETES = {"bp": "blood_pressure", "s1": "tc", "s2": "ldl", "s3": "hdl", "s4": "tch", "s5": "ltg", "s6": "glucose"}


def _sklearn(name: str) -> pd.DataFrame:
    from sklearn import datasets

    d = getattr(datasets, f"load_{name}")(as_frame=True, **({"scaled": False} if name == "diabetes" else {}))
    return pd.concat([d.data, d.target.rename("target")], axis=1)


def _statsmodels(name: str) -> pd.DataFrame:
    import statsmodels.datasets as datasets

    return getattr(datasets, name).load_pandas().data


def _breast_cancer() -> tuple[pd.DataFrame, np.ndarray]:
    df = _sklearn("breast_cancer").rename(columns=lambda c: c.replace(" ", "_"))
    return df, np.where(df["target"] == 0, "M", "B")


def _wine() -> tuple[pd.DataFrame, np.ndarray]:
    df = _sklearn("wine").rename(columns=lambda c: c.replace("/", "_"))
    return df, np.array(["Barolo", "Grignolino", "Barbera"])[df["target"]]


def _digits() -> tuple[pd.DataFrame, np.ndarray]:
    df = _sklearn("digits")  # pixel_<row>_<col> -> pixel_<index>, as the task names them
    df = df.rename(columns={c: f"pixel_{int(c.split('_')[1]) * 8 + int(c.split('_')[2])}"
                            for c in df.columns if c.startswith("pixel_")})
    return df, df["target"].to_numpy()


def _diabetes() -> tuple[pd.DataFrame, np.ndarray]:
    df = _sklearn("diabetes").rename(columns=_DIABETES)
    return df, df["target"].to_numpy()


def _affairs() -> tuple[pd.DataFrame, np.ndarray]:
    df = _statsmodels("fair")
    return df, (df["affairs"] > 0).astype(int).to_numpy()


def _party() -> tuple[pd.DataFrame, np.ndarray]:
    df = _statsmodels("anes96")
    return df, df["PID"].astype(int).to_numpy()


# task id -> the public table (columns named as the task names them) and its target written as the task's labels
PUBLIC: dict[str, Callable[[], tuple[pd.DataFrame, np.ndarray]]] = {
    "breast-cancer-diagnosis": _breast_cancer, "wine-cultivar": _wine, "digit-recognition": _digits,
    "diabetes-progression": _diabetes, "marital-affairs": _affairs, "party-identification": _party,
}


@functools.cache
def public(task_id: str) -> tuple[pd.DataFrame, np.ndarray]:
    return PUBLIC[task_id]()


def nearest_public_labels(features: pd.DataFrame, table: pd.DataFrame, labels: np.ndarray) -> np.ndarray:
    """For each row of `features`, the label of the nearest `table` row on the numeric columns both have."""
    from sklearn.neighbors import NearestNeighbors

    cols = [c for c in features.columns if c in table.columns and pd.api.types.is_numeric_dtype(features[c])
            and pd.api.types.is_numeric_dtype(table[c])]
    if len(cols) < 2:
        raise ValueError(f"too few shared numeric columns to join on: {cols}")
    ref = table[cols].to_numpy(float)
    mean, std = np.nanmean(ref, axis=0), np.nanstd(ref, axis=0) + 1e-9
    scaled = lambda a: np.nan_to_num((a - mean) / std)  # noqa: E731
    nearest = NearestNeighbors(n_neighbors=1).fit(scaled(ref)).kneighbors(scaled(features[cols].to_numpy(float)))[1]
    return labels[nearest[:, 0]]


def _score(metric: str, truth: np.ndarray, guess: np.ndarray, pos_label) -> float:
    predicts = get_metric(metric).predicts
    if predicts in (LABEL, RANKED_LABELS):
        truth, guess = truth.astype(str), guess.astype(str)
    else:
        truth, guess = truth.astype(float), guess.astype(float)
    return compute_metric(metric, truth, guess, **({"pos_label": str(pos_label)} if metric == "f1" else {}))


def reveals(task_id: str, metric: str, test: pd.DataFrame, truth: np.ndarray, pos_label=None,
            permutations: int = 100, seed: int = 0) -> bool:
    """Does the nearest-public-row join score `test` better than chance? Chance: the join's own guesses
    shuffled `permutations` times; "better" is past their 90th percentile, a margin below the best of them,
    so a table kept as not revealing stays so under any other shuffles. Only for the tasks in `PUBLIC`."""
    table, labels = public(task_id)
    guess = nearest_public_labels(test, table, labels)
    rng = np.random.default_rng(seed)
    chance = [_score(metric, truth, rng.permutation(guess), pos_label) for _ in range(permutations)]
    bar = np.quantile(chance, 0.9 if get_metric(metric).higher_is_better else 0.1)
    return better(metric, _score(metric, truth, guess, pos_label), float(bar))


__all__ = ["PUBLIC", "nearest_public_labels", "public", "reveals"]
