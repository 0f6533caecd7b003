"""parse_score on real-looking model output: labelled scores only, strict range, no stray numbers."""
import pytest

from mappa_envs.coach import parse_score
from mappa_envs.coach.parse import parse_reply


@pytest.mark.parametrize("text, expected", [
    ("SCORE: 7", 7.0),
    ("score: 7.5", 7.5),
    ("**SCORE:** 8", 8.0),
    ("**Score: 8**", 8.0),
    ("__SCORE__: 6", 6.0),
    ("Score: [[9]]", 9.0),
    ("SCORE: (4)", 4.0),
    ("SCORE: 7/10", 7.0),
    ("Score = 10/10 — flawless.", 10.0),
    ("## Score: 3", 3.0),
    ("- Score: 2", 2.0),
    ("> SCORE: 0", 0.0),
    ("RATIONALE: The sum 12 + 30 = 42 is right; 3 steps.\nSCORE: 6\nOverall a fair attempt with 2 gaps.", 6.0),
    ("Code quality score: 3\nCorrectness score: 9\nSCORE: 8", 8.0),  # take the labelled one
    ("SCORE: 3\n(revised after checking)\nFinal score: 7", 7.0),  # a final/overall label wins
    ("Overall score: 5\nSCORE: 9", 5.0),
    ("SCORE: 4\nSCORE: 6", 6.0),  # the verdict comes after the reasoning
    ('{"rationale": "ok", "score": 6.5}', 6.5),
    ('```json\n{"score": 4, "answer_correct": false}\n```', 4.0),
    ('{"rationale": "the output 99 is wrong", "score": 2', 2.0),  # truncated JSON still carries its key
    ("7", 7.0),
    ("**7/10**", 7.0),
    ("[8]", 8.0),
    ("8.", 8.0),
    # the reference implementation's labels
    ("PROCESS_SCORE: 7", 7.0),
    ("**PROCESS_SCORE:** 8", 8.0),
    ("PROCESS_SCORE = 2", 2.0),
    ("PROCESS_SCORE: [6]", 6.0),
    ("The verifier re-derived the sum.\nPROCESS_SCORE: 9/10", 9.0),
    ("Process score: 4.5", 4.5),
    ("7.5/10", 7.5),
    ('{"process_score": 3}', 3.0),
])
def test_reads_the_labelled_score(text, expected):
    assert parse_score(text)[0] == expected


@pytest.mark.parametrize("text", [
    None, "", "   \n",
    "The answer is 42.",  # an unrelated number
    "I'd give it a score of 5 or so.",  # unlabelled prose
    "Step 1 gives 3, step 2 gives 7.",
    "Code quality score: 3",  # a sub-score, not the score
    "SCORE: 11", "SCORE: -1", "SCORE: 15 out of 10", '{"score": 42}',  # out of range: rejected, not clamped
    "SCORE: 4/5", "Score: 85/100",  # not out of 10: rejected, not rescaled
    "SCORE: good", "SCORE:",
    "PROCESS_SCORE: 11", "PROCESS_SCORE: 8/5", "PROCESS_SCORE: high",  # the same strictness for the new label
    "The process score was 5, I think.", "Subprocess score: 6",  # prose, and another label
])
def test_rejects_what_is_not_a_valid_labelled_score(text):
    assert parse_score(text)[0] is None


@pytest.mark.parametrize("text, expected", [
    ("ANSWER_CORRECT: yes\nSCORE: 9", True),
    ("**Answer correct:** No\nSCORE: 2", False),
    ("ANSWER_CORRECT: [true]\nSCORE: 9", True),
    ("ANSWER_CORRECT: incorrect\nSCORE: 1", False),
    ('{"answer_correct": true, "score": 9}', True),
    ("SCORE: 9", None),
    ("The answer is correct.\nSCORE: 9", None),  # prose is not a label
])
def test_answer_correct(text, expected):
    assert parse_score(text)[1] is expected


def test_rationale_and_problem_are_reported():
    v = parse_reply("RATIONALE: Good check of the Solver's algebra.\nANSWER_CORRECT: yes\nSCORE: 9")
    assert v.rationale == "Good check of the Solver's algebra."
    assert v.problem is None
    assert "outside [0, 10]" in parse_reply("SCORE: 12").problem
    assert "no labelled score" in parse_reply("looks fine").problem
    assert parse_reply("").problem == "empty reply"


def test_json_rationale_is_the_field_not_the_raw_reply():
    v = parse_reply('{"rationale": "Ran the check; the \\"sum\\" is __right__.", "score": 8}')
    assert (v.score, v.rationale) == (8.0, 'Ran the check; the "sum" is __right__.')
    assert parse_reply('{"rationale": "cut off mid-sent').rationale == "cut off mid-sent"
    assert parse_reply("RATIONALE: fine work\nPROCESS_SCORE: 7").rationale == "fine work"


def test_structured_failure_names_the_schema():
    from mappa_envs.coach.prompts import json_schema

    problem = parse_reply("I think it is fine.", json_schema(ask_answer_correct=True)).problem
    assert problem == ('no labelled score (expected the JSON object of schema coach_verdict '
                       '{"rationale": string, "answer_correct": boolean, "score": number})')
    assert "SCORE:" not in problem
