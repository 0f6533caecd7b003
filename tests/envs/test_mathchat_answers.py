"""Answer extraction and matching, on hand-written cases and the real AIME/AMC answer sets."""
import json
import re

import pytest

from mappa_envs.mathchat import answers_match, extract_answer
from mappa_envs.mathchat.answers import normalize_answer
from tests.bench_data import BENCH

pytestmark = pytest.mark.unit


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


# ---- a number is answered by the number written out, never by the question's expression ----------

@pytest.mark.parametrize("pred", [
    "31", "31.0", "031", "+31", "31.00", "\\$31", "31\\%", "31^\\circ", "31^{\\circ}", "31\\text{ apples}",
    "\\text{31}", "\\mathbf{31}", "x = 31", "n_0=31", "(C) 31", "\\textbf{(C)}\\ 31", "31~\\text{cm}", "31\\quad",
])
def test_an_integer_is_matched_by_itself_written_out(pred):
    assert answers_match(pred, "31")


@pytest.mark.parametrize("pred", [
    "4 \\cdot 7 + 3", "4 * 7 + 3", "4\\times 7+3", "30+1", "32-1", "62/2", "\\frac{62}{2}", "\\dfrac{93}{3}",
    "31/1", "3.1e1", "31e0", "\\sqrt{961}", "31 + 0", "(31)", "x = 30 + 1", "x=31, y=2", "31, 32", "{31}",
])
def test_an_integer_is_never_matched_by_an_expression(pred):
    assert not answers_match(pred, "31")


@pytest.mark.parametrize("pred, gold", [
    ("10^{3}", "1000"), ("10^3", "1000"), ("1e3", "1000"), ("2^{10}", "1024"), ("1000/1", "1,000"),
    ("2\\cdot 500", "1000"), ("\\binom{5}{2}", "10"), ("5!", "120"), ("\\frac{84}{2}", "42.0"),
])
def test_powers_and_functions_do_not_stand_for_an_integer(pred, gold):
    assert not answers_match(pred, gold)


@pytest.mark.parametrize("pred, gold, ok", [
    ("\\frac{7}{8}", "0.875", True), ("7/8", "\\frac{7}{8}", True), ("0.875", "7/8", True), ("\\frac78", "7/8", True),
    ("\\frac{14}{16}", "7/8", True), ("-\\frac{1}{2}", "-0.5", True), ("-\\frac{-1}{2}", "0.5", True),
    ("8.75e-1", "7/8", True), ("\\frac{3}{4}+\\frac{1}{8}", "7/8", False), ("1 - \\frac{1}{8}", "0.875", False),
    ("2\\sqrt{2}", "\\sqrt{8}", True), ("\\frac{\\pi}{2}", "\\pi/2", True),  # closed forms: symbolic
])
def test_non_integer_references(pred, gold, ok):
    assert answers_match(pred, gold) is ok


def test_number_parsing_is_bounded():
    """`Fraction("1e99999999999")` computes 10**99999999999 holding the GIL: no number an action
    writes is parsed past MAX_DIGITS digits or an exponent of MAX_EXPONENT."""
    from mappa_envs.mathchat.answers import MAX_DIGITS, parse_number

    for hostile in ["1e99999999999", "1E99999999999", "-1e-99999999999", "1" * 5000, "9" * (MAX_DIGITS + 1),
                    f"1/{'7' * 4000}", f"\\frac{{{'1' * 4000}}}{{3}}", "0." + "1" * 5000, "1e0401", "1e+0000000005"]:
        assert parse_number(hostile) is None, hostile[:40]
        assert not answers_match(hostile, "1")
        assert not answers_match(hostile, "0.5")
        assert extract_answer(f"\\boxed{{{hostile}}}") == hostile
    assert parse_number("1e400").value == 10 ** 400
    assert parse_number("9" * MAX_DIGITS).value == 10 ** MAX_DIGITS - 1
    assert not answers_match("1" * 5000, "1" * 5000)  # longer than any answer: never a match


# ---- extraction is linear in the length of the action ---------------------------------------------

ADVERSARIAL = {  # each was quadratic (or worse) before: 2-13 s at 16k characters, minutes at 100k
    "unclosed boxes": "\\boxed{" * 20_000,
    "nested boxes": "\\boxed{" * 13_000 + "1" + "}" * 13_000,
    "bare boxes": "\\boxed" * 20_000,
    "fbox and boxed": "\\fbox{\\boxed{" * 10_000,
    "labels without an end": "answer is x " * 12_000 + "$y",
    "final labels": "final answer " * 10_000 + "*q",
    "labels and dollars": "The answer is $" * 10_000,
    "whitespace runs": "final" + " " * 100_000 + "x",
    "stars": "answer: " + "*" * 100_000 + "x",
    "think": "<think>" * 20_000 + "\\boxed{1}",
    "empty boxes": "\\boxed{ }" * 15_000,
}


@pytest.mark.parametrize("name", sorted(ADVERSARIAL))
def test_extraction_is_linear_on_adversarial_actions(name):
    """100k+ characters in well under a second each (a quadratic scan takes minutes); the bound is
    generous on purpose: it only separates linear from quadratic."""
    import time

    text = ADVERSARIAL[name]
    assert len(text) >= 100_000
    started = time.perf_counter()
    for _ in range(2):  # the Verifier's step extracts twice
        answer = extract_answer(text)
        answers_match(answer, "31")
    assert time.perf_counter() - started < 5.0, name


@pytest.mark.parametrize("text, expected", [
    ("The answer is 3.5.", "3.5"),  # a decimal point is not a sentence end
    ("The answer is 5, so the final answer is 6.", "6"),
    ("answer is 7. Then we check $x$.", "7"),
    ("Final Answer:\n\n142", "142"),
    ("The final answer is $\\frac{1}{2}$.", "\\frac{1}{2}"),
    ("answer is 5$ and more", None),
    ("\\boxed{\\boxed{5}}", "5"),
    ("\\boxed{5} and \\boxed{ }", "5"),
    ("\\boxed{unclosed and \\boxed{6}", "6"),
])
def test_extract_answer_edge_cases(text, expected):
    assert extract_answer(text) == expected
