"""Rule-based answer checking: pull the final answer out of model text and compare it with the truth.

Correctness is decided here, never by the LLM coach. Numbers are compared exactly (integers with
leading zeros, decimals, fractions), after dropping currency, percent, degree and unit marks around
them (`\\$60`, `60\\%`, `60^{\\circ}`, `60\\text{ dollars}` all read 60); anything else goes to
`math-verify` (symbolic equivalence).
"""
from __future__ import annotations

import re
from fractions import Fraction

from mappa_envs.core.tools import strip_think
from mappa_envs.mathchat.symbolic import symbolic_match

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*")
_FINAL = re.compile(
    r"(?:final\s+answer\s*(?:is)?\s*[:=]?|answer\s*(?:is|[:=]))\s*\**\s*\$?([^\n$*]+?)\$?\**\s*(?:\.|$)",
    re.IGNORECASE | re.MULTILINE,
)
_WRAPPERS = re.compile(r"\\(?:text|textbf|mathrm|mathbf|displaystyle)\s*\{([^{}]*)\}")
# Units and currency around a number: "\$60", "60\%", "60^\circ", "60^{\circ}", "60\text{ dollars}".
_UNIT_TEXT = re.compile(r"(?<=\d)\s*\\(?:text|textrm|mbox|mathrm)\s*\{\s*[A-Za-z][A-Za-z .]*\}\s*$")
_DEGREES = re.compile(r"\s*(?:\^\s*\{?\s*\\circ\s*\}?|°)")
_UNIT_MARKS = ("\\$", "\\%", "%", "\\euro", "€", "£")


def _boxed_contents(text: str) -> list[str]:
    """Contents of every \\boxed{...} / \\fbox{...} (balanced braces), and of `\\boxed 5`."""
    found = []
    for m in _BOXED.finditer(text):
        i = m.end()
        if i < len(text) and text[i] == "{":
            depth, j = 0, i
            while j < len(text):
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                if depth == 0:
                    found.append(text[i + 1 : j])
                    break
                j += 1
        else:
            token = re.match(r"[^\s$]+", text[i:])
            if token:
                found.append(token.group(0))
    return found


def extract_answer(text: str) -> str | None:
    """The final answer in `text`: the last \\boxed{} (or \\fbox{}), else a "Final answer: X" line.

    Text inside `<think>` is ignored. Returns the answer as written (normalised by `answers_match`),
    or None when the text states no answer.
    """
    if not isinstance(text, str):
        return None
    text = strip_think(text)
    boxed = [b for b in _boxed_contents(text) if b.strip()]
    if boxed:
        return boxed[-1].strip()
    lines = _FINAL.findall(text)
    return lines[-1].strip() if lines else None


def normalize_answer(answer: object) -> str:
    """Strip LaTeX wrappers, currency, units, spaces and thousands separators: '\\text{ 033 }' -> '033',
    '\\$60' -> '60', '60^{\\circ}' -> '60', '60\\text{ dollars}' -> '60'."""
    s = _UNIT_TEXT.sub("", str(answer).strip())
    s = _DEGREES.sub("", s)
    for mark in _UNIT_MARKS:
        s = s.replace(mark, "")
    for _ in range(3):
        s = _WRAPPERS.sub(r"\1", s)
    s = s.replace("$", "").replace("\\!", "").replace("\\,", "").replace("{,}", "").strip()
    s = re.sub(r"^\((?:[A-E])\)\s*", "", s)  # multiple-choice label "(B) 12"
    s = re.sub(r"(?<=\d),(?=\d{3}\b)", "", s)
    return s.rstrip(".").strip()


def _as_number(s: str) -> Fraction | None:
    s = s.replace(" ", "")
    m = re.fullmatch(r"\\[dt]?frac\{(-?\d+)\}\{(-?\d+)\}", s) or re.fullmatch(r"(-?\d+)/(-?\d+)", s)
    try:
        if m:
            return Fraction(int(m.group(1)), int(m.group(2)))
        if re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)(e[-+]?\d+)?", s, re.IGNORECASE):
            return Fraction(s)
    except (ValueError, ZeroDivisionError):
        return None
    return None


def answers_match(pred: object, gold: object) -> bool:
    """True when `pred` equals `gold` as a number or, failing that, symbolically (math-verify)."""
    if pred is None or gold is None:
        return False
    p, g = normalize_answer(pred), normalize_answer(gold)
    if not p:
        return False
    if p == g:
        return True
    pn, gn = _as_number(p), _as_number(g)
    if pn is not None and gn is not None:
        return pn == gn
    return symbolic_match(p, g)  # in a child process: a hostile answer can hang sympy for hours
