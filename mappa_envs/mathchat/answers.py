"""Rule-based answer checking: pull the final answer out of model text and compare it with the truth.

Correctness is decided here, never by the LLM coach. The rules, and why:

- A reference that is a number (`31`, `142.0`, `\\frac{7}{8}`, `0.25`) is matched only by a number
  *written out*, compared exactly after dropping currency, percent, degree and unit marks and
  thousands separators (`031`, `31.0`, `1,000`, `\\$31`, `31\\%`, `31^\\circ`, `31\\text{ dollars}`).
  An expression to evaluate never matches it: `\\boxed{4 \\cdot 7 + 3}` for "What is 4 * 7 + 3?"
  would otherwise be right without any work (the team boxes the question). An integer reference
  also refuses fractions and powers (`62/2`, `10^{3}`, `1e3`); a non-integer one takes a fraction
  or a decimal (`\\frac{7}{8}`, `7/8`, `0.875`).
- Any other reference (`2\\sqrt{2}`, `x^2+2x+1`) keeps symbolic equivalence among closed forms
  (math-verify, in a child process: `symbolic.py`). A reference that math-verify reads as a number
  although the rules above do not (`31\\,\\text{m}`, `31 cm`, `(31)`, `{31}`) is still a number: the
  symbolic match then counts only when the answer is a number written out (`31`, `31 cm`).
- An answer that restates the problem is not its answer (`restates_problem`): "Simplify
  $\\frac{84}{144}$" is not answered by `\\frac{84}{144}`, nor "Simplify $\\sqrt{8}$" by `\\sqrt{8}`,
  nor "Express $0.875$ as a common fraction" by `0.875`, although each equals its reference; nor by the
  same expression respelled or wrapped (`\\dfrac{84}{144}`, `84/144`, `0.8750`, `\\sqrt8`, `x = \\sqrt{8}`),
  nor by anything holding such a span verbatim (`\\sqrt{8}\\cdot\\frac{2}{2}`, `\\sqrt{8}+1-1`). Not
  caught: a rewrite inside the span that needs no maths either (`\\sqrt{08}`, `8^{1/2}`). The env
  applies it with `answers_match` (`MathChatScenario`); the reference's own written form always counts.
- Nothing an action controls runs unbounded here, in the trainer's process: answers longer than
  `MAX_ANSWER_CHARS` never match, numbers are parsed from bounded digit strings and exponents
  (no `Fraction("1e99999999999")`, which computes 10**99999999999 holding the GIL), and
  extraction is linear in the length of the text (no backtracking regex over the whole action).
"""
from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction

from mappa_envs.core.tools import strip_think
from mappa_envs.mathchat.symbolic import symbolic_check

MAX_ANSWER_CHARS = 1_000  # longer than any real answer; a longer one is not a match
MAX_DIGITS = 200  # digits in one number; 10**200 is instant, 10**99999999999 is not
MAX_EXPONENT = 400  # |e| in scientific notation

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")
_BRACE = re.compile(r"[{}]")
_TOKEN = re.compile(r"[^\s$]+")
# "Final answer: X" / "The answer is X": the label, then the value up to the end of its line
_LABEL = re.compile(r"final\s+answer\s*(?:is)?\s*[:=]?|answer\s*(?:is|[:=])", re.IGNORECASE)
_LEAD = re.compile(r"\s*\**\s*\$?")
_STOP = re.compile(r"[\n$*]")
_CUT = re.compile(r"\.(?:\s|$)")  # a sentence end ("3.5" is no cut)
_TAIL = re.compile(r"\$?\**[^\S\n]*(?:\.|\n|$)")
_NON_SPACE = re.compile(r"\S")

_WRAPPERS = re.compile(r"\\(?:text|textbf|mathrm|mathbf|displaystyle)\s*\{([^{}]*)\}")
# Units and currency around a number: "\$60", "60\%", "60^\circ", "60^{\circ}", "60\text{ dollars}".
_UNIT_TEXT = re.compile(r"(?<=\d)\s*\\(?:text|textrm|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}\s*$")
_DEGREES = re.compile(r"(?<!\s)\s*(?:\^\s*\{?\s*\\circ\s*\}?|°)")
_LATEX_SPACE = re.compile(r"\\(?:[ ;:]|q?quad\b)|~")  # "\textbf{(C)}\ 142", "31~\text{cm}"
_UNIT_MARKS = ("\\$", "\\%", "%", "\\euro", "€", "£")
# a unit word after a written-out number, its LaTeX unwrapped: "31 cm", "31\\,m^2", "31 square units"
_UNIT_WORD = re.compile(r"(?<=\d)\s*(?:\\[,;:! ]\s*)*[A-Za-z][A-Za-z ]{0,40}(?:\^\{?[23]\}?)?$")

