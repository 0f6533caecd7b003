"""Built-in offline tasks: generated deterministically on first use, in the DSBench layout.

Sources are datasets that ship inside installed packages (scikit-learn's `load_*`, statsmodels'
`datasets`) and seeded synthetic generators in the style of Kaggle's Playground series. Each task
gets an id column, a seeded train/test split, hidden answers, a sample submission (the baseline's),
a Kaggle-style description, and its baseline and reference scores, computed once at generation.

The cache folder is `$MAPPA_DSBENCH_CACHE`, else `$XDG_CACHE_HOME/mappa/dsbench`, else
`~/.cache/mappa/dsbench`; a generator version names the subfolder, so a change regenerates.
"""
from __future__ import annotations

import json
import os
import shutil
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from mappa_envs.dsbench.tasks import DSTask, task_from_folder

GENERATOR_VERSION = "builtin-v1"


def default_cache_dir() -> Path:
    if os.environ.get("MAPPA_DSBENCH_CACHE"):
        return Path(os.environ["MAPPA_DSBENCH_CACHE"]).expanduser()
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mappa" / "dsbench"


@dataclass(frozen=True)
class Spec:
    id: str
    title: str
    overview: str
    metric: str
    id_column: str
    targets: tuple[str, ...]
    data_notes: str
    make: Callable[[np.random.Generator], pd.DataFrame]  # the full table: features + targets (no id)
    pos_label: Any = None
    test_fraction: float = 0.3


# --- the sources -----------------------------------------------------------------------------------


def _breast_cancer(rng: np.random.Generator) -> pd.DataFrame:
    from sklearn.datasets import load_breast_cancer

    d = load_breast_cancer(as_frame=True)
    df = d.data.rename(columns=lambda c: c.replace(" ", "_"))
    for col in ("mean_texture", "worst_smoothness", "mean_symmetry", "area_error"):  # sensor drop-outs
        df.loc[rng.random(len(df)) < 0.06, col] = np.nan
    df["diagnosis"] = np.where(d.target == 0, "M", "B")
    return df


def _wine(rng: np.random.Generator) -> pd.DataFrame:
    from sklearn.datasets import load_wine

    d = load_wine(as_frame=True)
    df = d.data.rename(columns=lambda c: c.replace("/", "_"))
    df["cultivar"] = np.array(["Barolo", "Grignolino", "Barbera"])[d.target]
    return df


def _digits(rng: np.random.Generator) -> pd.DataFrame:
    from sklearn.datasets import load_digits

    d = load_digits()
    df = pd.DataFrame(d.data.astype(int), columns=[f"pixel_{i}" for i in range(64)])
    df["digit"] = d.target
    return df


def _diabetes(rng: np.random.Generator) -> pd.DataFrame:
    from sklearn.datasets import load_diabetes

    d = load_diabetes(as_frame=True, scaled=False)
    df = d.data.rename(columns={"bp": "blood_pressure", "s1": "tc", "s2": "ldl", "s3": "hdl", "s4": "tch",
                                "s5": "ltg", "s6": "glucose"})
    df["sex"] = np.where(df["sex"] == 1, "female", "male")
    df["progression"] = d.target
    return df


def _statsmodels_dataset(name: str) -> pd.DataFrame:
    try:
        import statsmodels.datasets as datasets
    except ImportError:
        raise ImportError("the built-in DSBench tasks use datasets that ship with statsmodels: "
                          "pip install statsmodels") from None
    return getattr(datasets, name).load_pandas().data


def _affairs(rng: np.random.Generator) -> pd.DataFrame:
    df = _statsmodels_dataset("fair")
    df = df.iloc[np.sort(rng.choice(len(df), 4000, replace=False))].reset_index(drop=True)
    jobs = {1: "student", 2: "farming", 3: "white-collar", 4: "teacher", 5: "managerial", 6: "professional"}
    df["occupation"] = df["occupation"].map(jobs)
    df["occupation_husb"] = df["occupation_husb"].map(jobs)
    df["religious"] = df["religious"].map({1: "not", 2: "mildly", 3: "fairly", 4: "strongly"})
    df["had_affair"] = (df.pop("affairs") > 0).astype(int)
    return df


