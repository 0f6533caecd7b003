"""`mappa quickstart`: a real model's team gets better with MAPPA, beside a control that gets the same training
from a coach that says nothing, offline, on a laptop CPU.

1. The start (`warm_start.build_start`): the built-in SmolLM2-135M-Instruct (`model.path: smollm2-135m`),
   warm-started with a few supervised steps on transcripts of a *noisy* scripted team
   (`mappa_envs.mathchat.scripted`): its Problem Solver always guesses wrong, and half of its Code
   Executor's cells are broken (the result is stored under one name and another is printed: NameError),
   after which the team reports the guess. The problems are the synthetic family `product_sum` ("What is
   47 * 85 + 12?"): a 135M model cannot multiply two-digit numbers in its head, but a working cell
   computes the answer and the Verifier copies it. The warm start teaches the team's format (short
   actions, the two cell templates, the copy); imitation inherits the broken cells too.
2. The teacher is played on the held-out problems (the dev set; see confirmation.py for the
   confirmation set), and the start is evaluated on both sets.
3. Two arms train from that same start with the same budget, tasks and sampling seeds
   (configs/quickstart.yaml): `coached`, with the rule coach, whose per-action score separates a cell
   that computes the answer (9.5) from a broken one (3.5) on that very action; and `control`, with
   the rule coach's verdict flipped at rate 0.5 (`rule:noise=0.5`): every action's expected score is 5
   whatever it did, so whatever the control gains comes from the update and the KL pull, not from the
   coach's information.
4. Each arm's final policy is evaluated on the dev and confirmation sets with the same k samples per
   problem, at the same temperature and seeds as the start, always scored by the plain rule coach.
5. report.json, report.md (printed) and curves.png: accuracy before and after with a 95% paired
   bootstrap over problems, coached − control paired over problems, the teacher, per-role coach
   scores, KL, CPU seconds by phase.

The start's evaluation and the two arms (3 and 4) run side by side, a process each (`side_by_side`).

Nothing here sees a held-out answer: the warm start and RL use training problems only.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, replace
from pathlib import Path

from mappa_train.experiments.warm_start import StartConfig, build_start

PRESET = Path(__file__).resolve().parents[2] / "configs" / "quickstart.yaml"
SET = "heldout"  # the preset's held-out eval set: the dev set
ARMS = ("coached", "control")
CONTROL_COACH = "rule:noise=0.5"  # every verdict flipped at rate 0.5: an expected 5 for any action


def arm_overrides(arm: str, seed: int) -> list[str]:
    """What an arm changes in the preset: only the training coach (the control's noise seeded by the run's)."""
    return [] if arm == "coached" else [f"env.coach={CONTROL_COACH},seed={seed}"]


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


def load(config: str, out: Path, overrides: list[str]):
    """The preset with the user's overrides, checked for what the quickstart itself relies on."""
    from mappa_train.config import ConfigError, load_config

    cfg = load_config(config, [f"out_dir={out}", *overrides])  # a ConfigError is one line in the CLI
    if SET not in cfg.env.eval_sets:
        raise ConfigError(f"the quickstart evaluates on env.eval_sets.{SET}; {config} has {sorted(cfg.env.eval_sets)}")
    if cfg.eval_every:
        raise ConfigError(f"the quickstart evaluates the start and each arm's end itself, on the same problems and "
                          f"seeds; set eval_every=0 (got {cfg.eval_every})")
    if cfg.model.policies != "shared":
        raise ConfigError(f"the quickstart trains one policy for the three roles: model.policies=shared (got "
                          f"{cfg.model.policies}); compare other modes with `mappa train`")
    return cfg


