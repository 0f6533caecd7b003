"""`read_csv_bounded`: pandas.read_csv for CSV files an agent wrote, with the shapes that stall it refused first.

The byte cap (`EpisodeLimits.max_read_bytes`) alone does not bound pandas' time: 200 kB of duplicate
column names cost it minutes (it renames duplicates with a quadratic search), a 700k-column header or a
first data row with 700k fields (turned into a 700k-level index) as long. Before any parsing, in time
linear in the bytes, a file is refused (`CSVShapeError`, a ValueError with a one-line reason) when:

- its header line is longer than `MAX_HEADER_BYTES`, or spans lines (an unclosed quote), or is blank;
- its header names more than `MAX_COLUMNS` columns, or one name twice;
- any line holds more than `MAX_COLUMNS` delimiters.

pandas then parses with `index_col=False` (no index inferred from a row longer than the header).
"""
from __future__ import annotations

import csv
import io

import numpy as np
import pandas as pd

MAX_COLUMNS = 10_000  # a one-hot feature table fits; 10k distinct columns parse in well under a second
MAX_HEADER_BYTES = 1 << 20


class CSVShapeError(ValueError):
    """A CSV file whose shape would stall the parser; the message says what, on one line."""


def check_csv_shape(raw: bytes, max_columns: int = MAX_COLUMNS, max_header_bytes: int = MAX_HEADER_BYTES) -> bytes:
    """`raw` without leading blank lines (what pandas would skip), or CSVShapeError."""
    raw = raw.lstrip(b"\r\n")
    end = raw.find(b"\n", 0, max_header_bytes + 1)
    if end < 0:
        if len(raw) > max_header_bytes:
            raise CSVShapeError(f"its header line is longer than {max_header_bytes} bytes")
        end = len(raw)
    header = raw[:end].rstrip(b"\r")
    if not header.strip():
        raise CSVShapeError("its first line is blank: the header must come first")
    if header.count(b'"') % 2:
        raise CSVShapeError("its header has an unclosed quote (a column name spanning lines)")
    if header.count(b",") >= max_columns:
        raise CSVShapeError(f"its header has more than {max_columns} columns")
    names = next(csv.reader(io.StringIO(header.decode("utf-8", errors="replace").lstrip("\ufeff"))), [])
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise CSVShapeError(f"its header names the column {name[:80]!r} twice: give every column its own name")
        seen.add(name)
    _check_line_widths(raw, max_columns)
    return raw


def _check_line_widths(raw: bytes, max_columns: int) -> None:
    """No line with more than `max_columns` delimiters. Only lines longer than that many bytes can have
    them, so only those are counted (newline positions found by numpy: linear, in C)."""
    if len(raw) <= max_columns:
        return
    ends = np.flatnonzero(np.frombuffer(raw, dtype=np.uint8) == 10)
    starts = np.concatenate(([0], ends + 1))
    stops = np.concatenate((ends, [len(raw)]))
    for i in np.flatnonzero(stops - starts > max_columns):
        if raw.count(b",", int(starts[i]), int(stops[i])) >= max_columns:
            raise CSVShapeError(f"line {i + 1} has more than {max_columns} fields")


def read_csv_bounded(raw: bytes, what: str, **kwargs) -> pd.DataFrame:
    """`pd.read_csv` of `raw` after `check_csv_shape`; every failure is a ValueError naming `what`."""
    try:
        raw = check_csv_shape(raw)
        return pd.read_csv(io.BytesIO(raw), index_col=False, **kwargs)
    except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError, csv.Error) as e:
        why = f"{type(e).__name__}: {' '.join(str(e).split())[:200]}"
        raise ValueError(f"{what} is not a readable CSV file ({why})") from None


__all__ = ["MAX_COLUMNS", "MAX_HEADER_BYTES", "CSVShapeError", "check_csv_shape", "read_csv_bounded"]
