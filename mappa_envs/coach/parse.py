"""Reading a score out of a coach model's reply, strictly.

`parse_score(text) -> (score, answer_correct)`. A score is taken only from a *labelled* place:

1. a JSON key: `"score": 7` or `"process_score": 7` (anywhere, also inside a truncated or fenced
   JSON object); its `"rationale"` is the rationale;
2. a line that starts with the label: `SCORE: 7`, `**Final score:** 7/10`, `- Score = [8.5]`,
   `## Overall score: 6`, and the reference implementation's `PROCESS_SCORE: 7`,
   `**PROCESS_SCORE:** 8`, `PROCESS_SCORE = 2`, `PROCESS_SCORE: [6]`. When several such lines
   exist the last "final"/"overall" one wins, else the last one (the verdict comes after the
   reasoning);
3. a reply that is nothing but a number: `7`, `**7/10**`, `[8]`, `7.5/10`.

A value outside [0, 10], or a fraction whose denominator is not 10, is rejected (None), never
clamped or rescaled. Numbers in prose ("the sum is 42", "a score of 5 would be too low") are
never used. `answer_correct` comes from `ANSWER_CORRECT: yes|no` (or true/false,
correct/incorrect) or a JSON `"answer_correct": true`; otherwise None.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

_NUM = r"(-?\d+(?:\.\d+)?)"
_VALUE = rf"[\[\(\"']*\s*{_NUM}\s*(?:/\s*{_NUM})?\s*[\]\)\"']*"
_JSON_SCORE = re.compile(rf'"(?:process_)?score"\s*:\s*"?{_NUM}"?', re.IGNORECASE)
_LINE_SCORE = re.compile(
    rf"^[\s#>*_\-]*(final\s+|overall\s+)?(?:process[\s_]*)?score\s*[*_\"']*\s*[:=]\s*[*_]*\s*{_VALUE}",
    re.IGNORECASE | re.MULTILINE,
)
_BARE = re.compile(rf"^\s*{_VALUE}\s*\.?\s*$")
_JSON_CORRECT = re.compile(r'"answer_correct"\s*:\s*"?(true|false|yes|no)"?', re.IGNORECASE)
_LINE_CORRECT = re.compile(
    r"^[\s#>*_\-]*answer[\s_]correct\s*[*_\"']*\s*[:=]\s*[*_\[\(\"']*\s*(yes|no|true|false|correct|incorrect)\b",
    re.IGNORECASE | re.MULTILINE,
)
_JSON_RATIONALE = re.compile(r'"rationale"\s*:\s*"((?:[^"\\]|\\.)*)"?', re.IGNORECASE)
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


def parse_reply(text: str | None, schema: dict | None = None) -> Verdict:
    """The verdict in `text`. `schema`: the `response_format` the coach asked for (structured output);
    a reply without a score then names that schema's fields in `problem`."""
    if not text or not text.strip():
        return Verdict(None, None, "", "empty reply")
    plain = text.replace("**", "").replace("__", "")
    answer_correct = _answer_correct(plain)
    rationale = _rationale(text, plain)
    found = _labelled(plain)
    if found is None:
        expected = f"the JSON object of {_describe(schema)}" if schema else "a line 'SCORE: <0-10>'"
        return Verdict(None, answer_correct, rationale, f"no labelled score (expected {expected})")
    value, denominator = found
    if denominator is not None and denominator != 10:
        return Verdict(None, answer_correct, rationale, f"score given as a fraction of {denominator:g}, not of 10")
    if not 0.0 <= value <= 10.0:
        return Verdict(None, answer_correct, rationale, f"score {value:g} is outside [0, 10]")
    return Verdict(value, answer_correct, rationale, None)


def _describe(schema: dict) -> str:
    """'schema coach_verdict {"rationale": string, "score": number}' from a json_schema response_format."""
    spec = schema.get("json_schema", schema)
    props = spec.get("schema", spec).get("properties", {})
    fields = ", ".join(f'"{name}": {p.get("type", "any")}' for name, p in props.items())
    name = spec.get("name")
    return f"schema {name} {{{fields}}}" if name else f"schema {{{fields}}}"


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


def _rationale(text: str, plain: str) -> str:
    """The JSON "rationale" field, else the text after a RATIONALE: label, else the whole reply."""
    quoted = _JSON_RATIONALE.search(text)
    if quoted:
        try:
            return json.loads(f'"{quoted.group(1)}"').strip()
        except json.JSONDecodeError:  # a reply cut off inside an escape
            return quoted.group(1).strip()
    m = _RATIONALE.search(plain)
    if m is None:
        return plain.strip()
    rest = plain[m.end():]
    stop = re.search(r"^[\s#>*_\-]*(final\s+|overall\s+)?(process[\s_]*)?(score|answer[\s_]correct)\s*[:=]", rest,
                     re.IGNORECASE | re.MULTILINE)
    return (rest[: stop.start()] if stop else rest).strip()
