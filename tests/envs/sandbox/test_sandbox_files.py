"""Host-side reads of the workspace: no link is followed, nothing blocks, every read is capped and
streamed, any file name works, and any depth. On every backend; each test bounded in time."""
from __future__ import annotations

import time

import pytest

from mappa_envs.sandbox import FileTooLargeError, NotRegularFileError, make_sandbox, raw_name
from tests.sandbox_helpers import BACKENDS, TEST_LIMITS, assert_usable, require_docker

pytestmark = pytest.mark.timeout(180)


@pytest.mark.parametrize("setup,path", [
    ("os.symlink('/etc/passwd', 'sub.csv')", "sub.csv"),
    ("os.symlink('/etc', 'etc')", "etc/passwd"),
    ("os.mkdir('d')\nos.symlink('..', 'd/up')", "d/up/d/x"),
    ("os.symlink('/dev/zero', 'zero')", "zero"),
], ids=["file_link", "dir_link", "relative_link", "device_link"])
def test_reads_and_writes_never_follow_links(session, setup, path):
    assert session.run(f"import os\n{setup}").ok
    with pytest.raises(NotRegularFileError, match="symbolic link"):
        session.read_file(path)
    with pytest.raises(NotRegularFileError, match="symbolic link"):
        session.write_file(path, "x")
    assert session.run("import os\nprint(open('/etc/passwd').read() != 'x')").stdout == "True\n"


def test_fifo_never_blocks_a_read_or_a_write(session):
    assert session.run("import os\nos.mkfifo('submission.csv')").ok
    t = time.monotonic()
    with pytest.raises(NotRegularFileError, match="FIFO"):
        session.read_file("submission.csv")
    with pytest.raises(NotRegularFileError, match="FIFO"):
        session.write_file("submission.csv", "a,b\n")
    assert time.monotonic() - t < 30
    entry = session.inventory().by_path()["submission.csv"]
    assert entry.kind == "fifo"
    assert entry.size == 0


def test_device_nodes_cannot_be_made(session):
    r = session.run("import os, stat\nos.mknod('dev', stat.S_IFCHR | 0o666, os.makedev(1, 5))")
    assert not r.ok, r
    assert r.error.startswith("PermissionError"), r


def test_unreadable_file_is_a_clear_error(session):
    assert session.run("import os\nopen('secret.csv', 'w').write('x')\nos.chmod('secret.csv', 0)").ok
    with pytest.raises(PermissionError):
        session.read_file("secret.csv")
    assert session.inventory().by_path()["secret.csv"].kind == "file"


def test_reads_are_capped(session):
    assert session.run("open('big.bin', 'wb').write(b'x' * 3_000_000)").ok
    with pytest.raises(FileTooLargeError, match="max_bytes"):
        session.read_file("big.bin", max_bytes=1_000_000)
    assert len(session.read_file("big.bin", max_bytes=3_000_000)) == 3_000_000  # over several chunks
    assert session.inventory().by_path()["big.bin"].size == 3_000_000


def test_directories_are_not_files(session):
    assert session.run("import os\nos.mkdir('d')").ok
    with pytest.raises(IsADirectoryError):
        session.read_file("d")


WEIRD = [b"bad\xff.csv", b"line\nbreak.csv", b"esc\x1b[2J.csv", b"back\\slash.csv", b"tab\t.csv",
         "ümlaut ✓.csv".encode(), b"n" * 255]


def test_any_file_name_is_listed_safely_and_round_trips(session):
    code = f"for i, name in enumerate({WEIRD!r}):\n    open(name, 'wb').write(str(i).encode())"
    assert session.run(code).ok
    listed = session.list_files()
    assert len(listed) == len(WEIRD)
    for name in listed:
        name.encode("utf-8")
        assert name.isprintable(), name
        assert session.read_file(name) == str(WEIRD.index(raw_name(name))).encode()
    session.write_file(listed[0], "rewritten")  # the listed form is a path the API takes back
    assert session.run(f"print(open({raw_name(listed[0])!r}, 'rb').read())").stdout == "b'rewritten'\n"


def test_very_deep_trees_are_walked_without_recursion(session):
    code = ("import os\nfor _ in range(1500):\n    os.mkdir('d')\n    os.chdir('d')\n"
            "open('bottom.txt', 'w').write('found')\nos.chdir('/workspace')")
    assert session.run(code, timeout=60).ok
    deep = "d/" * 1500 + "bottom.txt"
    assert session.list_files() == [deep]
    assert session.read_file(deep) == b"found"
    session.write_file("d/" * 1500 + "host.txt", "also")
    assert session.inventory().by_path()["d/" * 1500 + "host.txt"].size == 4


def test_huge_listings_stop_at_the_cap(session):
    assert session.run("import os\nfor i in range(5000):\n    open(f'f{i}', 'w')", timeout=60).ok
    inv = session.inventory(max_entries=1000)
    assert inv.truncated
    assert len(inv.files) <= 1000
    assert len(session.list_files()) == 5000


def test_inventory_names_the_owning_kernel(sandbox, session):
    session.write_file("task.csv", "x")
    assert session.run("open('a.txt', 'w')", kernel="a").ok
    assert session.run("open('b.txt', 'w')", kernel="b").ok
    owners = {f.path: f.owner for f in session.inventory().files}
    if sandbox.separate_kernel_uids:
        assert owners == {"task.csv": "host", "a.txt": "a", "b.txt": "b"}
    else:
        assert set(owners.values()) == {None}


def test_writes_stream_in_chunks(session):
    data = bytes(range(256)) * 20_000  # 5 MB: several frames
    session.write_file("blob.bin", data)
    assert session.read_file("blob.bin") == data
    assert session.run("print(len(open('blob.bin', 'rb').read()))").stdout == f"{len(data)}\n"


@pytest.fixture(params=BACKENDS)
def roomy_session(request):
    if request.param == "docker":
        require_docker()
    limits = dict(TEST_LIMITS, workspace_mb=300, max_file_mb=200, memory_mb=600)
    sb = make_sandbox(request.param, pool_size=0, preimport=(), **limits)
    try:
        with sb.session() as s:
            yield s
    finally:
        sb.close()


def _peak_rss_after(fn) -> int:
    """How far the peak resident memory of this process rose while fn ran, in bytes."""
    with open("/proc/self/clear_refs", "w") as f:  # resets VmHWM to the current RSS
        f.write("5")

    def field(name):
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) << 10 for line in f if line.startswith(name))

    base = field("VmRSS:")
    fn()
    return field("VmHWM:") - base


def test_reading_128_mb_costs_the_host_about_128_mb(roomy_session):
    assert roomy_session.run("open('big.bin', 'wb').write(b'\\x01' * (128 << 20))", timeout=120).ok
    out = []
    rise = _peak_rss_after(lambda: out.append(roomy_session.read_file("big.bin")))
    assert len(out[0]) == 128 << 20
    assert rise < 1.5 * (128 << 20), f"reading 128 MB raised the host's peak RSS by {rise >> 20} MB"
    assert_usable(roomy_session)
