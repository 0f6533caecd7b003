"""Task sources: a DSBench-layout folder with the reference metadata, malformed folders, built-in tasks."""
import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mappa_envs.dsbench import builtin
from mappa_envs.dsbench.metrics import better, get_metric
from mappa_envs.dsbench.scoring import read_answers, score_submission
from mappa_envs.dsbench.tasks import DSBenchFormatError, load_dsbench, read_records

BENCH = Path(__file__).resolve().parents[3] / "shared" / "data" / "bench"
if not BENCH.is_dir():
    BENCH = Path("/work/shared/data/bench")
META_FILES = ("dsbench_modeling_train.json", "dsbench_modeling_eval.json", "dsbench_modeling_cleaned_prompts.json")
needs_bench = pytest.mark.skipif(not BENCH.is_dir(), reason=f"reference DSBench metadata not found at {BENCH}")


def fake_dsbench(root: Path, rows: int = 12) -> Path:
    """A DSBench data folder for every task of the reference metadata, with tiny synthetic CSVs."""
    cleaned = json.loads((BENCH / META_FILES[2]).read_text())
    records = read_records(BENCH / META_FILES[0]) + read_records(BENCH / META_FILES[1])
    rng = np.random.default_rng(0)
    for record in records:
        task_id = record["metadata"]["task_id"]
        info = cleaned.get(task_id, {"id_column": "time", "target_column": "open_channels"})
        if task_id == "titanic":  # the metadata's titanic record describes another competition
            info = {"id_column": "PassengerId", "target_column": "Survived"}
        targets = info["target_column"]
        targets = [f"label_{i}" for i in range(30)] if targets == "30_labels" else \
            targets if isinstance(targets, list) else [targets]
        ids = [f"{task_id[:3]}{i}" for i in range(2 * rows)]
        features = pd.DataFrame({info["id_column"]: ids, "f1": rng.normal(size=2 * rows),
                                 "f2": rng.integers(0, 3, 2 * rows)})
        y = pd.DataFrame({t: rng.integers(0, 2, 2 * rows) for t in targets})
        folder, answers = root / "data_resplit" / task_id, root / "answers" / task_id
        folder.mkdir(parents=True)
        answers.mkdir(parents=True)
        pd.concat([features, y], axis=1)[:rows].to_csv(folder / "train.csv", index=False)
        features[rows:].to_csv(folder / "test.csv", index=False)
        pd.concat([features[[info["id_column"]]], y], axis=1)[rows:].to_csv(answers / "test_answer.csv", index=False)
    return root


@pytest.fixture(scope="module")
def dsbench_root(tmp_path_factory):
    root = fake_dsbench(tmp_path_factory.mktemp("dsbench"))
    for name in META_FILES:  # one-argument mode: the metadata files sit next to the data
        shutil.copy(BENCH / name, root / name)
    return root


@needs_bench
def test_load_the_paper_splits_with_one_argument(dsbench_root):
    train, evals = load_dsbench(dsbench_root, split="train"), load_dsbench(dsbench_root, split="eval")
    assert len(train) == 64
    assert len(evals) == 8
    assert len(load_dsbench(dsbench_root, split="all")) == 72
    assert [t.id for t in evals][:3] == ["playground-series-s4e6", "playground-series-s4e2", "playground-series-s4e1"]
    by_id = {t.id: t for t in train + evals}
    # corrected metadata: titanic, liverpool (no cleaned prompt), and classification despite data_type labels
    assert by_id["titanic"].meta["declared_target"] == "Survived"
    assert "Spaceship" not in by_id["titanic"].description
    assert by_id["liverpool-ion-switching"].metric == "f1_macro"
    assert by_id["playground-series-s4e6"].kind == "classification"
    assert by_id["playground-series-s4e2"].kind == "classification"
    assert by_id["feedback-prize-english-language-learning"].target_columns == (
        "cohesion", "syntax", "vocabulary", "phraseology", "grammar", "conventions")
    assert len(by_id["google-quest-challenge"].target_columns) == 30
    assert by_id["bike-sharing-demand"].id_column == "datetime"
    # every metric the reference metadata names is one we compute
    assert {get_metric(t.metric).name for t in train + evals} >= {"roc_auc", "rmsle", "mcrmse", "map_at_3", "jaccard"}


@needs_bench
def test_explicit_metadata_paths_and_data_subfolder(tmp_path):
    root = fake_dsbench(tmp_path / "DSBench" / "data")
    tasks = load_dsbench(tmp_path / "DSBench", metadata=BENCH / META_FILES[1], prompts=BENCH / META_FILES[2])
    assert len(tasks) == 8
    assert tasks[0].train_csv == root / "data_resplit" / "playground-series-s4e6" / "train.csv"


@needs_bench
def test_scoring_a_dsbench_task_joins_by_id(dsbench_root):
    task = next(t for t in load_dsbench(dsbench_root, split="eval") if t.id == "playground-series-s4e1")
    answers = read_answers(task)
    shuffled = answers.sample(frac=1, random_state=1).rename(columns={"Exited": "Exited"})
    assert score_submission(task, shuffled.to_csv(index=False)).score == 1.0


