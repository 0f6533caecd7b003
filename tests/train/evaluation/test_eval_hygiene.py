"""Train/eval overlap by normalized text, on hand-made texts and on the real bench files."""
import json
import warnings

import pytest

from mappa_train.evaluation.hygiene import OverlapWarning, find_overlap, normalize_text
from tests.bench_data import BENCH as DATA

pytestmark = pytest.mark.unit


def test_normalize_text_ignores_case_spacing_and_punctuation():
    assert normalize_text("Find  the SUM,\nof $x^2$!") == normalize_text("find the sum of x2")
    assert normalize_text("ｘ＝１") == normalize_text("x=1")  # NFKC folds full-width forms
    assert normalize_text("1 + 2") != normalize_text("1 + 3")


def test_overlap_found_and_warned():
    train = ["What is 2 + 2?", "Find the area of a unit circle."]
    evals = [("e1", "what is 2+2 ?"), ("e2", "How many primes are below 10?")]
    with pytest.warns(OverlapWarning, match=r"1/2 problems of eval set 'toy' .*\(e1\)"):
        overlap = find_overlap("toy", evals, "train.json", train)
    assert overlap.ids == ["e1"]
    assert overlap.fraction == 0.5
    assert overlap.to_dict() == {"train_source": "train.json", "n_eval": 2, "n_overlap": 1, "fraction": 0.5,
                                 "ids": ["e1"]}


def test_no_overlap_no_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert find_overlap("toy", [("e", "a new problem")], "t", ["an old problem", ""]).ids == []


def load(name):
    return json.loads((DATA / name).read_text())


@pytest.mark.skipif(not (DATA / "amc.json").is_file(), reason=f"bench data not found at {DATA}")
def test_real_bench_files():
    amc_eval = [(str(i), r["prompt"]) for i, r in enumerate(load("amc_eval_32.json"))]
    with pytest.warns(OverlapWarning):
        assert len(find_overlap("amc", amc_eval, "amc.json", [r["prompt"] for r in load("amc.json")]).ids) == 32
    aime25 = [(str(i), r["prompt"]) for i, r in enumerate(load("aime_2025.json"))]
    train = [r["prompt"] for r in load("AIME_1983_2024.json")]
    assert find_overlap("aime2025", aime25, "AIME 1983-2024", train).ids == []
