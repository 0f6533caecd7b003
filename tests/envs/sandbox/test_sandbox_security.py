"""Hostile cells, one property per test, on every backend: each is contained, reported in the
ExecResult, and the same session runs the next cell."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.sandbox_helpers import assert_usable, kill_in_sandbox

PROJECT_FILE = str(Path(__file__).resolve())


@pytest.fixture(autouse=True)
def _isolated_only(sandbox):
    if getattr(sandbox, "isolation", None) == "none":  # a fork bomb would hit the host itself
        pytest.skip("the local backend runs unisolated here (no usable bwrap: apt-get install bubblewrap)")


def test_fork_bomb_is_contained(session):
    r = session.run("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass", timeout=2)
    assert r.timed_out
    assert not r.ok
    assert r.error == "timeout after 2 s"
    # pid 1, supervisor, kernel, its `run`: no bomb left (reaping a bomb's last children can take
    # seconds on a loaded machine)
    count_pids = "import os, time\nfor _ in range(100):\n    n = sum(p.isdigit() for p in os.listdir('/proc'))\n" \
                 "    if n < 8: break\n    time.sleep(0.1)\nprint(n)"
    count = session.run(count_pids)
    assert int(count.stdout) < 8, count
    assert_usable(session)


def test_memory_bomb_is_contained(session):
    r = session.run("chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 2**20))", timeout=20)
    assert not r.ok
    assert not r.timed_out
    assert "MemoryError" in r.error or r.interpreter_restarted, r
    assert_usable(session)


def test_single_huge_allocation_fails_cleanly(session):
    r = session.run("x = bytearray(64 * 2**30)")
    assert not r.ok
    assert r.error.startswith("MemoryError")
    assert not r.interpreter_restarted
    assert_usable(session)


def test_infinite_loop_times_out_and_keeps_state(session):
    session.run("kept = 'yes'")
    r = session.run("while True:\n    pass", timeout=1)
    assert r.timed_out
    assert not r.ok
    assert "KeyboardInterrupt" in r.stderr
    assert not r.interpreter_restarted  # interrupted, not killed: variables survive
    assert session.run("print(kept)").stdout == "yes\n"


def test_sleep_past_timeout_times_out(session):
    r = session.run("import time\ntime.sleep(300)", timeout=1)
    assert r.timed_out
    assert not r.ok
    assert r.error == "timeout after 1 s"
    assert_usable(session)


def test_loop_that_ignores_interrupt_is_killed(session):
    code = "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    pass"
    r = session.run(code, timeout=1)
    assert r.timed_out
    assert r.interpreter_restarted
    assert not r.ok
    assert_usable(session)


def test_100mb_of_stdout_is_truncated_with_marker(session):
    r = session.run("import sys\nfor _ in range(100):\n    sys.stdout.write('x' * 2**20)", timeout=120)
    assert r.ok
    assert r.truncated
    assert "bytes of output truncated by the sandbox" in r.stdout
    assert len(r.stdout) < session.limits.max_output_bytes + 200
    assert_usable(session)


def test_background_process_does_not_outlive_its_cell(session):
    code = ("import subprocess, sys\n"
            "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)  # bg-marker'],\n"
            "                 start_new_session=True)\n"
            "print('started')")
    r = session.run(code)
    assert r.ok
    assert "killed 1 process(es) the cell left running" in r.stderr
    probe = ("import os\nalive = []\nfor p in os.listdir('/proc'):\n    try:\n"
             "        alive += [p] if b'bg-marker' in open(f'/proc/{p}/cmdline', 'rb').read() else []\n"
             "    except OSError:\n        pass\nprint(alive)")
    assert session.run(probe).stdout == "[]\n"


def test_double_forked_daemon_does_not_outlive_its_cell(session):
    code = ("import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(300)\n"
            "    os._exit(0)\nos.wait()")
    r = session.run(code)
    assert r.ok, r
    assert "killed 1 process(es)" in r.stderr, r
    assert_usable(session)


@pytest.mark.parametrize("path", [PROJECT_FILE, "/etc/shadow"], ids=["project_file", "etc_shadow"])
def test_cannot_read_outside_workspace(session, path):
    r = session.run(f"print(open({path!r}).read())")
    assert not r.ok, r
    assert r.error.split(":")[0] in ("FileNotFoundError", "PermissionError"), r
    assert r.stdout == ""


@pytest.mark.parametrize("path", [str(Path(PROJECT_FILE).parent / "sandbox-was-here"), "/usr/sandbox-was-here"],
                         ids=["project_dir", "usr"])
def test_cannot_write_outside_workspace(session, path):
    r = session.run(f"open({path!r}, 'w').write('x')")
    assert not r.ok, r
    assert r.error.split(":")[0] in ("FileNotFoundError", "PermissionError", "OSError"), r
    assert not os.path.exists(path)
    assert_usable(session)


def test_private_tmp_is_not_the_hosts(session, tmp_path):
    name = f"/tmp/sandbox-tmp-{os.getpid()}"
    assert session.run(f"open({name!r}, 'w').write('x')").ok  # /tmp is writable inside...
    assert not os.path.exists(name)  # ...but it is not the host's


def test_cannot_connect_to_host_loopback(session, loopback_server):
    port, accepted = loopback_server
    r = session.run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)", timeout=10)
    assert not r.ok, r
    assert r.error.split(":")[0] in ("ConnectionRefusedError", "OSError", "TimeoutError"), r
    assert accepted == []
    assert_usable(session)


@pytest.mark.parametrize("code", ["import os; os.kill(os.getpid(), 9)", "import os; os._exit(3)"],
                         ids=["sigkill_self", "exit"])
def test_killing_the_interpreter_from_inside_restarts_it(session, code):
    session.write_file("kept.txt", "still here")
    r = session.run(code)
    assert not r.ok, r
    assert r.interpreter_restarted, r
    assert r.error.startswith("interpreter died"), r
    assert_usable(session)
    assert session.read_file("kept.txt") == b"still here"  # the workspace survives


@pytest.mark.parametrize("code", ["import os; os.kill(os.getppid(), 9)", "import os; os.kill(-1, 9)"],
                         ids=["kill_supervisor", "kill_all"])
def test_killing_the_supervisor_or_everything_from_inside_is_contained(sandbox, session, code):
    session.write_file("kept.txt", "still here")
    assert session.run("other = 'alive'", kernel="other").ok
    r = session.run(code)
    if sandbox.separate_kernel_uids:  # a cell may signal only its own kernel's processes
        assert not r.interpreter_restarted, r
        assert session.run("print(other)", kernel="other").stdout == "alive\n"
    else:  # one uid for the whole session: the keeper replaces the supervisor it killed
        assert r.interpreter_restarted, r
        assert r.error.startswith("interpreter died"), r
    assert_usable(session)
    assert session.read_file("kept.txt") == b"still here"  # the workspace survives either way


def test_module_planted_in_workspace_is_not_imported_by_a_restarting_supervisor(session):
    """The supervisor imports its own modules before it drops privileges; a cell must not shadow them."""
    session.write_file("json.py", "import os\nopen('/workspace/planted-ran', 'w').write(str(os.getuid()))\n")
    session.write_file("mymod.py", "VALUE = 7\n")
    assert session.run("import mymod\nprint(mymod.VALUE)").stdout == "7\n"  # cells still import from the workspace
    kill_in_sandbox(session, session._channel.ready["pid"])  # the host then starts a new supervisor
    r = session.run("1")
    assert r.interpreter_restarted
    assert_usable(session)
    assert "planted-ran" not in session.list_files()
