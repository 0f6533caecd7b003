"""MathChat task sources: files in the AIME/AMC formats, bad files, and the synthetic generator."""
from pathlib import Path

import pytest

from mappa_envs.mathchat import load_task_file, load_tasks, synthetic_tasks
from mappa_envs.mathchat.tasks import FAMILIES, TaskSourceError, _run_solution

BENCH = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "bench"
if not BENCH.is_dir():  # a worktree next to the main checkout: the shared data sits beside that
    BENCH = Path("/work/shared/data/bench")


def test_loads_real_problem_sets():
    aime = load_tasks(str(BENCH / "AIME_1983_2024.json"), split="all")
    assert len(aime) == 933
    assert aime[0].id == "1983-1"
    assert aime[0].answer == "60"
    assert len(load_tasks(str(BENCH / "aime_2025.json"), split="all")) == 30
    amc = load_tasks(str(BENCH / "amc_eval_32.json"), split="all")
    assert len(amc) == 32
    assert all("." not in t.answer for t in amc)  # 142.0 -> "142"


def test_file_holdout_split_is_disjoint_and_stable():
    path = str(BENCH / "AIME_1983_2024.json")
    train, ev = load_tasks(path, split="train"), load_tasks(path, split="eval")
    assert len(train) + len(ev) == 933
    assert not {t.id for t in train} & {t.id for t in ev}
    assert [t.id for t in ev] == [t.id for t in load_tasks(path, split="eval")]


def test_jsonl_files_load(tmp_path):
    p = tmp_path / "t.jsonl"
    p.write_text('{"problem": "1+1?", "answer": 2}\n\n{"question": "2+2?", "answer": "4", "id": "b"}\n')
    tasks = load_task_file(p)
    assert [(t.prompt, t.answer, t.id) for t in tasks] == [("1+1?", "2", "t.jsonl-1"), ("2+2?", "4", "b")]


@pytest.mark.parametrize("content, message", [
    ('[{"prompt": "x"}]', "record 1 has no 'answer'"),
    ('[{"answer": 3}]', "record 1 has no non-empty text field"),
    ('[1, 2]', "record 1 is a int"),
    ('{"prompt": "x", "answer": 1}\n{bad json\n', "line 2, column 2: .*not valid JSON"),
    ('{"a": 1}', "record 1 has no non-empty text field"),  # one object is a file of one record
    ('7', "expected a JSON array"),
    ('[\n  {"prompt": "x", "answer": 1},\n  {"prompt": "y" "answer": 2}\n]',
     r"line 3, column 18: Expecting ',' delimiter"),
    ('{\n  "prompt": "x",\n  "answer": \n}\n', "line 4, column 1: Expecting value"),
    ('', "is empty"),
    ('  \n\n', "is empty"),
    ('[]', "empty array"),
    (b'\xff\xfe[]', "not UTF-8"),
])
def test_malformed_files_name_file_and_row(tmp_path, content, message):
    p = tmp_path / "bad.json"
    p.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(TaskSourceError, match=message) as e:
        load_task_file(p)
    assert str(p) in str(e.value)


def test_synthetic_refuses_more_problems_than_it_has():
    with pytest.raises(ValueError, match="only .* distinct eval problems"):
        synthetic_tasks(100_000, split="eval")


def test_missing_file_and_bad_split():
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_tasks("/nonexistent/tasks.json")
    with pytest.raises(ValueError, match="split"):
        load_tasks("synthetic", split="test")


def test_synthetic_is_seeded_disjoint_and_computed():
    a, b = synthetic_tasks(60, seed=3), synthetic_tasks(60, seed=3)
    assert [(t.prompt, t.answer) for t in a] == [(t.prompt, t.answer) for t in b]
    assert [t.prompt for t in synthetic_tasks(60, seed=4)] != [t.prompt for t in a]
    ev = synthetic_tasks(60, seed=3, split="eval")
    assert not {t.prompt for t in a} & {t.prompt for t in ev}
    # disjoint whatever the sizes and seeds: a small eval set against a large train set
    big_train = {t.prompt for s in (0, 1) for t in synthetic_tasks(512, seed=s)}
    assert not big_train & {t.prompt for s in (0, 1) for t in synthetic_tasks(8, seed=s, split="eval")}
    assert {t.meta["family"] for t in a} == set(FAMILIES)
    for t in a:  # the answer is what the solution prints, and it is an integer
        assert _run_solution(t.meta["solution_code"]) == t.answer
        assert t.answer.lstrip("-").isdigit()


def test_known_synthetic_answers_are_right():
    import math
    tasks = {t.meta["family"]: t for t in synthetic_tasks(10, seed=0)}
    t = tasks["power_mod"]
    a, b, m = (int(x) for x in __import__("re").findall(r"\d+", t.prompt)[:3])
    assert t.answer == str(pow(a, b, m))
    n = int(__import__("re").search(r"\$(\d+)!\$", tasks["trailing_zeros"].prompt).group(1))
    assert tasks["trailing_zeros"].answer == str(sum(n // 5 ** k for k in range(1, 6)))
    assert math.isfinite(float(tasks["digit_sum"].answer))


def test_hf_source_goes_through_datasets(tmp_path):
    """`hf:<id>` uses datasets.load_dataset; a local data directory exercises it with no network."""
    (tmp_path / "train.jsonl").write_text('{"problem": "1+2?", "answer": 3}\n{"problem": "2+5?", "answer": "7"}\n')
    tasks = load_tasks(f"hf:{tmp_path}", split="all")
    assert [(t.prompt, t.answer) for t in tasks] == [("1+2?", "3"), ("2+5?", "7")]
