"""No built-in DSBench task can be looked up in data the sandbox can read (issue 11 §2).

The sandbox has scikit-learn's and statsmodels' bundled datasets. Two attacks are tried on every built-in
task's test.csv, each first shown to work on a task built the old way (a public dataset, renamed and split):
- a nearest-row join against the public dataset whose column names the task carries: its labels must
  score no better than the same labels shuffled (chance);
- record linkage against every public dataset: no test row may share three distinctive, rare values with
  one public row.
And the generator's seed, which would rebuild the answers from the (readable) generator code, stays out
of the workspace: two caches drawn without a seed hold different answers.
"""
from collections import Counter, defaultdict
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from mappa_envs.dsbench import builtin, lookalike
from mappa_envs.dsbench.metrics import better, get_metric
from mappa_envs.dsbench.scoring import read_answers, score_submission
from mappa_envs.dsbench.tasks import task_from_folder

SEED = 20_250_101  # any seed: the generator redraws a table until the property holds; fixed, the test is stable


def public_datasets() -> dict[str, pd.DataFrame]:
    import statsmodels.datasets as sm
    from sklearn import datasets

    out = {f"sklearn.{n}": getattr(datasets, f"load_{n}")(as_frame=True).frame
           for n in ("iris", "wine", "breast_cancer", "digits", "diabetes", "linnerud")}
    out["sklearn.diabetes_unscaled"] = datasets.load_diabetes(as_frame=True, scaled=False).frame
    out |= {f"statsmodels.{n}": getattr(sm, n).load_pandas().data for n in sm.__all__
            if hasattr(getattr(sm, n, None), "load_pandas")}
    return out


@pytest.fixture(scope="module")
def tasks(tmp_path_factory):
    return {t.id: t for t in builtin.builtin_tasks(tmp_path_factory.mktemp("cache"), seed=SEED)}


def join_score(task, public: pd.DataFrame, labels: np.ndarray, permutations: int = 200) -> tuple[float, list[float]]:
    """The task's metric (scored as a submission) for the nearest public row's label of each test row, and
    for those guesses shuffled (other shuffles than the generator's own check)."""
    test = pd.read_csv(task.test_csv, dtype={task.id_column: str})
    guess = lookalike.nearest_public_labels(test.drop(columns=[task.id_column]), public, labels)
    answers = read_answers(task)

    def score(pred) -> float:
        sub = pd.DataFrame({task.id_column: test[task.id_column], task.target_columns[0]: pred})
        report = score_submission(task, sub, answers)
        assert report.valid, report.error
        return report.score

    rng = np.random.default_rng(1)
    return score(guess), [score(rng.permutation(guess)) for _ in range(permutations)]


def old_style_task(task, root) -> object:
    """The task built the old way from its public source (rows copied, columns renamed, split 70/30)."""
    df, labels = lookalike.PUBLIC[task.id]()
    target = task.target_columns[0]
    df = df.assign(**{target: labels}).drop(columns=[c for c in ("target", "affairs", "PID") if c in df.columns])
    df.insert(0, task.id_column, np.arange(len(df)) + 10_000)
    test = df.sample(frac=0.3, random_state=0)
    folder, answers = root / "data_resplit" / task.id, root / "answers" / task.id
    folder.mkdir(parents=True)
    answers.mkdir(parents=True)
    df.drop(test.index).to_csv(folder / "train.csv", index=False)
    test.drop(columns=[target]).to_csv(folder / "test.csv", index=False)
    test[[task.id_column, target]].to_csv(answers / "test_answer.csv", index=False)
    return task_from_folder(root, task.id, "", task.metric, task.id_column, task.pos_label)


