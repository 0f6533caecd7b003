"""Every DSBench metric against scikit-learn/scipy or hand-computed values, with edge cases."""
import math

import numpy as np
import pytest
from scipy import stats
from sklearn import metrics as skm

from mappa_envs.dsbench.metrics import METRICS, better, compute_metric, get_metric

pytestmark = pytest.mark.unit

RNG = np.random.default_rng(0)
Y = RNG.normal(10, 3, 50).clip(0.1)
P = (Y + RNG.normal(0, 1, 50)).clip(0.1)
B = np.array([0, 1, 1, 0, 1, 0, 0, 1, 1, 1])
PROB = np.array([0.1, 0.8, 0.6, 0.3, 0.9, 0.2, 0.55, 0.4, 0.7, 0.65])


def test_every_metric_the_issue_names_is_there():
    names = {"accuracy", "f1", "f1_micro", "f1_macro", "f1_weighted", "roc_auc", "log_loss", "rmse", "rmsle", "mae",
             "medae", "mse", "r2", "smape", "quadratic_weighted_kappa", "normalized_gini", "mcrmse", "map_at_3",
             "pearson", "spearman", "jaccard"}
    assert names <= set(METRICS)
    for alias, name in [("qwk", "quadratic_weighted_kappa"), ("AUC", "roc_auc"), ("map@3", "map_at_3"),
                        ("f1-macro", "f1_macro"), ("LogLoss", "log_loss")]:
        assert get_metric(alias).name == name


@pytest.mark.parametrize("name, expected", [
    ("rmse", skm.root_mean_squared_error(Y, P)),
    ("mse", skm.mean_squared_error(Y, P)),
    ("mae", skm.mean_absolute_error(Y, P)),
    ("medae", skm.median_absolute_error(Y, P)),
    ("r2", skm.r2_score(Y, P)),
    ("rmsle", math.sqrt(np.mean((np.log1p(P) - np.log1p(Y)) ** 2))),
    ("pearson", stats.pearsonr(Y, P)[0]),
    ("spearman", stats.spearmanr(Y, P)[0]),
    ("smape", 100 * np.mean(2 * np.abs(P - Y) / (np.abs(Y) + np.abs(P)))),
])
def test_regression_metrics_match_reference_implementations(name, expected):
    assert compute_metric(name, Y, P) == pytest.approx(expected, rel=1e-12)


def test_column_wise_means_for_multi_target():
    t = np.column_stack([Y, 2 * Y, Y + 1])
    p = np.column_stack([P, 2 * P + 1, Y + 1])
    per_col = [skm.root_mean_squared_error(t[:, j], p[:, j]) for j in range(3)]
    assert compute_metric("mcrmse", t, p) == pytest.approx(np.mean(per_col))
    assert compute_metric("rmse", t, p) == pytest.approx(np.mean(per_col))
    assert compute_metric("rmsle", t, p) == pytest.approx(
        np.mean([skm.root_mean_squared_log_error(t[:, j], p[:, j]) for j in range(3)]))
    labels = np.column_stack([B, 1 - B])
    probs = np.column_stack([PROB, PROB[::-1]])
    assert compute_metric("roc_auc", labels, probs) == pytest.approx(
        (skm.roc_auc_score(B, PROB) + skm.roc_auc_score(1 - B, PROB[::-1])) / 2)


def test_smape_hand_values_and_zero_rows():
    assert compute_metric("smape", [100, 0], [110, 0]) == pytest.approx(100 * (10 / 105) / 2)
    assert compute_metric("smape", [0, 0], [0, 0]) == 0.0
    assert compute_metric("smape", [0], [5]) == pytest.approx(200.0)


def test_rmsle_rejects_negative_predictions():
    with pytest.raises(ValueError, match="non-negative"):
        compute_metric("rmsle", [1, 2], [1, -0.5])


def test_classification_metrics_match_sklearn():
    t = np.array(["a", "b", "c", "a", "b", "c", "a", "a"])
    p = np.array(["a", "b", "b", "a", "c", "c", "b", "a"])
    assert compute_metric("accuracy", t, p) == pytest.approx(skm.accuracy_score(t, p))
    for avg in ("micro", "macro", "weighted"):
        assert compute_metric(f"f1_{avg}", t, p) == pytest.approx(skm.f1_score(t, p, average=avg))
    assert compute_metric("f1", B, (PROB > 0.5).astype(int)) == pytest.approx(skm.f1_score(B, PROB > 0.5))
    assert compute_metric("f1", ["M", "B", "M"], ["M", "M", "B"], pos_label="M") == pytest.approx(0.5)
    assert compute_metric("roc_auc", B, PROB) == pytest.approx(skm.roc_auc_score(B, PROB))