@needs_bench
@pytest.mark.parametrize("breakage, message", [
    (lambda r: (r / "data_resplit" / "playground-series-s4e6" / "test.csv").unlink(), "missing"),
    (lambda r: (r / "answers" / "playground-series-s4e2" / "test_answer.csv").write_text("x,Target\n1,a\n"),
     "has no id column 'id'"),
    (lambda r: (r / "answers" / "playground-series-s4e2" / "test_answer.csv").write_text("id\n1\n"),
     "only the id column"),
    (lambda r: (r / "answers" / "playground-series-s4e2" / "test_answer.csv").write_text(""), "is empty"),
    (lambda r: shutil.copy(r / "data_resplit" / "playground-series-s4e1" / "train.csv",
                           r / "data_resplit" / "playground-series-s4e1" / "test.csv"), "contains the target"),
])
def test_malformed_task_folders_give_clear_errors(tmp_path, breakage, message):
    root = fake_dsbench(tmp_path)
    breakage(root)
    with pytest.raises(DSBenchFormatError, match="cannot be loaded") as err:
        load_dsbench(root, metadata=BENCH / META_FILES[1], prompts=BENCH / META_FILES[2])
    assert message in str(err.value)
    assert "\n" not in str(err.value)  # one line, naming the problem


@needs_bench
def test_bad_roots_and_metadata(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_dsbench(tmp_path / "nowhere")
    with pytest.raises(DSBenchFormatError, match="not a DSBench data folder"):
        load_dsbench(tmp_path)
    (tmp_path / "data_resplit").mkdir()
    (tmp_path / "answers").mkdir()
    with pytest.raises(FileNotFoundError, match="MAPPA_DSBENCH_META"):
        load_dsbench(tmp_path, split="eval")
    bad = tmp_path / "bad.json"
    bad.write_text('{"prompt": "x", "metadata": {"task_id": "a"}}\n{not json\n')
    with pytest.raises(DSBenchFormatError, match="line 2, column 2: .*not valid JSON"):
        read_records(bad)
    bad.write_text('{"prompt": "x", "metadata": {}}\n')
    with pytest.raises(DSBenchFormatError, match="no metadata.task_id"):
        read_records(bad)
    bad.write_text('{"prompt": "x", "metadata": "{\\"task_id\\": \\"a\\"}"}\n')  # metadata as a JSON string
    assert read_records(bad)[0]["metadata"]["task_id"] == "a"
    with pytest.raises(ValueError, match="split="):
        load_dsbench(tmp_path, split="test")


# --- built-in tasks -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tasks():
    return builtin.builtin_tasks()


def test_builtin_tasks_cover_the_required_kinds(tasks):
    assert len(tasks) >= 8
    assert len({t.id for t in tasks}) == len(tasks)
    assert len({t.metric for t in tasks}) >= 6
    kinds = {t.kind for t in tasks}
    assert {"classification", "regression"} <= kinds
    assert any(len(t.target_columns) > 1 for t in tasks)  # multi-target
    frames = {t.id: pd.read_csv(t.train_csv) for t in tasks}
    classes = {t.id: frames[t.id][t.target_columns[0]].nunique() for t in tasks if t.kind == "classification"}
    assert 2 in classes.values()
    assert max(classes.values()) > 2  # binary and multi-class
    assert any(not pd.api.types.is_numeric_dtype(frames[t.id][t.target_columns[0]]) for t in tasks)  # string labels
    assert any(frames[t.id].isna().any().any() for t in tasks)  # missing values
    assert any(pd.api.types.is_object_dtype(d) or pd.api.types.is_string_dtype(d)
               for t in tasks for d in frames[t.id].drop(columns=list(t.target_columns)).dtypes)  # categorical columns


def test_builtin_task_files_and_descriptions(tasks):
    for t in tasks:
        test = pd.read_csv(t.test_csv, dtype={t.id_column: str})
        sample = pd.read_csv(t.sample_submission_csv, dtype={t.id_column: str})
        answers = read_answers(t)
        assert not set(t.target_columns) & set(test.columns), t.id
        assert list(sample.columns) == [t.id_column, *t.target_columns]
        assert sorted(sample[t.id_column]) == sorted(test[t.id_column]) == sorted(answers[t.id_column])
        for section in ("## Evaluation", "## Submission File", "## Dataset Description", "## Files", "submission.csv"):
            assert section in t.description, (t.id, section)
        # the sample submission is the plain trivial one and is valid, no better than the baseline (the best
        # trivial one) and never paid; the reference beats the baseline
        report = score_submission(t, t.sample_submission_csv.read_bytes(), answers)
        assert report.valid, t.id
        assert not better(t.metric, report.score, t.baseline_score), t.id
        assert not report.informative, t.id
        assert t.reference_score is not None, t.id
        assert get_metric(t.metric).higher_is_better == (t.reference_score > t.baseline_score), t.id


def test_generation_is_seeded_and_the_default_seed_stays_with_the_answers(tmp_path, tasks):
    cheap = [s for s in builtin.SPECS if s.id in ("wine-cultivar", "diabetes-progression", "playground-store-sales")]
    files = ["data_resplit/{}/train.csv", "data_resplit/{}/test.csv", "answers/{}/test_answer.csv",
             "data_resplit/{}/sample_submission.csv"]
    for run, seed in (("a", 123), ("b", 123), ("c", 124)):
        for spec in cheap:
            builtin._generate_one(spec, tmp_path / run, seed)
    for spec in cheap:
        for rel in (f.format(spec.id) for f in files):
            assert (tmp_path / "a" / rel).read_bytes() == (tmp_path / "b" / rel).read_bytes(), rel
        answers = f"answers/{spec.id}/test_answer.csv"
        assert (tmp_path / "a" / answers).read_bytes() != (tmp_path / "c" / answers).read_bytes(), spec.id
    # the default cache drew a secret seed and kept it next to the answers: it regenerates the same tasks
    root = tasks[0].train_csv.parents[2]
    secret = int((root / builtin.SEED_FILE).read_text())
    builtin._generate_one(cheap[0], tmp_path / "again", secret)
    cached = next(t for t in tasks if t.id == cheap[0].id)
    assert (tmp_path / "again" / files[0].format(cheap[0].id)).read_bytes() == cached.train_csv.read_bytes()