@pytest.mark.parametrize("task_id", list(lookalike.PUBLIC))
def test_a_nearest_row_join_on_the_public_dataset_is_chance(tasks, task_id, tmp_path):
    task = tasks[task_id]
    public, labels = lookalike.PUBLIC[task_id]()
    best = max if get_metric(task.metric).higher_is_better else min
    # the attack works on a task built the old way: the join recovers the labels
    leaked, null = join_score(old_style_task(task, tmp_path), public, labels)
    assert better(task.metric, leaked, best(null)), (task_id, leaked, best(null))
    # ... and not on the built-in task: its join is no better than its own guesses shuffled
    score, null = join_score(task, public, labels)
    assert not better(task.metric, score, best(null)), (task_id, score, best(null))


def test_the_generator_redraws_a_table_that_copies_its_public_dataset(monkeypatch):
    """The guard behind the property: a generator that copies the public rows never gets through."""
    spec = next(s for s in builtin.SPECS if s.id == "wine-cultivar")
    public, labels = lookalike.PUBLIC["wine-cultivar"]()
    copy = lambda rng: public.drop(columns="target").assign(cultivar=labels)  # noqa: E731
    with pytest.raises(RuntimeError, match="correlate with the public dataset"):
        builtin._draw(replace(spec, make=copy), np.random.default_rng(0), attempts=3)


def distinctive(row) -> set[float]:
    """A row's values that could identify it: finite, and not a small integer (a count, a code, a pixel)."""
    return {float(f"{v:.9g}") for v in row if np.isfinite(v) and not (float(v).is_integer() and abs(v) < 1000)}


def linked_rows(test: pd.DataFrame, public: pd.DataFrame, min_shared: int = 3) -> int:
    """Test rows that share at least `min_shared` distinctive values with one public row, counting only values
    that occur at most 3 times in the public table (so common values cannot link by chance)."""
    pub = public.select_dtypes("number").to_numpy(float)
    counts = Counter(v for row in pub for v in distinctive(row))
    index = defaultdict(set)
    for r, row in enumerate(pub):
        for v in distinctive(row):
            if counts[v] <= 3:
                index[v].add(r)
    linked = 0
    for row in test.select_dtypes("number").to_numpy(float):
        hits = Counter(r for v in distinctive(row) for r in index.get(v, ()))
        linked += bool(hits) and max(hits.values()) >= min_shared
    return linked


# copies the linker finds (the other look-alikes hold too few rare values; the nearest-row join covers them)
SOURCE_NAMES = {"breast-cancer-diagnosis": "sklearn.breast_cancer", "wine-cultivar": "sklearn.wine"}


@pytest.mark.slow
def test_no_test_row_links_to_any_public_dataset(tasks, tmp_path):
    public = public_datasets()
    assert len(public) > 30
    for name in SOURCE_NAMES:  # the linker's power
        old = pd.read_csv(old_style_task(tasks[name], tmp_path / name).test_csv)
        assert linked_rows(old.drop(columns=[tasks[name].id_column]), public[SOURCE_NAMES[name]]) > 0.75 * len(old)
    for task in tasks.values():
        test = pd.read_csv(task.test_csv).drop(columns=[task.id_column])
        for name, frame in public.items():
            assert linked_rows(test, frame) <= 0.01 * len(test), (task.id, name)


@pytest.mark.slow
def test_the_default_seed_is_secret_per_cache_and_not_in_the_workspace(tmp_path):
    a = builtin.builtin_tasks(tmp_path / "a")
    b = builtin.builtin_tasks(tmp_path / "b")
    for ta, tb in zip(a, b):
        assert ta.id == tb.id
        assert ta.answers_csv.read_bytes() != tb.answers_csv.read_bytes(), ta.id  # not a function of the id
        seed_file = ta.answers_csv.parents[2] / builtin.SEED_FILE
        assert seed_file.is_file()
        assert seed_file.parent != ta.train_csv.parent
    # what the sandbox receives is train.csv, test.csv and sample_submission.csv: none of them holds the seed
    secret = (a[0].answers_csv.parents[2] / builtin.SEED_FILE).read_text().strip()
    for t in a:
        for path in (t.train_csv, t.test_csv, t.sample_submission_csv):
            assert secret not in path.read_text()
        assert secret not in t.description
