"""Human verdicts in SQLite: one row per verdict given, never updated or deleted (the newest one of an
action is its verdict), each carrying the action as the coach saw it, so the file alone is a dataset.

A verdict is a score in [0, 10], or right/wrong, or both, plus a note, who and when. An action is keyed
by its transcript file, line and position in the episode; the file is stored relative to the
database's folder where it lies under it, so a run folder moved with its database keeps its verdicts.
"""
from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from mappa_envs.errors import MappaError

DEFAULT_NAME = "review.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  source TEXT NOT NULL,          -- transcript file (relative to the database's folder where possible)
  line INTEGER NOT NULL,         -- 1-based line of the episode in that file
  action INTEGER NOT NULL,       -- position of the action in the episode
  human_score REAL,              -- 0..10, or NULL
  human_right INTEGER,           -- 1 right, 0 wrong, or NULL
  note TEXT NOT NULL DEFAULT '',
  reviewer TEXT NOT NULL,
  created_at TEXT NOT NULL,      -- UTC, ISO 8601
  env_id TEXT, task_id TEXT, role TEXT, seed INTEGER, sample INTEGER,
  coach_score REAL, coach_rationale TEXT,
  request TEXT NOT NULL          -- JSON: the action's context as the coach saw it (CoachRequest fields)
);
CREATE INDEX IF NOT EXISTS verdicts_action ON verdicts (source, line, action);
"""
COLUMNS = ("id", "source", "line", "action", "human_score", "human_right", "note", "reviewer", "created_at",
           "env_id", "task_id", "role", "seed", "sample", "coach_score", "coach_rationale", "request")
MAX_NOTE = 4000
MAX_REVIEWER = 100
BUSY_S = 2.0  # how long a query waits for another program's lock before the reviewer is told to retry


class VerdictError(MappaError, ValueError):
    """A verdict or database that cannot be used as given; the message says what would work."""


class DatabaseBusy(MappaError):
    """Another program holds the database's lock past BUSY_S: nothing was read or recorded; retry."""


@dataclass(frozen=True)
class Verdict:
    human_score: float | None
    human_right: bool | None
    note: str
    reviewer: str

    def __post_init__(self):
        if self.human_score is None and self.human_right is None:
            raise VerdictError("a verdict needs a score (0-10) or right/wrong")
        if self.human_score is not None and not 0.0 <= self.human_score <= 10.0:
            raise VerdictError(f"a score must be between 0 and 10, got {self.human_score}")
        if not self.reviewer.strip():
            raise VerdictError("a verdict needs the reviewer's name")
        if len(self.reviewer) > MAX_REVIEWER or not self.reviewer.isprintable():
            raise VerdictError(f"a reviewer's name is one line of at most {MAX_REVIEWER} printable characters")
        if len(self.note) > MAX_NOTE:
            raise VerdictError(f"a note holds at most {MAX_NOTE} characters, got {len(self.note)}")


