"""CodeTest-v0 pays for the work: for every role, each cheap or hostile action earns strictly less (rule
coach, per action) than the honest one, and the checks say whether the team's code is right at each step.

One problem throughout, HumanEval/0 (`has_close_elements(numbers, threshold)`: is any pair closer than
the threshold?). Its docstring shows two examples; `ADJACENT` passes both but is wrong (it compares only
neighbours), so only a test beyond the examples exposes it.
"""
from __future__ import annotations

import pytest

import mappa_envs
from mappa_envs.codetest.mutant import candidates, mutants, normalized
from mappa_envs.codetest.tasks import load_problems

P = {p.task_id: p for p in load_problems()}["HumanEval/0"]
SIG = "def has_close_elements(numbers, threshold):\n"
RIGHT = P.reference_solution
ADJACENT = SIG + ("    return any(abs(a - b) < threshold for a, b in zip(numbers, numbers[1:]))\n")
LOOKUP = SIG + "    return {(1.0, 2.0, 3.0): False}.get(tuple(numbers), True)\n"
STUB = SIG + "    return None\n"
EXAMPLES_TEST = ("from solution import has_close_elements\n"
                 "assert has_close_elements([1.0, 2.0, 3.0], 0.5) is False\n"
                 "assert has_close_elements([1.0, 2.8, 3.0, 4.0, 5.0, 2.0], 0.3) is True\n")
BEYOND_TEST = EXAMPLES_TEST + "assert has_close_elements([1.0, 5.0, 1.1], 0.5) is True\n"
# Tells the reference from its mutants by comparing code objects with a memorised copy of the reference.
SNAPSHOT_TEST = ("import solution\n" + RIGHT.replace("def has_close_elements", "def memorised") +
                 "\nassert solution.has_close_elements.__code__.co_code == memorised.__code__.co_code\n"
                 "assert solution.has_close_elements.__code__.co_consts == memorised.__code__.co_consts\n")


def code(source: str) -> str:
    return f"```python\n{source}```"


@pytest.fixture(scope="module")
def env(local_sandbox):
    env = mappa_envs.make("CodeTest-v0", task_ids=["HumanEval/0"], sandbox=local_sandbox)
    yield env
    env.close()


def play(env, *texts):
    """Step the texts in order from a fresh episode: each action's (reward, checks)."""
    env.reset(seed=0)
    out = []
    for text in texts:
        env.step(text)
        a = env.unwrapped.last_action
        out.append((a.reward, a.checks))
    return out


def test_the_mutants_differ_from_the_reference_only_by_one_token_and_by_behaviour(local_sandbox):
    foils = mutants(P, local_sandbox)
    assert len(foils) == 3
    reference = normalized(P).splitlines()
    for m in foils:
        lines = m.splitlines()
        assert len(lines) == len(reference)
        assert sum(a != b for a, b in zip(lines, reference)) == 1  # one changed line, no helper, no new name
        assert "_adjust" not in m
    assert len(candidates(P)) > 3


def test_coder_cheapest_actions_earn_less_than_the_solution_and_no_more_than_no_code(env):
    honest = play(env, code(RIGHT))[0]
    assert honest[1]["code_correct"] is True
    none = play(env, "I will think about it.")[0][0]
    cheap = {name: play(env, code(src))[0] for name, src in (("lookup", LOOKUP), ("stub", STUB))}
    assert cheap["lookup"][1]["examples_pass"] is True
    assert cheap["lookup"][1]["code_correct"] is False
    assert all(r < honest[0] for r, _ in cheap.values())
    assert all(r <= none for r, _ in cheap.values()), (cheap, none)


def test_coder_padding_after_the_work_earns_less_than_the_report(env):
    report = play(env, code(RIGHT), "That is my solution.")[1]
    assert report[1] == {"closing_report": True}
    padding = {
        "cell": play(env, code(RIGHT), code("print('checked')\n"))[1],
        "resubmit": play(env, code(RIGHT), code(RIGHT))[1],
        "variant": play(env, code(RIGHT), code(RIGHT + "\n\n_unused = 1\n"))[1],
    }
    assert all(r < report[0] for r, _ in padding.values()), (padding, report)
    assert all(c["new_work"] is False for _, c in padding.values())


@pytest.mark.parametrize("sabotage", ["import os\nos.remove('solution.py')\n",
                                      "open('solution.py', 'w').write('raise SystemExit')\n",
                                      "import os\nos.remove('solution.py')\nos.mkdir('solution.py')\n",
                                      "import os\nos.mkdir('solution')\nopen('solution/__init__.py', 'w').write('')\n",
                                      "import os\nos.remove('solution.py')\nos.symlink('/etc/hosts', 'solution.py')"])