def _party(rng: np.random.Generator) -> pd.DataFrame:
    df = _statsmodels_dataset("anes96").drop(columns=["popul"])
    df["vote"] = np.where(df["vote"] == 1, "Dole", "Clinton")
    df["party_id"] = df.pop("PID").astype(int)
    return df


def _loans(rng: np.random.Generator, n: int = 4000) -> pd.DataFrame:
    grade = rng.choice(list("ABCDEFG"), n, p=[0.2, 0.25, 0.2, 0.15, 0.1, 0.06, 0.04])
    home = rng.choice(["RENT", "OWN", "MORTGAGE"], n, p=[0.45, 0.15, 0.4])
    purpose = rng.choice(["debt", "card", "home", "car", "medical", "business"], n)
    income = np.round(rng.lognormal(10.9, 0.5, n), -2)
    amount = np.round(rng.uniform(1_000, 35_000, n), -2)
    term = rng.choice(["36 months", "60 months"], n, p=[0.7, 0.3])
    dti = np.round(rng.gamma(4, 4, n), 2)
    emp = rng.integers(0, 11, n).astype(float)
    score = np.round(rng.normal(690, 45, n))
    logit = (-2.2 + 0.35 * (np.array([ord(g) - 65 for g in grade])) + 0.9 * (amount / income)
             + 0.03 * (dti - 16) - 0.012 * (score - 690) + 0.4 * (term == "60 months")
             + 0.5 * (purpose == "business") - 0.3 * (home == "OWN") - 0.04 * emp)
    default = (rng.random(n) < 1 / (1 + np.exp(-logit))).astype(int)
    emp[rng.random(n) < 0.1] = np.nan
    score[rng.random(n) < 0.05] = np.nan
    return pd.DataFrame({"grade": grade, "home_ownership": home, "purpose": purpose, "annual_income": income,
                         "loan_amount": amount, "term": term, "dti": dti, "emp_length": emp,
                         "credit_score": score, "default": default})


def _sales(rng: np.random.Generator, n: int = 3000) -> pd.DataFrame:
    stores = {"Downtown": 120, "Airport": 80, "Mall": 150, "Suburb": 60, "Campus": 40}
    products = {"Coffee": 1.5, "Tea": 0.7, "Bagel": 1.0, "Muffin": 0.8, "Sandwich": 1.2, "Juice": 0.5}
    store = rng.choice(list(stores), n)
    product = rng.choice(list(products), n)
    month = rng.integers(1, 13, n)
    weekday = rng.choice(["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"], n)
    promo = rng.random(n) < 0.2
    price = np.round(rng.uniform(1.5, 6.0, n), 2)
    season = 1 + 0.25 * np.sin(2 * np.pi * (month - 3) / 12)
    weekend = np.where(np.isin(weekday, ["Sat", "Sun"]), 1.3, 1.0)
    mean = (np.vectorize(stores.get)(store) * np.vectorize(products.get)(product) * season * weekend
            * (1 + 0.4 * promo) * (4.0 / price) ** 0.5)
    sold = rng.poisson(mean * rng.lognormal(0, 0.15, n))
    return pd.DataFrame({"store": store, "product": product, "month": month, "weekday": weekday,
                         "promotion": promo.astype(int), "price": price, "num_sold": sold})


