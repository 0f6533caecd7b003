"""Answer extraction and matching, on hand-written cases and the real AIME/AMC answer sets."""
import json
import re

import pytest

from mappa_envs.mathchat import answers_match, extract_answer
from mappa_envs.mathchat.answers import normalize_answer
from tests.bench_data import BENCH


@pytest.mark.parametrize("text, expected", [
    ("so the answer is \\boxed{033}", "033"),
    ("\\boxed{\\dfrac{3}{4}}", "\\dfrac{3}{4}"),
    ("first \\boxed{1} then \\boxed{2}", "2"),
    ("<think>maybe \\boxed{5}</think> I am sure: \\boxed{6}", "6"),
    ("<think>unclosed \\boxed{5}", None),
    ("\\boxed{\\frac{1}{\\sqrt{2}}}", "\\frac{1}{\\sqrt{2}}"),
    ("\\fbox{12}", "12"),
    ("\\boxed 7", "7"),
    ("**Final Answer:** 142", "142"),
    ("The answer is 7.", "7"),
    ("no answer here", None),
    ("", None),
])
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_extract_answer_rejects_non_text():
    assert extract_answer(None) is None
    assert extract_answer(42) is None


@pytest.mark.parametrize("pred, gold", [
    ("033", "33"), ("33", "033"), ("142", "142.0"), ("0.5", "\\frac{1}{2}"), ("\\dfrac{3}{4}", "0.75"),
    ("3/4", "\\frac{3}{4}"), ("\\text{ 12 }", "12"), ("(B) 12", "12"), ("1,000", "1000"), ("$-4$", "-4.0"),
    ("2\\sqrt{2}", "\\sqrt{8}"), ("(x+1)^2", "x^2+2x+1"),
    ("\\$60", "60"), ("60\\%", "60"), ("60^\\circ", "60"), ("60^{\\circ}", "60"), ("60°", "60"),
    ("60\\text{ dollars}", "60"), ("60 \\mbox{cm}", "60"), ("\\$1,250.00", "1250"), ("\\text{\\$}60", "60"),
])
def test_answers_match(pred, gold):
    assert answers_match(pred, gold)


@pytest.mark.parametrize("pred, gold", [
    ("34", "33"), ("0.51", "\\frac{1}{2}"), ("", "5"), (None, "5"), ("5", None), ("x+1", "x"), ("garbage{{", "5"),
    ("\\$61", "60"), ("61\\%", "60"), ("6\\%", "60"), ("61^{\\circ}", "60"), ("6\\text{ dollars}", "60"),
])
def test_answers_do_not_match(pred, gold):
    assert not answers_match(pred, gold)


needs_bench = pytest.mark.skipif(not BENCH.is_dir(), reason=f"bench data not found at {BENCH}")
ALL_SETS = ["AIME_1983_2024.json", "aime_2025.json", "amc.json", "amc_eval_32.json"]
# how a model may dress a number: currency, percent, degrees, a unit word, in LaTeX
DRESSED = ["\\${}", "{}\\%", "{}^\\circ", "{}^{{\\circ}}", "{}\\text{{ dollars}}", "\\text{{\\$}}{}"]


def _answers(name):
    return [r["answer"] for r in json.loads((BENCH / name).read_text())]


@needs_bench
@pytest.mark.parametrize("name", ALL_SETS)
def test_real_answers_match_themselves_in_boxed_form(name):
    for gold in _answers(name):
        gold_text = str(int(gold)) if isinstance(gold, float) and gold.is_integer() else str(gold)
        assert answers_match(extract_answer(f"Thus \\boxed{{{gold_text}}}."), gold), gold
        assert answers_match(extract_answer(f"\\boxed{{{gold_text.zfill(3)}}}"), gold), gold


@needs_bench
@pytest.mark.parametrize("name", ALL_SETS)
def test_real_answers_match_with_currency_and_units_but_not_their_neighbours(name):
    golds = [(gold, normalize_answer(gold)) for gold in _answers(name)]
    numeric = [(gold, int(float(n))) for gold, n in golds if re.fullmatch(r"-?\d+(\.0)?", n)]
    assert len(numeric) >= len(golds) - 1  # one AIME answer is "080 or 081 (both were accepted)"
    for gold, number in numeric:
        for dress in DRESSED:
            assert answers_match(extract_answer(f"\\boxed{{{dress.format(number)}}}"), gold), (dress, gold)
            assert not answers_match(extract_answer(f"\\boxed{{{dress.format(number + 1)}}}"), gold), (dress, gold)


@needs_bench
def test_real_answers_are_not_confused_with_neighbours():
    for gold in _answers("AIME_1983_2024.json")[:200]:
        assert not answers_match(str(int(gold) + 1), gold)
