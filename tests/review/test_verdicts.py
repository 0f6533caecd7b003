"""The verdicts database: append-only, the newest verdict wins, read-only when it cannot be written."""
from __future__ import annotations

import os
import sqlite3

import pytest

from mappa_train.review.verdicts import Verdict, VerdictError, VerdictStore, open_existing

ABOUT = {"env_id": "Chain-v0", "task_id": "t0", "role": "step_1", "seed": 1, "sample": 0, "coach_score": 9.0,
         "coach_rationale": "why", "request": {"action": "\\boxed{3}"}}


def test_the_newest_verdict_of_an_action_wins_and_none_is_lost(tmp_path):
    store = VerdictStore(tmp_path / "review.sqlite")
    store.add(tmp_path / "run" / "transcripts.jsonl", 3, 1, Verdict(2.0, None, "first look", "ann"), ABOUT)
    store.add(tmp_path / "run" / "transcripts.jsonl", 3, 1, Verdict(None, True, "on reflection", "bob"), ABOUT)
    latest = store.latest()
    assert [(v["source"], v["line"], v["action"], v["human_right"], v["reviewer"]) for v in latest] == \
        [("run/transcripts.jsonl", 3, 1, 1, "bob")]
    history = store.history(tmp_path / "run" / "transcripts.jsonl", 3)[1]
    assert [v["note"] for v in history] == ["on reflection", "first look"]
    assert history[0]["created_at"].endswith("+00:00")


@pytest.mark.parametrize(("verdict", "message"), [
    (dict(human_score=None, human_right=None), "needs a score"),
    (dict(human_score=11.0, human_right=None), "between 0 and 10"),
    (dict(human_score=-0.5, human_right=None), "between 0 and 10"),
])
def test_a_verdict_that_says_nothing_or_too_much_is_refused(verdict, message):
    with pytest.raises(VerdictError, match=message):
        Verdict(**verdict, note="", reviewer="ann")


def test_a_verdict_needs_a_reviewer():
    with pytest.raises(VerdictError, match="reviewer"):
        Verdict(5.0, None, "", "  ")


def test_a_read_only_database_is_served_read_only(tmp_path):
    db = tmp_path / "review.sqlite"
    VerdictStore(db).add(tmp_path / "t.jsonl", 1, 0, Verdict(4.0, None, "kept", "ann"), ABOUT)
    before = db.read_bytes()
    os.chmod(db, 0o444)
    store = VerdictStore(db)
    assert not store.writable
    assert [v["note"] for v in store.latest()] == ["kept"]
    with pytest.raises(VerdictError, match="read-only"):
        store.add(tmp_path / "t.jsonl", 1, 0, Verdict(5.0, None, "", "ann"), ABOUT)
    assert db.read_bytes() == before


def test_a_database_that_cannot_be_created_is_read_only_and_empty(tmp_path):
    (tmp_path / "a-file").write_text("")
    store = VerdictStore(tmp_path / "a-file" / "review.sqlite")
    assert not store.writable
    assert store.latest() == []


def test_a_file_that_is_no_database_is_a_one_line_error(tmp_path):
    (tmp_path / "notes.sqlite").write_text("not sqlite " * 100)
    with pytest.raises(VerdictError, match="not a verdicts database"):
        VerdictStore(tmp_path / "notes.sqlite")
    with pytest.raises(VerdictError, match="does not exist"):
        open_existing(tmp_path / "missing.sqlite")


def test_export_never_writes_into_a_database_it_did_not_write(tmp_path):
    other = tmp_path / "other.sqlite"
    db = sqlite3.connect(other)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.commit()
    db.close()
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    before = other.read_bytes()
    for path in (other, empty):
        with pytest.raises(VerdictError, match="not a verdicts database"):
            open_existing(path)
    assert other.read_bytes() == before
    assert empty.read_bytes() == b""


def test_the_schema_is_plain_sqlite(tmp_path):
    db = tmp_path / "review.sqlite"
    VerdictStore(db).add(tmp_path / "t.jsonl", 2, 0, Verdict(7.5, False, "note", "ann"), ABOUT)
    query = "SELECT human_score, human_right, role, coach_score, request FROM verdicts"
    row = sqlite3.connect(db).execute(query).fetchone()
    assert row == (7.5, 0, "step_1", 9.0, '{"action": "\\\\boxed{3}"}')
