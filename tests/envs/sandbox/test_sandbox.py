"""The sandbox API on every backend: persistent kernels, shared workspace, files, limits, factory."""
from __future__ import annotations

import os
import warnings

import pytest

from mappa_envs.sandbox import ExecResult, Limits, Sandbox, SandboxSession, make_sandbox
from tests.sandbox_helpers import TEST_LIMITS, assert_usable, kill_in_sandbox, require_docker, wait_gone


def test_backends_satisfy_the_protocols(sandbox, session):
    assert isinstance(sandbox, Sandbox)
    assert isinstance(session, SandboxSession)
    assert sandbox.name in ("local", "docker")
    assert sandbox.limits.memory_mb == TEST_LIMITS["memory_mb"]


def test_variables_and_imports_persist_between_cells(session):
    assert session.run("import math\nx = 41").ok
    r = session.run("print(math.floor(x + 1.5))")
    assert r == ExecResult(stdout="42\n", duration_s=r.duration_s)


def test_final_expression_is_shown_like_a_notebook(session):
    assert session.run("x = [1, 2]\nx + [3]").stdout == "[1, 2, 3]\n"
    assert session.run("None").stdout == ""


def test_errors_are_reported_with_traceback_and_source(session):
    r = session.run("def f():\n    return 1 / 0\nf()")
    assert not r.ok
    assert r.error == "ZeroDivisionError: division by zero"
    assert not r.interpreter_restarted
    assert "return 1 / 0" in r.stderr
    assert "kernel.py" not in r.stderr
    assert "<string>" not in r.stderr


def test_syntax_error_is_reported(session):
    r = session.run("def (:")
    assert not r.ok
    assert r.error.startswith("SyntaxError")


def test_sys_exit_is_not_fatal(session):
    assert session.run("import sys; sys.exit(0)").ok
    r = session.run("raise SystemExit(2)")
    assert not r.ok
    assert r.error == "SystemExit: 2"
    assert not r.interpreter_restarted


def test_stdout_and_stderr_of_subprocesses_are_captured(session):
    r = session.run("import os\nprint('py', flush=True)\nos.system('echo sh; echo err >&2')")
    assert r.ok
    assert r.stdout.startswith("py\nsh\n")
    assert r.stderr == "err\n"


def test_kernels_share_the_workspace_not_the_variables(session):
    assert session.run("secret = 1\nopen('shared.txt', 'w').write('from a')", kernel="a").ok
    r = session.run("print(open('shared.txt').read())\nsecret", kernel="b")
    assert r.stdout == "from a\n"
    assert r.error == "NameError: name 'secret' is not defined"


def test_restart_gives_a_fresh_interpreter_in_the_same_workspace(session):
    session.run("x = 1\nopen('f.txt', 'w').write('kept')")
    session.restart()
    r = session.run("print(open('f.txt').read())\nx")
    assert r.stdout == "kept\n"
    assert r.error == "NameError: name 'x' is not defined"


def test_file_api_round_trip(session):
    session.write_file("data/train.csv", "a,b\n1,2\n")
    session.write_file("blob.bin", bytes(range(256)))
    assert session.list_files() == ["blob.bin", "data/train.csv"]
    assert session.read_file("blob.bin") == bytes(range(256))
    rows = session.run("import csv\nprint(list(csv.reader(open('data/train.csv'))))").stdout
    assert rows == "[['a', 'b'], ['1', '2']]\n"
    session.run("open('out.txt', 'w').write('written by the cell')")
    assert session.read_file("out.txt") == b"written by the cell"


@pytest.mark.parametrize("path", ["/etc/passwd", "../escape.txt", "a/../../escape.txt", ""])
def test_file_api_rejects_paths_outside_the_workspace(session, path):
    with pytest.raises(ValueError, match="workspace"):
        session.read_file(path)
    with pytest.raises(ValueError, match="workspace"):
        session.write_file(path, "x")


def test_file_api_does_not_follow_symlinks_out_of_the_workspace(session):
    session.run("import os; os.symlink('/etc/hostname', 'link')")
    with pytest.raises(ValueError, match="workspace"):
        session.read_file("link")


def test_missing_file_raises_file_not_found(session):
    with pytest.raises(FileNotFoundError):
        session.read_file("nope.txt")


def test_closed_session_refuses_work(sandbox):
    with sandbox.session() as s:
        pass
    with pytest.raises(Exception, match="closed"):
        s.run("1")


def test_each_session_has_its_own_workspace(sandbox):
    with sandbox.session() as a, sandbox.session() as b:
        a.write_file("mine.txt", "a")
        assert b.list_files() == []


