"""Reading a score out of a coach model's reply, strictly.

`parse_score(text) -> (score, answer_correct)`. A score is taken only from a *labelled* place:

1. a JSON key: `"score": 7` (anywhere, also inside a truncated or fenced JSON object);
2. a line that starts with the label: `SCORE: 7`, `**Final score:** 7/10`, `- Score = [8.5]`,
   `## Overall score: 6`. When several such lines exist the last "final"/"overall" one wins,
   else the last one (the verdict comes after the reasoning);
3. a reply that is nothing but a number: `7`, `**7/10**`, `[8]`.

A value outside [0, 10], or a fraction whose denominator is not 10, is rejected (None), never
clamped or rescaled. Numbers in prose ("the sum is 42", "a score of 5 would be too low") are
never used. `answer_correct` comes from `ANSWER_CORRECT: yes|no` (or true/false,
correct/incorrect) or a JSON `"answer_correct": true`; otherwise None.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_NUM = r"(-?\d+(?:\.\d+)?)"
_VALUE = rf"[\[\(\"']*\s*{_NUM}\s*(?:/\s*{_NUM})?\s*[\]\)\"']*"
_JSON_SCORE = re.compile(rf'"score"\s*:\s*"?{_NUM}"?', re.IGNORECASE)
_LINE_SCORE = re.compile(
    rf"^[\s#>*_\-]*(final\s+|overall\s+)?score\s*[*_\"']*\s*[:=]\s*[*_]*\s*{_VALUE}",
    re.IGNORECASE | re.MULTILINE,
)
_BARE = re.compile(rf"^\s*{_VALUE}\s*\.?\s*$")
_JSON_CORRECT = re.compile(r'"answer_correct"\s*:\s*"?(true|false|yes|no)"?', re.IGNORECASE)
_LINE_CORRECT = re.compile(
    r"^[\s#>*_\-]*answer[\s_]correct\s*[*_\"']*\s*[:=]\s*[*_\[\(\"']*\s*(yes|no|true|false|correct|incorrect)\b",
    re.IGNORECASE | re.MULTILINE,
)
_RATIONALE = re.compile(r"^[\s#>*_\-]*rationale\s*[*_]*\s*:[*_]*\s*", re.IGNORECASE | re.MULTILINE)
_TRUE = {"yes", "true", "correct"}


@dataclass
class Verdict:
    score: float | None
    answer_correct: bool | None
    rationale: str
    problem: str | None  # why no score could be read, for the error message and the format retry


def parse_score(text: str | None) -> tuple[float | None, bool | None]:
    """(score in [0, 10] or None, answer_correct or None); see the module docstring for the rules."""
    verdict = parse_reply(text)
    return verdict.score, verdict.answer_correct


def parse_reply(text: str | None) -> Verdict:
    if not text or not text.strip():
        return Verdict(None, None, "", "empty reply")
    plain = text.replace("**", "").replace("__", "")
    answer_correct = _answer_correct(plain)
    rationale = _rationale(plain)
    found = _labelled(plain)
    if found is None:
        return Verdict(None, answer_correct, rationale, "no labelled score (expected a line 'SCORE: <0-10>')")
    value, denominator = found
    if denominator is not None and denominator != 10:
        return Verdict(None, answer_correct, rationale, f"score given as a fraction of {denominator:g}, not of 10")
    if not 0.0 <= value <= 10.0:
        return Verdict(None, answer_correct, rationale, f"score {value:g} is outside [0, 10]")
    return Verdict(value, answer_correct, rationale, None)


def _labelled(plain: str) -> tuple[float, float | None] | None:
    json_hits = _JSON_SCORE.findall(plain)
    if json_hits:
        return float(json_hits[-1]), None
    lines = list(_LINE_SCORE.finditer(plain))
    if lines:
        final = [m for m in lines if m.group(1)]
        m = (final or lines)[-1]
        return float(m.group(2)), float(m.group(3)) if m.group(3) else None
    bare = _BARE.match(plain)
    if bare:
        return float(bare.group(1)), float(bare.group(2)) if bare.group(2) else None
    return None


def _answer_correct(plain: str) -> bool | None:
    hits = _JSON_CORRECT.findall(plain) or _LINE_CORRECT.findall(plain)
    return hits[-1].lower() in _TRUE if hits else None


def _rationale(plain: str) -> str:
    m = _RATIONALE.search(plain)
    if m is None:
        return plain.strip()
    rest = plain[m.end():]
    stop = re.search(r"^[\s#>*_\-]*(final\s+|overall\s+)?(score|answer[\s_]correct)\s*[:=]", rest, re.IGNORECASE | re.MULTILINE)
    return (rest[: stop.start()] if stop else rest).strip()
