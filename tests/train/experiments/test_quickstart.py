"""`mappa quickstart`: the interval it reports, the noisy teacher it imitates, and its report end to end."""
import itertools
import json
import time
from pathlib import Path

import numpy as np
import pytest

from mappa_cli.main import main
from mappa_train.evaluation.stats import paired_bootstrap


def test_paired_bootstrap_interval_matches_brute_force_enumeration():
    """With 5 problems every one of the 5^5 resamples can be enumerated: the exact bootstrap
    distribution of the mean delta. The percentile interval must sit on its 2.5% / 97.5% quantiles,
    and its spread on the closed form var = population variance / n."""
    before, after = [0.0, 0.5, 0.0, 1.0, 0.5], [1.0, 0.5, 0.5, 1.0, 1.0]
    d = np.subtract(after, before)
    exact = np.array([d[list(idx)].mean() for idx in itertools.product(range(5), repeat=5)])
    assert exact.var() == pytest.approx(d.var() / 5)
    ci = paired_bootstrap(before, after, n_boot=200_000, seed=1)
    assert ci.delta == pytest.approx(d.mean())
    # the exact distribution is discrete (steps of 0.1): allow one step either way
    assert abs(ci.low - np.quantile(exact, 0.025)) <= 0.1 + 1e-9
    assert abs(ci.high - np.quantile(exact, 0.975)) <= 0.1 + 1e-9
    assert np.mean(exact < ci.low) <= 0.025 + 0.01
    assert np.mean(exact > ci.high) <= 0.025 + 0.01


@pytest.mark.parametrize("family,executor_actions", [("product_sum", 2), ("digit_product_sum", 1)])
def test_noisy_teacher_breaks_its_code_at_the_given_rate_and_the_coach_sees_it(family, executor_actions):
    """With one executor action the Verifier reads the printed value from the quoted cell output."""
    import mappa_envs
    from mappa_envs.mathchat.scripted import ScriptedMathPolicy
    from mappa_envs.sandbox import make_sandbox

    sandbox = make_sandbox("local", preimport=())
    env = mappa_envs.make("MathChat-v0", task_source=f"synthetic:{family}", num_tasks=40, sandbox=sandbox,
                          executor_max_actions=executor_actions)
    policy = ScriptedMathPolicy(env.unwrapped.tasks, skill=0.0, code_skill=0.5, seed=3)
    correct, code_scores = [], []
    try:
        for i in range(40):
            env.reset(options={"task_index": i})
            for agent in env.agent_iter():
                _, _, term, trunc, info = env.last()
                env.step(None if term or trunc else policy.respond([info["messages"]], [agent])[0])
            code = next(a for a in env.episode.actions if a.role == "code_executor")
            code_scores.append(code.reward)
            correct.append(bool(env.episode.outcome.correct))
            assert env.episode.outcome.correct == code.tool_results[0].ok  # the team is right exactly when its code ran
    finally:
        env.close()
        sandbox.close()
    assert 10 <= sum(correct) <= 30  # about half
    # a raising cell costs 6 points on that very action: 3.5 for raising, 0.5 for printing nothing, 2 for no answer
    assert sorted(set(code_scores)) == [3.5, 9.5]
    with pytest.raises(ValueError, match="code_skill"):
        ScriptedMathPolicy([], code_skill=1.5)


@pytest.mark.parametrize("family,digits,answer_lengths", [("product_sum", 2, {4}), ("digit_product_sum", 1, {1, 2})])
def test_product_sum_families_are_disjoint_by_text_and_computed(family, digits, answer_lengths):
    from mappa_envs.mathchat.tasks import load_tasks

    train = load_tasks(f"synthetic:{family}", split="train", num_tasks=512)
    heldout = load_tasks(f"synthetic:{family}", split="eval", num_tasks=48)
    assert not {t.prompt for t in train} & {t.prompt for t in heldout}
    assert {len(t.answer) for t in train + heldout} <= answer_lengths
    assert all(t.meta["family"] == family for t in train + heldout)
    for t in heldout:
        a, b, c = (int(x) for x in t.prompt.removeprefix("What is ").rstrip("?").replace("*", "+").split("+"))
        assert int(t.answer) == a * b + c
        assert all(len(str(x)) == digits for x in (a, b, c))
    with pytest.raises(ValueError, match="unknown synthetic families"):
        load_tasks("synthetic:nope")