def run_quickstart(config: str, out: Path, spec: StartConfig, overrides: list[str], n_boot: int,
                   confirmation_problems: int) -> dict:
    """The five steps of the module's docstring; writes report.json, report.md (printed) and returns the report.

    The warm start runs in a process of its own (its memory is given back when it ends); then the
    start's evaluation and the two arms run side by side, one process each, the CPUs shared between
    them: much of a small model's step is single-threaded, so three processes keep two cores busy
    where one left them half idle."""
    from mappa_train.experiments import confirmation
    from mappa_train.health import available_cpus

    cfg = load(config, out, overrides)
    cpus = available_cpus()
    started, cpu = time.perf_counter(), {"start": _cpu_s()}
    print(f"1/5 the start: {cfg.model.path}, warm-started with {spec.sft_short_steps + spec.sft_steps} supervised "
          f"steps on {spec.sft_episodes} episodes of a noisy scripted team ...", flush=True)
    start = side_by_side({"warm_start": (_warm_start_job, (config, out, overrides, spec))}, cpus)["warm_start"]
    cpu["warm_start"] = _cpu_s()
    print("2/5 the teacher on the held-out problems ...", flush=True)
    teacher, overlap = teacher_and_overlap(cfg, spec, out / "teacher")
    sets = {SET: dev_records(cfg)}
    confirm_overlap = None
    if confirmation_problems:
        sets[confirmation.CONFIRM], confirm_overlap = confirmation.confirmation_tasks(cfg, heldout_kwargs(cfg),
                                                                                   confirmation_problems)
    cpu["teacher"] = _cpu_s()
    episodes = cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt
    print(f"3/5 side by side: the start's evaluation, and two arms of {cfg.steps} MAPPA steps x {episodes} episodes "
          f"from it, coached by {cfg.env.coach} and by {CONTROL_COACH} (the rule coach's verdict flipped at rate "
          f"0.5: a coach that says nothing) ...", flush=True)
    jobs = {"start": (_evaluate_job, (config, out, overrides, sets, start, out / "start", 0))}
    jobs.update({arm: (_arm_job, (config, out, overrides, arm, start, sets)) for arm in ARMS})
    done = side_by_side(jobs, cpus, progress=lambda: arm_progress(out, cfg.steps))
    evaluations = {name: r["evaluation"] for name, r in done.items()}
    print("5/5 writing the report ...", flush=True)
    report = build_report(cfg, spec, out, teacher, overlap, evaluations, n_boot)
    report["confirmation"] = (confirmation_summary(out, cfg, confirm_overlap, n_boot, evaluations)
                              if confirmation_problems else None)
    phases = {"warm_start": cpu["warm_start"] - cpu["start"],
              "teacher_and_start_eval": cpu["teacher"] - cpu["warm_start"] + done["start"]["cpu_s"]}
    for arm in ARMS:
        phases.update(done[arm]["phases"])
    report.update(wall_s=time.perf_counter() - started, cpu_s=_cpu_s() - cpu["start"], threads=cpus,
                  processes=len(jobs), cpu_s_by_phase=phases)
    plot_arms(out, report)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    text = format_report(report)
    (out / "report.md").write_text(text)
    print(text)
    return report


# ---- side by side: jobs in processes of their own ------------------------------------------------

def side_by_side(jobs: dict, cpus: int, progress=None, every_s: float = 20.0) -> dict:
    """Run `jobs` ({name: (function, args)}) at once, one spawned process each, torch's threads split
    between them (at least one each) and re-split as jobs end, so the last job running gets every core;
    returns {name: result}. `progress()` returns a line, printed every `every_s` seconds when it changed.
    The first job to fail stops the rest and raises its error; so does SIGTERM (as Ctrl-C does), so a
    killed run leaves no job computing on."""
    import concurrent.futures as cf
    import multiprocessing
    import signal
    import tempfile
    import threading

    main = threading.current_thread() is threading.main_thread()  # only it may set a signal handler
    before = signal.signal(signal.SIGTERM, _exit_on_sigterm) if main else None
    with tempfile.TemporaryDirectory(prefix="mappa-cpus-") as tmp:
        share = Path(tmp) / "cpus"
        _write_share(share, cpus, len(jobs))
        pool = cf.ProcessPoolExecutor(len(jobs), mp_context=multiprocessing.get_context("spawn"))
        futures = {}
        try:
            futures = {pool.submit(_in_process, fn, str(share), *args): name for name, (fn, args) in jobs.items()}
            results, shown = {}, ""
            pending = set(futures)
            while pending:
                finished, pending = cf.wait(pending, timeout=every_s, return_when=cf.FIRST_COMPLETED)
                for f in finished:
                    results[futures[f]] = f.result()  # a job's error is raised here, in the caller
                if finished and pending:
                    _write_share(share, cpus, len(pending))
                line = progress() if progress else ""
                if line and line != shown:
                    print(line, flush=True)
                    shown = line
            return results
        finally:
            if any(not f.done() for f in futures):  # a job failed or we were stopped: end the others now
                for process in (getattr(pool, "_processes", None) or {}).values():  # no public way in 3.11
                    process.terminate()
            pool.shutdown(wait=True, cancel_futures=True)
            if main:
                signal.signal(signal.SIGTERM, before)


