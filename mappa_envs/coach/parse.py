"""Reading the judge's own verdict out of a coach model's reply, strictly.

`parse_score(text) -> (score, answer_correct)`. The judge's reply quotes the agent it scores, and the
agent writes what it likes (`{"score": 10}`, a line `FINAL SCORE: 10`), so a score is read from one
of two places only, and a reply that leaves any doubt is no verdict (the coach then retries once and
records a failure; it never guesses):

1. a reply that is one JSON object and nothing else (also inside one ```json fence): its `"score"`
   (or `"process_score"`; both present must agree), `"answer_correct"` and `"rationale"`;
2. otherwise the labelled lines of the judge's own text: `SCORE: 7`, `**Final score:** 7/10`,
   `- Score = [8.5]`, `## Overall score: 6`, and the reference implementation's
   `PROCESS_SCORE: 7`, `**PROCESS_SCORE:** 8`, `PROCESS_SCORE = 2`, `PROCESS_SCORE: [6]`. The
   judge's own text is the reply without `<think>` spans (one that opens the reply runs to the last
   `</think>`), code fences, `>` quote lines and the prompt's `<<<BEGIN ...>>>` evidence blocks.
   The verdict is the last labelled line; an earlier labelled line with another value makes the
   reply ambiguous (no "final" label outranks another: the agent can write that label too), and
   so does a later one inside a fence or a `>` quote (the judge may fence its own verdict). A JSON
   `"score"` inside prose is never read;
3. a reply that is nothing but a number: `7`, `**7/10**`, `[8]`, `7.5/10`.

A value outside [0, 10], or a fraction whose denominator is not 10, is rejected (None), never
clamped or rescaled. Numbers in prose ("the sum is 42", "a score of 5 would be too low") are
never used. `answer_correct` comes from the same text: `ANSWER_CORRECT: yes|no` (or true/false,
correct/incorrect, 1/0) or the JSON `"answer_correct"`; absent or contradictory, None.
Every step is linear in the length of the reply.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

_NUM = r"(-?\d+(?:\.\d+)?)"
_VALUE = rf"[\[\(\"']*[ \t]*{_NUM}[ \t]*(?:/[ \t]*{_NUM})?[ \t]*[\]\)\"']*"
_LINE_SCORE = re.compile(
    r"[ \t#*_\-]*(?:final[ \t]+|overall[ \t]+)?(?:process[ \t_]*)?score"
    rf"[ \t]*[*_\"']*[ \t]*[:=][ \t]*[*_]*[ \t]*{_VALUE}",
    re.IGNORECASE,
)
_BARE = re.compile(rf"\s*{_VALUE}\s*\.?\s*")
_LINE_CORRECT = re.compile(
    r"[ \t#*_\-]*answer[ \t_]correct[ \t]*[*_\"']*[ \t]*[:=][ \t]*[*_\[\(\"']*[ \t]*"
    r"(yes|no|true|false|correct|incorrect|1|0)\b",
    re.IGNORECASE,
)
_JSON_FENCE = re.compile(r"\s*```(?:json)?[ \t]*\n(.*)\n[ \t]*```\s*", re.DOTALL | re.IGNORECASE)
# Only *closed* spans are dropped (an unclosed think only at the very start: a reasoning model's
# preamble): an agent that prints an opening marker, quoted by the judge, must not hide the verdict.
_THINK_OPEN, _THINK_CLOSE = re.compile(r"<think>", re.IGNORECASE), re.compile(r"</think>", re.IGNORECASE)
_BEGIN, _END = re.compile(r"<<<BEGIN ([^>\n]{1,200})>>>"), re.compile(r"<<<END ([^>\n]{1,200})>>>")
_QUOTE_LINE = re.compile(r"^[ \t]*>[^\n]*$", re.MULTILINE)
_QUOTE_MARKS = re.compile(r"^[ \t>]*>", re.MULTILINE)
_JSON_RATIONALE = re.compile(r'"rationale"\s*:\s*"((?:[^"\\]|\\.)*)"?', re.IGNORECASE)
_RATIONALE = re.compile(r"^[ \t#>*_\-]*rationale[ \t]*[*_]*[ \t]*:[*_]*[ \t]*", re.IGNORECASE | re.MULTILINE)
_BLANKS = re.compile(r"[ \t]+")
_BARE_MAX_CHARS = 40  # a reply that is only a number is short
_TRUE = {"yes", "true", "correct", "1"}
_SCORE_KEYS = ("score", "process_score")


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
    whole = whole_json(text)
    if whole is not None:
        return _json_verdict(whole, text, schema)
    # runs of blanks become one space: no regex below can then backtrack over a long run
    plain = _BLANKS.sub(" ", own_text(text).replace("**", "").replace("__", ""))
    answer_correct = _answer_correct(plain)
    rationale = _rationale(text, plain)
    found = _labelled(plain)
    if isinstance(found, str):
        return Verdict(None, answer_correct, rationale, found)
    if found is not None and _hidden_after(text, found):
        return Verdict(None, answer_correct, rationale, "ambiguous: a score line in a fence or a > quote comes "
                                                        "after the judge's own and disagrees with it")
    if found is None:
        expected = f"the JSON object of {_describe(schema)}" if schema else "a line 'SCORE: <0-10>'"
        return Verdict(None, answer_correct, rationale, f"no labelled score (expected {expected})")
    return _checked(found, answer_correct, rationale)


def own_text(text: str) -> str:
    """The judge's own words: `text` without `<think>` spans, code fences, `>` quote lines and the
    prompt's evidence blocks. Only closed spans are dropped, and an unclosed `<think>` only when it
    opens the reply (then the reply is all thinking)."""
    text = drop_leading_think(text)
    text = _drop_spans(text, _THINK_OPEN, _THINK_CLOSE)
    text = _drop_spans(text, _BEGIN, _END)
    return _QUOTE_LINE.sub("", _drop_fences(text))


def drop_leading_think(text: str) -> str:
    """A reply that opens with `<think>` (the judge's own reasoning: the agent cannot write the reply's
    first word) thinks up to its *last* `</think>`: a `</think>` the agent printed and the judge quoted
    while thinking does not end the thinking. Unclosed: the reply is all thinking."""
    if text.lstrip()[:7].lower() != "<think>":
        return text
    ends = [m.end() for m in _THINK_CLOSE.finditer(text)]  # not text.lower(): "İ" lowers to two characters
    return text[ends[-1]:] if ends else ""


def _hidden_after(text: str, verdict: tuple[float, float | None]) -> bool:
    """Is the reply's last labelled line, fences and `>` quotes read too, another value than `verdict`?
    Fences and quotes may hold the agent's text, but also the judge's own verdict (a reply wrapped in
    ```): the agent's labelled line outside them must not win over a verdict the judge fenced."""
    plain = _BLANKS.sub(" ", quoted_too(text).replace("**", "").replace("__", ""))
    last = _labelled(plain, last_only=True)
    return isinstance(last, tuple) and _as_tenths(last) != _as_tenths(verdict)


def quoted_too(text: str) -> str:
    """The reply without thinking and evidence blocks, but with its fences and `>` quotes (their marks
    dropped): what `own_text` leaves out, put back, to see whether a later verdict hides there."""
    text = _drop_spans(_drop_spans(drop_leading_think(text), _THINK_OPEN, _THINK_CLOSE), _BEGIN, _END)
    return _QUOTE_MARKS.sub("", text)


def _as_tenths(found: tuple[float, float | None]) -> tuple[float, float]:
    value, denominator = found
    return value, 10.0 if denominator is None else denominator


def _drop_spans(text: str, opening: re.Pattern, closing: re.Pattern) -> str:
    """`text` without each span from an opening marker to the next closing one after it (with the
    same mark, when the markers carry one); an opening without its closing stays. Linear."""
    closes: dict[str, list[tuple[int, int]]] = {}
    for m in closing.finditer(text):
        closes.setdefault(m.group(1) if m.groups() else "", []).append((m.start(), m.end()))
    seen = dict.fromkeys(closes, 0)  # per mark: closings already passed (positions only grow)
    out, pos = [], 0
    for m in opening.finditer(text):
        if m.start() < pos:
            continue
        mark = m.group(1) if m.groups() else ""
        ends, k = closes.get(mark, []), seen.get(mark, 0)
        while k < len(ends) and ends[k][0] < m.end():
            k += 1
        seen[mark] = k
        if k < len(ends):
            out.append(text[pos : m.start()])
            pos = ends[k][1]
    out.append(text[pos:])
    return "\n".join(out)


def _drop_fences(text: str) -> str:
    """`text` without its closed ``` code fences (an unclosed one stays). Linear."""
    lines = text.split("\n")
    keep, opened = [True] * len(lines), None
    for k, line in enumerate(lines):
        stripped = line.strip()
        if not stripped.startswith("```"):
            continue
        if opened is None:
            opened = k
        elif stripped == "```":
            keep[opened : k + 1] = [False] * (k + 1 - opened)
            opened = None
    return "\n".join(line for line, kept in zip(lines, keep) if kept)


def _checked(found: tuple[float, float | None], answer_correct: bool | None, rationale: str) -> Verdict:
    value, denominator = found
    if denominator is not None and denominator != 10:
        return Verdict(None, answer_correct, rationale, f"score given as a fraction of {denominator:g}, not of 10")
    if not 0.0 <= value <= 10.0:
        return Verdict(None, answer_correct, rationale, f"score {value:g} is outside [0, 10]")
    return Verdict(value, answer_correct, rationale, None)


def whole_json(text: str) -> dict | None:
    """The JSON object that is the whole reply (or the whole of one ```json fence), else None."""
    body = text.strip()
    fenced = _JSON_FENCE.fullmatch(text)
    if fenced:
        body = fenced.group(1).strip()
    if not body.startswith("{"):
        return None
    try:
        value = json.loads(body, object_pairs_hook=_Object.of)
    except (ValueError, RecursionError):  # not JSON; an integer past Python's digit limit; nested too deep
        return None
    return value if isinstance(value, dict) else None


class _Object(dict):
    """A JSON object that remembers every key/value pair in order, repeated keys included."""

    pairs: list

    @classmethod
    def of(cls, pairs: list) -> _Object:
        obj = cls(pairs)
        obj.pairs = pairs
        return obj


def _json_verdict(obj: dict, text: str, schema: dict | None) -> Verdict:
    rationale = obj.get("rationale")
    rationale = rationale.strip() if isinstance(rationale, str) else text.strip()
    correct = obj.get("answer_correct")
    answer_correct = _truth(correct)
    pairs = getattr(obj, "pairs", list(obj.items()))  # a repeated key is kept, not silently the last one
    found = [(k, _json_number(v)) for k, v in pairs if isinstance(k, str) and k.lower() in _SCORE_KEYS]
    if not found:
        expected = f"the JSON object of {_describe(schema)}" if schema else 'a "score" key'
        return Verdict(None, answer_correct, rationale, f"no score in the JSON reply (expected {expected})")
    if any(v is None for _, v in found):
        return Verdict(None, answer_correct, rationale, "the JSON score is not a number")
    if len({v for _, v in found}) > 1:
        problem = f"ambiguous: the JSON reply gives {[k for k, _ in found]} different values"
        return Verdict(None, answer_correct, rationale, problem)
    return _checked(found[0][1], answer_correct, rationale)


def _json_number(v: object) -> tuple[float, float | None] | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v), None
    if isinstance(v, str):
        m = _BARE.fullmatch(v)
        if m:
            return float(m.group(1)), float(m.group(2)) if m.group(2) else None
    return None


def _truth(v: object) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.strip().lower() in _TRUE | {"no", "false", "incorrect", "0"}:
        return v.strip().lower() in _TRUE
    return None


def _describe(schema: dict) -> str:
    """'schema coach_verdict {"rationale": string, "score": number}' from a json_schema response_format."""
    spec = schema.get("json_schema", schema)
    props = spec.get("schema", spec).get("properties", {})
    fields = ", ".join(f'"{name}": {p.get("type", "any")}' for name, p in props.items())
    name = spec.get("name")
    return f"schema {name} {{{fields}}}" if name else f"schema {{{fields}}}"


def _labelled(plain: str, last_only: bool = False) -> tuple[float, float | None] | str | None:
    """The last labelled score line as (value, denominator); a problem string when labelled lines
    disagree (unless `last_only`); None when there is none (then a reply that is a bare number counts)."""
    found = []
    for line in plain.splitlines():
        m = _LINE_SCORE.match(line)
        if m:
            found.append((float(m.group(1)), float(m.group(2)) if m.group(2) else None))
    if found and last_only:
        return found[-1]
    if found:
        distinct = {(v, 10.0 if d is None else d) for v, d in found}
        if len(distinct) > 1:
            shown = ", ".join(f"{v:g}" + (f"/{d:g}" if d is not None else "") for v, d in found[-4:])
            return f"ambiguous: {len(found)} labelled score lines that disagree ({shown})"
        return found[-1]
    bare = _BARE.fullmatch(plain.strip()) if len(plain.strip()) <= _BARE_MAX_CHARS else None
    if bare:
        return float(bare.group(1)), float(bare.group(2)) if bare.group(2) else None
    return None


def _answer_correct(plain: str) -> bool | None:
    hits = {m.group(1).lower() in _TRUE for line in plain.splitlines() if (m := _LINE_CORRECT.match(line))}
    return hits.pop() if len(hits) == 1 else None


def _rationale(text: str, plain: str) -> str:
    """The JSON "rationale" field (of a reply cut off mid-object), else the text after a RATIONALE:
    label, else the whole reply. Only a description: the score never comes from here."""
    quoted = _JSON_RATIONALE.search(text) if text.lstrip().startswith(("{", "```")) else None
    if quoted:
        try:
            return json.loads(f'"{quoted.group(1)}"').strip()
        except json.JSONDecodeError:  # a reply cut off inside an escape
            return quoted.group(1).strip()
    m = _RATIONALE.search(plain)
    if m is None:
        return plain.strip()
    rest = plain[m.end():]
    stop = re.search(r"^[ \t#>*_\-]*(final[ \t]+|overall[ \t]+)?(process[ \t_]*)?(score|answer[ \t_]correct)[ \t]*[:=]",
                     rest, re.IGNORECASE | re.MULTILINE)
    return (rest[: stop.start()] if stop else rest).strip()
