"""Reading runs into the review's index: every transcript shape, the disagreements, the queue order."""
from __future__ import annotations

import json

import pytest

from mappa_train.review.transcripts import ReviewInputError, load, priority


def test_every_shape_of_a_run_folder_is_read(runs):
    index = load([runs])
    sources = {e.source.split("/runs/")[1] for e in index.episodes}
    assert sources == {"eval/transcripts.jsonl", "backprop/step_3/transcripts.jsonl", "hostile/transcripts.jsonl"}
    assert list(index.curves) == [str(runs / "train" / "metrics.jsonl")]
    eval_file = [json.loads(line) for line in (runs / "eval" / "transcripts.jsonl").read_text().splitlines()]
    first = next(e for e in index.episodes if e.source.endswith("eval/transcripts.jsonl") and e.line == 1)
    record, action = eval_file[0], first.actions[0]
    assert (first.task_id, first.set, first.correct) == (record["task_id"], "chain", record["outcome"]["correct"])
    assert (action.role, action.text, action.prompt) == (record["actions"][0]["role"], record["actions"][0]["text"],
                                                         record["actions"][0]["seen"])
    assert action.coach_score == record["actions"][0]["coach"]["score"]
    assert action.rationale == record["actions"][0]["coach"]["rationale"]


def test_a_recorder_file_gives_the_chat_and_the_nested_record(runs):
    index = load([runs / "hostile" / "transcripts.jsonl"])
    record = json.loads((runs / "hostile" / "transcripts.jsonl").read_text().splitlines()[0])
    action = index.episodes[0].actions[0]
    assert action.text == record["actions"][0]["action"]
    assert action.coach_score == record["actions"][0]["record"]["coach"]["score"] is not None
    assert record["actions"][0]["messages"][-1]["content"] in action.prompt


def test_a_step_is_read_from_the_folder_a_transcript_lies_in(runs):
    index = load([runs / "backprop"])
    assert {e.step for e in index.episodes} == {3}
    assert index.steps() == [3]


def test_blame_and_outcome_disagreements_follow_their_rules(runs):
    index = load([runs / "backprop"])
    for e in index.episodes:
        for k, a in enumerate(e.actions):
            s = a.coach_score
            blame = a.share is not None and ((a.share < 0 and s >= 7) or (a.share > 0 and s <= 3))
            assert ("blame" in a.disagreements) == blame
            final = k == len(e.actions) - 1
            outcome = final and ((e.correct and s <= 3) or (e.correct is False and s >= 7))
            assert ("outcome" in a.disagreements) == outcome


def test_two_coaches_apart_on_the_same_action_disagree(runs):
    lines = (runs / "eval" / "transcripts.jsonl").read_text().splitlines()
    record = json.loads(lines[0])
    record["actions"][1]["coach"]["score"] = 10.0 - record["actions"][1]["coach"]["score"]  # another coach's view
    (runs / "other").mkdir()
    (runs / "other" / "transcripts.jsonl").write_text(json.dumps(record) + "\n")
    index = load([runs / "eval", runs / "other"])
    pair = [e.actions[1] for e in index.episodes if e.line == 1]
    assert len(pair) == 2
    assert all("coaches" in a.disagreements for a in pair)
    assert not any("coaches" in a.disagreements for e in index.episodes for a in e.actions if a not in pair)


def test_the_queue_puts_disagreements_then_unsure_scores_first(runs):
    actions = [a for e in load([runs]).episodes for a in e.actions]
    ordered = sorted(actions, key=priority, reverse=True)
    assert ordered[0].disagreements
    flagged = [bool(a.disagreements) for a in ordered]
    assert flagged == sorted(flagged, reverse=True)


def test_a_torn_line_is_skipped_and_named(runs):
    path = runs / "eval" / "transcripts.jsonl"
    path.write_text(path.read_text() + '{"actions": [')
    index = load([path])
    assert index.skipped == [f"{path}:7 (not JSON)"]
    assert len(index.episodes) == 6


def test_a_path_with_nothing_to_review_is_a_one_line_error(tmp_path):
    with pytest.raises(ReviewInputError, match="does not exist"):
        load([tmp_path / "missing"])
    (tmp_path / "notes.jsonl").write_text('{"hello": 1}\n')
    with pytest.raises(ReviewInputError, match="no transcripts under"):
        load([tmp_path])
