"""`mappa sandbox check|build`: the check runs a real session; the build's mirror discovery reads apt's config."""
from __future__ import annotations

import pytest

from mappa_cli.main import main
from mappa_envs.sandbox.image import debian_mirror
from tests.sandbox_helpers import require_docker


def test_check_local_reports_latency(capsys):
    assert main(["sandbox", "check", "--backend", "local", "--cells", "5"]) == 0
    out = capsys.readouterr().out
    assert "backend: local" in out
    assert "round trip, trivial cell: p50" in out
    assert "memory_mb=" in out


@pytest.mark.docker
def test_check_docker_reports_engine_image_and_latency(capsys):
    require_docker()
    assert main(["sandbox", "check", "--backend", "docker", "--cells", "5"]) == 0
    out = capsys.readouterr().out
    assert "docker: usable - Docker engine" in out
    assert "backend: docker" in out
    assert "uid, cwd inside: 3.11" in out


def test_mirror_from_deb822_sources(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://deb.debian.org/debian-security\nSuites: bookworm-security\nComponents: main\n\n"
        "Types: deb\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\nComponents: main\n")
    assert debian_mirror(str(tmp_path)) == ("http://mirror.example/debian", "bookworm")


def test_mirror_from_one_line_sources(tmp_path):
    (tmp_path / "sources.list").write_text("# comment\ndeb [arch=amd64] http://ftp.de.debian.org/debian trixie main\n")
    assert debian_mirror(str(tmp_path)) == ("http://ftp.de.debian.org/debian", "trixie")


def test_mirror_missing_says_how_to_fix(tmp_path):
    with pytest.raises(RuntimeError, match="--mirror"):
        debian_mirror(str(tmp_path))