def _air(rng: np.random.Generator, n: int = 3000) -> pd.DataFrame:
    hour = rng.integers(0, 24, n)
    weekday = rng.choice(["weekday", "weekend"], n, p=[5 / 7, 2 / 7])
    temp = np.round(rng.normal(15, 8, n), 1)
    humidity = np.round(rng.uniform(20, 95, n), 1)
    wind = np.round(rng.gamma(2, 1.5, n), 2)
    rush = np.exp(-((hour - 8) ** 2) / 6) + np.exp(-((hour - 18) ** 2) / 6)
    traffic = rush * np.where(weekday == "weekday", 1.0, 0.4) + rng.normal(0, 0.1, n)
    s1, s2, s3 = (rng.normal(0, 1, n) for _ in range(3))
    co = 1.0 + 2.5 * traffic - 0.15 * wind + 0.3 * s1 + rng.normal(0, 0.3, n)
    benzene = 4 + 9 * traffic - 0.4 * wind + 0.05 * temp + 0.8 * s2 + rng.normal(0, 1.0, n)
    nox = 120 + 180 * traffic - 12 * wind + 0.5 * humidity + 15 * s3 + rng.normal(0, 20, n)
    return pd.DataFrame({"hour": hour, "day_type": weekday, "temperature": temp, "humidity": humidity,
                         "wind_speed": wind, "sensor_1": np.round(co + rng.normal(0, 0.4, n), 3),
                         "sensor_2": np.round(benzene + rng.normal(0, 1.5, n), 3),
                         "sensor_3": np.round(nox + rng.normal(0, 25, n), 3),
                         "target_carbon_monoxide": np.round(co, 3), "target_benzene": np.round(benzene, 3),
                         "target_nitrogen_oxides": np.round(nox, 3)})