class VerdictStore:
    """The verdicts database at `path`, opened read-write when it can be written (and not `read_only`),
    read-only otherwise."""

    def __init__(self, path: str | Path, read_only: bool = False):
        self.path = Path(path)
        self._db = None if read_only else _open_writable(self.path)
        self.writable = self._db is not None
        if self._db is None and self.path.is_file():
            self._db = sqlite3.connect(f"{self.path.resolve().as_uri()}?mode=ro", uri=True, timeout=BUSY_S,
                                       check_same_thread=False)
        elif self._db is None:  # nothing recorded yet, and nothing can be
            self._db = sqlite3.connect(":memory:", check_same_thread=False)
            self._db.executescript(SCHEMA)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()  # the server queries from its worker threads: one at a time

    @contextmanager
    def _locked(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                yield self._db
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e):
                    raise
                raise DatabaseBusy(f"{self.path} is locked by another program (a second mappa review, an open "
                                   "sqlite shell); nothing was read or recorded: try again in a moment") from None

    def key_of(self, source: str | Path) -> str:
        src = Path(source).resolve()
        try:
            return src.relative_to(self.path.resolve().parent).as_posix()
        except ValueError:
            return src.as_posix()

    def add(self, source: str | Path, line: int, action: int, verdict: Verdict, about: dict) -> int:
        """Record `verdict` on an action; `about` holds env_id, task_id, role, seed, sample, coach_score,
        coach_rationale and request (a dict). Returns the row id."""
        if not self.writable:
            raise VerdictError(f"{self.path} cannot be written: the review is read-only")
        row = {"source": self.key_of(source), "line": line, "action": action, "human_score": verdict.human_score,
               "human_right": None if verdict.human_right is None else int(verdict.human_right),
               "note": verdict.note, "reviewer": verdict.reviewer.strip(),
               "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               **{k: about.get(k) for k in ("env_id", "task_id", "role", "seed", "sample", "coach_score",
                                            "coach_rationale")},
               "request": json.dumps(about.get("request") or {}, default=str, ensure_ascii=False)}
        with self._locked() as db, db:
            cur = db.execute(f"INSERT INTO verdicts ({', '.join(row)}) VALUES ({', '.join('?' * len(row))})",
                             tuple(row.values()))
        return int(cur.lastrowid)

    def history(self, source: str | Path, line: int) -> dict[int, list[dict]]:
        """action position -> its verdicts, newest first, for one episode."""
        out: dict[int, list[dict]] = {}
        with self._locked() as db:
            rows = db.execute("SELECT * FROM verdicts WHERE source = ? AND line = ? ORDER BY id DESC",
                              (self.key_of(source), line)).fetchall()
        for r in rows:
            out.setdefault(r["action"], []).append(dict(r))
        return out

    def reviewed(self) -> set[tuple[str, int, int]]:
        """(source key, line, action) of every action with a verdict."""
        with self._locked() as db:
            return {(r[0], r[1], r[2]) for r in db.execute("SELECT DISTINCT source, line, action FROM verdicts")}

    def latest(self) -> list[dict]:
        """The newest verdict of every action, in the order they were first given."""
        with self._locked() as db:
            return [dict(r) for r in db.execute(
                "SELECT * FROM verdicts WHERE id IN (SELECT MAX(id) FROM verdicts GROUP BY source, line, action) "
                "ORDER BY id")]

    def close(self) -> None:
        self._db.close()


def open_existing(path: str | Path) -> VerdictStore:
    """A verdicts database that must already exist (for export), opened read-only: a missing one, or a file
    some other program wrote, is a one-line error and is left as it was."""
    path = Path(path)
    if not path.is_file():
        raise VerdictError(f"{path} does not exist; give the database `mappa review` wrote (default "
                           f"{DEFAULT_NAME} beside the run)")
    store = VerdictStore(path, read_only=True)
    try:
        found = {r[1] for r in store._db.execute("PRAGMA table_info(verdicts)")}
    except sqlite3.DatabaseError as e:
        store.close()
        raise VerdictError(f"{path} is not a verdicts database ({e}); give the one `mappa review` wrote") from None
    if not set(COLUMNS) <= found:
        store.close()
        raise VerdictError(f"{path} is not a verdicts database (no verdicts table with {', '.join(COLUMNS[:4])}, "
                           "...); give the one `mappa review` wrote")
    return store


def _open_writable(path: Path) -> sqlite3.Connection | None:
    """The database opened for writing with its schema, or None where it cannot be written: a file whose mode
    says read-only (honoured even for root), an unwritable folder or file system."""
    if path.exists() and (not path.is_file() or not path.stat().st_mode & 0o222):
        return None
    try:
        db = sqlite3.connect(path, timeout=BUSY_S, check_same_thread=False)
        db.executescript(SCHEMA)
        db.execute("PRAGMA user_version = 1")  # a real write: proves the file and its folder take one
        db.commit()
        return db
    except sqlite3.OperationalError:
        return None
    except sqlite3.DatabaseError as e:
        raise VerdictError(f"{path} is not a verdicts database ({e}); give another --db") from None