# number literals (spaces already removed); digit counts are checked after the match
_ASSIGNED = re.compile(r"[A-Za-z](?:_\{?\w+\}?)?=")  # "x=31", "n_0=31": the value is what counts
_INT = re.compile(r"[-+]?\d+")
_DEC = re.compile(r"[-+]?(?:\d+\.\d*|\.\d+)")
_SCI = re.compile(r"([-+]?(?:\d+\.?\d*|\.\d+))[eE]([-+]?\d+)")
_FRAC = re.compile(r"([-+]?)\\[dt]?frac(?:\{([-+]?\d+)\}\{([-+]?\d+)\}|(\d)(\d))")
_SLASH = re.compile(r"([-+]?\d+)/([-+]?\d+)")


@dataclass(frozen=True)
class Number:
    """A number literal: its exact value and how it was written ("int", "dec", "sci" or "frac")."""

    value: Fraction
    kind: str


def _boxed_answer(text: str) -> str | None:
    """The contents of the last non-empty \\boxed{...} / \\fbox{...} (balanced braces), or `\\boxed 5`.

    One pass pairs every brace, so nested or unclosed boxes cost O(len(text)), not O(len^2)."""
    starts = list(_BOXED.finditer(text))
    if not starts:
        return None
    close, stack = {}, []
    for m in _BRACE.finditer(text):
        if m.group() == "{":
            stack.append(m.start())
        elif stack:
            close[stack.pop()] = m.start()
    for m in reversed(starts):
        i = m.end()
        if i < len(text) and text[i] == "{":
            j = close.get(i)
            if j is not None and _NON_SPACE.search(text, i + 1, j):
                return text[i + 1 : j].strip()
        else:
            token = _TOKEN.match(text, i)
            if token:
                return token.group()
    return None


def _final_line_answer(text: str) -> str | None:
    """The value of the last "Final answer: X" / "the answer is X" label.

    A label's value runs to the end of its line, cut at the first sentence end, or stops at a `$`
    or `*` after which only `$`, `*`, spaces and a full stop may follow. It never reaches past the
    next label, so each character is read a bounded number of times."""
    labels = list(_LABEL.finditer(text))
    found = None
    for k, m in enumerate(labels):
        end = labels[k + 1].start() if k + 1 < len(labels) else len(text)
        p = _LEAD.match(text, m.end(), end).end()
        stop_m = _STOP.search(text, p, end)
        stop = stop_m.start() if stop_m else end
        cut = _CUT.search(text, p, stop + 1 if stop < len(text) else stop)
        if cut and cut.start() < stop:
            value = text[p : cut.start()]
        elif stop < end or end == len(text):
            if not _TAIL.match(text, stop):
                continue
            value = text[p:stop]
        else:  # runs into the next label without ending: not a stated answer
            continue
        if value.strip():
            found = value.strip()
    return found


def extract_answer(text: str) -> str | None:
    """The final answer in `text`: the last \\boxed{} (or \\fbox{}), else a "Final answer: X" line.

    Text inside `<think>` is ignored. Returns the answer as written (normalised by `answers_match`),
    or None when the text states no answer. Linear in len(text).
    """
    if not isinstance(text, str):
        return None
    text = strip_think(text)
    return _boxed_answer(text) or _final_line_answer(text)


def normalize_answer(answer: object) -> str:
    """Strip LaTeX wrappers, currency, units, spaces and thousands separators: '\\text{ 033 }' -> '033',
    '\\$60' -> '60', '60^{\\circ}' -> '60', '60\\text{ dollars}' -> '60'."""
    s = _UNIT_TEXT.sub("", _LATEX_SPACE.sub(" ", str(answer)).strip())
    s = _DEGREES.sub("", s)
    for mark in _UNIT_MARKS:
        s = s.replace(mark, "")
    for _ in range(3):
        s = _WRAPPERS.sub(r"\1", s)
    s = s.replace("$", "").replace("\\!", "").replace("\\,", "").replace("{,}", "").strip()
    s = re.sub(r"^\((?:[A-E])\)\s*", "", s)  # multiple-choice label "(B) 12"
    s = re.sub(r"(?<=\d),(?=\d{3}\b)", "", s)
    return s.rstrip(".").strip()


