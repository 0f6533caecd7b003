"""results.json figures, the leaderboard table, --compare and the plots, from hand-made episode records."""
import math

import pytest

from mappa_envs.mathchat import answers_match
from mappa_train.evaluation.compare import compare, format_comparison
from mappa_train.evaluation.leaderboard import find_runs, leaderboard
from mappa_train.evaluation.report import build_results, load_results, summarize_set, write_results

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def record(task, sample, correct, predicted, coach=(6.0, 8.0), cached=False, outcome=None):
    actions = [
        {"role": "solver", "text": "x" * 10, "chars": 10,
         "coach": {"score": coach[0], "ok": True, "prompt_tokens": 100, "completion_tokens": 20, "cached": cached,
                   "cost_usd": 0.01}},
        {"role": "verifier", "text": "y" * 5, "chars": 5,
         "coach": {"score": coach[1], "ok": True, "prompt_tokens": 50, "completion_tokens": 10, "cached": cached,
                   "cost_usd": 0.005}},
    ]
    out = outcome or {"score": float(correct), "correct": correct, "predicted": predicted}
    return {"set": "s", "task_id": task, "sample": sample, "seed": 0, "actions": actions, "outcome": out}


def math_records(pattern):
    """pattern: task -> list of (correct, predicted) per sample."""
    return [record(t, i, c, p) for t, samples in pattern.items() for i, (c, p) in enumerate(samples)]


BASE = {"p1": [(True, "1"), (False, "2")], "p2": [(False, "5"), (False, "5")], "p3": [(True, "0.5"), (True, "1/2")]}
TRAINED = {"p1": [(True, "1"), (True, "1")], "p2": [(True, "3"), (False, "5")], "p3": [(True, "0.5"), (True, "1/2")]}


def test_summarize_math_set():
    s = summarize_set(math_records(BASE), k=2, same=answers_match)
    assert s["episodes"] == 6
    assert s["problems"] == 3
    # per-problem accuracy 1/2, 0, 1 -> mean 1/2, SE = std([.5, 0, 1], ddof=1) / sqrt(3) = 0.5 / sqrt(3)
    assert s["avg@k"]["mean"] == pytest.approx(0.5)
    assert s["avg@k"]["se"] == pytest.approx(0.5 / math.sqrt(3))
    assert s["pass@k"]["1"]["mean"] == pytest.approx(0.5)
    assert s["pass@k"]["2"]["mean"] == pytest.approx((1 + 0 + 1) / 3)
    # p1: a "1" vs "2" tie -> 0.5; p2: "5" wins, wrong; p3: 0.5 == 1/2 -> right
    assert s["maj@k"]["mean"] == pytest.approx((0.5 + 0 + 1) / 3)
    assert s["per_task"]["p1"] == {"n": 2, "score": 0.5, "correct": 1, "avg": 0.5, "maj": 0.5}
    assert s["coach_by_role"]["solver"]["mean"] == 6.0
    assert s["coach_by_role"]["verifier"]["mean"] == 8.0
    cost = s["cost"]
    assert cost["coach_calls"] == 12
    assert cost["coach_cached"] == 0
    assert cost["coach_prompt_tokens"] == 6 * 150
    assert cost["coach_completion_tokens"] == 6 * 30
    assert cost["coach_cost_usd"] == pytest.approx(6 * 0.015)
    assert cost["policy_chars"] == 6 * 15
    assert "policy_prompt_tokens" not in cost
    assert "valid_rate" not in s


def test_cached_verdicts_cost_nothing():
    s = summarize_set([record("p", 0, True, "1", cached=True)], k=1)
    assert s["cost"]["coach_calls"] == 0
    assert s["cost"]["coach_cached"] == 2
    assert s["cost"]["coach_cost_usd"] == 0


def test_summarize_dsbench_set():
    # DSBench's `correct` means "beats the baseline"; it is reported as such, not as accuracy
    recs = [record("t1", 0, None, None, outcome={"score": 0.8, "correct": True, "submission_valid": True}),
            record("t1", 1, None, None, outcome={"score": 0.4, "correct": False, "submission_valid": True}),
            record("t2", 0, None, None, outcome={"score": 0.0, "correct": False, "submission_valid": False})]
    s = summarize_set(recs, k=2)
    assert "avg@k" not in s
    assert "maj@k" not in s
    assert s["beats_baseline"]["mean"] == pytest.approx((0.5 + 0) / 2)
    assert s["valid_rate"]["mean"] == pytest.approx(0.5)  # t1 always valid, t2 never
    assert s["quality"]["mean"] == pytest.approx((0.6 + 0.0) / 2)
    assert s["per_task"]["t1"]["score"] == pytest.approx(0.6)


def write_run(root, name, pattern, overlap=None):
    results = build_results(name, f"team-{name}", {"amc": math_records(pattern)}, k=2, seed=0, config={},
                            same=answers_match, overlaps={"amc": overlap} if overlap else None)
    (root / name).mkdir()
    write_results(root / name, results)
    return results


