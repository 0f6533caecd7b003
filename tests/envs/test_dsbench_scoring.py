"""Submission validation and scoring: id joins, string labels, broken files, relative quality."""
import pandas as pd
import pytest

from mappa_envs.dsbench.scoring import relative_quality, score_submission
from mappa_envs.dsbench.tasks import task_from_folder

pytestmark = pytest.mark.unit


def make_task(tmp_path, metric, answers: pd.DataFrame, id_column="id", train: pd.DataFrame | None = None, **kw):
    folder, ans = tmp_path / "data_resplit" / "t", tmp_path / "answers" / "t"
    folder.mkdir(parents=True)
    ans.mkdir(parents=True)
    targets = [c for c in answers.columns if c != id_column]
    (train if train is not None else answers).to_csv(folder / "train.csv", index=False)
    answers.drop(columns=targets).assign(x=1).to_csv(folder / "test.csv", index=False)
    answers.to_csv(ans / "test_answer.csv", index=False)
    return task_from_folder(tmp_path, "t", "a task", metric, id_column, **kw)


def csv(df: pd.DataFrame) -> bytes:
    return df.to_csv(index=False).encode()


@pytest.fixture
def labels_task(tmp_path):
    answers = pd.DataFrame({"PassengerId": ["0013_01", "0018_01", "0019_01", "0021_01"],
                            "Transported": [False, True, True, False]})
    return make_task(tmp_path, "accuracy", answers, id_column="PassengerId")


def test_join_by_id_not_by_row_order(labels_task):
    shuffled = pd.DataFrame({"PassengerId": ["0021_01", "0019_01", "0018_01", "0013_01"],
                             "Transported": [False, True, True, False]})
    report = score_submission(labels_task, csv(shuffled))
    assert report.valid
    assert report.score == 1.0
    assert report.error is None


def test_string_and_boolean_labels_compare_by_value(labels_task):
    sub = "PassengerId,Transported\n0013_01,False\n0018_01,True\n0019_01,False\n0021_01,False\n"
    assert score_submission(labels_task, sub).score == 0.75


def test_labels_of_the_wrong_kind_are_an_error_not_a_zero(labels_task):
    sub = "PassengerId,Transported\n0013_01,no\n0018_01,yes\n0019_01,yes\n0021_01,no\n"
    report = score_submission(labels_task, sub)
    assert not report.valid
    assert report.score is None
    assert "none of the predicted labels" in report.error
    assert "'yes'" in report.error


@pytest.mark.parametrize("text, message", [
    ("PassengerId,Survived\n0013_01,True\n", "missing column(s) ['Transported']"),
    ("Transported\nTrue\n", "missing column(s) ['PassengerId']"),
    ("PassengerId,Transported\n", "header but no rows"),
    ("PassengerId,Transported\n0013_01,True\n0013_01,True\n0018_01,True\n0019_01,True\n0021_01,True\n",
     "1 duplicated 'PassengerId' value(s), e.g. ['0013_01']"),
    ("PassengerId,Transported\n0013_01,True\n0018_01,True\n0019_01,True\n",
     "3 rows for 4 test ids; 1 test id(s) have no prediction, e.g. ['0021_01']"),
    ("PassengerId,Transported\n0013_01,True\n0018_01,True\n0019_01,True\n0021_01,True\n9999_01,True\n",
     "1 id(s) are not in the test set, e.g. ['9999_01']"),
    ("PassengerId,Transported\n0013_01,True\n0018_01,\n0019_01,True\n0021_01,True\n",
     "column 'Transported' has 1 empty/NaN value(s) (first at PassengerId='0018_01')"),
    (b"\xff\xfe\x00garbage", "not a readable CSV"),
    ("", "not a readable CSV"),
])
def test_broken_submissions_get_precise_errors(labels_task, text, message):
    report = score_submission(labels_task, text)
    assert not report.valid
    assert report.score is None
    assert message in report.error
    assert report.to_dict()["error"] == report.error  # the failed-submission record carries it


