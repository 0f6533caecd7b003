"""Built-in offline tasks: generated on first use from a seed kept on the host, in the DSBench layout.

Each task is a seeded generator (`generators.py`: every row and every feature-target coefficient
is drawn from the seed), in the style of well-known small datasets and Kaggle's Playground series.
Each gets an id column, a seeded train/test split, hidden answers, a sample submission (the
baseline's), a Kaggle-style description, and its baseline and reference scores, computed once.

The seed never enters the sandbox, so the answers cannot be rebuilt from the generator's code, and
no row is a copy of a public dataset the sandbox could join against. Without an explicit seed a
secret one is drawn once per cache folder (and kept there, next to the answers); pass
`seed=` (the env's `task_seed=`) for tasks that are the same on every machine, and keep it private.

The cache folder is `$MAPPA_DSBENCH_CACHE`, else `$XDG_CACHE_HOME/mappa/dsbench`, else
`~/.cache/mappa/dsbench`; a generator version names the subfolder, so a change regenerates.
"""
from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mappa_envs.dsbench import generators as gen
from mappa_envs.dsbench.tasks import DSTask, task_from_folder
from mappa_envs.errors import EnvArgumentError
from mappa_envs.seeding import name_key

GENERATOR_VERSION = "builtin-v3"  # v3: the baseline is the best trivial submission (tasks.json keeps the scores)
SEED_FILE = "SECRET_SEED"  # host-only, next to the answers


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


