"""`mappa quickstart`: watch MAPPA fix what imitation could not, offline, on a laptop CPU.

1. The start (`build_start`): a tiny Qwen2 model and tokenizer built offline, warm-started with
   supervised steps on transcripts of a *noisy* scripted team (`mappa_envs.mathchat.scripted`,
   `code_skill`): half of its Code Executor's code is broken (it stores the result under one name
   and prints another, so the sandbox raises NameError; the rule coach scores that action 3.5
   instead of 9.5) and the team then reports the Problem Solver's wrong guess. The problems are the
   synthetic family `digit_product_sum` ("What is 4 * 7 + 3?"), whose code only has to copy the
   problem's one-digit numbers: a model this small learns that in minutes, not real mathematics.
   Imitation inherits the team's habits, the broken code included.
2. The teacher is played on the held-out problems (disjoint from training by problem text; the
   dev set, see mappa_train/experiments/confirmation.py for the confirmation set).
3. MAPPA trains the warm start (configs/quickstart.yaml: shared policy, rule coach, local
   sandbox, advantages whitened per role), evaluating on the held-out problems before the first
   update, every `eval_every` steps and after the last, always with the same k samples per problem
   at the same temperature.
4. The confirmation set (mappa_train/experiments/confirmation.py), played with the warm start and the final policy only.
5. report.json, report.md and curves.png: accuracy before and after with a 95% paired bootstrap
   interval over problems (dev and confirmation sets), the teacher's accuracy on the dev problems,
   per-role coach scores, KL, CPU seconds by phase.

Why the numbers move: the coach scores a broken cell 6 points below one that runs and prints the
right answer (2 below one that runs and prints something else), on that very action, so RL shifts
the executor towards code that computes the answer; a working cell prints it, and the Verifier then
copies it (its own reward checks the answer: 9 when right, 2 when wrong). Measured
before the round-3 fixes (docs/results.md, seed 0): accuracy 0.094 -> 0.354, interval [+0.135,
+0.396]; the executor's held-out coach score 4.25 -> 8.58, while the Verifier's copy of the printed
value stays the weak link (2.66 -> 4.48). The headline is the mean over seeds (`--seeds 0,1,2`).
Held-out accuracy is read near-greedily (temperature 0.1), so it
reports the policy's preferred actions. Nothing here sees a held-out answer: the warm start and RL
use training problems only, and the rule coach checks answers of training episodes only.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path

from mappa_train.experiments.warm_start import StartConfig, build_start

PRESET = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
SET = "heldout"  # the preset's held-out eval set


def run_seeds(config: str, out: Path, spec: StartConfig, overrides: list[str], seeds: list[int], n_boot: int,
              confirmation_problems: int) -> str:
    """One whole quickstart per training seed under OUT/seed_N, then OUT/seeds.json and seeds.md (returned)."""
    from mappa_train.config import ConfigError
    from mappa_train.experiments.seeds import summarise

    if any(o.startswith("seed=") for o in overrides):
        raise ConfigError("give the seeds with --seeds, not seed= as well")
    for seed in seeds:
        print(f"== seed {seed} ==", flush=True)
        run_quickstart(config, out / f"seed_{seed}", spec, [*overrides, f"seed={seed}"], n_boot,
                       confirmation_problems)
    return summarise(out, seeds)


def run_quickstart(config: str, out: Path, spec: StartConfig, overrides: list[str], n_boot: int,
                   confirmation_problems: int) -> dict:
    """The five steps of the module's docstring; writes report.json, report.md (printed) and returns the report."""
    from mappa_train.config import ConfigError, load_config
    from mappa_train.experiments import confirmation
    from mappa_train.health import use_available_cpus

    cfg = load_config(config, [f"out_dir={out}", *overrides])  # a ConfigError is one line in the CLI
    if SET not in cfg.env.eval_sets:
        raise ConfigError(f"the quickstart evaluates on env.eval_sets.{SET}; {config} has "
                          f"{sorted(cfg.env.eval_sets)}")
    threads = use_available_cpus()
    started, cpu = time.perf_counter(), {"start": _cpu_s()}
    print(f"1/5 the start: a tiny model, warm-started on {spec.sft_episodes} episodes of a noisy scripted team ...",
          flush=True)
    start = build_start(cfg, spec, out / "start")
    cpu["warm_start"] = _cpu_s()
    print("2/5 the teacher on the held-out problems ...", flush=True)
    teacher, overlap = teacher_and_overlap(cfg, spec, out / "teacher")
    cpu["teacher"] = _cpu_s()
    print(f"3/5 MAPPA: {cfg.steps} steps x {cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt} episodes, "
          f"held-out evaluation every {cfg.eval_every} ...", flush=True)
    from mappa_train.train import train

    train(load_config(config, [f"out_dir={out}", f"model.path={start}", *overrides]))
    cpu["mappa"] = _cpu_s()
    confirm = None
    if confirmation_problems:
        print(f"4/5 the confirmation set ({confirmation_problems} problems), before and after ...", flush=True)
        records, confirm_overlap = confirmation.confirmation_tasks(cfg, heldout_kwargs(cfg), confirmation_problems)
        confirmation.evaluate(cfg, records, start, out, 0)
        confirmation.evaluate(cfg, records, out / "final" / "shared", out, cfg.steps)
        confirm = confirmation.summary(out, 0, cfg.steps, confirm_overlap, n_boot, cfg.seed)
    cpu["confirmation"] = _cpu_s()
    print("5/5 writing the report ...", flush=True)
    report = build_report(cfg, spec, out, teacher, overlap, time.perf_counter() - started, cpu["confirmation"] -
                          cpu["start"], n_boot)
    report.update(confirmation=confirm, threads=threads, cpu_s_by_phase=cpu_by_phase(out, cpu))
    (out / "report.json").write_text(json.dumps(report, indent=2))
    text = format_report(report)
    (out / "report.md").write_text(text)
    print(text)
    return report


