"""Broken copies of a reference solution.

`broken_solution`: every value the function returns is off by one (True/False flip, numbers +1, strings
and sequences grow), so it fails every HumanEval problem's tests. It is the scripted team's planted bug
(a Coder's bug, a Reviewer that breaks working code). It carries a helper (`_adjust`) the reference
lacks, so it is never the Test Writer's foil.

`mutants`: the Test Writer's foils (`tests_catch_bug`). Each makes ONE small change to the reference
(`<` for `<=`, `+` for `-`, `and` for `or`, 2 for 3, "a" for "a ", a condition negated, `f(g(x))` for
`g(x)`, `s` for `s.lower()`) and nothing else: no new names, the same layout, the same docstring. Each
is kept only if the hidden tests tell it from the reference (it is really broken) and it answers every
call in time (no timeout to pay on every check). Several are kept, so one lucky assertion does not
catch them all.
`normalized` is how the reference and every mutant are laid out for the judge, so none differs from
another in its source's shape either.
"""
from __future__ import annotations

import ast
import copy
import hashlib
import random
import threading

from mappa_envs.codetest.tasks import Problem, parse

_ADJUST = '''def _adjust(value):
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value + 1
    if isinstance(value, str):
        return value + " "
    if isinstance(value, list):
        return value + value[:1] if value else [0]
    if isinstance(value, tuple):
        return value + (0,)
    return 0 if value is None else None
'''

MUTANTS = 3  # foils per problem
MAX_TRIES = 16  # candidates run against the hidden tests before giving up on more
_CALL_TIMEOUT_S, _BUDGET_S = 2.0, 10.0  # a mutant slower than this is dropped (it would slow every check)


class _WrapReturns(ast.NodeTransformer):
    """`return X` -> `return _adjust(X)` in the function itself (nested functions keep theirs)."""

    def __init__(self, root: ast.AST):
        self.root = root

    def visit_FunctionDef(self, node):
        return self.generic_visit(node) if node is self.root else node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node):
        return node

    def visit_Return(self, node):
        value = node.value or ast.Constant(None)
        return ast.copy_location(ast.Return(ast.Call(ast.Name("_adjust", ast.Load()), [value], [])), node)


_CACHE: dict[str, str] = {}


def broken_solution(problem: Problem) -> str:
    """The reference function with every return value adjusted, and the helper that adjusts it."""
    if problem.task_id not in _CACHE:
        _CACHE[problem.task_id] = _broken(problem)
    return _CACHE[problem.task_id]


def _entry(tree: ast.Module, problem: Problem) -> ast.FunctionDef:
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == problem.entry_point)


def _broken(problem: Problem) -> str:
    tree = parse(problem.reference_solution)
    fn = _entry(tree, problem)
    _WrapReturns(fn).visit(fn)
    return _ADJUST + "\n\n" + ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def broken_program(problem: Problem) -> str:
    return problem.program(broken_solution(problem))


# ---- one-token mutants ---------------------------------------------------------------------------

# operator -> what it may become (one mutant each)
_SWAPS = {ast.Lt: (ast.LtE, ast.Gt), ast.LtE: (ast.Lt, ast.GtE), ast.Gt: (ast.GtE, ast.Lt), ast.GtE: (ast.Gt, ast.LtE),
          ast.Eq: (ast.NotEq,), ast.NotEq: (ast.Eq,), ast.In: (ast.NotIn,), ast.NotIn: (ast.In,), ast.Is: (ast.IsNot,),
          ast.IsNot: (ast.Is,), ast.Add: (ast.Sub, ast.Mult), ast.Sub: (ast.Add, ast.FloorDiv),
          ast.Mult: (ast.Add, ast.Pow), ast.FloorDiv: (ast.Mult, ast.Mod), ast.Mod: (ast.FloorDiv, ast.Add),
          ast.Div: (ast.Mult,), ast.And: (ast.Or,), ast.Or: (ast.And,)}


