"""Inventory fingerprints and named look-ups (issue 21 §4), on both backends (the `session` fixture).

A rewrite that keeps the size and sets the old mtime back must still change the fingerprint (inode, ctime,
content hash); the paths asked for by name are looked up whatever the entry cap, so a flood can neither
hide a deletion nor make a present file look deleted; a named path is never followed or read if it is
not a regular file.
"""
from __future__ import annotations

import hashlib

import pytest

pytestmark = pytest.mark.timeout(300)


def _fingerprint(info):
    return (info.kind, info.size, info.mtime_ns, info.inode, info.ctime_ns, info.sha256)


def test_a_rewrite_in_place_with_the_old_mtime_changes_the_fingerprint(session):
    # written by the kernel itself: only a file's owner may set its times back (where kernels have own uids)
    assert session.run("open('X_test.csv', 'wb').write(b'id,a\\n1,2\\n3,4\\n')").ok
    before = session.inventory(include=["X_test.csv"], hash_max=1 << 16).by_path()["X_test.csv"]
    assert before.sha256 == hashlib.sha256(b"id,a\n1,2\n3,4\n").hexdigest()
    r = session.run("import os, time\nst = os.stat('X_test.csv')\ntime.sleep(0.05)\n"
                    "with open('X_test.csv', 'r+b') as f:\n    f.write(b'id,a\\n9,9\\n9,9\\n')\n"
                    "os.utime('X_test.csv', ns=(st.st_atime_ns, st.st_mtime_ns))\n"
                    "print(os.stat('X_test.csv').st_size == st.st_size, os.stat('X_test.csv').st_mtime_ns == "
                    "st.st_mtime_ns)")
    assert r.stdout == "True True\n", r
    after = session.inventory(include=["X_test.csv"], hash_max=1 << 16).by_path()["X_test.csv"]
    assert (after.size, after.mtime_ns) == (before.size, before.mtime_ns)  # what the old fingerprint saw
    assert after.sha256 != before.sha256
    assert after.ctime_ns != before.ctime_ns
    assert _fingerprint(after) != _fingerprint(before)
    unhashed = session.inventory().by_path()["X_test.csv"]  # not named: no hash, the ctime still tells
    assert unhashed.sha256 is None
    assert unhashed.ctime_ns == after.ctime_ns
    r = session.run("import os\nopen('new.csv', 'wb').write(open('X_test.csv', 'rb').read())\n"
                    "st = os.stat('X_test.csv')\nos.rename('new.csv', 'X_test.csv')\n"
                    "os.utime('X_test.csv', ns=(st.st_atime_ns, st.st_mtime_ns))")
    assert r.ok, r
    renamed = session.inventory().by_path()["X_test.csv"]
    assert renamed.inode != after.inode  # the same bytes, size and mtime, but another file


def test_named_paths_are_looked_up_past_the_cap(session):
    session.write_file("train.csv", "id,y\n1,2\n")
    session.write_file("X_test.csv", "id,a\n1,2\n")
    r = session.run("import os\nos.makedirs('a', exist_ok=True)\nfor i in range(20_000):\n"
                    "    open(f'a/{i}', 'w').close()\nos.remove('X_test.csv')", timeout=120)
    assert r.ok, r
    inv = session.inventory(max_entries=1000, include=["train.csv", "X_test.csv"], hash_max=1 << 16)
    assert inv.truncated
    assert inv.included == ("train.csv", "X_test.csv")
    files = inv.by_path()
    assert files["train.csv"].sha256 == hashlib.sha256(b"id,y\n1,2\n").hexdigest()  # present, whatever the cap
    assert "X_test.csv" not in files  # looked up and absent: a real deletion


def test_included_paths_never_follow_links_or_block(session):
    session.write_file("secret.txt", "hidden")
    r = session.run("import os\nos.symlink('secret.txt', 'link.csv')\nos.symlink('/etc/passwd', 'out.csv')\n"
                    "os.mkfifo('fifo.csv')")
    assert r.ok, r
    inv = session.inventory(include=["link.csv", "out.csv", "fifo.csv", "../etc/passwd", "missing.csv"],
                            hash_max=1 << 16)
    files = inv.by_path()
    assert files["link.csv"].kind == "symlink"
    assert files["link.csv"].sha256 is None
    assert files["out.csv"].sha256 is None
    assert files["fifo.csv"].kind == "fifo"
    assert files["fifo.csv"].sha256 is None
    assert "../etc/passwd" not in files
    assert "missing.csv" not in files