def cpu_by_phase(out: Path, marks: dict[str, float]) -> dict[str, float]:
    """CPU seconds of each phase: the quickstart's own marks, and MAPPA's split by metrics.jsonl into
    rollout, update, weight sync and held-out evaluation (the rest: start-up, checkpoints, plots)."""
    from mappa_train.runlog import METRICS_FILE, read_metrics

    rows = read_metrics(out / METRICS_FILE)
    phases = {k: sum(r.get(f"cpu_{k}_s", 0.0) for r in rows) for k in ("rollout", "update", "sync", "eval")}
    mappa = marks["mappa"] - marks["teacher"]
    return {"warm_start": marks["warm_start"] - marks["start"], "teacher": marks["teacher"] - marks["warm_start"],
            **phases, "mappa_other": mappa - sum(phases.values()),
            "confirmation": marks["confirmation"] - marks["mappa"]}


def _cpu_s() -> float:
    """CPU seconds of this process, its finished children and its live ones (sandbox kernels)."""
    from mappa_train.runlog import cpu_seconds

    return cpu_seconds()


# ---- the held-out set: the teacher, and the in-training evaluations --------------------------------

def heldout_kwargs(cfg) -> dict:
    return {**cfg.env.kwargs, **cfg.env.eval_sets[SET]}


def teacher_and_overlap(cfg, spec: StartConfig, out_dir: Path) -> tuple[dict[str, list[float]], dict]:
    """The noisy teacher's correctness on each of k samples of every held-out problem (task id -> list),
    and how many held-out problems also occur (by normalised text) among the training problems."""
    import mappa_envs
    from mappa_envs.mathchat.scripted import ScriptedMathPolicy
    from mappa_envs.sandbox import make_sandbox
    from mappa_train.evaluation.hygiene import find_overlap
    from mappa_train.evaluation.runner import EvalSet, run_eval

    es = EvalSet(SET, cfg.env.id, heldout_kwargs(cfg), max_problems=cfg.eval_episodes)
    sandbox = make_sandbox(cfg.env.sandbox, **cfg.env.sandbox_kwargs)
    try:
        team = lambda env: ScriptedMathPolicy(env.unwrapped.tasks, skill=spec.solver_skill,  # noqa: E731
                                              seed=cfg.seed + 1, code_skill=spec.code_skill)
        records, _ = run_eval(team, [es], out_dir, k=cfg.eval_samples, seed=cfg.seed,
                              batch_size=cfg.rollout.num_envs, env_kwargs={"sandbox": sandbox})
        problems = {}
        for name, kwargs in (("train", cfg.env.kwargs), (SET, heldout_kwargs(cfg))):
            env = mappa_envs.make(cfg.env.id, sandbox=sandbox, **kwargs)
            problems[name] = [(t.id, t.prompt) for t in env.unwrapped.tasks]
            env.close()
    finally:
        sandbox.close()
    outcomes: dict[str, list[float]] = {}
    for r in records[SET]:
        outcomes.setdefault(r["task_id"], []).append(float(bool(r["outcome"]["correct"])))
    overlap = find_overlap(SET, problems[SET][:cfg.eval_episodes], "training problems",
                           [p for _, p in problems["train"]])
    return outcomes, {"training_problems": len(problems["train"]), "overlapping": len(overlap.ids)}


# ---- the report ----------------------------------------------------------------------------------