@pytest.mark.slow
def test_quickstart_small_writes_a_complete_report_with_both_arms(tmp_path):
    """The default pipeline on the tiny model, made small: the start, the coached and control arms, the
    evaluations of all three on the dev and confirmation sets, and the report's keys."""
    out = tmp_path / "qs"
    rc = main(["quickstart", "--out", str(out), "--sft-episodes", "8", "--sft-short-steps", "2", "--sft-steps", "1",
               "--n-boot", "500", "--confirmation-problems", "2", "model.path=tiny", "model.dtype=float32",
               "steps=2", "eval_episodes=3", "eval_samples=2", "env.eval_sets={heldout: {split: eval, num_tasks: 3}}",
               "rollout.num_envs=4", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=1",
               "generation.max_new_tokens=16", "log.progress=false"])
    assert rc == 0
    report = json.loads((out / "report.json").read_text())
    for key in ("accuracy_before", "accuracy_after", "teacher_accuracy", "warm_start_accuracy", "wall_s", "cpu_s"):
        assert isinstance(report[key], float), key
    assert (report["heldout_problems"], report["k"], report["steps"], report["seed"]) == (3, 2, 2, 0)
    low, high = report["accuracy_delta_ci95"]
    assert low <= report["accuracy_delta"] <= high
    assert report["accuracy_delta"] == pytest.approx(report["accuracy_after"] - report["accuracy_before"])
    assert report["model"]["path"] == "tiny"
    assert report["heldout_set"]["overlapping"] == 0
    assert report["warm_start"]["code_skill"] == 0.5
    assert set(report["coach_before"]) == {"problem_solver", "code_executor", "verifier"}
    control = report["control"]
    assert control["coach"] == "rule:noise=0.5,seed=0"
    assert control["coached_minus_control"] == pytest.approx(report["accuracy_after"] - control["accuracy_after"])
    assert control["coached_minus_control_ci95"][0] <= control["coached_minus_control"]
    assert control["coached_minus_control"] <= control["coached_minus_control_ci95"][1]
    # the two arms differ by the training coach only: the same tasks at every step, from the same start
    configs = {arm: json.loads((out / arm / "config.json").read_text()) for arm in ("coached", "control")}
    assert (configs["coached"]["env"]["coach"], configs["control"]["env"]["coach"]) == ("rule", "rule:noise=0.5,seed=0")
    assert configs["coached"]["model"]["path"] == configs["control"]["model"]["path"] == str(out / "start" / "model")
    played = {arm: [(r["step"], r["task_id"]) for r in map(json.loads, (out / arm / "train_episodes.jsonl")
                                                            .read_text().splitlines())] for arm in configs}
    assert played["coached"] == played["control"]
    assert len(played["coached"]) == 4
    # every policy is evaluated on the same problems and samples: the start at step 0, each arm's end at step 2
    for where, step in (("start", 0), ("coached", 2), ("control", 2)):
        rows = [json.loads(x) for x in (out / where / "eval_episodes.jsonl").read_text().splitlines()]
        assert {(r["step"], r["set"]) for r in rows} == {(step, "heldout"), (step, "confirmation")}
        assert len(rows) == (3 + 2) * 2
    c = report["confirmation"]
    assert (c["problems"], c["overlapping"], c["overlapping_dev"]) == (2, 0, 0)
    assert c["accuracy_before"] + c["accuracy_delta"] == pytest.approx(c["accuracy_after"])
    assert c["accuracy_delta_ci95"][0] <= c["accuracy_delta"] <= c["accuracy_delta_ci95"][1]
    assert set(c["control"]) >= {"accuracy_after", "coached_minus_control", "coached_minus_control_ci95"}
    text = (out / "report.md").read_text()
    for phrase in ("noisy scripted teacher", "Coached − control", "control (a coach that says nothing)",
                   "Confirmation set", "What RL added beyond the warm start"):
        assert phrase in text
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert (out / "coached" / "final" / "shared" / "tokenizer.json").exists()
    phases = report["cpu_s_by_phase"]
    assert set(phases) >= {"warm_start", "coached_update", "control_update", "coached_eval", "control_eval"}
    assert phases["warm_start"] > 0
    assert report["threads"] >= 1


