"""Every env's held-out split is disjoint from training by problem and drawn from the same distribution:
its feature distributions are not told apart from training's (a chi-square or Kolmogorov-Smirnov test at
the 1% level, on seeded, fixed data), while a distribution-shift set, where one exists, is."""
import json
from collections import Counter

import pytest
from scipy.stats import chi2_contingency, fisher_exact, ks_2samp

from mappa_envs.chain.env import HELD_OUT_SHARE, SPLITS, chain_tasks
from tests.bench_data import BENCH

LEVEL = 0.01


def same_categories(a, b) -> float:
    """The chi-square p-value that two samples of a categorical feature come from one distribution."""
    keys = sorted(set(a) | set(b), key=str)
    ca, cb = Counter(a), Counter(b)
    if len(keys) < 2:
        return 1.0
    return float(chi2_contingency([[ca[k] for k in keys], [cb[k] for k in keys]])[1])


def same_numbers(a, b) -> float:
    return float(ks_2samp(a, b).pvalue)


def chain_features(tasks, depth):
    features = {"start": same_categories, "final": same_numbers}
    rows = {"start": [t.meta["start"] for t in tasks], "final": [int(t.answer) for t in tasks]}
    for j in range(depth):
        features[f"op{j + 1}"] = same_categories
        rows[f"op{j + 1}"] = [t.meta["steps"][j][0] for t in tasks]
    return features, rows


@pytest.mark.parametrize("depth, max_value", [(2, None), (4, None), (8, None), (4, 99)])
def test_chain_eval_is_the_training_distribution_and_shift_is_not(depth, max_value):
    train = chain_tasks(depth, 2000, seed=0, max_value=max_value)
    held = chain_tasks(depth, 500, seed=0, split="eval", max_value=max_value)
    shift = chain_tasks(depth, 500, seed=0, split="shift", max_value=max_value)
    assert not {t.prompt for t in train} & {t.prompt for t in held}
    assert not {t.prompt for t in train} & {t.prompt for t in shift}
    tests, train_rows = chain_features(train, depth)
    _, held_rows = chain_features(held, depth)
    _, shift_rows = chain_features(shift, depth)
    p = {name: test(train_rows[name], held_rows[name]) for name, test in tests.items()}
    assert min(p.values()) > LEVEL, p
    assert tests["start"](train_rows["start"], shift_rows["start"]) < 1e-6  # the shift set is told apart


def test_chain_depth_1_keeps_the_start_distribution_in_its_small_problem_space():
    """Depth 1 has about 150 problems, 30 of them held out: the start values match training's, the steps
    are the few held-out ones (documented; the distribution tests run from depth 2)."""
    train, held = chain_tasks(1, 2000, seed=0), chain_tasks(1, 500, seed=0, split="eval")
    assert not {t.prompt for t in train} & {t.prompt for t in held}
    assert same_categories([t.meta["start"] for t in train], [t.meta["start"] for t in held]) > LEVEL


def test_chain_held_out_share_and_splits():
    assert SPLITS == ("train", "eval", "shift")
    draws = chain_tasks(6, 400, seed=3, split="train") + chain_tasks(6, 400, seed=3, split="eval")
    assert {t.meta["start"] % 2 for t in draws} == {0}
    assert {t.meta["start"] % 2 for t in chain_tasks(6, 50, seed=3, split="shift")} == {1}
    assert 0 < HELD_OUT_SHARE < 0.5


def test_mathchat_synthetic_eval_is_the_training_distribution():
    from mappa_envs.mathchat.tasks import synthetic_tasks

    train, held = synthetic_tasks(1000, seed=0), synthetic_tasks(150, seed=0, split="eval")
    assert not {t.prompt for t in train} & {t.prompt for t in held}
    assert same_categories([t.meta["family"] for t in train], [t.meta["family"] for t in held]) > LEVEL
    assert same_numbers([len(t.answer) for t in train], [len(t.answer) for t in held]) > LEVEL
    assert same_numbers([len(t.prompt) for t in train], [len(t.prompt) for t in held]) > LEVEL


@pytest.mark.skipif(not (BENCH / "AIME_1983_2024.json").exists(), reason="no AIME data (shared/data/bench)")
def test_mathchat_file_eval_is_the_files_distribution():
    from mappa_envs.mathchat.tasks import load_tasks

    path = str(BENCH / "AIME_1983_2024.json")
    train, held = load_tasks(path, "train"), load_tasks(path, "eval")
    assert not {t.prompt for t in train} & {t.prompt for t in held}
    assert same_numbers([int(t.meta["year"]) for t in train], [int(t.meta["year"]) for t in held]) > LEVEL
    assert same_numbers([int(t.meta["problem_number"]) for t in train],
                        [int(t.meta["problem_number"]) for t in held]) > LEVEL
    assert same_numbers([len(t.prompt) for t in train], [len(t.prompt) for t in held]) > LEVEL


@pytest.mark.skipif(not (BENCH / "dsbench_modeling_eval.json").exists(), reason="no DSBench metadata")
def test_dsbench_eval_tasks_are_the_training_kind():
    """The reference's 64/8 split: disjoint tasks, and the same kinds of task (classification, regression,
    as the env derives them from the metric) and of metric -- what 8 tasks can test."""
    from mappa_envs.dsbench.metrics import NUMBER, get_metric
    from mappa_envs.dsbench.tasks import CORRECTIONS, PROMPTS_FILE, SPLIT_FILES

    info = json.loads((BENCH / PROMPTS_FILE).read_text())
    ids = {split: [json.loads(line)["metadata"]["task_id"] for line in (BENCH / name).read_text().splitlines()
                   if line.strip()] for split, name in SPLIT_FILES.items()}
    assert not set(ids["train"]) & set(ids["eval"])
    predicts = {split: [get_metric({**info.get(t, {}), **CORRECTIONS.get(t, {})}["metric"]).predicts for t in tasks]
                for split, tasks in ids.items()}
    number = {split: Counter(kind == NUMBER for kind in kinds) for split, kinds in predicts.items()}
    table = [[number[s][True], number[s][False]] for s in ("train", "eval")]
    assert fisher_exact(table)[1] > LEVEL, table
    assert same_categories(predicts["train"], predicts["eval"]) > LEVEL


def test_codetest_eval_is_the_training_distribution():
    from mappa_envs.codetest.tasks import load_problems, split_of

    problems = load_problems()
    split = {p.task_id: split_of(p.task_id) for p in problems}
    train = [p for p in problems if split[p.task_id] == "train"]
    held = [p for p in problems if split[p.task_id] == "eval"]
    assert len(train) + len(held) == len(problems)
    assert same_categories([bool(p.examples) for p in train], [bool(p.examples) for p in held]) > LEVEL
    assert same_numbers([len(p.prompt) for p in train], [len(p.prompt) for p in held]) > LEVEL
    assert same_numbers([len(p.test) for p in train], [len(p.test) for p in held]) > LEVEL
    index = {p.task_id: i for i, p in enumerate(problems)}  # HumanEval's order: not by split
    assert same_numbers([index[p.task_id] for p in train], [index[p.task_id] for p in held]) > LEVEL