SPECS: tuple[Spec, ...] = (
    Spec("breast-cancer-diagnosis", "Breast Cancer Diagnosis",
         "Predict whether a breast mass is malignant (M) or benign (B) from measurements of cell nuclei in a "
         "fine needle aspirate. Some measurements were lost to sensor drop-outs.",
         "f1", "patient_id", ("diagnosis",),
         "30 real-valued features (mean, error and worst value of ten cell-nucleus measurements). Four columns have "
         "missing values. The target `diagnosis` is the string M (malignant) or B (benign).",
         gen.breast_cancer, pos_label="M"),
    Spec("wine-cultivar", "Wine Cultivar Classification",
         "Identify which of three Italian cultivars a wine comes from, using the results of its chemical analysis.",
         "accuracy", "id", ("cultivar",),
         "13 numeric chemical measurements. The target `cultivar` is one of Barolo, Grignolino, Barbera.",
         gen.wine),
    Spec("digit-recognition", "Handwritten Digit Recognition",
         "Recognize which of ten glyphs an 8x8 image shows. You may submit up to three guesses per image.",
         "map_at_3", "ImageId", ("digit",),
         "64 integer pixel intensities (0-16), pixel_0 ... pixel_63, row by row. The target `digit` is 0-9 (a "
         "glyph class; the glyphs are not Arabic numerals).",
         gen.digits),
    Spec("diabetes-progression", "Diabetes Progression",
         "Predict a quantitative measure of diabetes progression one year after baseline.",
         "rmse", "id", ("progression",),
         "Age, sex (female/male, categorical), body mass index, blood pressure and six blood serum measurements. "
         "The target `progression` is a positive number.",
         gen.diabetes),
    Spec("marital-affairs", "Marital Affairs Survey",
         "From a magazine survey of married women, predict the probability that a respondent had an affair.",
         "roc_auc", "respondent_id", ("had_affair",),
         "Marriage rating (1-5), age, years married, children, religiousness (categorical), education and the "
         "occupations of the respondent and her husband (categorical). The target `had_affair` is 0 or 1.",
         gen.affairs),
    Spec("party-identification", "Party Identification",
         "From an election survey, predict a voter's party identification on the 7-point scale 0 (strong "
         "Democrat) to 6 (strong Republican).",
         "quadratic_weighted_kappa", "voter_id", ("party_id",),
         "TV news days per week, self and perceived candidate left-right placements, age, education, income, "
         "log population of the voter's area and the presidential vote (Clinton/Dole). The target "
         "`party_id` is an integer 0-6.",
         gen.party),
    Spec("playground-loan-default", "Playground: Loan Default",
         "A synthetic lending dataset in the style of the Kaggle Playground series: predict the probability "
         "that a loan defaults.",
         "normalized_gini", "id", ("default",),
         "Categorical columns grade, home_ownership, purpose and term; numeric annual_income, loan_amount, dti, "
         "emp_length and credit_score (the last two have missing values). The target `default` is 0 or 1.",
         gen.loans),
    Spec("playground-store-sales", "Playground: Store Sales",
         "A synthetic retail dataset: forecast how many units of a product a store sells on a day.",
         "smape", "row_id", ("num_sold",),
         "Categorical store, product and weekday; month, promotion flag and price. The target `num_sold` is a "
         "non-negative integer.",
         gen.sales),
    Spec("playground-air-quality", "Playground: Air Quality (multi-target)",
         "A synthetic air-quality dataset: predict three pollutant concentrations at once from weather, time "
         "and three noisy low-cost sensor readings.",
         "mcrmse", "id", ("target_carbon_monoxide", "target_benzene", "target_nitrogen_oxides"),
         "hour, day_type (weekday/weekend), temperature, humidity, wind_speed and sensor_1..sensor_3. Three targets: "
         "target_carbon_monoxide, target_benzene, target_nitrogen_oxides.",
         gen.air),
    Spec("playground-weather-outcome", "Playground: Tomorrow's Weather",
         "A synthetic weather dataset: give the probability of each of tomorrow's outcomes (sunny, cloudy, rainy).",
         "log_loss", "id", ("outcome_sunny", "outcome_cloudy", "outcome_rainy"),
         "pressure, humidity, cloud_cover (with missing values), wind_direction (N/E/S/W) and temperature. In "
         "train.csv the outcome is one-hot encoded in outcome_sunny, outcome_cloudy, outcome_rainy.",
         gen.weather),
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


def _task_rng(seed: int, task_id: str) -> np.random.Generator:
    """One task's random stream: the secret seed and the task's id, so tasks differ from each other."""
    return np.random.default_rng([seed, name_key(task_id)])


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


def _draw(spec: Spec, rng: np.random.Generator, attempts: int = 50) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(train, test) of a fresh table; for a task shaped like a public dataset, drawn again until joining
    its test rows to the public copy predicts no better than chance (`lookalike.reveals`)."""
    from mappa_envs.dsbench import lookalike

    for _ in range(attempts):
        full = spec.make(rng)
        ids = rng.permutation(len(full)) + 10_000  # opaque, shuffled ids: row order carries no signal
        full.insert(0, spec.id_column, ids)
        test_mask = np.zeros(len(full), bool)
        test_mask[rng.choice(len(full), int(round(spec.test_fraction * len(full))), replace=False)] = True
        train, test = full[~test_mask], full[test_mask]
        if spec.id not in lookalike.PUBLIC or not lookalike.reveals(
                spec.id, spec.metric, test.drop(columns=list(spec.targets)), test[spec.targets[0]].to_numpy(),
                spec.pos_label):
            return train, test
    raise RuntimeError(f"built-in task {spec.id}: {attempts} draws all correlate with the public dataset it is "
                       "shaped like; its generator copies that dataset's structure")


def _generate_one(spec: Spec, root: Path, seed: int) -> dict:
    from mappa_envs.dsbench.reference import baseline_submission, reference_scores

    train, test = _draw(spec, _task_rng(seed, spec.id))
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


def _folder_name(seed: int | None) -> str:
    """"secret" for a drawn seed; for a given one a hash, so the folder name does not tell the seed."""
    return "secret" if seed is None else "seed-" + hashlib.sha256(f"mappa-{seed}".encode()).hexdigest()[:16]


def builtin_tasks(cache_dir: str | Path | None = None, seed: int | None = None) -> list[DSTask]:
    """The built-in tasks, generated into `cache_dir` on first use (safe when several processes race).

    `seed`: the generator's seed; None draws a secret one, once per cache folder (see the module docstring).
    """
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise EnvArgumentError(f"the built-in tasks' seed must be an integer or None, got {seed!r}")
    base = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
    parent = base / GENERATOR_VERSION
    root = parent / _folder_name(seed)
    if not (root / "tasks.json").is_file():
        parent.mkdir(parents=True, exist_ok=True)
        tmp = parent / f".tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        try:
            drawn = secrets.randbits(128) if seed is None else seed
            records = [_generate_one(spec, tmp, drawn) for spec in SPECS]
            (tmp / SEED_FILE).write_text(f"{drawn}\n")
            (tmp / "tasks.json").write_text(json.dumps(records, indent=1))
            try:
                tmp.rename(root)
            except OSError:  # another process finished first: use its tasks (same seed, or an equally secret one)
                pass
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    records = json.loads((root / "tasks.json").read_text())
    return [task_from_folder(root, r["task_id"], r["description"], r["metric"], r["id_column"], r["pos_label"],
                             source="builtin").with_scores(r["baseline_score"], r["reference_score"])
            for r in records]