def build_report(cfg, spec: StartConfig, out: Path, teacher: dict, overlap: dict, wall_s: float, cpu_s: float,
                 n_boot: int) -> dict:
    from mappa_train.evaluation.stats import accuracy_change, paired_bootstrap
    from mappa_train.evaluation.stats import problem_means as per_problem
    from mappa_train.runlog import METRICS_FILE, read_metrics

    rows = read_metrics(out / METRICS_FILE)
    evals = sorted((r for r in rows if r["kind"] == "eval"), key=lambda r: r["step"])
    train = sorted((r for r in rows if r["kind"] == "train"), key=lambda r: r["step"])
    first, last = evals[0], evals[-1]
    tasks, before, after, ci = accuracy_change(out, SET, first["step"], last["step"], n_boot, cfg.seed)
    vs_teacher = paired_bootstrap(per_problem(teacher, tasks), after, n_boot=n_boot, seed=cfg.seed)
    sft = json.loads((out / "start" / "model" / "warm_start.json").read_text())
    roles = sorted(k.split("/")[-1] for k in first if k.startswith(f"{SET}/coach/"))
    return {
        "accuracy_before": mean(before), "accuracy_after": mean(after),
        "accuracy_delta": ci.delta, "accuracy_delta_ci95": [ci.low, ci.high],
        "teacher_accuracy": mean(per_problem(teacher, tasks)), "warm_start_accuracy": mean(before),
        "after_minus_teacher": vs_teacher.delta, "after_minus_teacher_ci95": [vs_teacher.low, vs_teacher.high],
        "interval": f"percentile paired bootstrap over held-out problems ({n_boot} resamples; each problem's "
                    f"figure is its mean correctness over its k samples)",
        "heldout_set": {"env": cfg.env.id, **heldout_kwargs(cfg), **overlap},
        "heldout_problems": len(tasks), "k": cfg.eval_samples, "eval_temperature": cfg.generation.eval_temperature,
        "max_new_tokens": cfg.generation.max_new_tokens,
        "steps": len(train), "rollouts": len(train) * cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt,
        "seed": cfg.seed, "wall_s": wall_s, "cpu_s": cpu_s,
        "model": {"kind": "tiny Qwen2 (random init, offline tokenizer)", "parameters": sft["parameters"],
                  "hidden_size": spec.hidden_size, "layers": spec.layers},
        "warm_start": {**asdict(spec), **sft},
        "coach_before": {r: first[f"{SET}/coach/{r}"] for r in roles},
        "coach_after": {r: last.get(f"{SET}/coach/{r}") for r in roles},
        "kl_last_step": train[-1].get("kl") if train else None,
        "curve": [[r["step"], r[f"{SET}/accuracy"]] for r in evals],
    }


def confirmation_lines(c: dict | None) -> list[str]:
    if not c:
        return []
    lo, hi = c["accuracy_delta_ci95"]
    return [f"Confirmation set (never evaluated while presets were tuned; {c['problems']} problems, "
            f"{c['overlapping']} among the training problems, {c['overlapping_dev']} in the dev set above): "
            f"{c['accuracy_before']:.3f} -> {c['accuracy_after']:.3f}, after − before {c['accuracy_delta']:+.3f}, "
            f"95% interval [{lo:+.3f}, {hi:+.3f}].", ""]


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def format_report(r: dict) -> str:
    lo, hi = r["accuracy_delta_ci95"]
    tlo, thi = r["after_minus_teacher_ci95"]
    hs = r["heldout_set"]
    verdict = ("Held-out accuracy rose: the interval excludes zero." if lo > 0 else
               "Held-out accuracy fell: the interval excludes zero." if hi < 0 else
               "No significant change in held-out accuracy: the interval includes zero.")
    lines = [
        f"# MAPPA quickstart ({r['wall_s'] / 60:.1f} min wall, {r['cpu_s'] / 60:.1f} min CPU)", "",
        f"Model: {r['model']['kind']}, {r['model']['parameters'] / 1e6:.2f} M parameters; warm start: "
        f"{r['warm_start']['steps']} supervised steps on {r['warm_start']['pairs']} actions of a scripted team whose "
        f"code runs {r['warm_start']['code_skill']:.0%} of the time (loss {r['warm_start']['first_loss']:.2f} -> "
        f"{r['warm_start']['last_loss']:.2f}).", "",
        f"Held-out (dev) set: {r['heldout_problems']} problems of `{hs['task_source']}` (split `{hs.get('split')}`), "
        f"{hs['overlapping']} of them among the {hs['training_problems']} training problems; k = {r['k']} samples "
        f"per problem at temperature {r['eval_temperature']}, the same before and after.", "",
        "| | held-out accuracy |", "|---|---|",
        f"| noisy scripted teacher | {r['teacher_accuracy']:.3f} |",
        f"| warm start (before RL) | {r['accuracy_before']:.3f} |",
        f"| after {r['steps']} MAPPA steps ({r['rollouts']} episodes) | {r['accuracy_after']:.3f} |", "",
        f"After − before: {r['accuracy_delta']:+.3f}, 95% interval [{lo:+.3f}, {hi:+.3f}] "
        f"({r['interval']}). {verdict}", "",
        f"After − teacher: {r['after_minus_teacher']:+.3f}, 95% interval [{tlo:+.3f}, {thi:+.3f}].", "",
        "Held-out coach score by role, before -> after: " + "; ".join(
            f"{role} {b:.2f} -> {r['coach_after'][role]:.2f}" for role, b in r["coach_before"].items()) + ".", "",
        f"KL to the warm start at the last step: {r['kl_last_step']:.4f} per token." if r["kl_last_step"] is not None
        else "", "",
        *confirmation_lines(r.get("confirmation")),
        "CPU seconds by phase: " + ", ".join(f"{k} {v:.0f}" for k, v in r.get("cpu_s_by_phase", {}).items())
        + f" ({r.get('threads')} torch threads).", "",
        "Curves: curves.png; every number: report.json, metrics.jsonl, eval_episodes.jsonl.",
    ]
    return "\n".join(lines) + "\n"
