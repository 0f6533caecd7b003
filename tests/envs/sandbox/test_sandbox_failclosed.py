"""Fail closed: nothing but isolation="none", asked for by name, runs agent code unisolated.

"No bubblewrap" is made real by a PATH without bwrap on it, "no Docker" by DOCKER_HOST pointing at a socket
nobody listens on; the components under test are the real factory, LocalSandbox and env.
"""
from __future__ import annotations

import logging
import os
import shutil
import sys

import pytest

import mappa_envs
from mappa_envs.errors import MappaError
from mappa_envs.sandbox import IsolationUnavailableError, SandboxError, make_sandbox
from mappa_envs.sandbox.factory import make_default_sandbox
from tests.sandbox_helpers import TEST_LIMITS


@pytest.fixture
def bare_machine(tmp_path, monkeypatch):
    """A PATH with the usual tools but no bwrap, and a Docker host that does not answer."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for tool in ("sh", "true", "env", "cat"):
        found = shutil.which(tool)
        if found:
            os.symlink(found, bindir / tool)
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    assert shutil.which("bwrap") is None
    return tmp_path


def _assert_one_line_refusal(e: BaseException) -> None:
    message = str(e)
    assert isinstance(e, MappaError)
    assert isinstance(e, SandboxError)
    assert "\n" not in message
    assert "apt-get install bubblewrap" in message
    assert "isolation='none'" in message
    assert "sandbox='docker'" in message


@pytest.mark.parametrize("backend", ["local", "auto"])
def test_without_bwrap_or_docker_auto_refuses_in_one_line(bare_machine, backend):
    with pytest.raises(IsolationUnavailableError) as info:
        make_sandbox(backend, pool_size=0, preimport=(), **TEST_LIMITS)
    _assert_one_line_refusal(info.value)


def test_without_bwrap_or_docker_the_default_refuses(bare_machine):
    with pytest.raises(IsolationUnavailableError) as info:
        make_default_sandbox(pool_size=0, preimport=(), **TEST_LIMITS)
    _assert_one_line_refusal(info.value)
    assert "Docker is not usable either" in str(info.value)


@pytest.mark.parametrize("env_id", ["DSBench-v0", "MathChat-v0"])
def test_env_with_no_sandbox_refuses_instead_of_running_unisolated(bare_machine, env_id):
    """The issue's case: make() with no sandbox argument on a machine without bwrap (or Docker)."""
    env = mappa_envs.make(env_id, **({"tasks": "builtin", "cache_dir": str(bare_machine / "cache")}
                                     if env_id == "DSBench-v0" else {"task_source": "synthetic", "num_tasks": 2}))
    try:
        with pytest.raises(IsolationUnavailableError) as info:
            env.reset(seed=0)
        _assert_one_line_refusal(info.value)
    finally:
        env.close()


def test_cli_prints_the_refusal_as_one_line(bare_machine):
    """`mappa run` on a bare machine: the one line, no traceback, non-zero exit."""
    import subprocess

    out = subprocess.run([sys.executable, "-m", "mappa_cli.main", "run", "MathChat-v0", "--episodes", "1",
                          "--out", str(bare_machine / "t.jsonl")],
                         capture_output=True, text=True, timeout=300,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode != 0
    assert "Traceback" not in out.stderr, out.stderr[-2000:]
    assert "apt-get install bubblewrap" in out.stderr + out.stdout


def test_explicit_none_runs_with_a_loud_warning(bare_machine, caplog):
    with caplog.at_level(logging.WARNING, logger="mappa_envs.sandbox.local"):
        with pytest.warns(RuntimeWarning, match="UNISOLATED"):
            sb = make_sandbox("local", isolation="none", pool_size=0, preimport=(), **TEST_LIMITS)
    try:
        assert sb.isolation == "none"
        assert any("UNISOLATED" in r.getMessage() for r in caplog.records)
        with sb.session() as s:
            assert s.run("print(6 * 7)").stdout == "42\n"
    finally:
        sb.close()


def test_explicit_none_through_auto_is_honoured(bare_machine):
    with pytest.warns(RuntimeWarning, match="UNISOLATED"):
        sb = make_sandbox("auto", isolation="none", pool_size=0, preimport=(), **TEST_LIMITS)
    try:
        assert sb.name == "local"
        assert sb.isolation == "none"
    finally:
        sb.close()


def test_isolation_bwrap_without_bwrap_is_an_error(bare_machine):
    with pytest.raises(SandboxError, match="isolation='bwrap' is not possible"):
        make_sandbox("local", isolation="bwrap", pool_size=0, preimport=(), **TEST_LIMITS)


def test_with_bwrap_the_default_is_isolated():
    """Where bubblewrap runs (CI installs it), the env's default sandbox is the isolated local one."""
    from mappa_envs.sandbox.bwrap import bwrap_path

    if not bwrap_path():
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    sb = make_default_sandbox(pool_size=0, preimport=(), **TEST_LIMITS)
    try:
        assert sb.name == "local"
        assert sb.isolation == "bwrap"
        with sb.session() as s:  # the host's home and this checkout are not visible from inside
            # the checkout's directory may appear as the mount point of a .venv inside it: probe its files
            r = s.run(f"import os\nprint(os.path.exists({os.path.join(os.getcwd(), 'pyproject.toml')!r}))")
            assert r.stdout == "False\n", r
    finally:
        sb.close()


@pytest.mark.docker
def test_without_bwrap_auto_uses_docker(tmp_path, monkeypatch):
    """No bwrap but a Docker engine with the image: the default and "auto" use Docker, not unisolated code."""
    from tests.sandbox_helpers import require_docker

    require_docker()
    monkeypatch.setenv("PATH", str(tmp_path))
    for make in (lambda: make_default_sandbox(pool_size=0, preimport=(), **TEST_LIMITS),
                 lambda: make_sandbox("auto", pool_size=0, preimport=(), **TEST_LIMITS)):
        sb = make()
        try:
            assert sb.name == "docker"
        finally:
            sb.close()


def test_the_quickstart_preset_runs_isolated_or_not_at_all(bare_machine, monkeypatch):
    """The quickstart's own config: on a bare machine its sandbox refuses; with bwrap it is isolated."""
    pytest.importorskip("torch")
    from mappa_train.config import load_config
    from mappa_train.experiments.quickstart import PRESET

    cfg = load_config(str(PRESET), [])
    with pytest.raises(IsolationUnavailableError):
        make_sandbox(cfg.env.sandbox, **{**cfg.env.sandbox_kwargs, "pool_size": 0})
    monkeypatch.undo()  # PATH back: bubblewrap where the machine has it
    from mappa_envs.sandbox.bwrap import bwrap_path

    if not bwrap_path():
        pytest.skip("bubblewrap is not installed (apt-get install bubblewrap)")
    sb = make_sandbox(cfg.env.sandbox, **{**cfg.env.sandbox_kwargs, "pool_size": 0})
    try:
        assert getattr(sb, "isolation", "container") in ("bwrap", "container")
    finally:
        sb.close()
