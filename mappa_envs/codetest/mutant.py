"""A broken copy of a reference solution: every value the function returns is off by one.

It is the Test Writer's ground-truth foil (`tests_catch_bug`: good tests fail on it) and the scripted
team's planted bug (a Coder's bug, a Reviewer that breaks working code). Every return value changes
(True/False flip, numbers +1, strings and sequences grow), so it fails every HumanEval problem's tests.
"""
from __future__ import annotations

import ast

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


def _broken(problem: Problem) -> str:
    tree = parse(problem.reference_solution)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == problem.entry_point)
    _WrapReturns(fn).visit(fn)
    return _ADJUST + "\n\n" + ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def broken_program(problem: Problem) -> str:
    return problem.program(broken_solution(problem))
