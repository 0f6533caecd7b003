"""Kernels of different roles cannot touch each other, and nothing a cell leaves runs in another turn."""
from __future__ import annotations

import time

import pytest

from tests.sandbox_fixtures import assert_usable, docker_sandbox, local_sandbox, sandbox, session  # noqa: F401

pytestmark = pytest.mark.timeout(120)

PTRACE = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
          "def ptrace(request, pid):\n"
          "    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]\n"
          "    return libc.ptrace(request, pid, None, None), ctypes.get_errno()\n")


@pytest.fixture
def victim(sandbox, session):
    """Kernel "b" with state; yields its pid. Needs kernels with their own uids."""
    if not sandbox.separate_kernel_uids:
        pytest.skip("kernels share one uid here (local backend started without root): they may signal each other")
    r = session.run("import os\nstate = 'intact'\nprint(os.getpid())", kernel="b")
    yield int(r.stdout)
    after = session.run("print(state)", kernel="b")
    assert after.ok and not after.interpreter_restarted and after.stdout == "intact\n", after


@pytest.mark.parametrize("sig", ["SIGSTOP", "SIGKILL", "SIGCONT", "SIGINT", "SIGTERM"])
def test_a_kernel_cannot_signal_another(session, victim, sig):
    r = session.run(f"import os, signal\nos.kill({victim}, signal.{sig})", kernel="a")
    assert not r.ok and r.error.startswith("PermissionError"), r


def test_a_kernel_cannot_trace_or_read_another(session, victim):
    code = PTRACE + (f"print(ptrace(16, {victim}), ptrace(0x4206, {victim}))\n"  # PTRACE_ATTACH, PTRACE_SEIZE
                     f"for name in ('mem', 'environ', 'fd', 'maps'):\n"
                     f"    try:\n        os.listdir('/proc/{victim}/fd') if name == 'fd' else open('/proc/{victim}/' + name, 'rb').read(1)\n"
                     "        print('READ', name)\n    except PermissionError:\n        pass\n")
    r = session.run(code, kernel="a")
    assert r.ok and r.stdout == "(-1, 1) (-1, 1)\n", r  # EPERM twice; nothing of /proc/<b> beyond what all may read


def test_a_kernel_cannot_touch_the_supervisor(session, sandbox):
    if not sandbox.separate_kernel_uids:
        pytest.skip("kernels share the supervisor's uid here (local backend started without root)")
    code = PTRACE + ("import resource, signal\nsup = os.getppid()\nout = []\n"
                     "for attempt in (lambda: os.kill(sup, signal.SIGSTOP), lambda: os.kill(sup, signal.SIGKILL),\n"
                     "                lambda: resource.prlimit(sup, resource.RLIMIT_NOFILE, (0, 0))):\n"
                     "    try:\n        attempt()\n        out.append('done')\n    except PermissionError:\n        out.append('refused')\n"
                     "out.append(ptrace(16, sup))\n"
                     "if os.fork() == 0:\n    os.setsid()\n    try:\n        os.kill(sup, 9)\n    finally:\n        os._exit(0)\n"
                     "os.wait()\nprint(out)")
    r = session.run(code)
    assert r.ok and r.stdout == "['refused', 'refused', 'refused', (-1, 1)]\n", r
    assert_usable(session)


def test_kernels_cannot_make_namespaces_or_raise_privileges(session):
    code = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "print(libc.unshare(0x10000000), libc.unshare(0x20000000))\n"  # a user namespace, a pid namespace
            "try:\n    open('/proc/self/oom_score_adj', 'w').write('-1000')\n    print('lowered')\nexcept OSError:\n    print('kept')\n"
            "print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])")
    r = session.run(code)
    assert r.ok and r.stdout == "-1 -1\nkept\n0000000000000000\n", r


def test_a_thread_left_running_never_runs_in_another_turn(session):
    beat = ("import threading, time\n"
            "def beat():\n    n = 0\n    while True:\n        n += 1\n        open('beat', 'w').write(str(n))\n        time.sleep(0.01)\n"
            "threading.Thread(target=beat, daemon=True).start()\ntime.sleep(0.1)")
    r = session.run(beat, kernel="a")
    assert r.ok and "thread(s) besides its main one" in r.stderr, r
    first = session.read_file("beat")
    time.sleep(0.3)  # between turns: the kernel is paused
    assert session.read_file("beat") == first
    seen = session.run("import time\na = open('beat').read()\ntime.sleep(0.5)\nprint(a == open('beat').read())", kernel="b")
    assert seen.stdout == "True\n", seen  # b's turn: a's thread did not run
    session.run("import time\ntime.sleep(0.2)", kernel="a")
    assert int(session.read_file("beat")) > int(first)  # a's own turn: it runs again


def test_a_process_forked_later_by_a_left_thread_does_not_survive(session):
    code = ("import threading, time, subprocess, sys\n"
            "def later():\n    time.sleep(0.3)\n"
            "    subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', 'forked-later'], start_new_session=True)\n"
            "threading.Thread(target=later, daemon=True).start()")
    assert session.run(code, kernel="a").ok
    time.sleep(0.6)  # the thread is paused: it cannot fork now
    probe = ("import os\nalive = []\nfor p in os.listdir('/proc'):\n    try:\n"
             "        alive += [p] if b'forked-later' in open(f'/proc/{p}/cmdline', 'rb').read() else []\n"
             "    except OSError:\n        pass\nprint(alive)")
    assert session.run(probe, kernel="b").stdout == "[]\n"
    r = session.run("import time\ntime.sleep(1)", kernel="a")  # its turn: the thread forks, and the child is killed
    assert r.ok and "killed 1 process(es) the cell left running" in r.stderr, r
    assert session.run(probe, kernel="b").stdout == "[]\n"


def test_setsid_and_double_fork_from_a_thread_do_not_survive(session):
    code = ("import os, threading, time\n"
            "def escape():\n    pid = os.fork()\n    if pid == 0:\n        os.setsid()\n        if os.fork() == 0:\n"
            "            time.sleep(300)\n        os._exit(0)\n    os.waitpid(pid, 0)\n"
            "t = threading.Thread(target=escape)\nt.start()\nt.join()")
    r = session.run(code)
    assert r.ok and "killed 1 process(es)" in r.stderr, r
    assert_usable(session)