def parse_number(s: str) -> Number | None:
    """`s` (normalised) as a number literal, or None: an integer, a decimal, scientific notation
    or a fraction of integers, each with at most MAX_DIGITS digits and |exponent| <= MAX_EXPONENT.
    Anything else (an expression, a power, a huge literal) is None. Cheap whatever `s` is."""
    s = s.replace(" ", "")
    if len(s) > 2 * MAX_DIGITS + 20:
        return None
    s = _ASSIGNED.sub("", s, count=1) if _ASSIGNED.match(s) else s
    if _INT.fullmatch(s) and _digits(s) <= MAX_DIGITS:
        return Number(Fraction(int(s)), "int")
    if _DEC.fullmatch(s) and _digits(s) <= MAX_DIGITS:
        return Number(Fraction(s), "dec")  # digits only, no exponent: exact and cheap
    m = _SCI.fullmatch(s)
    if m and _digits(m.group(1)) <= MAX_DIGITS and len(m.group(2).lstrip("+-")) <= 4 \
            and abs(int(m.group(2))) <= MAX_EXPONENT:
        return Number(Fraction(m.group(1)) * Fraction(10) ** int(m.group(2)), "sci")
    parts = _fraction_parts(s)
    return _fraction(*parts) if parts else None


def _fraction_parts(s: str) -> tuple[str, str, bool] | None:
    """Numerator, denominator and sign of `s` written as `\\frac{a}{b}`, `\\frac ab` or `a/b`, as written."""
    m = _FRAC.fullmatch(s)
    if m:
        num, den = (m.group(2), m.group(3)) if m.group(2) is not None else (m.group(4), m.group(5))
        return num, den, m.group(1) == "-"
    m = _SLASH.fullmatch(s)
    return (m.group(1), m.group(2), False) if m else None


def _digits(s: str) -> int:
    return sum(c.isdigit() for c in s)


def _fraction(num: str, den: str, negate: bool = False) -> Number | None:
    if _digits(num) > MAX_DIGITS or _digits(den) > MAX_DIGITS or int(den) == 0:
        return None
    value = Fraction(int(num), int(den))
    return Number(-value if negate else value, "frac")


# the problem's math: $...$, $$...$$, \\(...\\), \\[...\\] spans, and its words (plain-text problems)
_N = MAX_ANSWER_CHARS
_MATH_SPAN = re.compile(rf"\$\$?([^$]{{1,{_N}}})\$\$?|\\\((.{{1,{_N}}}?)\\\)|\\\[(.{{1,{_N}}}?)\\\]", re.DOTALL)
_WORD = re.compile(rf"[^\s$]{{1,{_N}}}")
_SPACES = re.compile(r"\s+")


_FRAC_MACRO = re.compile(r"\\[dt]frac(?![A-Za-z])")
_BARE_SQRT = re.compile(r"\\sqrt([0-9A-Za-z])")  # "\\sqrt8": the one-character argument of \\sqrt{8}


def _compact(text: str) -> str:
    return _SPACES.sub("", normalize_answer(text))


def _spelling(text: str) -> str:
    """One spelling of `text` for comparing restatements: compact, `\\dfrac`/`\\tfrac` as `\\frac`,
    `\\sqrt8` as `\\sqrt{8}`; a fraction of integers as its literal numerator and denominator
    (`84/144` = `\\dfrac{84}{144}`, not reduced), a decimal as its value (`.875` = `0.8750`)."""
    s = _respelled(_compact(text))
    number = parse_number(s)
    parts = _fraction_parts(s)
    if number is None or number.kind not in ("frac", "dec") or (number.kind == "frac" and parts is None):
        return s
    if number.kind == "dec":
        return f"dec:{number.value}"
    num, den, negate = parts
    return f"frac:{-int(num) if negate else int(num)}/{int(den)}"


def _respelled(s: str) -> str:
    return _BARE_SQRT.sub(r"\\sqrt{\1}", _FRAC_MACRO.sub(r"\\frac", s))


_COMPARES = re.compile(r"[<>!]=|=[<>]|\\(?:le|ge|ne)")  # an inequality: its sides are not one value
_SIZED = re.compile(r"\\(?:left|right|big|Big|bigg|Bigg)(?![A-Za-z])")
_PADDED = re.compile(r"(?:[+-]0|(?:\\cdot|\\times|\*)1|\^\{?1\}?)(?![\d.{])$|^(?:0\+|1(?:\\cdot|\\times|\*))")