def test_extra_columns_are_ignored_with_a_warning(labels_task):
    sub = "PassengerId,Transported,confidence\n0013_01,False,1\n0018_01,True,1\n0019_01,True,1\n0021_01,False,1\n"
    report = score_submission(labels_task, sub)
    assert report.valid
    assert report.score == 1.0
    assert report.warnings == ["ignored extra column(s) ['confidence']"]


def test_integer_ids_join_whatever_their_type_and_float_ids_get_a_hint(tmp_path):
    task = make_task(tmp_path, "rmse", pd.DataFrame({"id": [5, 6, 8], "y": [1.0, 2.0, 3.0]}))
    assert score_submission(task, "id,y\n8,3\n5,1\n6,2\n").score == 0.0
    report = score_submission(task, "id,y\n5.0,1\n6.0,2\n8.0,3\n")
    assert "written as floats" in report.error


def test_non_numeric_predictions_for_a_numeric_metric(tmp_path):
    task = make_task(tmp_path, "rmse", pd.DataFrame({"id": [1, 2], "y": [1.0, 2.0]}))
    report = score_submission(task, "id,y\n1,abc\n2,2\n")
    assert "column 'y' must hold numbers; 1 value(s) are not, e.g. ['abc']" in report.error
    report = score_submission(task, "id,y\n1,inf\n2,2\n")
    assert "must hold numbers" in report.error


def test_every_target_column_is_scored(tmp_path):
    answers = pd.DataFrame({"id": [1, 2, 3], "a": [1.0, 2.0, 3.0], "b": [10.0, 20.0, 30.0]})
    task = make_task(tmp_path, "mcrmse", answers)
    assert task.target_columns == ("a", "b")
    report = score_submission(task, "id,a,b\n1,1,12\n2,2,22\n3,3,32\n")
    assert report.score == pytest.approx((0 + 2) / 2)


def test_binary_probabilities_against_string_targets_with_pos_label(tmp_path):
    answers = pd.DataFrame({"id": [1, 2, 3, 4], "Attrition": ["Yes", "No", "No", "Yes"]})
    task = make_task(tmp_path, "roc_auc", answers, pos_label="Yes")
    assert score_submission(task, "id,Attrition\n1,0.9\n2,0.1\n3,0.2\n4,0.8\n").score == 1.0


def test_one_hot_log_loss_and_probability_range(tmp_path):
    answers = pd.DataFrame({"id": [1, 2], "a": [1, 0], "b": [0, 1]})
    task = make_task(tmp_path, "log_loss", answers)
    assert score_submission(task, "id,a,b\n1,0.5,0.5\n2,0.5,0.5\n").score == pytest.approx(0.6931, abs=1e-4)
    assert "probabilities in [0, 1]" in score_submission(task, "id,a,b\n1,1.5,0\n2,0,1\n").error


def test_binary_f1_positive_class_is_inferred_or_given(tmp_path):
    answers = pd.DataFrame({"id": [1, 2, 3], "d": ["M", "B", "M"]})
    task = make_task(tmp_path, "f1", answers, pos_label="M")
    assert score_submission(task, "id,d\n1,M\n2,M\n3,B\n").score == pytest.approx(0.5)
    unlabeled = make_task(tmp_path / "x", "f1", answers)
    assert "positive class" in score_submission(unlabeled, "id,d\n1,M\n2,M\n3,B\n").error


def test_metric_errors_become_failed_submissions(tmp_path):
    task = make_task(tmp_path, "rmsle", pd.DataFrame({"id": [1, 2], "y": [1.0, 2.0]}))
    report = score_submission(task, "id,y\n1,-3\n2,2\n")
    assert not report.valid
    assert "non-negative" in report.error


def test_relative_quality():
    assert relative_quality("roc_auc", 0.75, 0.5, 1.0) == 0.5
    assert relative_quality("rmse", 15.0, 20.0, 10.0) == 0.5
    assert relative_quality("rmse", 25.0, 20.0, 10.0) == 0.0  # worse than the baseline
    assert relative_quality("rmse", 5.0, 20.0, 10.0) == 1.0  # better than the reference
    assert relative_quality("jaccard", 0.7, 0.6, None) == 1.0  # no reference: beating the baseline is all
    assert relative_quality("jaccard", 0.6, 0.6, 0.6) == 0.0
