"""CSV files an agent wrote cannot stall the scorer or the engineer's features check (issue 21 §2).

Each shape here stalled pandas for seconds to minutes (duplicate column names are renamed quadratically;
a wide header or a wide first row becomes thousands of columns or index levels). Each must be a failed
check with a one-line reason, quickly: through `read_csv_bounded` by hand, and through the real env on
both sandbox backends. The time bound is pytest's timeout, with wide headroom, not a timed assertion.
"""
from __future__ import annotations

import re

import pytest

from mappa_envs.dsbench.csvread import MAX_COLUMNS, read_csv_bounded
from mappa_envs.dsbench.env import DSBenchEnv
from mappa_envs.dsbench.scripted import engineer_code, modeler_code
from mappa_envs.sandbox import make_sandbox
from tests.sandbox_helpers import require_docker

# name -> (a Python expression for the bytes, evaluated here and inside the sandbox; pattern of the reason)
HOSTILE = {
    "200kB-duplicate-names": ("b'a,' * 100_000 + b'a\\n1\\n'", r"more than 10000 columns"),
    "10k-duplicate-names": ("b'a,' * 9_999 + b'a\\n1\\n'", r"names the column 'a' twice"),  # 6 s in pandas
    "700k-column-header": ("b','.join(b'c%d' % i for i in range(700_000)) + b'\\n'",
                           r"more than 10000 columns|header line is longer than"),
    "400k-short-names": ("b','.join([b'c'] * 400_000) + b'\\n'", r"more than 10000 columns"),
    "wide-first-row": ("b'id\\n1' + b',' * 700_000 + b'\\n'", r"line 2 has more than 10000 fields"),
    "wide-later-row": ("b'id,x\\n1,2\\n' * 100 + b'1' + b',2' * 50_000 + b'\\n'", r"line 201 has more than"),
    "blank-lines-then-wide": ("b'\\n' * 500_000 + b'a,' * 20_000 + b'a\\n'", r"more than 10000 columns"),
    "header-past-1MiB": ("b'x' * (2 << 20) + b'\\n1\\n'", r"header line is longer than"),
    "quoted-header-spanning-lines": ("b'\"a\\n' + b'b,' * 200_000 + b'\"\\n1\\n'", r"unclosed quote"),
    "blank-first-line": ("b'   \\n' + b'a,b\\n1,2\\n'", r"first line is blank"),
    "duplicates-after-quoting": ("b'\"a\",a\\n1,2\\n'", r"names the column 'a' twice"),
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", HOSTILE)
def test_a_stalling_csv_is_refused_before_parsing(case):
    expr, pattern = HOSTILE[case]
    data = eval(expr)
    with pytest.raises(ValueError, match=pattern) as info:
        read_csv_bounded(data, "X_train.csv")
    assert "\n" not in str(info.value)
    assert str(info.value).startswith("X_train.csv is not a readable CSV file")


@pytest.mark.parametrize("seed", range(200))
def test_any_bytes_are_a_table_or_a_one_line_error_naming_the_file(seed):
    """Random bytes (the hostile suite's "binary" submission, seeded) and a carriage return inside the
    header (the stdlib csv reader's own error, which escaped once): a DataFrame or a ValueError, never
    another exception, and the error names the file."""
    import random
    data = b"id\rx,y\n1,2\n" if seed == 0 else random.Random(seed).randbytes(5000)
    try:
        read_csv_bounded(data, "submission.csv")
    except ValueError as e:
        assert str(e).startswith("submission.csv is not a readable CSV file")
        assert "\n" not in str(e)


def test_honest_tables_still_parse():
    wide = b",".join(b"f%d" % i for i in range(MAX_COLUMNS)) + b"\n" + b",".join([b"1"] * MAX_COLUMNS) + b"\n"
    assert read_csv_bounded(wide, "X.csv").shape == (1, MAX_COLUMNS)
    text = b'id,selected_text\n1,"a, b, and c, with commas"\n2,"line\nbreak"\n'
    df = read_csv_bounded(text, "submission.csv", dtype={"id": str})
    assert list(df["selected_text"]) == ["a, b, and c, with commas", "line\nbreak"]
    trailing = b"id,y\n1,0.5,\n2,0.25,\n"  # a delimiter at the end of each row: no index is inferred from it
    assert list(read_csv_bounded(trailing, "s.csv")["id"]) == [1, 2]
    assert list(read_csv_bounded(b"\n\nid,y\n1,2\n", "s.csv").columns) == ["id", "y"]  # pandas skips them too


BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]


@pytest.fixture(scope="module", params=BACKENDS)
def sandbox(request):
    if request.param == "docker":
        require_docker()
    sb = make_sandbox(request.param, preimport=(), pool_size=1, timeout_s=60, memory_mb=1024, max_file_mb=64,
                      workspace_mb=256)
    yield sb
    sb.close()


def cell(code: str) -> str:
    return f"```python\n{code}\n```"


def _write(name: str, expr: str) -> str:
    return f"open({name!r}, 'wb').write({expr})"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", ["10k-duplicate-names", "700k-column-header", "wide-first-row"])
def test_hostile_feature_file_fails_the_engineers_check_quickly(sandbox, case):
    expr, pattern = HOSTILE[case]
    env = DSBenchEnv(sandbox=sandbox, max_actions=1, limits={"cell_timeout_s": 60})
    try:
        env.reset(options={"task_id": "wine-cultivar"})
        task = next(t for t in env.scenario.task_list if t.id == "wine-cultivar")
        env.step(cell(engineer_code(task) + "\n" + _write("X_train.csv", expr)))
        record = env.last_action
        assert record.checks["features_consistent"] is False
        problem = record.coach.rationale
        assert "features_consistent=False" in problem
        env.step(cell(modeler_code(task)))
        assert env.last_action.checks["inputs_ready"] is True  # the Modeler needs only X_train/y_train to exist
        env.step("Nothing to do.")
        details = env.outcome.details
        assert re.search(pattern, details["failure"]["root_cause"]["reason"]), details["failure"]
        assert details["failure"]["root_cause"]["owner"] == "data_engineer"
    finally:
        env.close()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("case", ["10k-duplicate-names", "700k-column-header", "wide-first-row"])
def test_hostile_submission_is_invalid_quickly(sandbox, case):
    expr, pattern = HOSTILE[case]
    env = DSBenchEnv(sandbox=sandbox, max_actions=1, limits={"cell_timeout_s": 60})
    try:
        env.reset(options={"task_id": "wine-cultivar"})
        env.step("Nothing to engineer.")
        env.step("Nothing to model.")
        env.step(cell(_write("submission.csv", expr)))
        assert env.last_action.checks["submission_valid"] is False
        details = env.outcome.details
        assert details["submission_valid"] is False
        assert re.search(pattern, details["failure"]["error"]), details["failure"]
    finally:
        env.close()
