"""Reading task data files: a JSON array of records, one JSON object, or JSON lines.

Errors are `TaskDataError`s that name the file and the real line and column of the problem (a
pretty-printed array broken on line 3 says line 3), and an empty file is an error.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from mappa_envs.errors import TaskDataError, TaskDataNotFoundError


class Record(NamedTuple):
    number: int  # the record's index (1-based) in an array, or its line number in JSON lines
    where: str  # "record N" or "line N", for messages
    value: object


def read_json_records(path: str | Path, what: str = "task file") -> list[Record]:
    """Every record of the file, in order."""
    path = Path(path)
    if not path.is_file():
        raise TaskDataNotFoundError(f"{what} {path} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise TaskDataError(f"{path}: not UTF-8 text (byte {e.start}: {e.reason})") from None
    if not text.strip():
        raise TaskDataError(f"{path} is empty: expected a JSON array of records or JSON lines")
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        if e.msg != "Extra data":  # a syntax error inside the first value: its position is the real one
            raise TaskDataError(f"{path}: line {e.lineno}, column {e.colno}: {e.msg} (not valid JSON)") from None
        return _json_lines(path, text)
    if isinstance(value, dict):
        return [Record(1, "record 1", value)]
    if not isinstance(value, list):
        raise TaskDataError(f"{path}: expected a JSON array of records or JSON lines, got a {type(value).__name__}")
    if not value:
        raise TaskDataError(f"{path} holds an empty array: expected at least one record")
    return [Record(n, f"record {n}", row) for n, row in enumerate(value, 1)]


def _json_lines(path: Path, text: str) -> list[Record]:
    rows = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                rows.append(Record(n, f"line {n}", json.loads(line)))
            except json.JSONDecodeError as e:
                raise TaskDataError(f"{path}: line {n}, column {e.colno}: {e.msg} (not valid JSON)") from None
    return rows


__all__ = ["Record", "read_json_records"]
