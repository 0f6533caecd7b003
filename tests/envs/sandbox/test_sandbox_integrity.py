"""Cell results cannot be forged: what a cell does to its kernel affects at most its own result, and the
next cell runs in a kernel that tells the truth. On every backend; each test bounded in time."""
from __future__ import annotations

import pytest

from tests.sandbox_helpers import assert_usable

pytestmark = pytest.mark.timeout(120)

FRAME = ("import json, os, struct\n"
         "def frame(token, ok=True):\n"
         "    meta = json.dumps({'token': token, 'ok': ok, 'error': None, 'tampered': []}).encode()\n"
         "    return struct.pack('>II', len(meta), 0) + meta\n")
STEAL = ("import sys\n"
         "f = sys._getframe()\n"
         "while f is not None and 'token' not in f.f_locals:\n"
         "    f = f.f_back\n"
         "token = f.f_locals['token']\n")


def assert_truthful(session, kernel: str = "main") -> None:
    """The kernel still tells the truth: a cell that prints and raises is reported as exactly that."""
    r = session.run("print('before')\n1/0", kernel=kernel)
    assert not r.ok, r
    assert r.error == "ZeroDivisionError: division by zero", r
    assert r.stdout == "before\n", r
    assert_usable(session)


def test_forged_frame_of_the_right_shape_is_refused(session):
    r = session.run(FRAME + "os.write(4, frame('0' * 32))\nraise ValueError('really failed')")
    assert not r.ok, r
    assert r.interpreter_restarted, r
    assert "tampered" in r.error, r
    assert_truthful(session)


def test_frame_with_a_stolen_token_counts_for_its_own_cell_only(session):
    r = session.run(FRAME + STEAL + "os.write(4, frame(token))\nprint('said ok')\nraise ValueError('really failed')")
    assert r.ok or "tampered" in r.error, r  # it may lie about itself, as try/except could
    nxt = session.run("print('before')\n1/0")  # the real, now stale, frame may land in this turn: caught
    assert not nxt.ok, nxt
    assert nxt.error.startswith("ZeroDivisionError") or "tampered" in nxt.error, nxt
    assert_truthful(session)
    assert session.run("print(1)", kernel="other").stdout == "1\n"


def test_huge_frame_header_is_refused_before_it_is_read(session):
    code = "import os, struct, time\nos.write(4, struct.pack('>II', 2**31, 0) + b'x' * 4096)\ntime.sleep(30)"
    r = session.run(code, timeout=60)
    assert not r.ok, r
    assert not r.timed_out, r
    assert "tampered" in r.error, r
    assert r.interpreter_restarted, r
    assert_truthful(session)


def test_garbage_on_the_result_output_is_tampering(session):
    r = session.run("import os\nos.write(4, b'\\x00\\x00\\x00\\x05\\x00\\x00\\x00\\x00{bad}')")
    assert not r.ok, r
    assert "tampered" in r.error, r
    assert r.interpreter_restarted, r
    assert_truthful(session)


@pytest.mark.parametrize("code", [
    "import os\nos.close(3)",
    "import os\nos.close(4)",
    "import os\nos.dup2(1, 4)",
    "import os\nos.dup2(os.open('/dev/null', os.O_WRONLY), 1)",
    "import os\nos.close(1)\nos.close(2)",
], ids=["close_input", "close_result", "result_into_stdout", "stdout_to_devnull", "close_outputs"])
def test_closing_or_replacing_the_kernels_fds_restarts_it(session, code):
    session.run("kept = 1")
    r = session.run(code)
    assert not r.ok, r
    assert r.interpreter_restarted, r
    assert_truthful(session)


@pytest.mark.parametrize("code", [
    "import builtins\nbuiltins.print = lambda *a, **k: None",
    "import builtins\nbuiltins.len = lambda x: 0",
    "import builtins\nbuiltins.isinstance = lambda *a: False",
    "import sys\nsys.modules['mappa_inside.kernel']._one_line = lambda e: 'fine'",
    "import sys\nk = sys.modules['mappa_inside.kernel']\n"
    "k._run_cell.__code__ = (lambda code, ns, n: (True, None, False)).__code__",
    "import os\nos.fstat = lambda fd: None",
    "import sys\nsys.settrace(lambda *a: None)",
    "import sys\nsys.setprofile(lambda *a: None)",
], ids=["print", "len", "isinstance", "kernel_global", "kernel_code", "os_fstat", "settrace", "setprofile"])
def test_tampering_with_the_kernel_restarts_it_and_says_so(session, code):
    r = session.run(code)
    assert not r.ok, r
    assert r.interpreter_restarted, r
    assert "tampered" in r.error, r
    assert_truthful(session)


