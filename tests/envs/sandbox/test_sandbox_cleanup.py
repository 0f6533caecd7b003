"""Closing a session removes whatever its cells did, and a hostile session never breaks later ones."""
from __future__ import annotations

import os
import threading
import time

import pytest

from mappa_envs.sandbox import make_sandbox
from tests.sandbox_helpers import TEST_LIMITS, assert_usable

pytestmark = pytest.mark.timeout(240)

HOSTILE = """\
import array, fcntl, os, subprocess, sys
for _ in range(1500):
    os.mkdir('d')
    os.chdir('d')
os.chdir('/workspace')
os.makedirs('locked/inner')
open('locked/inner/f', 'w').write('x')
os.chmod('locked/inner', 0)
os.chmod('locked', 0)
fd = os.open('immutable', os.O_CREAT | os.O_RDONLY)
try:
    fcntl.ioctl(fd, 0x40086602, array.array('l', [0x10 | 0x20]), True)  # FS_IOC_SETFLAGS: immutable, append-only
    print('flags set')
except OSError as e:
    print('flags refused', e.errno)
try:
    with open('fill', 'wb') as f:
        while True:
            f.write(b'x' * 2**20)
except OSError:
    pass
daemon = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(3000)', 'hostile-daemon'],
                          start_new_session=True)
"""


def _host_processes_with(marker: bytes) -> list[int]:
    found = []
    for p in os.listdir("/proc"):
        try:
            with open(f"/proc/{p}/cmdline", "rb") as f:
                if marker in f.read():
                    found.append(int(p))
        except (OSError, ValueError):
            pass
    return found


def _wait_until(check, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_a_hostile_session_is_cleaned_up_and_later_sessions_work(sandbox):
    s = sandbox.open()
    r = s.run(HOSTILE, timeout=120)
    assert r.ok, r
    assert r.stdout.startswith("flags refused"), r  # no capability to set immutable flags
    assert r.stdout.split()[2] in ("1", "25", "95"), r  # EPERM (or the file system has no flags)
    assert s.run("open('other.txt', 'w').write('b')", kernel="b").ok
    if sandbox.separate_kernel_uids:  # the workspace itself belongs to the supervisor
        chmod = s.run("import os\nos.chmod('/workspace', 0)")
        assert not chmod.ok, chmod
        assert chmod.error.startswith("PermissionError"), chmod
    transport = s._channel.transport
    s.close()
    if sandbox.name == "local":
        assert transport.proc.poll() is not None  # the whole sandbox is gone, and its tmpfs with it
    else:
        assert _wait_until(lambda: not sandbox.client.api.containers(all=True, filters={"id": transport.container_id}))
    assert _wait_until(lambda: not _host_processes_with(b"hostile-daemon"))
    with sandbox.session() as a, sandbox.session() as b:
        assert a.list_files() == []
        assert b.list_files() == []
        a.write_file("x.txt", "fine")
        assert a.read_file("x.txt") == b"fine"
        assert_usable(a)
        assert_usable(b)


def test_local_session_leaves_no_cgroup_or_workspace_behind(local_sandbox):
    s = local_sandbox.open()
    s.run("x = bytearray(10 << 20)")
    argv = s._channel.transport.proc.args
    groups = [a for a in argv if a.endswith("/cgroup.procs")]
    s.close()
    for procs in groups:
        assert not os.path.exists(os.path.dirname(procs))
    assert s.workspace is None or not os.path.exists(s.workspace)


def test_a_fork_bomb_in_one_session_does_not_starve_another(sandbox):
    with sandbox.session() as bomber, sandbox.session() as other:
        bomb = threading.Thread(target=bomber.run, args=("import os\nwhile True:\n    try:\n        os.fork()\n"
                                                        "    except OSError:\n        pass",), kwargs={"timeout": 4})
        bomb.start()
        time.sleep(1)
        r = other.run("import subprocess\nprint(subprocess.run(['true']).returncode)", timeout=30)
        bomb.join()
        assert r.ok, r
        assert r.stdout == "0\n", r
        assert_usable(bomber)


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can set immutable flags for the unisolated cell to leave")
def test_unisolated_workspace_is_removed_whatever_the_cell_left(tmp_path):
    with pytest.warns(RuntimeWarning, match="UNISOLATED"):
        sb = make_sandbox("local", isolation="none", pool_size=0, preimport=(), workspace_root=str(tmp_path),
                          **TEST_LIMITS)
    try:
        with sb.session() as s:
            r = s.run(HOSTILE.replace("os.chdir('/workspace')", f"os.chdir({s.workspace!r})").replace(
                "while True:\n            f.write", "for _ in range(4):\n            f.write"), timeout=120)
            assert r.ok, r
            assert r.stdout.startswith(("flags set", "flags refused")), r
    finally:
        sb.close()
    assert list(tmp_path.iterdir()) == []
