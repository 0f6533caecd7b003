"""Kernels of different roles cannot touch each other, and nothing a cell leaves runs in another turn."""
from __future__ import annotations

import re
import time
from textwrap import dedent

import pytest

from tests.sandbox_helpers import assert_usable

pytestmark = pytest.mark.timeout(120)

PTRACE = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
          "def ptrace(request, pid):\n"
          "    libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]\n"
          "    return libc.ptrace(request, pid, None, None), ctypes.get_errno()\n")

PROBE = dedent("""\
    import os
    alive = []
    for p in os.listdir('/proc'):
        try:
            alive += [p] if b'MARKER' in open(f'/proc/{p}/cmdline', 'rb').read() else []
        except OSError:
            pass
    print(alive)
    """)  # the pids of processes whose command line holds MARKER


@pytest.fixture
def victim(sandbox, session):
    """Kernel "b" with state; yields its pid. Needs kernels with their own uids."""
    if not sandbox.separate_kernel_uids:
        pytest.skip("kernels share one uid here (local backend started without root): they may signal each other")
    r = session.run("import os\nstate = 'intact'\nprint(os.getpid())", kernel="b")
    yield int(r.stdout)
    after = session.run("print(state)", kernel="b")
    assert after.ok, after
    assert not after.interpreter_restarted, after
    assert after.stdout == "intact\n", after


@pytest.mark.parametrize("sig", ["SIGSTOP", "SIGKILL", "SIGCONT", "SIGINT", "SIGTERM"])
def test_a_kernel_cannot_signal_another(session, victim, sig):
    r = session.run(f"import os, signal\nos.kill({victim}, signal.{sig})", kernel="a")
    assert not r.ok, r
    assert r.error.startswith("PermissionError"), r


def test_a_kernel_cannot_trace_or_read_another(session, victim):
    code = PTRACE + dedent(f"""\
        print(ptrace(16, {victim}), ptrace(0x4206, {victim}))  # PTRACE_ATTACH, PTRACE_SEIZE
        for name in ('mem', 'environ', 'maps'):
            try:
                open('/proc/{victim}/' + name, 'rb').read(1)
                print('READ', name)
            except PermissionError:
                pass
        try:
            os.listdir('/proc/{victim}/fd')
            print('READ fd')
        except PermissionError:
            pass
        """)
    r = session.run(code, kernel="a")
    assert r.ok, r
    assert r.stdout == "(-1, 1) (-1, 1)\n", r  # EPERM twice; nothing of /proc/<b> beyond what all may read


def test_a_kernel_cannot_touch_the_supervisor(session, sandbox):
    if not sandbox.separate_kernel_uids:
        pytest.skip("kernels share the supervisor's uid here (local backend started without root)")
    code = PTRACE + dedent("""\
        import resource, signal
        sup, out = os.getppid(), []
        for attempt in (lambda: os.kill(sup, signal.SIGSTOP), lambda: os.kill(sup, signal.SIGKILL),
                        lambda: resource.prlimit(sup, resource.RLIMIT_NOFILE, (0, 0))):
            try:
                attempt()
                out.append('done')
            except PermissionError:
                out.append('refused')
        out.append(ptrace(16, sup))
        if os.fork() == 0:  # a child in a session of its own
            os.setsid()
            try:
                os.kill(sup, 9)
            finally:
                os._exit(0)
        os.wait()
        print(out)
        """)
    r = session.run(code)
    assert r.ok, r
    assert r.stdout == "['refused', 'refused', 'refused', (-1, 1)]\n", r
    assert_usable(session)


def test_kernels_cannot_make_namespaces_or_raise_privileges(session):
    code = dedent("""\
        import ctypes, os
        libc = ctypes.CDLL(None, use_errno=True)
        print(libc.unshare(0x10000000), libc.unshare(0x20000000))  # a user namespace, a pid namespace
        try:
            open('/proc/self/oom_score_adj', 'w').write('-1000')
            print('lowered')
        except OSError:
            print('kept')
        print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])
        """)
    r = session.run(code)
    assert r.ok, r
    assert r.stdout == "-1 -1\nkept\n0000000000000000\n", r


def test_a_thread_left_running_never_runs_in_another_turn(session):
    beat = dedent("""\
        import threading, time
        def beat():
            n = 0
            while True:
                n += 1
                open('beat', 'w').write(str(n))
                time.sleep(0.01)
        threading.Thread(target=beat, daemon=True).start()
        time.sleep(0.1)
        """)
    r = session.run(beat, kernel="a")
    assert r.ok, r
    assert "1 thread(s) started by this kernel's cells are still alive" in r.stderr, r
    first = session.read_file("beat")
    time.sleep(0.3)  # between turns: the kernel is paused
    assert session.read_file("beat") == first
    watch = "import time\nbefore = open('beat').read()\ntime.sleep(0.5)\nprint(before == open('beat').read())"
    seen = session.run(watch, kernel="b")
    assert seen.stdout == "True\n", seen  # b's turn: a's thread did not run
    session.run("import time\ntime.sleep(0.2)", kernel="a")
    assert int(session.read_file("beat")) > int(first)  # a's own turn: it runs again