def test_the_quickstart_refuses_settings_it_cannot_report_in_one_line(tmp_path):
    from mappa_train.config import ConfigError
    from mappa_train.experiments.quickstart import PRESET, load

    for bad, says in (("eval_every=2", "eval_every=0"), ("model.policies=lora", "model.policies=shared"),
                      ("env.eval_sets={dev: {split: eval}}", "env.eval_sets.heldout")):
        with pytest.raises(ConfigError, match=says):
            load(str(PRESET), tmp_path, [bad])
    cfg = load(str(PRESET), tmp_path, [])
    assert (cfg.model.path, cfg.model.dtype, cfg.env.kwargs["task_source"]) == ("smollm2-135m", "bfloat16",
                                                                                 "synthetic:product_sum")


def test_the_warm_start_recipe_follows_the_model():
    from mappa_train.experiments.warm_start import PRETRAINED, StartConfig, recipe_for

    assert recipe_for("tiny") == StartConfig()
    real = recipe_for("smollm2-135m", sft_batch=4, sft_steps=None)
    assert (real.sft_lr, real.sft_batch, real.sft_steps) == (PRETRAINED["sft_lr"], 4, PRETRAINED["sft_steps"])


def test_the_noisy_teacher_plays_the_same_episodes_whatever_the_batch_and_timing():
    """The warm start imitates the teacher's episodes, so they must not depend on how many envs play
    at once or in which order concurrent episodes ask: each action's coin flips follow its seed."""
    import mappa_envs
    from mappa_envs.driver import Driver
    from mappa_envs.mathchat.scripted import ScriptedMathPolicy
    from mappa_envs.sandbox import make_sandbox

    def play(batch: int) -> list:
        sandbox = make_sandbox("local", preimport=())
        envs = [mappa_envs.make("MathChat-v0", task_source="synthetic:digit_product_sum", num_tasks=12,
                                executor_max_actions=1, sandbox=sandbox) for _ in range(batch)]
        policy = ScriptedMathPolicy(envs[0].unwrapped.tasks, skill=0.0, code_skill=0.5, seed=3)
        try:
            results = list(Driver(envs, policy).play([(50 + i, {"task_index": i}) for i in range(12)]))
        finally:
            for env in envs:
                env.close()
            sandbox.close()
        return sorted((r.task_id, tuple(t.output for t in r.turns)) for r in results)

    one, four = play(1), play(4)
    assert one == four
    assert len({texts for _, texts in one}) > 1  # the coin flips differ between episodes


def test_the_confirmation_set_is_the_eval_stream_after_the_dev_set():
    """The preset's confirmation problems: the 32 product_sum eval problems after the dev set's 32,
    disjoint by text from the dev set and from the 512 training problems."""
    from mappa_envs.mathchat.tasks import synthetic_tasks
    from mappa_train.config import load_config
    from mappa_train.experiments.confirmation import confirmation_tasks
    from mappa_train.experiments.quickstart import PRESET, heldout_kwargs

    cfg = load_config(PRESET, [])
    records, overlap = confirmation_tasks(cfg, heldout_kwargs(cfg))
    stream = synthetic_tasks(64, split="eval", families=["product_sum"])
    assert [r["prompt"] for r in records] == [t.prompt for t in stream[32:]]
    assert overlap == {"training_problems": 512, "overlapping": 0, "overlapping_dev": 0}


def test_the_summary_over_seeds_is_a_t_interval_and_keeps_each_seeds_bootstrap(tmp_path):
    from mappa_cli.quickstart import parse_seeds
    from mappa_train.config import ConfigError
    from mappa_train.experiments.seeds import over_seeds, summarise, t_quantile

    assert parse_seeds("0, 1,2") == [0, 1, 2]
    for bad in ("0", "0,0", "a,b"):
        with pytest.raises(ConfigError, match="--seeds"):
            parse_seeds(bad)
    # 0.1, 0.2, 0.6: mean 0.3, sd 0.2646; t(0.975, 2) = 4.303 -> half-width 0.6572
    s = over_seeds([0.1, 0.2, 0.6])
    assert s["mean"] == pytest.approx(0.3)
    assert s["ci95"] == pytest.approx([0.3 - 0.6572, 0.3 + 0.6572], abs=1e-3)
    assert t_quantile(30) == pytest.approx(2.042, abs=2e-3)  # beyond the table
    for seed, (before, after) in enumerate([(0.1, 0.3), (0.2, 0.3)]):
        run = tmp_path / f"seed_{seed}"
        run.mkdir()
        block = {"accuracy_before": before, "accuracy_after": after, "accuracy_delta": after - before,
                 "accuracy_delta_ci95": [-0.1, 0.4],
                 "control": {"accuracy_after": before, "coached_minus_control": after - before,
                             "coached_minus_control_ci95": [0, 0.3]}}
        run.joinpath("report.json").write_text(json.dumps({**block, "heldout_problems": 48, "wall_s": 60.0,
                                                           "cpu_s": 90.0, "confirmation": {**block, "problems": 34}}))
    text = summarise(tmp_path, [0, 1])
    summary = json.loads((tmp_path / "seeds.json").read_text())
    assert summary["dev"]["delta"]["mean"] == pytest.approx(0.15)
    assert summary["confirmation"]["problems"] == 34
    assert summary["dev"]["per_seed"]["1"]["accuracy_delta_ci95"] == [-0.1, 0.4]
    assert "+0.150" in text
    assert "| 1 | 0.200 | 0.300 | +0.100 [-0.100, +0.400] | 0.200 | +0.100 [+0.000, +0.300] |" in text
    assert summary["confirmation"]["coached_minus_control"]["mean"] == pytest.approx(0.15)
    assert "Mean coached − control over seeds: +0.150" in text