def _unwrapped(s: str) -> str:
    """`s` without what changes no value and needs no maths, which the symbolic match ignores: an
    assignment or equation's left sides (`x=`, `A=A`: the last side counts), `\\left`/`\\right`, braces or
    brackets around the whole, and padding by 0 or 1 at either end (`+0`, `\\cdot1`, `^{1}`, `0+`, `1\\cdot`)."""
    s = _SIZED.sub("", s)
    for _ in range(len(s)):  # each pass removes something, or stops
        before = s
        if "=" in s and not _COMPARES.search(s):
            s = s.rsplit("=", 1)[1] or s
        s = _PADDED.sub("", s) or s
        if len(s) > 1 and (s[0], s[-1]) in (("{", "}"), ("(", ")"), ("[", "]")) and _closes_at_end(s):
            s = s[1:-1]
        if s == before:
            return s
    return s


def _closes_at_end(s: str) -> bool:
    """Whether the bracket opening `s` is the one its last character closes."""
    depth = 0
    for i, c in enumerate(s):
        depth += (c in "{([") - (c in "})]")
        if depth == 0:
            return i == len(s) - 1
    return False


def restates_problem(pred: object, problem: str, gold: object) -> bool:
    """Does `pred` restate the question rather than answer it, whatever it equals? It is not an integer nor
    the reference as written, and either it is one of the problem's own expressions (a math span or a
    word of it, in one spelling, its wrappers dropped: `x = \\frac{84}{144}` for "Simplify
    $\\frac{84}{144}$"), or it holds verbatim a math span of the problem that already equals the reference
    (`\\sqrt{8}\\cdot\\frac{2}{2}` for "Simplify $\\sqrt{8}$": the question with padding around it)."""
    if pred is None or len(str(pred)) > MAX_ANSWER_CHARS:
        return False
    p = _compact(str(pred))
    if not p or p == _compact(str(gold)):
        return False
    number = parse_number(p)
    if number is not None and number.value.denominator == 1:
        return False  # an integer is written out, not restated: "how many of 1..31" may well be 31
    spelled = _spelling(_unwrapped(p))
    if spelled == _written(str(gold)):
        return False
    held = _respelled(p)
    return spelled in _problem_pieces(problem) or any(span in held for span in _answer_spans(problem, str(gold)))


@functools.lru_cache(maxsize=4096)
def _problem_pieces(problem: str) -> frozenset[str]:
    """The problem's math spans and the words of its text (outside them: a span's side of an equation is
    no word), each in one spelling (`_spelling`): read once per problem."""
    spans = _math_spans(problem)
    words = (m.group().rstrip(".,;:?!") for m in _WORD.finditer(_MATH_SPAN.sub(" ", problem)))
    return frozenset(_spelling(piece) for piece in (*spans, *words) if piece)


def _math_spans(problem: str) -> list[str]:
    """The text inside the problem's $...$, $$...$$, \\(...\\) and \\[...\\] spans."""
    return [next(g for g in m.groups() if g is not None) for m in _MATH_SPAN.finditer(problem)]


def _written(gold: str) -> str:
    """The reference as written, its wrappers dropped: `\\left[-1,3\\right)` is written as `[-1, 3)`."""
    return _spelling(_unwrapped(_compact(gold)))


@functools.lru_cache(maxsize=4096)
def _answer_spans(problem: str, gold: str) -> tuple[str, ...]:
    """The problem's math spans (compact, respelled) that already equal the reference without being written
    as it or being integers: what a "Simplify" or "Express" question hands over. Once per problem."""
    spans = {_respelled(_compact(span)) for span in _math_spans(problem)}
    written = _written(gold)
    return tuple(span for span in sorted(spans) if span and _spelling(_unwrapped(span)) != written
                 and not ((n := parse_number(span)) is not None and n.value.denominator == 1)
                 and answers_match(span, gold))


def answers_match(pred: object, gold: object) -> bool:
    """True when `pred` states the answer `gold`; see the module docstring for the rules."""
    if pred is None or gold is None:
        return False
    p, g = str(pred), str(gold)
    if len(p) > MAX_ANSWER_CHARS or len(g) > MAX_ANSWER_CHARS:
        return False
    p, g = normalize_answer(p), normalize_answer(g)
    if not p:
        return False
    reference = parse_number(g)
    if reference is not None:  # a number is answered by a number, never by an expression that evaluates to it
        stated = parse_number(p)
        if stated is None:
            return False
        if reference.value.denominator == 1 and stated.kind not in ("int", "dec"):
            return False  # an integer is written out: not 62/2, \frac{62}{2} or 3.1e1
        return stated.value == reference.value
    if p == g:
        return True
    matched, reference_kind = symbolic_check(p, g)  # in a child process: sympy can hang for hours
    if matched and reference_kind:  # a number after all (`31\\,\\text{m}`, `(31)`): written out, as above
        stated = parse_number(p) or parse_number(_UNIT_WORD.sub("", p))
        return stated is not None and (reference_kind != "int" or stated.kind in ("int", "dec"))
    return matched