@pytest.mark.parametrize("code", [
    "import sys, io\nsys.stdout = io.StringIO()\nsys.stderr = io.StringIO()\nprint('hidden')",
    "import os\nos._exit = lambda code: None",
    "import json\njson.dumps = lambda *a, **k: '{}'\njson.loads = lambda *a, **k: {}",
    "import struct\nstruct.pack = lambda *a: b''",
    "import atexit\natexit.register(lambda: print('atexit ran'))",
    "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)",
], ids=["replace_stdout", "replace_os_exit", "replace_json", "replace_struct", "atexit", "ignore_sigint"])
def test_benign_changes_do_not_reach_the_next_cell(session, code):
    session.run("kept = 'yes'")
    session.run(code)
    r = session.run("print(kept)")
    assert r.stdout == "kept\n".replace("kept", "yes"), r
    assert r.ok, r
    assert_truthful(session)
    timeout = session.run("while True:\n    pass", timeout=1)  # the deadline still interrupts, state kept
    assert timeout.timed_out, timeout
    assert not timeout.interpreter_restarted, timeout
    assert "atexit ran" not in session.run("print(kept)").stdout


def test_late_output_is_never_given_to_another_kernel(session):
    start = ("import threading, time, os\n"
             "def late():\n    time.sleep(0.3)\n    print('LATE', flush=True)\n    os.write(2, b'LATE-ERR')\n"
             "threading.Thread(target=late, daemon=True).start()\nprint('early')")
    assert session.run(start, kernel="a").stdout == "early\n"
    r = session.run("import time\ntime.sleep(1)\nprint('b')", kernel="b")
    assert r.stdout == "b\n", r
    assert r.stderr == "", r  # a's thread was paused during b's turn
    later = session.run("import time\ntime.sleep(1)", kernel="a")
    assert "LATE" in later.stdout  # it runs again only in its own kernel's turn


def test_output_cap_holds_for_direct_fd_writes_and_children(session):
    code = ("import os, subprocess, sys\n"
            "for _ in range(40):\n    os.write(1, b'o' * 2**18)\n    os.write(2, b'e' * 2**18)\n"
            "subprocess.run([sys.executable, '-c', 'import os\\nfor _ in range(40): os.write(1, b\"c\" * 2**18)'])")
    r = session.run(code, timeout=60)
    assert r.truncated, r
    assert r.ok, r
    assert len(r.stdout) < session.limits.max_output_bytes + 200
    assert len(r.stderr) < session.limits.max_output_bytes + 200


def test_cell_that_ends_its_turn_early_cannot_hide_that_it_ran_on(session):
    """A stolen token lets a cell end its own turn early; the rest of it runs in its kernel's next turn,
    whose real result frame then carries a stale token: tampering, a fresh kernel, said so."""
    session.run(FRAME + STEAL + "os.write(4, frame(token))\nimport time\ntime.sleep(0.5)")
    r = session.run("import time\ntime.sleep(1)\nprint('next')")
    assert not r.ok, r
    assert r.interpreter_restarted, r
    assert "tampered" in r.error, r
    assert_truthful(session)


def test_control_sequences_and_bad_utf8_in_output_are_escaped(session):
    r = session.run("import sys, os\nprint('\\x1b[2Jgone\\rover')\nos.write(1, b'\\xff\\xfe\\x00')\n"
                    "sys.stderr.write('\\ud800\\u202e')\nraise ValueError('\\x1b[31m')")
    assert "\x1b" not in r.stdout + r.stderr + r.error
    assert "\r" not in r.stdout
    assert "\x00" not in r.stdout
    assert "\\x1b[2Jgone\\rover" in r.stdout
    assert "\\xff\\xfe\\x00" in r.stdout
    (r.stdout + r.stderr + r.error).encode("utf-8")
