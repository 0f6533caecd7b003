"""Verdicts as data: `mappa export labels` and `mappa coach-eval --labels`."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

from mappa_envs.coach_eval.metrics import auroc
from mappa_train.export import ExportError
from mappa_train.review.app import about
from mappa_train.review.labels import evaluate_labels, export_labels, load_labels, measure, request_of
from mappa_train.review.transcripts import load
from mappa_train.review.verdicts import Verdict, VerdictError, VerdictStore


def review(runs, n: int = 8) -> tuple[VerdictStore, list]:
    """A reviewer who calls an action right exactly when the env's checks say its step was right."""
    store = VerdictStore(runs / "review.sqlite")
    given = []
    for e in load([runs / "eval"]).episodes:
        for k, a in enumerate(e.actions):
            if len(given) < n:
                right = bool(a.checks.get("step_correct"))
                store.add(e.source, e.line, k, Verdict(None if k % 2 else (9.0 if right else 1.0), right, "", "ann"),
                          about(e, k))
                given.append((e, k, a, right))
    return store, given


def test_exported_labels_hold_the_verdict_the_coach_view_and_ids_back(runs, tmp_path):
    store, given = review(runs)
    e, k, a, right = given[0]
    store.add(e.source, e.line, k, Verdict(None, not right, "changed my mind", "bob"), about(e, k))
    ds = export_labels(store.path, tmp_path / "labels")
    assert ds.num_rows == len(given)  # the newest verdict of each action, once
    row = next(r for r in ds if (r["line"], r["action_index"]) == (e.line, k))
    assert (row["source"], row["env_id"], row["task_id"], row["role"]) == ("eval/transcripts.jsonl", e.env_id,
                                                                          e.task_id, a.role)
    assert (row["human_right"], row["label"], row["reviewer"], row["note"]) == (not right, not right, "bob",
                                                                                 "changed my mind")
    assert (row["coach_score"], row["action"], row["context"]) == (a.coach_score, a.text, a.prompt)
    request = request_of(row)
    assert (request.action, request.context, request.checks) == (a.text, a.prompt, a.checks)
    assert request.role_duties  # looked up from the registered env


def test_an_export_never_overwrites_and_needs_verdicts(runs, tmp_path):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    store, _ = review(runs, 2)
    with pytest.raises(ExportError, match="already exists"):
        export_labels(store.path, tmp_path / "taken")
    assert (tmp_path / "taken" / "keep.txt").read_text() == "mine"
    VerdictStore(tmp_path / "empty.sqlite")
    with pytest.raises(VerdictError, match="no verdicts yet"):
        export_labels(tmp_path / "empty.sqlite", tmp_path / "out")
    assert not (tmp_path / "out").exists()


GOOD_ROW = {"label": True, "human_score": 9.0, "coach_score": 8.5, "env_id": "Chain-v0", "role": "adder",
            "task": "Start at 3; add 4.", "action": "7", "request": json.dumps({"tool_results": [], "checks": {}})}


@pytest.mark.parametrize("change, message", [
    ({"human_score": 11.0}, "human_score 11.0, not a number from 0 to 10"),
    ({"human_score": float("nan")}, "human_score nan"),
    ({"coach_score": -1.0}, "coach_score -1.0"),
    ({"label": None}, "label None, not true or false"),
    ({"request": "{not json"}, "request that is not JSON"),
    ({"request": "[1, 2]"}, "a JSON list, not an object"),
    ({"request": json.dumps({"tool_results": 5})}, "'tool_results' of type int, not list"),
    ({"request": json.dumps({"tool_results": [5]})}, "tool_results are not all objects"),
])
def test_a_label_row_that_would_train_a_wrong_verdict_is_refused_by_row(tmp_path, change, message):
    import datasets

    rows = [GOOD_ROW, {**GOOD_ROW, **change}]
    datasets.Dataset.from_list([{k: r[k] for k in GOOD_ROW} for r in rows]).save_to_disk(str(tmp_path / "labels"))
    with pytest.raises(VerdictError, match=f"row 1 .*{message}".replace("(", r"\(").replace(")", r"\)")):
        load_labels(tmp_path / "labels")