def test_leaderboard_table(tmp_path):
    overlap = {"train_source": "x", "n_eval": 3, "n_overlap": 1, "fraction": 1 / 3, "ids": ["p1"]}
    write_run(tmp_path, "base", BASE, overlap=overlap)
    write_run(tmp_path, "trained", TRAINED)
    runs = find_runs([tmp_path])
    assert [p.parent.name for p in runs] == ["base", "trained"]
    table = leaderboard([load_results(p) for p in runs])
    lines = table.strip().splitlines()
    assert lines[0].startswith("| eval set | run | team | k | avg@k | maj@k | pass@k |")
    assert lines[2].startswith("| amc | trained | team-trained | 2 | 0.833 ± 0.167 |")  # best first
    assert lines[3].startswith("| amc | base | team-base | 2 | 0.500 ± 0.289 |")
    assert "⚠ 1/3" in lines[3]
    assert "solver 6.0 / verifier 8.0" in lines[3]


def test_leaderboard_errors_on_missing_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="neither a run directory"):
        find_runs([tmp_path / "nope"])


def test_compare_paired_deltas(tmp_path):
    a, b = write_run(tmp_path, "base", BASE), write_run(tmp_path, "trained", TRAINED)
    c = compare(a, b, n_boot=2000)["amc"]
    assert c["metric"] == "avg"
    assert c["ci"].n == 3
    assert c["deltas"] == {"p1": (0.5, 1.0), "p2": (0.0, 0.5), "p3": (1.0, 1.0)}
    assert c["ci"].delta == pytest.approx(1 / 3)
    assert c["ci"].low <= 1 / 3 <= c["ci"].high
    text = format_comparison(a, b, compare(a, b, n_boot=2000))
    assert "| amc | avg | 3 | 0.500 | 0.833 | +0.333 |" in text
    assert "2 of 3 problems changed" in text
    assert "| p1 | 0.500 | 1.000 | +0.500 |" in text


def test_compare_needs_a_shared_set(tmp_path):
    a = write_run(tmp_path, "base", BASE)
    b = {**a, "run": "other", "sets": {"aime": a["sets"]["amc"]}}
    with pytest.raises(ValueError, match="share no eval set"):
        compare(a, b)


def test_plots_are_valid_pngs(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib.image

    from mappa_train.evaluation.plots import write_plots

    ds = [record("t1", 0, None, None, outcome={"score": 0.7, "correct": None, "submission_valid": True})]
    results = build_results("run", "team", {"amc": math_records(BASE), "dsbench-eval": ds}, k=2, seed=0, config={})
    files = write_plots(results, tmp_path)
    assert sorted(f.name for f in files) == ["accuracy_by_set.png", "coach_by_role.png", "quality_dsbench-eval.png"]
    for f in files:
        assert f.read_bytes()[:8] == PNG_MAGIC
        assert matplotlib.image.imread(f).shape[0] > 100  # decodes to a real image


def test_leaderboard_has_a_dsbench_table():
    ds = [record("t1", 0, None, None, outcome={"score": 0.75, "correct": True, "submission_valid": True})]
    res = build_results("ds-run", "scripted", {"dsbench": ds, "amc": math_records(BASE)}, k=1, seed=0, config={})
    math_table, ds_table, note = leaderboard([res]).strip().split("\n\n")
    assert note.startswith("A reference team plays the scripted oracle")
    assert "| amc | ds-run |" in math_table
    assert "dsbench" not in math_table
    head, _, row = ds_table.splitlines()[:3]
    assert head.startswith("| eval set | run | team | k | valid submissions | relative quality | beats baseline |")
    assert row.startswith("| dsbench | ds-run | scripted (reference: reads the gold answer) | 1 | 1.000 (n=1) | "
                          "0.750 (n=1) | 1.000 (n=1) |")


def test_reference_teams_are_labelled_and_noisy_ones_are_not():
    from mappa_train.evaluation.leaderboard import is_reference

    assert is_reference("scripted")
    assert is_reference("problem_solver=hf:m;verifier=scripted")  # one oracle role reads the gold answer too
    assert not is_reference("scripted:0.5")
    assert not is_reference("hf:scripted_model")
    noisy = build_results("noisy", "scripted:0.5", {"amc": math_records(BASE)}, k=1, seed=0, config={})
    table = leaderboard([noisy])
    assert "| amc | noisy | scripted:0.5 | 1 |" in table
    assert "reference" not in table


def test_a_row_whose_every_coach_call_failed_says_so():
    records = math_records(BASE)
    for r in records:
        for a in r["actions"]:
            a["coach"] = {"ok": False, "score": None, "error": "coach.score failed: CoachError: HTML"}
    res = build_results("dead-coach", "scripted:0.5", {"amc": records}, k=1, seed=0, config={})
    row = next(line for line in leaderboard([res]).splitlines() if line.startswith("| amc |"))
    n = sum(len(r["actions"]) for r in records)
    assert f"✗ every coach call failed ({n})" in row