def _exit_on_sigterm(signum, frame):
    raise SystemExit(f"stopped by signal {signum}")


def _write_share(path: Path, cpus: int, jobs: int) -> None:
    """Each running job's thread count, replaced whole so that a job never reads half of it."""
    part = path.with_suffix(".part")
    part.write_text(str(max(1, cpus // jobs)))
    part.replace(path)


def _in_process(fn, share_file: str, *args):
    """A job in its spawned process: torch's thread pools sized to its share of the CPUs, which it
    re-reads each training step and generation batch."""
    import os

    from mappa_train.health import CPU_SHARE_FILE, use_available_cpus

    os.environ[CPU_SHARE_FILE] = share_file
    use_available_cpus()
    return fn(*args)


def arm_progress(out: Path, steps: int) -> str:
    """One line: how far each arm's training and evaluation have got."""
    from mappa_train.runlog import METRICS_FILE, read_metrics

    parts = []
    for arm in ARMS:
        rows = [r for r in read_metrics(out / arm / METRICS_FILE) if r.get("kind") == "train"]
        if (out / arm / "evaluation.json").exists():
            parts.append(f"{arm}: done")
        elif len(rows) == steps:
            parts.append(f"{arm}: evaluating its final policy")
        else:
            last = f", reward {rows[-1]['reward']:.2f}" if rows and "reward" in rows[-1] else ""
            parts.append(f"{arm}: step {len(rows)}/{steps}{last}")
    start = "done" if (out / "start" / "evaluation.json").exists() else "evaluating"
    return f"   start: {start} | " + " | ".join(parts)


def _warm_start_job(config: str, out: Path, overrides: list[str], spec: StartConfig) -> Path:
    return build_start(load(config, out, overrides), spec, out / "start")


def _evaluate_job(config: str, out: Path, overrides: list[str], sets: dict, model: Path, where: Path,
                  step: int) -> dict:
    c0 = _cpu_s()
    evaluation = evaluate_once(load(config, out, overrides), sets, model, where, step)
    return {"evaluation": evaluation, "cpu_s": _cpu_s() - c0}


def _arm_job(config: str, out: Path, overrides: list[str], arm: str, start: Path, sets: dict) -> dict:
    """One arm: MAPPA training from the start, then its final policy on the held-out sets; its CPU
    seconds by phase (rollout, update, sync from its metrics.jsonl; the rest as `other`)."""
    from mappa_train.runlog import METRICS_FILE, read_metrics
    from mappa_train.train import train

    c0, cfg = _cpu_s(), load(config, out, overrides)
    train(load(config, out / arm, [*overrides, f"model.path={start}", "log.progress=false",
                                   *arm_overrides(arm, cfg.seed)]))
    c1 = _cpu_s()
    evaluation = evaluate_once(cfg, sets, out / arm / "final" / "shared", out / arm, cfg.steps)
    rows = read_metrics(out / arm / METRICS_FILE)
    phases = {f"{arm}_{k}": sum(r.get(f"cpu_{k}_s", 0.0) for r in rows) for k in ("rollout", "update", "sync")}
    phases[f"{arm}_other"] = c1 - c0 - sum(phases.values())
    phases[f"{arm}_eval"] = _cpu_s() - c1
    return {"evaluation": evaluation, "phases": phases}


def _cpu_s() -> float:
    """CPU seconds of this process, its finished children and its live ones (sandbox kernels)."""
    from mappa_train.runlog import cpu_seconds

    return cpu_seconds()


# ---- the held-out sets: the teacher, and the evaluations of the start and each arm -----------------

def heldout_kwargs(cfg) -> dict:
    return {**cfg.env.kwargs, **cfg.env.eval_sets[SET]}


def dev_records(cfg) -> list[dict]:
    """The dev set: the first `eval_episodes` problems of the held-out stream, as task records."""
    import mappa_envs

    env = mappa_envs.make(cfg.env.id, sandbox="local", **heldout_kwargs(cfg))
    tasks = env.unwrapped.tasks[:cfg.eval_episodes]
    env.close()
    return [{"id": t.id, "prompt": t.prompt, "answer": t.answer} for t in tasks]


def evaluate_once(cfg, sets: dict[str, list[dict]], model_path: Path, out: Path, step: int) -> dict[str, float]:
    """Play every set with the policy at `model_path` (k = eval_samples at the eval temperature and
    `eval_seed`, scored by the rule coach), appending the episodes to out/eval_episodes.jsonl at `step`;
    returns the sets' accuracy and coach scores. A finished evaluation (out/evaluation.json) is reused."""
    from mappa_train.evaluation.heldout import heldout_metrics
    from mappa_train.factories import local_experience

    done = out / "evaluation.json"
    if done.exists():
        return json.loads(done.read_text())
    env = replace(cfg.env, coach="rule", eval_coach="", coach_cache=None,
                  eval_sets={name: {"split": "eval", "task_source": records} for name, records in sets.items()})
    run_cfg = replace(cfg, env=env, eval_episodes=max(map(len, sets.values())),
                      model=replace(cfg.model, path=str(model_path)))
    experience = local_experience(run_cfg, model_path)
    try:
        metrics = heldout_metrics(run_cfg, experience, step, out)
    finally:
        experience.close()
    done.write_text(json.dumps(metrics))
    return metrics


def outcomes(out: Path, step: int, eval_set: str) -> dict[str, list[float]]:
    from mappa_train.runlog import eval_outcomes

    return eval_outcomes(out, step, eval_set)


def paired(a: dict[str, list[float]], b: dict[str, list[float]], n_boot: int, seed: int):
    """The problems, each one's accuracy under a and under b, and the paired bootstrap of b − a."""
    from mappa_train.evaluation.stats import paired_bootstrap, problem_means

    tasks = sorted(a)
    if sorted(b) != tasks or any(len(a[t]) != len(b[t]) for t in tasks):
        raise RuntimeError("two evaluations did not play the same problems and samples; re-run in a fresh --out")
    x, y = problem_means(a, tasks), problem_means(b, tasks)
    return tasks, x, y, paired_bootstrap(x, y, n_boot=n_boot, seed=seed)


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
    result: dict[str, list[float]] = {}
    for r in records[SET]:
        result.setdefault(r["task_id"], []).append(float(bool(r["outcome"]["correct"])))
    overlap = find_overlap(SET, problems[SET][:cfg.eval_episodes], "training problems",
                           [p for _, p in problems["train"]])
    return result, {"training_problems": len(problems["train"]), "overlapping": len(overlap.ids)}


# ---- the report ----------------------------------------------------------------------------------

def _ci(c) -> list[float]:
    return [c.low, c.high]


def build_report(cfg, spec: StartConfig, out: Path, teacher: dict, overlap: dict, evaluations: dict,
                 n_boot: int) -> dict:
    from mappa_train.evaluation.stats import paired_bootstrap, problem_means
    from mappa_train.runlog import METRICS_FILE, read_metrics

    start = outcomes(out / "start", 0, SET)
    arms = {}
    for arm in ARMS:
        tasks, before, after, ci = paired(start, outcomes(out / arm, cfg.steps, SET), n_boot, cfg.seed)
        train = sorted((r for r in read_metrics(out / arm / METRICS_FILE) if r["kind"] == "train"),
                       key=lambda r: r["step"])
        arms[arm] = {"accuracy_after": mean(after), "accuracy_delta": ci.delta, "accuracy_delta_ci95": _ci(ci),
                     "coach_after": _coach(evaluations[arm]), "kl_last_step": train[-1].get("kl") if train else None,
                     "training": [{k: r.get(k) for k in ("step", "accuracy", "reward", "kl", "time_update_s",
                                                         "time_rollout_s")} for r in train]}
    _, control, coached, vs_control = paired(outcomes(out / "control", cfg.steps, SET),
                                             outcomes(out / "coached", cfg.steps, SET), n_boot, cfg.seed)
    vs_teacher = paired_bootstrap(problem_means(teacher, tasks), problem_means(outcomes(out / "coached", cfg.steps,
                                                                                        SET), tasks),
                                  n_boot=n_boot, seed=cfg.seed)
    sft = json.loads((out / "start" / "model" / "warm_start.json").read_text())
    coached_arm = arms["coached"]
    return {
        "accuracy_before": mean(before), "accuracy_after": coached_arm["accuracy_after"],
        "accuracy_delta": coached_arm["accuracy_delta"], "accuracy_delta_ci95": coached_arm["accuracy_delta_ci95"],
        "control": {**arms["control"], "coach": f"{CONTROL_COACH},seed={cfg.seed}",
                    "coached_minus_control": vs_control.delta, "coached_minus_control_ci95": _ci(vs_control)},
        "coached": {**coached_arm, "coach": cfg.env.coach},
        "teacher_accuracy": mean(problem_means(teacher, tasks)), "warm_start_accuracy": mean(before),
        "after_minus_teacher": vs_teacher.delta, "after_minus_teacher_ci95": _ci(vs_teacher),
        "interval": f"percentile paired bootstrap over held-out problems ({n_boot} resamples; each problem's "
                    f"figure is its mean correctness over its k samples)",
        "heldout_set": {"env": cfg.env.id, **heldout_kwargs(cfg), **overlap},
        "heldout_problems": len(tasks), "k": cfg.eval_samples, "eval_temperature": cfg.generation.eval_temperature,
        "max_new_tokens": cfg.generation.max_new_tokens,
        "steps": cfg.steps, "rollouts": cfg.steps * cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt,
        "lr": cfg.learner.lr, "seed": cfg.seed,
        "model": {"path": cfg.model.path, "policies": cfg.model.policies, "dtype": cfg.model.dtype,
                  "parameters": sft["parameters"]},
        "warm_start": {**asdict(spec), **sft},
        "coach_before": _coach(evaluations["start"]), "coach_after": coached_arm["coach_after"],
        "kl_last_step": coached_arm["kl_last_step"],
        "curve": [[0, mean(before)], [cfg.steps, coached_arm["accuracy_after"]]],
    }


def _coach(metrics: dict) -> dict[str, float]:
    prefix = f"{SET}/coach/"
    return {k.removeprefix(prefix): v for k, v in metrics.items() if k.startswith(prefix)}


def confirmation_summary(out: Path, cfg, overlap: dict, n_boot: int, evaluations: dict) -> dict:
    """report.json's `confirmation`: each arm's change from the start and coached − control, paired over problems."""
    from mappa_train.experiments.confirmation import CONFIRM

    start = outcomes(out / "start", 0, CONFIRM)
    after = {arm: outcomes(out / arm, cfg.steps, CONFIRM) for arm in ARMS}
    tasks, before, coached, ci = paired(start, after["coached"], n_boot, cfg.seed)
    _, _, control, control_ci = paired(start, after["control"], n_boot, cfg.seed)
    _, _, _, vs_control = paired(after["control"], after["coached"], n_boot, cfg.seed)
    return {"problems": len(tasks), "accuracy_before": mean(before), "accuracy_after": mean(coached),
            "accuracy_delta": ci.delta, "accuracy_delta_ci95": _ci(ci),
            "control": {"accuracy_after": mean(control), "accuracy_delta": control_ci.delta,
                        "accuracy_delta_ci95": _ci(control_ci), "coached_minus_control": vs_control.delta,
                        "coached_minus_control_ci95": _ci(vs_control)}, **overlap}


def plot_arms(out: Path, r: dict) -> Path:
    """curves.png: training accuracy and reward per step of both arms, and held-out accuracy before and after."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8))
    for arm, colour in zip(ARMS, ("tab:blue", "tab:grey")):
        rows = r[arm]["training"]
        for ax, key in zip(axes[:2], ("accuracy", "reward")):
            points = [(row["step"], row[key]) for row in rows if isinstance(row.get(key), (int, float))]
            if points:
                ax.plot(*zip(*points), marker="o", markersize=3, color=colour, label=arm)
        axes[2].plot([0, r["steps"]], [r["accuracy_before"], r[arm]["accuracy_after"]], marker="o", color=colour,
                     label=arm)
    titles = ("training accuracy (temperature 1)", "training reward (scaled coach score)",
              f"held-out accuracy ({r['heldout_problems']} dev problems)")
    axes[2].axhline(r["teacher_accuracy"], ls="--", color="tab:orange", lw=1, label="noisy teacher")
    for ax, title in zip(axes, titles):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.suptitle(f"MAPPA quickstart: {r['model']['path']}, seed {r['seed']}")
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=100)
    plt.close(fig)
    return out / "curves.png"


def mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _interval(delta: float, ci: list[float]) -> str:
    return f"{delta:+.3f} [{ci[0]:+.3f}, {ci[1]:+.3f}]"


def verdict(ci: list[float], what: str) -> str:
    lo, hi = ci
    return (f"{what} rose: the interval excludes zero." if lo > 0 else
            f"{what} fell: the interval excludes zero." if hi < 0 else
            f"No significant change in {what.lower()}: the interval includes zero.")


def confirmation_lines(c: dict | None) -> list[str]:
    if not c:
        return []
    k = c["control"]
    return [f"Confirmation set ({c['problems']} problems never evaluated while presets were tuned, "
            f"{c['overlapping']} among the training problems, {c['overlapping_dev']} in the dev set): "
            f"start {c['accuracy_before']:.3f}, coached {c['accuracy_after']:.3f} "
            f"({_interval(c['accuracy_delta'], c['accuracy_delta_ci95'])}), control {k['accuracy_after']:.3f} "
            f"({_interval(k['accuracy_delta'], k['accuracy_delta_ci95'])}); coached − control "
            f"{_interval(k['coached_minus_control'], k['coached_minus_control_ci95'])}.", ""]


def format_report(r: dict) -> str:
    hs, ws, c = r["heldout_set"], r["warm_start"], r["control"]
    lines = [
        f"# MAPPA quickstart ({r['wall_s'] / 60:.1f} min wall, {r['cpu_s'] / 60:.1f} min CPU)", "",
        f"Model: {r['model']['path']} ({r['model']['parameters'] / 1e6:.1f} M parameters, {r['model']['dtype']}, one "
        f"policy for the three roles). Warm start: {ws['steps']} supervised steps on {ws['pairs']} actions of a "
        f"scripted team whose Problem Solver is always wrong and whose code runs {ws['code_skill']:.0%} of the time "
        f"(loss {ws['first_loss']:.2f} -> {ws['last_loss']:.2f}): it taught the team's format, the two cell "
        f"templates (one computes the answer, one raises NameError) and the Verifier's copy of a printed value.", "",
        f"Held-out (dev) set: {r['heldout_problems']} problems of `{hs['task_source']}`, {hs['overlapping']} of them "
        f"among the {hs['training_problems']} training problems; k = {r['k']} per problem at temperature "
        f"{r['eval_temperature']}, the same samples' seeds for every policy.", "",
        f"Both arms: {r['steps']} MAPPA steps ({r['rollouts']} episodes, lr {r['lr']:g}) from the same start, on the "
        f"same tasks and sampling seeds. Coached: the rule coach. Control: `{c['coach']}`, the rule coach's verdict "
        f"flipped at rate 0.5, so every action's expected score is 5 and its reward carries no information.", "",
        "| | held-out accuracy | − start [95% interval] |", "|---|---|---|",
        f"| noisy scripted teacher | {r['teacher_accuracy']:.3f} | |",
        f"| start (warm start, before RL) | {r['accuracy_before']:.3f} | |",
        f"| coached (rule coach) | {r['accuracy_after']:.3f} | "
        f"{_interval(r['accuracy_delta'], r['accuracy_delta_ci95'])} |",
        f"| control (a coach that says nothing) | {c['accuracy_after']:.3f} | "
        f"{_interval(c['accuracy_delta'], c['accuracy_delta_ci95'])} |", "",
        f"**Coached − control: {_interval(c['coached_minus_control'], c['coached_minus_control_ci95'])}** "
        f"({r['interval']}). {verdict(c['coached_minus_control_ci95'], 'Accuracy over the control')} "
        f"Coached − start: {verdict(r['accuracy_delta_ci95'], 'Held-out accuracy')}", "",
        f"What RL added beyond the warm start: coached − start {r['accuracy_delta']:+.3f}, of which the control "
        f"(the same updates without the coach's information) accounts for {c['accuracy_delta']:+.3f}; coached − "
        f"teacher {_interval(r['after_minus_teacher'], r['after_minus_teacher_ci95'])}.", "",
        "Held-out coach score by role (rule coach), start -> coached / control: " + "; ".join(
            f"{role} {b:.2f} -> {r['coach_after'].get(role, float('nan')):.2f} / "
            f"{c['coach_after'].get(role, float('nan')):.2f}" for role, b in r["coach_before"].items()) + ".", "",
        *([f"KL to the start at the last step: coached {r['kl_last_step']:.4f}, control {c['kl_last_step']:.4f} "
           "per token.", ""] if r["kl_last_step"] is not None and c["kl_last_step"] is not None else []),
        *confirmation_lines(r.get("confirmation")),
        "CPU seconds by phase: " + ", ".join(f"{k} {v:.0f}" for k, v in r.get("cpu_s_by_phase", {}).items())
        + f" ({r.get('threads')} torch threads).", "",
        "Curves: curves.png; every number: report.json; each arm's metrics.jsonl and eval_episodes.jsonl under "
        "coached/ and control/, the start's under start/.",
    ]
    return "\n".join(lines) + "\n"
