"""safe_text / safe_name: every string that leaves a sandbox is valid UTF-8 with control sequences escaped."""
from __future__ import annotations

import pytest

from mappa_envs.sandbox import ExecResult, raw_name, safe_name, safe_text

pytestmark = pytest.mark.unit

HOSTILE = [
    ("ansi colour", "\x1b[31mred\x1b[0m", "\\x1b[31mred\\x1b[0m"),
    ("carriage return overwrite", "score: 0\rscore: 10", "score: 0\\rscore: 10"),
    ("nul and backspace", "a\x00b\x08", "a\\x00b\\x08"),
    ("c1 control (CSI)", "x\x9b31m", "x\\u009b31m"),
    ("bidi override", "abc\u202edcba", "abc\\u202edcba"),
    ("line separator", "a\u2028b", "a\\u2028b"),
    ("lone surrogate", "a\ud800b", "a\\ud800b"),
    ("del", "a\x7f", "a\\x7f"),
]


@pytest.mark.parametrize("name,text,expected", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_safe_text_escapes_control_sequences(name, text, expected):
    out = safe_text(text)
    assert out == expected
    out.encode("utf-8")  # valid UTF-8: no lone surrogate survives
    assert safe_text(out) == out  # idempotent


def test_safe_text_keeps_ordinary_text_and_reads_bytes_as_utf8():
    text = "Traceback:\n\tline 1 – ümlaut ✓ 数学 \\ backslash"
    assert safe_text(text) is text
    assert safe_text(text.encode()) == text
    assert safe_text(b"ok \xff\xfe end") == "ok \\xff\\xfe end"  # bytes that are not UTF-8 show as their values


def test_safe_text_refuses_other_types():
    with pytest.raises(TypeError, match="str or bytes"):
        safe_text(42)


RAW_NAMES = [b"plain.csv", b"bad\xff.csv", b"line\nbreak.csv", b"tab\tname", b"esc\x1b[2J.csv",
             b"back\\slash", b"\\x41", "ümlaut.csv".encode(), "rtl\u202e.csv".encode(), b"\xed\xa0\x80"]


@pytest.mark.parametrize("raw", RAW_NAMES, ids=[repr(r) for r in RAW_NAMES])
def test_safe_name_round_trips_any_raw_name(raw):
    shown = safe_name(raw)
    shown.encode("utf-8")
    assert shown.isprintable()  # no newline, tab, control or bidi character is left
    assert raw_name(shown) == raw


def test_safe_name_leaves_ordinary_names_alone_and_is_injective():
    assert safe_name(b"data/train.csv") == "data/train.csv"
    shown = {safe_name(r) for r in RAW_NAMES}
    assert len(shown) == len(RAW_NAMES)  # a literal backslash-x never collides with an escaped byte


def test_raw_name_refuses_a_stray_backslash():
    with pytest.raises(ValueError, match="not an escape"):
        raw_name("a\\q.csv")


def test_exec_result_is_sanitized_on_construction():
    r = ExecResult(stdout="\x1b[2Jwiped", stderr="a\ud800", error="bad\rline")
    assert (r.stdout, r.stderr, r.error) == ("\\x1b[2Jwiped", "a\\ud800", "bad\\rline")