def test_accuracy_on_several_label_columns_needs_every_column_right():
    assert compute_metric("accuracy", [[1, 2], [3, 4]], [[1, 2], [3, 5]]) == 0.5


def test_roc_auc_needs_both_classes():
    with pytest.raises(ValueError, match="both classes"):
        compute_metric("roc_auc", [1, 1, 1], [0.2, 0.4, 0.9])


def test_log_loss_binary_and_multiclass():
    assert compute_metric("log_loss", B, PROB) == pytest.approx(skm.log_loss(B, PROB))
    onehot = np.eye(3)[[0, 2, 1, 2]]
    probs = np.array([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8], [0.3, 0.4, 0.3], [0.2, 0.2, 0.6]])
    assert compute_metric("log_loss", onehot, probs) == pytest.approx(skm.log_loss([0, 2, 1, 2], probs))
    # rows are rescaled to sum to 1, as Kaggle does
    assert compute_metric("log_loss", onehot, 2 * probs) == pytest.approx(skm.log_loss([0, 2, 1, 2], probs))
    # a confident wrong answer is clipped, not infinite
    assert math.isfinite(compute_metric("log_loss", [1, 0], [0.0, 1.0]))
    assert compute_metric("log_loss", [1, 0], [0.0, 1.0]) == pytest.approx(-math.log(1e-15), rel=1e-4)


def test_quadratic_weighted_kappa():
    t, p = [0, 1, 2, 3, 4, 2], [0, 2, 2, 3, 3, 1]
    assert compute_metric("qwk", t, p) == pytest.approx(skm.cohen_kappa_score(t, p, weights="quadratic"))
    assert compute_metric("qwk", [1, 2, 3], [1.0, 2.0, 3.0]) == 1.0
    assert compute_metric("qwk", [2, 2], [2, 2]) == 1.0  # one class everywhere
    with pytest.raises(ValueError, match="integer"):
        compute_metric("qwk", [1, 2], [1.5, 2])


def test_normalized_gini_is_2auc_minus_1_for_binary_and_kaggle_formula_otherwise():
    assert compute_metric("normalized_gini", B, PROB) == pytest.approx(2 * skm.roc_auc_score(B, PROB) - 1)
    assert compute_metric("normalized_gini", B, np.full(10, 0.3)) == 0.0  # constant: no ranking power
    assert compute_metric("normalized_gini", B, B) == pytest.approx(1.0)
    # continuous target, worked by hand: actual [1, 3, 2], order by pred gives [3, 1, 2]
    # cum shares 3/6, 4/6, 1 -> sum 13/6 / 3 - 4/6 = 0.0556; perfect order [3, 2, 1]: 3/6, 5/6, 1 -> 0.1111
    expected = (13 / 18 - 4 / 6) / (14 / 18 - 4 / 6)
    assert compute_metric("normalized_gini", [1, 3, 2], [0.2, 0.9, 0.1]) == pytest.approx(expected)


def test_map_at_3():
    t = ["a", "b", "c", "d"]
    p = ["a b c", "c b a", "a b c", "x y z"]
    assert compute_metric("map_at_3", t, p) == pytest.approx((1 + 1 / 2 + 1 / 3 + 0) / 4)
    assert compute_metric("map_at_3", [3, 7], ["3", "1 7"]) == pytest.approx(0.75)
    with pytest.raises(ValueError, match="at most 3"):
        compute_metric("map_at_3", ["a"], ["a b c d"])


def test_word_jaccard():
    assert compute_metric("jaccard", ["the cat sat"], ["The cat"]) == pytest.approx(2 / 3)
    assert compute_metric("jaccard", ["", "a b"], ["", "c"]) == pytest.approx(0.5)


def test_correlations_of_a_constant_column_are_zero():
    assert compute_metric("pearson", [1, 2, 3], [5, 5, 5]) == 0.0
    assert compute_metric("spearman", [1, 2, 3], [5, 5, 5]) == 0.0


@pytest.mark.parametrize("y_true, y_pred, message", [
    ([1, 2], [1, 2, 3], "shape"),
    ([], [], "no rows"),
    ([1.0, 2.0], [np.nan, 1.0], "NaN"),
    ([1.0, 2.0], ["a", "b"], "numbers"),
])
def test_bad_inputs_raise_value_errors(y_true, y_pred, message):
    with pytest.raises(ValueError, match=message):
        compute_metric("rmse", y_true, y_pred)


def test_unknown_metric_lists_the_known_ones():
    with pytest.raises(ValueError, match="known: accuracy"):
        compute_metric("brier", [1], [1])


def test_better_respects_direction():
    assert better("rmse", 1.0, 2.0)
    assert not better("rmse", 2.0, 1.0)
    assert better("roc_auc", 0.8, 0.7)
    assert not better("roc_auc", 0.7, 0.7)
