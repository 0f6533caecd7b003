"""The import graph of mappa_envs, mappa_train and mappa_cli: no circle, and no import from a lower layer to
a higher one (mappa_envs < mappa_train < mappa_cli). Every import statement counts, those inside functions
too: a lazy import makes a circle as surely as a top-level one, only later."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ["mappa_envs", "mappa_train", "mappa_cli"]  # each may import those before it, never those after


def modules() -> dict[str, Path]:
    """Dotted module name -> its file, for every module of the three packages."""
    out = {}
    for package in LAYERS:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of the three packages that `name` imports (a name imported from a package counts as its
    submodule when there is one, else as the package)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            targets |= {f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names}
    out = set()
    for target in targets:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target and target != name:
            out.add(target)
    return out


def graph() -> dict[str, set[str]]:
    """Module -> the modules it imports, leaving out a module's import of a package that contains it: the
    package has run its __init__ before any of its submodules runs, so that edge closes no circle."""
    known = modules()
    return {name: {t for t in imports(name, path, known) if not name.startswith(t + ".")}
            for name, path in known.items()}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_back():
    assert circles(graph()) == []


def test_no_layer_imports_a_higher_one():
    rank = {package: k for k, package in enumerate(LAYERS)}
    upward = sorted(f"{name} -> {target}" for name, targets in graph().items() for target in targets
                    if rank[target.split(".")[0]] > rank[name.split(".")[0]])
    assert upward == []


def test_the_checks_see_a_circle_a_lazy_import_and_an_upward_import():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(edges) == [["a", "b", "c"]]
    known = modules()
    ablate = imports("mappa_train.experiments.ablate", known["mappa_train.experiments.ablate"], known)
    assert "mappa_train.experiments.preflight" in ablate  # imported inside a function: still an edge
    assert "mappa_envs.registration" in imports("mappa_envs", known["mappa_envs"], known)
    assert "mappa_envs.coach_eval.card" in graph()["mappa_cli.coach_eval"]