def test_output_limit_cuts_with_marker_and_keeps_both_ends(session):
    r = session.run("print('START' + 'x' * 100_000 + 'END')")
    assert r.truncated
    assert r.stdout.startswith("START")
    assert r.stdout.rstrip().endswith("END")
    assert "bytes of output truncated by the sandbox" in r.stdout


def test_to_dict_leaves_timings_out_by_default(session):
    d = session.run("1").to_dict()
    assert "duration_s" not in d
    assert d["ok"]
    assert d["stdout"] == "1\n"


def test_bad_arguments_say_what_to_fix(session):
    with pytest.raises(TypeError, match="str"):
        session.run(b"print(1)")
    with pytest.raises(ValueError, match="timeout"):
        session.run("1", timeout=0)


def test_factory_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown sandbox backend"):
        make_sandbox("podman")
    with pytest.raises(TypeError, match="unknown argument"):
        make_sandbox("local", memory=1)
    with pytest.raises(TypeError, match="does not take"):
        make_sandbox("local", image="x")
    with pytest.raises(ValueError, match="memory_mb must be a positive number"):
        Limits(memory_mb=0)


def test_auto_picks_docker_when_usable_else_local(caplog):
    from mappa_envs.sandbox.docker import docker_status

    sb = make_sandbox("auto", pool_size=0, preimport=(), **TEST_LIMITS)
    try:
        assert sb.name == ("docker" if docker_status()[0] else "local")
    finally:
        sb.close()


def test_local_without_bwrap_warns_that_code_runs_unisolated():
    with pytest.warns(RuntimeWarning, match="UNISOLATED"):
        sb = make_sandbox("local", isolation="none", pool_size=0, preimport=(), **TEST_LIMITS)
    try:
        with sb.session() as s:
            assert s.run("print(1)").stdout == "1\n"
    finally:
        sb.close()


def test_local_with_bwrap_does_not_warn():
    from mappa_envs.sandbox.local import bwrap_path

    if not bwrap_path():
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        make_sandbox("local", pool_size=0, preimport=(), **TEST_LIMITS).close()


@pytest.mark.docker
def test_docker_image_has_the_data_science_stack_preimported():
    require_docker()
    sb = make_sandbox("docker", pool_size=0)
    try:
        with sb.session() as s:
            r = s.run("import sys\nprint(all(m in sys.modules for m in ('numpy', 'pandas', 'sklearn', 'scipy')))")
            assert r.stdout == "True\n", r
            r = s.run("import pandas as pd\nfrom sklearn.linear_model import LinearRegression\n"
                      "df = pd.DataFrame({'x': [0, 1, 2], 'y': [1, 3, 5]})\n"
                      "round(float(LinearRegression().fit(df[['x']], df.y).coef_[0]), 3)")
            assert r.stdout == "2.0\n", r
    finally:
        sb.close()


def test_workspaces_of_dead_owners_are_reaped_at_start(tmp_path):
    """Host-side workspace directories exist only without bwrap (bwrap's workspace is a tmpfs inside it)."""
    from mappa_envs.sandbox.local import reap_workspaces

    dead = tmp_path / "mappa-ws-999999999.1-abc"
    (dead / "locked").mkdir(parents=True)
    (dead / "locked").chmod(0)
    with pytest.warns(RuntimeWarning, match="UNISOLATED"):
        sb = make_sandbox("local", isolation="none", pool_size=0, preimport=(), workspace_root=str(tmp_path),
                          **TEST_LIMITS)
    try:
        with sb.session() as s:
            assert not dead.exists()
            assert reap_workspaces(str(tmp_path)) == 0  # a live owner's workspace is kept
            assert s.list_files() == []
            assert os.path.isdir(s.workspace)
    finally:
        sb.close()
    assert list(tmp_path.iterdir()) == []


def test_kernel_that_died_while_idle_is_reported_on_its_next_cell(session):
    pid = int(session.run("import os\nlost = 1\nos.getpid()", kernel="victim").stdout)
    kill_in_sandbox(session, pid)  # from outside: kernels cannot signal each other
    wait_gone(session, pid)
    r = session.run("print('fresh' if 'lost' not in globals() else 'same')", kernel="victim")
    assert r.ok
    assert r.interpreter_restarted
    assert r.stdout == "fresh\n"
    assert "interpreter died between cells (killed by SIGKILL" in r.stderr


def test_file_api_survives_a_dead_supervisor(session):
    session.write_file("a.txt", "kept")
    kill_in_sandbox(session, session._channel.ready["pid"])  # gone between calls: the next call starts another
    assert session.read_file("a.txt") == b"kept"
    assert session.list_files() == ["a.txt"]
    assert_usable(session)