def test_a_labels_dataset_missing_a_column_names_it(tmp_path):
    import datasets

    datasets.Dataset.from_list([{k: v for k, v in GOOD_ROW.items() if k != "human_score"}]).save_to_disk(
        str(tmp_path / "labels"))
    with pytest.raises(VerdictError, match="no human_score"):
        load_labels(tmp_path / "labels")


def test_a_coach_is_measured_against_the_labels(runs, tmp_path):
    from mappa_envs.coach import RuleCoach

    store, given = review(runs, 12)
    rows = load_labels(export_labels(store.path, tmp_path / "labels") and tmp_path / "labels")
    report = {r["coach"]: r for r in evaluate_labels(rows, {"rule": RuleCoach()})}
    recorded = report["recorded"]
    scores, labels = [r["coach_score"] for r in rows], [r["label"] for r in rows]
    assert recorded["auroc"] == auroc(scores, labels)
    assert recorded["agreement"] == sum((s >= 5) == y for s, y in zip(scores, labels)) / len(rows)
    scored_humans = [(s, r["human_score"]) for s, r in zip(scores, rows) if r["human_score"] is not None]
    assert recorded["mean_abs_diff"] == sum(abs(s - h) for s, h in scored_humans) / len(scored_humans)
    assert report["rule"]["scored"] == len(rows)
    assert report["rule"]["auroc"] == 1.0  # the reviewer followed the checks the rule coach reads
    assert set(recorded["calibration"]["right"]) <= {a.role for _, _, a, _ in given}


def test_measure_counts_unscored_actions_apart():
    rows = [{"label": True, "human_score": 8.0, "role": "r"}, {"label": False, "human_score": None, "role": "r"},
            {"label": False, "human_score": 2.0, "role": "r"}]
    m = measure("c", [9.0, None, 6.0], rows)
    assert (m["labels"], m["scored"], m["auroc"], m["agreement"], m["mean_abs_diff"]) == (3, 2, 1.0, 0.5, 2.5)


def mappa(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mappa_cli", *argv], capture_output=True, text=True, timeout=300)


@pytest.mark.slow  # three command-line starts: ~20 s on a loaded machine
def test_the_command_line_exports_and_refuses_bad_labels_in_one_line(runs, tmp_path):
    review(runs, 3)
    done = mappa("export", "labels", str(runs / "review.sqlite"), "--out", str(tmp_path / "labels"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("3 verdicts by 1 reviewer(s) ->")
    missing = mappa("export", "labels", str(tmp_path / "nope.sqlite"), "--out", str(tmp_path / "l2"))
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0
    assert "does not exist" in missing.stderr
    bad = mappa("coach-eval", "--labels", str(tmp_path / "nothing"), "--env", "Chain-v0", "--out", str(tmp_path / "ce"))
    assert bad.returncode == 2
    assert "is not a labels dataset" in bad.stderr
    assert not (tmp_path / "ce").exists()  # refused before anything was played


@pytest.mark.slow
def test_coach_eval_reports_against_the_labels_beside_its_card(runs, tmp_path):
    review(runs, 6)
    assert mappa("export", "labels", str(runs / "review.sqlite"), "--out", str(tmp_path / "labels")).returncode == 0
    done = mappa("coach-eval", "--labels", str(tmp_path / "labels"), "--env", "Chain-v0", "--num-tasks", "1",
                 "--probe-tasks", "1", "--no-backprop", "--out", str(tmp_path / "ce"))
    assert done.returncode == 0, done.stderr
    report = json.loads((tmp_path / "ce" / "labels.json").read_text())
    assert [r["coach"] for r in report["rows"]] == ["recorded", "rule"]
    assert (tmp_path / "ce" / "coach_eval.md").is_file()
    assert "| rule | 6 | 6 |" in (tmp_path / "ce" / "labels.md").read_text()