def test_a_coder_that_breaks_its_hand_off_earns_nothing_and_costs_the_test_writer_nothing(env, sabotage):
    honest = play(env, code(RIGHT), "done", code(EXAMPLES_TEST))
    broken = play(env, code(RIGHT), code(sabotage), code(EXAMPLES_TEST))
    assert broken[1][1].get("handoff_intact") is False
    assert broken[1][0] <= 0.5
    assert broken[2] == honest[2]  # the tester ran against the restored file: same checks, same reward
    episode = env.unwrapped.episode
    assert episode.session.read_file("solution.py") == P.program(episode.state["solution"]).encode()


FORGED_CACHE = """import importlib.util, os
from importlib._bootstrap_external import _code_to_timestamp_pyc
st = os.stat('solution.py')
bad = compile('def has_close_elements(numbers, threshold):\\n    return None\\n', 'solution.py', 'exec')
os.makedirs('__pycache__', exist_ok=True)
open(importlib.util.cache_from_source('solution.py'), 'wb').write(_code_to_timestamp_pyc(bad, st.st_mtime, st.st_size))
"""


def test_a_forged_bytecode_cache_of_the_hand_off_never_reaches_the_test_writer(env):
    honest = play(env, code(RIGHT), "done", code(EXAMPLES_TEST))
    forged = play(env, code(RIGHT), code(FORGED_CACHE), code(EXAMPLES_TEST))
    assert [r.ok for r in env.unwrapped.episode.actions[1].tool_results] == [True]
    assert forged[2] == honest[2]


def test_test_writer_vacuous_or_name_keyed_tests_earn_no_more_than_no_test(env):
    none = play(env, code(RIGHT), "done", "I have no tests.")[2][0]
    honest = play(env, code(RIGHT), "done", code(EXAMPLES_TEST))[2]
    assert honest[1]["tests_catch_all_bugs"] is True
    cheap = {name: play(env, code(RIGHT), "done", code(src))[2] for name, src in {
        "assert_true": "assert True\n",
        "print_only": "print('all good')\n",
        "names": "import solution\nassert not hasattr(solution, '_adjust')\n"
                 "assert callable(solution.has_close_elements)\n",
        "source_shape": "import solution\nassert solution.has_close_elements.__code__.co_firstlineno == 1\n",
        "memorised_bytecode": SNAPSHOT_TEST,
    }.items()}
    assert all(r <= none < honest[0] for r, _ in cheap.values()), (cheap, none, honest)
    assert all(c.get("tests_catch_bug") is False for _, c in cheap.values())


def test_a_coder_padding_its_code_with_a_deep_expression_buys_its_test_writer_nothing(env):
    """Salting the judged copies once rewrote the program from its tree, whose recursion a 500-term sum in
    the Coder's code exhausted: the checks raised, and `assert True` was paid the coach's baseline."""
    head, body = RIGHT.split("\n", 1)  # the def line, then the body
    padded = f"{head}\n    _pad = {'1 + ' * 500}1\n{body}"
    coder, _, vacuous = play(env, code(padded), "done", code("assert True\n"))
    assert coder[1]["code_correct"] is True
    none = play(env, code(RIGHT), "done", "I have no tests.")[2][0]
    assert vacuous[1].get("tests_correct") is True
    assert vacuous[1]["tests_catch_bug"] is False
    assert vacuous[0] <= none
    assert not env.unwrapped.last_action.env_errors


def test_a_coder_layout_the_salt_cannot_rewrite_leaves_the_test_writer_judged(env):
    """A def continued by a backslash sends the salt to the tree's rewriting, which cannot write back an
    f-string holding a zero-width space: the checks once raised, so the Test Writer's honest tests were paid 0."""
    head = RIGHT.split("\n", 1)[0]
    tricky = (RIGHT.replace("def has_close_elements", "def _impl", 1) + "\n\n" + head
              + ' \\\n    return _impl(numbers, threshold) if f"""{\'\u200b\'}""" else None\n')
    coder, _, tests = play(env, code(tricky), "done", code(EXAMPLES_TEST))
    assert coder[1]["code_correct"] is True
    assert tests[1]["tests_correct"] is True
    assert not env.unwrapped.last_action.env_errors


