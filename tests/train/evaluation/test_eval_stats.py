"""Eval metric math against hand-computed values and brute-force enumeration."""
import itertools
import math

import pytest

from mappa_envs.mathchat import answers_match
from mappa_train.evaluation.stats import (
    Sample,
    majority_vote,
    mean_se,
    paired_bootstrap,
    pass_at_k,
    pass_ks,
    per_problem,
)

pytestmark = pytest.mark.unit


def brute_force_pass_at_k(n: int, c: int, k: int) -> float:
    """The fraction of all k-subsets of n samples (c correct) holding at least one correct one."""
    samples = [True] * c + [False] * (n - c)
    subsets = list(itertools.combinations(range(n), k))
    return sum(any(samples[i] for i in s) for s in subsets) / len(subsets)


def test_pass_at_k_hand_values():
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)  # pass@1 is the plain accuracy
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(10, 3, 4) == pytest.approx(1 - 35 / 210)  # 1 - C(7,4)/C(10,4)
    assert pass_at_k(4, 0, 2) == 0.0
    assert pass_at_k(4, 3, 2) == 1.0  # fewer than k wrong samples: every k-subset holds a right one
    assert pass_at_k(1, 1, 1) == 1.0


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_pass_at_k_matches_closed_form_and_enumeration(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            closed = 1 - math.comb(n - c, k) / math.comb(n, k)
            assert pass_at_k(n, c, k) == pytest.approx(closed)
            assert pass_at_k(n, c, k) == pytest.approx(brute_force_pass_at_k(n, c, k))


def test_pass_at_k_is_not_the_biased_estimator():
    # 1 - (1 - c/n)^k would say 0.64 for n=5, c=2, k=2; the unbiased value is 0.7
    assert pass_at_k(5, 2, 2) != pytest.approx(1 - (1 - 2 / 5) ** 2)


@pytest.mark.parametrize("n,c,k", [(3, 4, 1), (3, -1, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_rejects_bad_counts(n, c, k):
    with pytest.raises(ValueError, match="pass_at_k"):
        pass_at_k(n, c, k)


def test_pass_ks():
    assert pass_ks(1) == [1]
    assert pass_ks(4) == [1, 2, 4]
    assert pass_ks(6) == [1, 2, 4, 6]


def test_majority_vote():
    assert majority_vote(["5", "5", "7", None], [True, True, False, False]) == 1.0
    assert majority_vote(["7", "7", "5"], [False, False, True]) == 0.0
    assert majority_vote(["5", "7"], [True, False]) == 0.5  # a tie: the expected fair tie-break
    assert majority_vote([None, None], [False, False]) == 0.0  # nobody answered
    assert majority_vote([None, None, "3"], [False, False, False]) == 0.0  # a lone wrong answer wins
    assert majority_vote([None, None, "3"], [False, False, True]) == 1.0  # blanks do not vote


def test_majority_vote_pools_equivalent_answers():
    answers, correct = ["0.5", "1/2", "3"], [True, True, False]
    assert majority_vote(answers, correct) == pytest.approx(2 / 3)  # by text: a three-way tie
    assert majority_vote(answers, correct, same=answers_match) == 1.0  # 0.5 == 1/2: two votes


def test_majority_vote_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="2 answers but 1"):
        majority_vote(["1", "2"], [True])


def test_per_problem_groups_interleaved_samples_by_id():
    # samples arrive interleaved (as batched rollouts finish): grouping must be by id, not position
    samples = [
        Sample("a", True, "1"), Sample("b", False, "9"), Sample("a", False, "2"),
        Sample("b", False, "9"), Sample("a", True, "1"), Sample("b", True, "4"),
    ]
    table = per_problem(samples, k=3)
    assert table["a"]["n"] == 3
    assert table["a"]["c"] == 2
    assert table["a"]["avg"] == pytest.approx(2 / 3)
    assert table["a"]["maj"] == 1.0  # "1" twice
    assert table["b"]["maj"] == 0.0  # "9" twice beats the right "4"
    assert table["b"]["pass"][1] == pytest.approx(1 / 3)
    assert table["b"]["pass"][3] == 1.0
    assert table["a"]["pass"][2] == pytest.approx(1 - 0 / 3)  # one wrong sample < k=2


def test_maj_votes_over_the_first_k_samples():
    samples = [Sample("p", False, "9"), Sample("p", True, "4"), Sample("p", True, "4")]
    assert per_problem(samples, k=1)["p"]["maj"] == 0.0
    assert per_problem(samples, k=3)["p"]["maj"] == 1.0


def test_mean_se():
    m = mean_se([1, 0, 1, 0])
    assert m.mean == 0.5
    assert m.n == 4
    assert m.se == pytest.approx(math.sqrt(1 / 3) / 2)  # sample std sqrt(1/3), over sqrt(4)
    assert math.isnan(mean_se([0.7]).se)
    assert mean_se([0.7]).format() == "0.700 (n=1)"
    assert mean_se([]).n == 0
    assert mean_se([]).format() == "–"
    assert mean_se([1, 0, 1, 0]).format() == "0.500 ± 0.289"


def test_paired_bootstrap():
    same = paired_bootstrap([0.1, 0.5, 0.9], [0.1, 0.5, 0.9])
    assert (same.delta, same.low, same.high) == (0.0, 0.0, 0.0)
    assert not same.significant
    shifted = paired_bootstrap([0, 0.2, 0.5], [1, 1.2, 1.5])
    assert shifted.delta == pytest.approx(1)
    assert shifted.low == pytest.approx(1)
    assert shifted.high == pytest.approx(1)
    better = paired_bootstrap([0.0] * 20, [1.0] * 10 + [0.0] * 10, n_boot=2000, seed=1)
    assert better.delta == pytest.approx(0.5)
    assert better.significant
    assert better.low < 0.5 < better.high
    assert better == paired_bootstrap([0.0] * 20, [1.0] * 10 + [0.0] * 10, n_boot=2000, seed=1)  # seeded
    noisy = paired_bootstrap([1, 0, 1, 0], [0, 1, 0, 1], n_boot=2000)
    assert noisy.low < 0 < noisy.high
    assert not noisy.significant


def test_paired_bootstrap_rejects_bad_input():
    with pytest.raises(ValueError, match="equal-length"):
        paired_bootstrap([1, 2], [1])
    with pytest.raises(ValueError, match="no paired problems"):
        paired_bootstrap([], [])


def test_majority_vote_never_pools_a_number_with_an_expression():
    """Four samples box the question, three the answer: the expressions do not vote for 31."""
    from mappa_train.evaluation.runner import same_answer

    answers = ["4 \\cdot 7 + 3"] * 4 + ["31", "031", "31.0"]
    correct = [False] * 4 + [True] * 3
    assert majority_vote(answers, correct, same_answer) == 0.0
    assert majority_vote(["31", "4 \\cdot 7 + 3", "4 \\cdot 7 + 3"], [True, False, False], same_answer) == 0.0
    assert same_answer("031", "31.0")