def test_a_finalizer_that_starts_a_thread_never_runs_it_in_another_turn(session):
    """Garbage with a finalizer may be collected at any allocation, even after the cell's code is done."""
    plant = dedent("""\
        import gc, threading, time
        def beat():
            n = 0
            while True:
                n += 1
                open('beat', 'w').write(str(n))
                time.sleep(0.01)
        class Seed:
            def __del__(self):
                threading.Thread(target=beat, daemon=True).start()
        seed = Seed()
        seed.cycle = seed  # only the cyclic collector frees it, whenever it next runs
        del seed
        gc.set_threshold(10)
        """)
    assert session.run(plant, kernel="a").ok
    assert session.run("import gc\ngc.collect()\nx = [[] for _ in range(1000)]", kernel="a").ok
    watch = ("import time, os\nread = lambda: open('beat').read() if os.path.exists('beat') else ''\n"
             "before = read()\ntime.sleep(0.5)\nprint(before == read())")
    assert session.run(watch, kernel="b").stdout == "True\n"


def test_a_timer_left_armed_never_runs_its_handler_in_another_turn(session):
    arm = dedent("""\
        import os, signal, subprocess, sys
        def tick(*_):
            n = int(open('ticks').read()) if os.path.exists('ticks') else 0
            open('ticks', 'w').write(str(n + 1))
            if n % 5 == 4:
                subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', 'from-a-handler'])
        signal.signal(signal.SIGALRM, tick)
        signal.setitimer(signal.ITIMER_REAL, 0.02, 0.02)
        """)
    assert session.run(arm, kernel="a").ok
    first = session.read_file("ticks") if "ticks" in session.list_files() else b"0"
    watch = ("import time, os\nbefore = open('ticks').read() if os.path.exists('ticks') else '0'\ntime.sleep(0.5)\n"
             "after = open('ticks').read() if os.path.exists('ticks') else '0'\nprint(before == after)")
    assert session.run(watch, kernel="b").stdout == "True\n"  # a is stopped: its timer's handler cannot run
    assert (session.read_file("ticks") if "ticks" in session.list_files() else b"0") == first
    r = session.run("import time\ntime.sleep(0.5)", kernel="a")  # its own turn: the handler runs, forks
    assert int(session.read_file("ticks")) > int(first), r
    assert re.search(r"killed \d+ process\(es\) the cell left running", r.stderr), r
    assert session.run(PROBE.replace("MARKER", "from-a-handler"), kernel="b").stdout == "[]\n"


def test_a_process_forked_later_by_a_left_thread_does_not_survive(session):
    code = dedent("""\
        import threading, time, subprocess, sys
        def later():
            time.sleep(0.3)
            subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(300)', 'forked-later'],
                             start_new_session=True)
        threading.Thread(target=later, daemon=True).start()
        """)
    assert session.run(code, kernel="a").ok
    time.sleep(0.6)  # the thread is paused: it cannot fork now
    probe = PROBE.replace("MARKER", "forked-later")
    assert session.run(probe, kernel="b").stdout == "[]\n"
    for _ in range(5):  # its turns: the thread forks (in the first, unless the machine is slow), the child is killed
        r = session.run("import time\ntime.sleep(1)", kernel="a")
        assert r.ok, r
        assert session.run(probe, kernel="b").stdout == "[]\n", r
        if "killed 1 process(es) the cell left running" in r.stderr:
            break
    else:
        raise AssertionError(f"the thread's child was never reported killed: {r}")


def test_setsid_and_double_fork_from_a_thread_do_not_survive(session):
    code = dedent("""\
        import os, threading, time
        def escape():
            pid = os.fork()
            if pid == 0:
                os.setsid()
                if os.fork() == 0:
                    time.sleep(300)
                os._exit(0)
            os.waitpid(pid, 0)
        t = threading.Thread(target=escape)
        t.start()
        t.join()
        """)
    r = session.run(code)
    assert r.ok, r
    assert "killed 1 process(es)" in r.stderr, r
    assert_usable(session)


def test_kernel_names_are_capped(sandbox, session):
    """The host decides kernel names; a session holds at most 64 kernels (their uids, pipes, processes), and
    a kernel that the session's process limit leaves no room for is a failed cell, not an exception."""
    started = [session.run("1", kernel=f"k{i}") for i in range(1, 40)]  # TEST_LIMITS allow 32 processes
    refused = [r for r in started if not r.ok]
    assert all(r.ok for r in started[: 32 - 8])  # keeper/init, supervisor, main: room for the first ones
    if sandbox.session_cgroup:  # a limit on the session's processes in total
        assert refused, refused[:1]
        assert "process limit" in refused[0].error, refused[:1]
    with pytest.raises(ValueError, match="at most 64 kernels"):
        for i in range(40, 70):
            session.run("1", kernel=f"k{i}")
    with pytest.raises(ValueError, match="at most 200 characters"):
        session.run("1", kernel="k" * 201)
    assert_usable(session)
