"""Documented limits hold on both backends: workspace size, /tmp and /dev/shm, memory of the whole session."""
from __future__ import annotations

import pytest

from mappa_envs.sandbox import make_sandbox
from tests.sandbox_helpers import BACKENDS, TEST_LIMITS, assert_usable, require_docker

pytestmark = pytest.mark.timeout(240)
SMALL = dict(TEST_LIMITS, workspace_mb=64, max_file_mb=256, memory_mb=400)


@pytest.fixture(params=BACKENDS, scope="module")
def small_sandbox(request):
    if request.param == "docker":
        require_docker()
    sb = make_sandbox(request.param, pool_size=0, preimport=(), **SMALL)
    yield sb
    sb.close()


@pytest.fixture
def small(small_sandbox):
    with small_sandbox.session() as s:
        yield s


WRITE_128MB = "with open({path!r}, 'wb') as f:\n    for _ in range(128):\n        f.write(b'x' * 2**20)"


@pytest.mark.parametrize("path", ["/workspace/big.bin", "/tmp/big.bin", "/dev/shm/big.bin"],
                         ids=["workspace", "tmp", "shm"])
def test_writing_past_a_tmpfs_size_fails_cleanly(small, path):
    r = small.run(WRITE_128MB.format(path=path), timeout=120)
    assert not r.ok, r
    assert not r.interpreter_restarted, r
    assert "No space left on device" in r.error, r
    assert small.run(f"import os\nos.remove({path!r})").ok
    assert_usable(small)
    small.write_file("after.txt", "the workspace takes files again")
    assert small.read_file("after.txt") == b"the workspace takes files again"


def test_host_writes_respect_the_workspace_size(small):
    with pytest.raises(OSError, match="No space left"):
        small.write_file("huge.bin", b"x" * (100 << 20))
    assert_usable(small)


def test_memory_is_limited_for_the_whole_session(small_sandbox, small):
    """Each kernel stays under its own address-space limit; together they pass the session's limit
    (memory_mb + workspace_mb = 464 MB): one of them is killed, and the session goes on."""
    if not small_sandbox.session_cgroup:
        pytest.skip(f"no session-wide memory limit here: {small_sandbox.memory_limit}")
    grab = "import mmap\nm = mmap.mmap(-1, 300 << 20)\nfor i in range(0, 300 << 20, 4096):\n    m[i] = 1\nprint('held')"
    a = small.run(grab, kernel="a", timeout=120)
    b = small.run(grab, kernel="b", timeout=120)
    again = small.run("print('a is back')", kernel="a")
    died = [r for r in (a, b, again) if r.interpreter_restarted]
    assert died, (a, b, again)
    assert "killed by SIGKILL" in (died[0].error or "") + died[0].stderr
    assert_usable(small)