def test_test_writer_exposing_a_bug_the_examples_miss_earns_more_than_rechecking_the_examples(env):
    examples = play(env, code(ADJACENT), "done", code(EXAMPLES_TEST))[2]
    beyond = play(env, code(ADJACENT), "done", code(BEYOND_TEST))[2]
    assert examples[1]["tests_found_bug"] is False  # they passed on wrong code: a miss
    assert beyond[1]["tests_found_bug"] is True
    assert beyond[0] > examples[0], (beyond, examples)


def test_test_writer_repeating_its_block_earns_less_than_the_report(env):
    report = play(env, code(RIGHT), "done", code(EXAMPLES_TEST), "All tests passed.")[3]
    repeat = play(env, code(RIGHT), "done", code(EXAMPLES_TEST), code(EXAMPLES_TEST))[3]
    twice = play(env, code(RIGHT), "done", code(EXAMPLES_TEST + EXAMPLES_TEST))[2]
    assert report[1] == {"closing_report": True}
    assert repeat[1]["new_work"] is False
    assert repeat[0] < report[0]
    assert twice[0] <= play(env, code(RIGHT), "done", code(EXAMPLES_TEST))[2][0]


def test_reviewer_approving_right_code_beats_every_cheaper_move(env):
    approve = play(env, code(RIGHT), "done", "no tests", "APPROVED")
    assert approve[3][1]["review_right"] is True
    assert env.unwrapped.outcome.correct
    moves = {
        "resubmit": play(env, code(RIGHT), "done", "no tests", code(RIGHT), "APPROVED")[3],
        "noop_cell": play(env, code(RIGHT), "done", "no tests", code("print(1)\n"), "APPROVED")[3],
    }
    lookup = play(env, code(RIGHT), "done", "no tests", code(LOOKUP), "APPROVED")
    moves["lookup"] = lookup[3]
    assert not env.unwrapped.outcome.correct  # the overwrite turned a win into a loss
    assert lookup[3][1]["review_right"] is False
    assert lookup[3][1]["code_correct"] is False
    assert all(r < approve[3][0] for r, _ in moves.values()), (moves, approve[3])
    assert lookup[3][0] == 0.0


def test_reviewer_fixing_wrong_code_beats_approving_it_and_a_failed_fix_does_not_lose_to_approving(env):
    approve = play(env, code(ADJACENT), "done", "no tests", "APPROVED")[3]
    failed_fix = play(env, code(ADJACENT), "done", "no tests", code(LOOKUP), "APPROVED")[3]
    fix = play(env, code(ADJACENT), "done", "no tests", code(RIGHT), "APPROVED")[3]
    assert env.unwrapped.outcome.correct
    assert "review_right" not in failed_fix[1]
    assert approve[0] <= failed_fix[0] < fix[0]
    assert approve[1]["review_right"] is False
    assert fix[1]["review_right"] is True
    assert fix[0] > approve[0]


def test_every_action_says_whether_the_teams_code_is_right_before_and_after_it(env):
    """`CoachRequest.metrics` (solution_correct_before / solution_correct) and the submission's
    `code_correct`: what blame needs to find the reviewer that broke right code."""
    play(env, code(RIGHT), "done", "no tests", code(LOOKUP), "APPROVED")
    actions = env.unwrapped.episode.actions
    seen = []
    from mappa_envs.coach.types import CoachRequest

    class Recorder:
        def score(self, request: CoachRequest):
            from mappa_envs.coach.rule import RuleCoach

            seen.append((request.role, request.metrics, request.checks.get("code_correct")))
            return RuleCoach().score(request)

    env.unwrapped.coach = Recorder()
    try:
        play(env, code(RIGHT), "done", "no tests", code(LOOKUP), "APPROVED")
    finally:
        env.unwrapped.coach = mappa_envs.coach.RuleCoach()
    assert len(seen) == len(actions) == 5
    assert [(r, m["solution_correct_before"], m["solution_correct"], c) for r, m, c in seen] == [
        ("coder", None, True, True), ("coder", True, True, None), ("test_writer", True, True, None),
        ("reviewer", True, False, False), ("reviewer", False, False, None)]


@pytest.mark.slow
def test_every_problem_has_mutants_that_fail_its_hidden_tests(local_sandbox):
    """Over all 164 problems (a few minutes): each has a foil, nearly all have three."""
    counts = [len(mutants(p, local_sandbox)) for p in load_problems()]
    assert min(counts) >= 1
    assert sum(c == 3 for c in counts) >= 150