def _weather(rng: np.random.Generator, n: int = 3000) -> pd.DataFrame:
    pressure = np.round(rng.normal(1013, 9, n), 1)
    humidity = np.round(rng.uniform(15, 100, n), 1)
    cloud = np.round(rng.uniform(0, 100, n), 0)
    wind_dir = rng.choice(["N", "E", "S", "W"], n)
    temp = np.round(rng.normal(14, 7, n), 1)
    logits = np.column_stack([
        0.15 * (pressure - 1013) - 0.03 * (cloud - 50) - 0.02 * (humidity - 55),
        0.02 * (cloud - 50) + 0.2 * np.ones(n),
        -0.12 * (pressure - 1013) + 0.05 * (humidity - 55) + 0.7 * (wind_dir == "W"),
    ])
    p = np.exp(logits - logits.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    label = (p.cumsum(axis=1) > rng.random((n, 1))).argmax(axis=1)
    cloud[rng.random(n) < 0.08] = np.nan
    df = pd.DataFrame({"pressure": pressure, "humidity": humidity, "cloud_cover": cloud, "wind_direction": wind_dir,
                       "temperature": temp})
    for k, name in enumerate(["sunny", "cloudy", "rainy"]):
        df[f"outcome_{name}"] = (label == k).astype(int)
    return df


SPECS: tuple[Spec, ...] = (
    Spec("breast-cancer-diagnosis", "Breast Cancer Diagnosis",
         "Predict whether a breast mass is malignant (M) or benign (B) from features computed on a digitized "
         "image of a fine needle aspirate. Some measurements were lost to sensor drop-outs.",
         "f1", "patient_id", ("diagnosis",),
         "30 real-valued features (mean, error and worst value of ten cell-nucleus measurements). Four columns have "
         "missing values. The target `diagnosis` is the string M (malignant) or B (benign).",
         _breast_cancer, pos_label="M"),
    Spec("wine-cultivar", "Wine Cultivar Classification",
         "Identify which of three Italian cultivars a wine comes from, using the results of its chemical analysis.",
         "accuracy", "id", ("cultivar",),
         "13 numeric chemical measurements. The target `cultivar` is one of Barolo, Grignolino, Barbera.",
         _wine),
    Spec("digit-recognition", "Handwritten Digit Recognition",
         "Recognize handwritten digits from 8x8 images. You may submit up to three guesses per image.",
         "map_at_3", "ImageId", ("digit",),
         "64 integer pixel intensities (0-16), pixel_0 ... pixel_63, row by row. The target `digit` is 0-9.",
         _digits),
    Spec("diabetes-progression", "Diabetes Progression",
         "Predict a quantitative measure of diabetes progression one year after baseline.",
         "rmse", "id", ("progression",),
         "Age, sex (female/male, categorical), body mass index, blood pressure and six blood serum measurements. "
         "The target `progression` is a positive number.",
         _diabetes),
    Spec("marital-affairs", "Marital Affairs Survey",
         "From a 1974 magazine survey of married women, predict the probability that a respondent had an affair.",
         "roc_auc", "respondent_id", ("had_affair",),
         "Marriage rating (1-5), age, years married, children, religiousness (categorical), education and the "
         "occupations of the respondent and her husband (categorical). The target `had_affair` is 0 or 1.",
         _affairs),
    Spec("party-identification", "Party Identification",
         "From the 1996 American National Election Study, predict a voter's party identification on the 7-point "
         "scale 0 (strong Democrat) to 6 (strong Republican).",
         "quadratic_weighted_kappa", "voter_id", ("party_id",),
         "TV news days per week, self and perceived candidate left-right placements, age, education, income, "
         "log population of the voter's area and the 1996 presidential vote (Clinton/Dole). The target "
         "`party_id` is an integer 0-6.",
         _party),
    Spec("playground-loan-default", "Playground: Loan Default",
         "A synthetic lending dataset in the style of the Kaggle Playground series: predict the probability "
         "that a loan defaults.",
         "normalized_gini", "id", ("default",),
         "Categorical columns grade, home_ownership, purpose and term; numeric annual_income, loan_amount, dti, "
         "emp_length and credit_score (the last two have missing values). The target `default` is 0 or 1.",
         _loans),
    Spec("playground-store-sales", "Playground: Store Sales",
         "A synthetic retail dataset: forecast how many units of a product a store sells on a day.",
         "smape", "row_id", ("num_sold",),
         "Categorical store, product and weekday; month, promotion flag and price. The target `num_sold` is a "
         "non-negative integer.",
         _sales),
    Spec("playground-air-quality", "Playground: Air Quality (multi-target)",
         "A synthetic air-quality dataset: predict three pollutant concentrations at once from weather, time "
         "and three noisy low-cost sensor readings.",
         "mcrmse", "id", ("target_carbon_monoxide", "target_benzene", "target_nitrogen_oxides"),
         "hour, day_type (weekday/weekend), temperature, humidity, wind_speed and sensor_1..sensor_3. Three targets: "
         "target_carbon_monoxide, target_benzene, target_nitrogen_oxides.",
         _air),
    Spec("playground-weather-outcome", "Playground: Tomorrow's Weather",
         "A synthetic weather dataset: give the probability of each of tomorrow's outcomes (sunny, cloudy, rainy).",
         "log_loss", "id", ("outcome_sunny", "outcome_cloudy", "outcome_rainy"),
         "pressure, humidity, cloud_cover (with missing values), wind_direction (N/E/S/W) and temperature. In "
         "train.csv the outcome is one-hot encoded in outcome_sunny, outcome_cloudy, outcome_rainy.",
         _weather),
)

EVALUATION = {
    "f1": "Submissions are evaluated on the F1 score of the positive class {pos}: the harmonic mean of precision "
          "and recall. Higher is better.",
    "accuracy": "Submissions are evaluated on classification accuracy, the share of rows whose label is exactly "
                "right. Higher is better.",
    "map_at_3": "Submissions are evaluated on Mean Average Precision @ 3 (MAP@3): for each row you may give up to "
                "three labels, space-separated, best first; a correct first guess scores 1, second 1/2, third 1/3. "
                "Higher is better.",
    "rmse": "Submissions are evaluated on the root mean squared error (RMSE) between predictions and the observed "
            "values. Lower is better.",
    "roc_auc": "Submissions are evaluated on the area under the ROC curve between the predicted probability and "
               "the observed target. Higher is better.",
    "quadratic_weighted_kappa": "Submissions are evaluated on the quadratic weighted kappa between predicted and "
                                "actual integer labels (1 is perfect agreement, 0 is chance). Higher is better.",
    "normalized_gini": "Submissions are evaluated on the normalized Gini coefficient of the predicted probabilities "
                       "(2 x AUC - 1 for a 0/1 target). Higher is better.",
    "smape": "Submissions are evaluated on SMAPE, the symmetric mean absolute percentage error (0-200; a row where "
             "prediction and truth are both 0 counts 0). Lower is better.",
    "mcrmse": "Submissions are scored by MCRMSE, the mean column-wise root mean squared error over the target "
              "columns. Lower is better.",
    "log_loss": "Submissions are evaluated on the multi-class logarithmic loss. Each row's probabilities are "
                "rescaled to sum to 1 and clipped to [1e-15, 1 - 1e-15]. Lower is better.",
}


# --- generation ------------------------------------------------------------------------------------


def _seed(task_id: str) -> int:
    return zlib.crc32(task_id.encode())


def _description(spec: Spec, sample: pd.DataFrame) -> str:
    head = sample.head(3).to_csv(index=False).strip()
    targets = ", ".join(spec.targets)
    return "\n\n".join([
        f"# {spec.title}",
        f"## Overview\n{spec.overview}",
        "## Evaluation\n" + EVALUATION[spec.metric].format(pos=spec.pos_label),
        f"## Submission File\nFor each {spec.id_column} in the test set, predict {targets}. The file must be named "
        f"submission.csv, contain a header and have the following format:\n```\n{head}\n...\n```",
        f"## Dataset Description\n{spec.data_notes}",
        f"## Files\n- train.csv - the training set, with the id column {spec.id_column} and the target(s) {targets}\n"
        f"- test.csv - the test set; predict the target(s) for each of its {len(sample)} rows\n"
        "- sample_submission.csv - a sample submission file in the correct format",
    ])


def _generate_one(spec: Spec, root: Path) -> dict:
    from mappa_envs.dsbench.reference import baseline_submission, reference_scores

    rng = np.random.default_rng(_seed(spec.id))
    full = spec.make(rng)
    ids = rng.permutation(len(full)) + 10_000  # opaque, shuffled ids: row order carries no signal
    full.insert(0, spec.id_column, ids)
    test_mask = np.zeros(len(full), bool)
    test_mask[rng.choice(len(full), int(round(spec.test_fraction * len(full))), replace=False)] = True
    train, test = full[~test_mask], full[test_mask]
    folder, answers_dir = root / "data_resplit" / spec.id, root / "answers" / spec.id
    folder.mkdir(parents=True)
    answers_dir.mkdir(parents=True)
    train.to_csv(folder / "train.csv", index=False)
    test.drop(columns=list(spec.targets)).to_csv(folder / "test.csv", index=False)
    test[[spec.id_column, *spec.targets]].to_csv(answers_dir / "test_answer.csv", index=False)
    task = task_from_folder(root, spec.id, "", spec.metric, spec.id_column, spec.pos_label, source="builtin")
    sample = baseline_submission(task, train, test.drop(columns=list(spec.targets)))
    sample.to_csv(folder / "sample_submission.csv", index=False)
    baseline, reference, _ = reference_scores(task)
    return {"task_id": spec.id, "description": _description(spec, sample), "metric": spec.metric,
            "id_column": spec.id_column, "pos_label": spec.pos_label, "baseline_score": baseline,
            "reference_score": reference}


def builtin_tasks(cache_dir: str | Path | None = None) -> list[DSTask]:
    """The built-in tasks, generated into `cache_dir` on first use (safe when several processes race)."""
    base = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    root = base / GENERATOR_VERSION
    if not (root / "tasks.json").is_file():
        base.mkdir(parents=True, exist_ok=True)
        tmp = base / f".{GENERATOR_VERSION}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            records = [_generate_one(spec, tmp) for spec in SPECS]
            (tmp / "tasks.json").write_text(json.dumps(records, indent=1))
            try:
                tmp.rename(root)
            except OSError:  # another process finished first; its tasks are identical
                pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    records = json.loads((root / "tasks.json").read_text())
    return [task_from_folder(root, r["task_id"], r["description"], r["metric"], r["id_column"], r["pos_label"],
                             source="builtin").with_scores(r["baseline_score"], r["reference_score"])
            for r in records]