def _sites(fn: ast.FunctionDef) -> list[tuple[int, str, int]]:
    """Every way one token can change, as (node index in ast.walk order, what to change, which alternative)."""
    doc = fn.body[0].value if fn.body and isinstance(fn.body[0], ast.Expr) else None
    sites = []
    for i, node in enumerate(ast.walk(fn)):
        if isinstance(node, ast.Compare):
            sites += [(i, f"cmp{k}", j) for k, op in enumerate(node.ops) for j in range(len(_SWAPS.get(type(op), ())))]
        elif isinstance(node, (ast.BinOp, ast.AugAssign, ast.BoolOp)):
            sites += [(i, "op", j) for j in range(len(_SWAPS.get(type(node.op), ())))]
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float, bool, str) and node is not doc:
            sites.append((i, "const", 0))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            sites.append((i, "not", 0))
        elif isinstance(node, ast.Call) and len(node.args) == 1 and not node.keywords:
            sites.append((i, "unwrap", 0))  # f(g(x)) -> g(x): a one-liner's only mutable spot is often a call
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and not node.args + node.keywords:
            sites.append((i, "drop_method", 0))  # s.swapcase() -> s
        if isinstance(node, (ast.If, ast.IfExp, ast.comprehension)):
            tests = node.ifs if isinstance(node, ast.comprehension) else [node.test]
            sites += [(i, f"negate{k}", 0) for k in range(len(tests))]
    return sites


class _Replace(ast.NodeTransformer):
    """Replace one node (by identity) with `make(node)`."""

    def __init__(self, target: ast.AST, make):
        self.target, self.make = target, make

    def visit(self, node):
        return self.make(node) if node is self.target else super().visit(node)


def _changed(value):
    if isinstance(value, bool):
        return not value
    return value + " " if isinstance(value, str) else value + 1


def _mutate(tree: ast.Module, problem: Problem, site: tuple[int, str, int]) -> str:
    tree = copy.deepcopy(tree)
    fn = _entry(tree, problem)
    index, what, alternative = site
    node = list(ast.walk(fn))[index]
    if what.startswith("cmp"):
        k = int(what[3:])
        node.ops[k] = _SWAPS[type(node.ops[k])][alternative]()
    elif what == "op":
        node.op = _SWAPS[type(node.op)][alternative]()
    elif what == "const":
        node.value = _changed(node.value)
    elif what == "not":
        _Replace(node, lambda n: n.operand).visit(fn)
    elif what == "unwrap":
        _Replace(node, lambda n: n.args[0]).visit(fn)
    elif what == "drop_method":
        _Replace(node, lambda n: n.func.value).visit(fn)
    else:  # negate the k-th condition of an if, a conditional expression or a comprehension
        tests = node.ifs if isinstance(node, ast.comprehension) else [node.test]
        target = tests[int(what[len("negate"):])]
        _Replace(target, lambda n: ast.UnaryOp(ast.Not(), n)).visit(fn)
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def normalized(problem: Problem) -> str:
    """The reference as the mutants are written (`ast.unparse`): the judge runs this, not the dataset's text."""
    return ast.unparse(parse(problem.reference_solution)) + "\n"


def candidates(problem: Problem) -> list[str]:
    """Every one-token mutant of the reference, in an order drawn from the task id (stable across runs)."""
    tree = parse(problem.reference_solution)
    sites = _sites(_entry(tree, problem))
    random.Random(hashlib.sha256(problem.task_id.encode()).digest()).shuffle(sites)
    reference = normalized(problem)
    out = []
    for site in sites:
        source = _mutate(tree, problem, site)
        if source != reference and source not in out:
            out.append(source)
    return out


_MUTANTS: dict[str, tuple[str, ...]] = {}
_LOCK = threading.Lock()


def mutants(problem: Problem, sandbox) -> tuple[str, ...]:
    """Up to `MUTANTS` one-token mutants (whole solutions) that fail the hidden tests in time; cached per task.
    The hidden tests run on the host as ever (`judge`), against each candidate in a session of `sandbox`."""
    from mappa_envs.codetest import judge

    with _LOCK:
        if problem.task_id in _MUTANTS:
            return _MUTANTS[problem.task_id]
    kept: list[str] = []
    with sandbox.session() as session:
        for source in candidates(problem)[:MAX_TRIES]:
            session.restart()
            report = judge.run_hidden_tests(session, problem.prompt, problem.test, problem.program(source),
                                            problem.entry_point, _CALL_TIMEOUT_S, _BUDGET_S)
            slow = any("timeout" in f or "budget" in f for f in report.failures)
            if report.total and not report.all_passed and not slow:
                kept.append(source)
                if len(kept) == MUTANTS:
                    break
    with _LOCK:
        _MUTANTS[problem.task_id] = tuple(kept)
    return tuple(kept)
