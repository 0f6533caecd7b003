"""benchmarks/perf/run_all.py: running a benchmark script, reading its figures, the table."""
import importlib.util
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
spec = importlib.util.spec_from_file_location("run_all", ROOT / "benchmarks" / "perf" / "run_all.py")
run_all = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_all)

JSON_BENCH = """
import argparse, json
p = argparse.ArgumentParser()
p.add_argument("--quick", action="store_true")
p.add_argument("--json")
a = p.parse_args()
json.dump({"exec_ms": {"p50": 1.5 if a.quick else 1.2}, "ok": True, "sizes": [3, 4]}, open(a.json, "w"))
"""
PRINT_BENCH = """
import argparse
p = argparse.ArgumentParser()
p.add_argument("--short", action="store_true")
a = p.parse_args()
print("| a table row | 3 |")
print("steps per second: 12.5")
print("latency p50 = 70 ms")
print(" packed:       718 tokens/s  (update 45.52 s, 32686 real tokens)")
print("Loading weights: 100%|#####| 50/50")
print("[2026-11-29 21:42:16,211] [WARNING] a log line: 3")
print("quick" if a.short else "full")
"""


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text(textwrap.dedent(body))
    return path


def test_json_figures_and_quick_flag(tmp_path):
    res = run_all.run_one(script(tmp_path, "b.py", JSON_BENCH), full=False, timeout=60)
    assert res["status"] == "ok"
    assert res["figures"] == {"exec_ms.p50": 1.5, "sizes[0]": 3.0, "sizes[1]": 4.0}  # booleans are not figures
    assert "--quick" in res["command"]
    assert run_all.run_one(tmp_path / "b.py", full=True, timeout=60)["figures"]["exec_ms.p50"] == 1.2


def test_printed_figures(tmp_path):
    res = run_all.run_one(script(tmp_path, "p.py", PRINT_BENCH), full=False, timeout=60)
    assert res["status"] == "ok"
    assert "--short" in res["command"]
    assert res["figures"] == {"steps per second": 12.5, "latency p50 [ms]": 70.0, "packed [tokens/s]": 718.0}
    assert res["output_tail"].endswith("quick")


def test_missing_and_failing_scripts(tmp_path):
    assert run_all.run_one(tmp_path / "nope.py", full=False, timeout=60)["status"] == "missing"
    res = run_all.run_one(script(tmp_path, "f.py", "import sys\nif '--help' not in sys.argv: sys.exit(3)\n"), False, 60)
    assert res["status"] == "failed (exit 3)"


def test_table_with_baseline():
    now = {"commit": "a" * 40, "mode": "quick", "finished_at": "t", "python": "3.11", "machine": "x",
           "benchmarks": {"bench_coach.py": {"status": "ok", "wall_s": 2.0, "figures": {"calls/s": 300.0}},
                          "bench_rollout.py": {"status": "missing", "wall_s": 0.0, "figures": {}}}}
    coach = {"status": "ok", "wall_s": 4.0, "figures": {"calls/s": 100.0}}
    old = {"commit": "b" * 40, "benchmarks": {"bench_coach.py": coach}}
    text = run_all.table(now, old)
    assert "| bench_coach.py | calls/s | 300 | 100 | 3.00× |" in text
    assert "| bench_coach.py | wall time [s] | 2 | 4 | 0.50× |" in text
    assert "| bench_rollout.py | missing |  |  |  |" in text
    assert text.startswith("# Performance — aaaaaaaaaaaa (quick")


def test_benchmark_list_has_the_expected_scripts_first():
    names = run_all.benchmarks()
    assert names[:4] == ["bench_sandbox.py", "bench_coach.py", "bench_rollout.py", "bench_learner.py"]
    assert len(names) == len(set(names))