def _threads_seen(n: int, ready: str, timeout_s: float = 60.0) -> list[int]:
    """A side-by-side job: the thread counts it is given, polled until it holds `n` threads. The job
    holding 1 ends once `ready` exists; the job waiting for 2 writes it after its first poll."""
    import time
    from pathlib import Path

    import torch

    from mappa_train.health import use_available_cpus

    seen, deadline = [], time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        use_available_cpus()
        seen.append(torch.get_num_threads())
        if n > 1:
            Path(ready).touch()
        if seen[-1] == n and (n > 1 or Path(ready).exists()):
            break
        time.sleep(0.05)
    return seen


def test_side_by_side_gives_the_last_job_every_core(tmp_path):
    """Two jobs on two CPUs hold a thread each; when one ends, the other takes both."""
    from mappa_train.experiments.quickstart import side_by_side

    ready = str(tmp_path / "ready")
    done = side_by_side({"short": (_threads_seen, (1, ready)), "long": (_threads_seen, (2, ready))}, cpus=2,
                        every_s=0.1)
    assert set(done["short"]) == {1}
    assert done["long"][0] == 1
    assert done["long"][-1] == 2


def _fail_once_running(pid_file: str) -> None:
    """Fails once the other job is running (its pid written)."""
    deadline = time.monotonic() + 120
    while not Path(pid_file).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    raise ValueError("this job failed")


def _run_until_stopped(pid_file: str) -> None:
    import os

    Path(pid_file).write_text(str(os.getpid()))
    time.sleep(600)


def _gone(pid: int, timeout_s: float = 30) -> bool:
    import os

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def test_a_failing_job_stops_the_others_and_raises_its_error(tmp_path):
    from mappa_train.experiments.quickstart import side_by_side

    pid_file = tmp_path / "pid"
    started = time.monotonic()
    with pytest.raises(ValueError, match="this job failed"):
        side_by_side({"fails": (_fail_once_running, (str(pid_file),)),
                      "runs": (_run_until_stopped, (str(pid_file),))}, cpus=2, every_s=0.1)
    assert time.monotonic() - started < 300  # not the survivor's 600 s
    assert _gone(int(pid_file.read_text()))  # stopped, not left running


def test_sigterm_stops_every_job_of_a_run(tmp_path):
    """`kill` of a quickstart (SIGTERM, not Ctrl-C's process-group SIGINT) leaves no job computing on."""
    import os
    import signal
    import subprocess
    import sys

    pid_file = tmp_path / "pid"
    code = ("from tests.train.experiments.test_quickstart import _run_until_stopped as run\n"
            "from mappa_train.experiments.quickstart import side_by_side\n"
            f"side_by_side({{'a': (run, ({str(pid_file)!r},))}}, cpus=1, every_s=0.1)\n")
    parent = subprocess.Popen([sys.executable, "-c", code], cwd=Path(__file__).resolve().parents[3])
    deadline = time.monotonic() + 120
    while not pid_file.exists():
        assert parent.poll() is None, "the run ended before its job started"
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.1)
    os.kill(parent.pid, signal.SIGTERM)
    assert parent.wait(60) != 0
    assert _gone(int(pid_file.read_text()))
