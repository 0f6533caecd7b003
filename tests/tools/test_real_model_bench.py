"""benchmarks/real_model_mathchat.py: its training config is valid and its report reads the run's files."""
import argparse
import importlib.util
import json
from pathlib import Path

import pytest

from mappa_train.config import load_config

ROOT = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("real_model_mathchat", ROOT / "benchmarks" / "real_model_mathchat.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _args(tmp_path, **kw):
    base = dict(out=tmp_path, family="product_sum", steps=3, episodes_per_step=16, heldout=4, k=2,
                eval_temperature=0.7, max_new_tokens=96, lr=1e-5, backend="hf", seed=0, reward="process")
    return argparse.Namespace(**{**base, **kw})


def test_real_model_bench_overrides_make_a_valid_config(tmp_path):
    cfg = load_config(ROOT / "configs" / "quickstart.yaml", _bench().overrides(_args(tmp_path), tmp_path / "model"))
    assert cfg.env.kwargs["task_source"] == "synthetic:product_sum"
    assert cfg.eval_every == cfg.steps == 3
    assert cfg.env.eval_sets == {"heldout": {"split": "eval", "num_tasks": 4}}
    assert cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt == 16
    assert cfg.env.kwargs["reward_mode"] == "process"
    outcome = load_config(ROOT / "configs" / "quickstart.yaml",
                          _bench().overrides(_args(tmp_path, reward="outcome"), tmp_path / "model"))
    assert outcome.env.kwargs["reward_mode"] == "outcome"


def test_real_model_bench_report_is_a_paired_interval_over_problems(tmp_path):
    rows = [{"kind": "eval", "step": 0, "heldout/coach/verifier": 3.0}, {"kind": "train", "step": 1, "reward": 0.5},
            {"kind": "eval", "step": 3, "heldout/coach/verifier": 5.0}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    correct = {0: [0, 0, 0, 1, 0, 0, 1, 0], 3: [1, 0, 1, 1, 0, 1, 1, 1]}  # 4 problems x 2 samples
    episodes = [{"step": s, "set": "heldout", "task_id": f"t{i // 2}", "sample": i % 2, "correct": bool(c), "score": c}
                for s, cs in correct.items() for i, c in enumerate(cs)]
    (tmp_path / "eval_episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    r = _bench().report(tmp_path, _args(tmp_path), wall_s=1.0, cpu_s=1.0)
    assert r["heldout_problems"] == 4
    assert r["accuracy_before"] == pytest.approx(0.25)
    assert r["accuracy_after"] == pytest.approx(0.75)
    assert r["accuracy_delta"] == pytest.approx(0.5)
    # every problem gains exactly 0.5 (one more of its two samples right): every resample's mean is 0.5
    assert r["accuracy_delta_ci95"] == pytest.approx([0.5, 0.5])
    assert r["coach_before"] == {"verifier": 3.0}
    assert r["coach_after"] == {"verifier": 5.0}
    assert "no warm start" in _bench().markdown(r)
    outcome = _bench().report(tmp_path, _args(tmp_path, reward="outcome"), wall_s=1.0, cpu_s=1.0)
    assert outcome["coach_before"] == outcome["coach_after"] == {}
    assert "no coach calls" in _bench().markdown(outcome)


def test_real_model_bench_reports_the_warm_start_teacher_on_the_same_problems(tmp_path):
    rows = [{"kind": "eval", "step": 0}, {"kind": "train", "step": 1}, {"kind": "eval", "step": 1}]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    episodes = [{"step": s, "set": "heldout", "task_id": f"t{i}", "sample": 0, "correct": i == 0, "score": 0}
                for s in (0, 1) for i in range(2)]
    (tmp_path / "eval_episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    bench = _bench()
    spec = bench.start_spec(_args(tmp_path, warm_start_steps=10, sft_lr=1e-4))
    assert (spec.sft_short_steps, spec.sft_steps, spec.sft_lr) == (7, 3, 1e-4)
    # the teacher also played a problem the model's evaluations did not: it is left out
    start = {"summary": {"steps": 10}, "teacher": {"t0": [1.0], "t1": [1.0], "t9": [0.0]}}
    r = bench.report(tmp_path, _args(tmp_path), wall_s=1.0, cpu_s=1.0, start=start)
    assert r["teacher_accuracy"] == pytest.approx(1.0)
    assert r["after_minus_teacher"] == pytest.approx(-0.5)  # t1 was right for the teacher, wrong after
    assert "10 supervised steps" in bench.markdown(r)


@pytest.mark.parametrize(("argv", "says"), [
    (["--episodes-per-step", "3"], "must be even"),
    (["--warm-start-steps", "-1"], "must be >= 0"),
    (["--family", "nope"], "unknown synthetic families"),
    (["--family", "divisors"], "distinct train problems; ask for fewer"),
])
def test_real_model_bench_bad_input_is_one_line_before_any_model_loads(tmp_path, capsys, argv, says):
    with pytest.raises(SystemExit) as exit_:
        _bench().main([*argv, "--out", str(tmp_path / "run")])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_template_count_tells_the_teachers_working_code_from_its_broken_code():
    from mappa_envs.mathchat.scripted import _broken

    bench = _bench()
    working = "Let me compute it.\n```python\nprint(47 * 85 + 12)\n```"
    broken = f"Let me compute it.\n```python\n{_broken('print(47 * 85 + 12)')}\n```"
    assert bench.template(working) == "print"
    assert bench.template(broken) == "broken"
    assert bench.template("```python\nx = 47 * 85\nprint(x + 12)\n```") == "other code"
    assert bench.template("The code printed 4007.\n\\boxed{4007}") == "no code"


def test_transcripts_are_played_and_their_templates_counted(tmp_path):
    """The scripted team at code_skill 0.5 (scripted:0.5 breaks its code half the time) through the
    benchmark's transcript pass: real envs, the local sandbox, the rule coach, transcripts on disk."""
    bench = _bench()
    args = _args(tmp_path, heldout=6, k=2, episodes_per_step=4)
    cfg = load_config(ROOT / "configs" / "quickstart.yaml", bench.overrides(args, tmp_path / "model"))
    played = bench.play_transcripts(cfg, args, {"teacher": "scripted:0.5"})["teacher"]
    assert played["episodes"] == 12
    assert (tmp_path / "transcripts" / "teacher" / "transcripts.jsonl").is_file()
    cells = played["code_executor_templates"]
    assert set(cells) <= {"print", "broken"}
    assert sum(cells.values()) == 12
    assert cells.get("print", 0) > 0
    assert cells.get("broken", 0) > 0
