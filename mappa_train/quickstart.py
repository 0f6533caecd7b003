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
   dev set, see mappa_train/confirmation.py for the confirmation set).
3. MAPPA trains the warm start (configs/quickstart.yaml: shared policy, rule coach, local
   sandbox, advantages whitened per role), evaluating on the held-out problems before the first
   update, every `eval_every` steps and after the last, always with the same k samples per problem
   at the same temperature.
4. The confirmation set (mappa_train/confirmation.py), played with the warm start and the final policy only.
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

import argparse
import json
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mappa_train.config import doc
from mappa_train.confirmation import DEFAULT_PROBLEMS

PRESET = Path(__file__).resolve().parent.parent / "configs" / "quickstart.yaml"
SET = "heldout"  # the preset's held-out eval set


@dataclass
class StartConfig:
    """The start: a tiny model and its warm start on a noisy scripted team (shared with `mappa ablate`)."""

    hidden_size: int = doc(128, "tiny model width")
    layers: int = doc(2, "tiny model depth")
    sft_episodes: int = doc(1200, "scripted episodes for the warm start")
    sft_short_steps: int = doc(600, "first supervised steps, on the conversations without their system prompts")
    sft_steps: int = doc(150, "then supervised steps on the conversations exactly as the agents see them")
    sft_batch: int = doc(32, "conversations per supervised step")
    sft_lr: float = doc(3e-3, "peak learning rate of the warm start (20 warm-up steps, linear decay to 10%)")
    solver_skill: float = doc(0.0, "how often the teacher's Problem Solver is right")
    code_skill: float = doc(0.5, "how often the teacher's code runs (else it raises NameError)")


def configure(parser: argparse.ArgumentParser) -> None:
    d = StartConfig()
    parser.add_argument("--out", default="runs/quickstart", help="output directory (reused: an existing run resumes)")
    parser.add_argument("--config", default=str(PRESET), help="the training preset")
    parser.add_argument("--sft-episodes", type=int, default=d.sft_episodes, help="scripted episodes for the warm start")
    parser.add_argument("--sft-short-steps", type=int, default=d.sft_short_steps,
                        help="warm-start steps on conversations without their system prompts (cheaper)")
    parser.add_argument("--sft-steps", type=int, default=d.sft_steps,
                        help="then warm-start steps on full conversations")
    parser.add_argument("--teacher-code-skill", type=float, default=d.code_skill,
                        help="how often the teacher's code runs; the rest raises NameError")
    parser.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples for the interval")
    parser.add_argument("--confirmation-problems", type=int, default=DEFAULT_PROBLEMS,
                        help="held-out problems after the dev set's, evaluated before and after only (0: none)")
    parser.add_argument("--seeds", default="", help="comma-separated training seeds, e.g. 0,1,2: one whole run per "
                        "seed under OUT/seed_N, then OUT/seeds.json and seeds.md: the mean change over seeds with a "
                        "95%% t-interval, and each seed's paired bootstrap")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="training config overrides (see mappa train --help)")


def run(args: argparse.Namespace) -> int:
    from mappa_train.config import ConfigError

    if not args.seeds:
        return run_one(args)
    from mappa_train.seeds import parse_seeds, summarise

    seeds = parse_seeds(args.seeds)
    if any(o.startswith("seed=") for o in args.overrides):
        raise ConfigError("give the seeds with --seeds, not seed= as well")
    for seed in seeds:
        print(f"== seed {seed} ==", flush=True)
        run_one(argparse.Namespace(**{**vars(args), "out": str(Path(args.out) / f"seed_{seed}"),
                                      "overrides": [*args.overrides, f"seed={seed}"]}))
    print(summarise(Path(args.out), seeds))
    return 0


def run_one(args: argparse.Namespace) -> int:
    from mappa_train import confirmation
    from mappa_train.config import ConfigError, load_config
    from mappa_train.health import use_available_cpus

    out = Path(args.out)
    spec = StartConfig(sft_episodes=args.sft_episodes, sft_short_steps=args.sft_short_steps, sft_steps=args.sft_steps,
                       code_skill=args.teacher_code_skill)
    cfg = load_config(args.config, [f"out_dir={out}", *args.overrides])  # a ConfigError is one line in the CLI
    if SET not in cfg.env.eval_sets:
        raise ConfigError(f"the quickstart evaluates on env.eval_sets.{SET}; {args.config} has "
                          f"{sorted(cfg.env.eval_sets)}")
    if not 0 <= spec.code_skill <= 1:
        raise ConfigError(f"--teacher-code-skill must be in [0, 1], got {spec.code_skill}")
    if args.confirmation_problems < 0:
        raise ConfigError(f"--confirmation-problems must be >= 0, got {args.confirmation_problems}")
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

    train(load_config(args.config, [f"out_dir={out}", f"model.path={start}", *args.overrides]))
    cpu["mappa"] = _cpu_s()
    confirm = None
    if args.confirmation_problems:
        print(f"4/5 the confirmation set ({args.confirmation_problems} problems), before and after ...", flush=True)
        records, confirm_overlap = confirmation.confirmation_tasks(cfg, heldout_kwargs(cfg), args.confirmation_problems)
        confirmation.evaluate(cfg, records, start, out, 0)
        confirmation.evaluate(cfg, records, out / "final" / "shared", out, cfg.steps)
        confirm = confirmation.summary(out, 0, cfg.steps, confirm_overlap, args.n_boot, cfg.seed)
    cpu["confirmation"] = _cpu_s()
    print("5/5 writing the report ...", flush=True)
    report = build_report(cfg, spec, out, teacher, overlap, time.perf_counter() - started, cpu["confirmation"] -
                          cpu["start"], args.n_boot)
    report.update(confirmation=confirm, threads=threads, cpu_s_by_phase=cpu_by_phase(out, cpu))
    (out / "report.json").write_text(json.dumps(report, indent=2))
    text = format_report(report)
    (out / "report.md").write_text(text)
    print(text)
    return 0


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


# ---- the start -----------------------------------------------------------------------------------

def build_start(cfg, spec: StartConfig, out_dir: Path) -> Path:
    """The tiny model warm-started on the noisy team's training episodes; a finished one is reused."""
    from mappa_train.tiny_model import build_tiny_model

    base = build_tiny_model(out_dir / "base", hidden_size=spec.hidden_size, layers=spec.layers,
                            heads=max(1, spec.hidden_size // 32), kv_heads=max(1, spec.hidden_size // 64),
                            seed=cfg.seed)
    warm_start(cfg, spec, base, out_dir / "model")
    return out_dir / "model"


def scripted_pairs(cfg, spec: StartConfig) -> list[tuple[list[dict], str]]:
    """(conversation, action) pairs of the noisy scripted team on the training problems."""
    from mappa_envs.mathchat.scripted import ScriptedMathPolicy
    from mappa_envs.sandbox import make_sandbox
    from mappa_envs.wrappers import VectorRunner
    from mappa_train.train import make_envs

    sandbox = make_sandbox(cfg.env.sandbox, **cfg.env.sandbox_kwargs)
    envs = make_envs(cfg, cfg.rollout.num_envs, sandbox=sandbox)
    try:
        policy = ScriptedMathPolicy(envs[0].unwrapped.tasks, skill=spec.solver_skill, seed=cfg.seed,
                                    code_skill=spec.code_skill)
        results = VectorRunner(envs, policy).run(episodes=spec.sft_episodes, seed=cfg.seed + 10_000)
    finally:
        for env in envs:
            env.close()
        sandbox.close()
    return [(turn.messages, turn.action) for r in results for turn in r.turns]


def warm_start(cfg, spec: StartConfig, base: Path, out_dir: Path) -> dict:
    """Supervised steps on the scripted transcripts (loss on action tokens only); reuses a finished one.

    The first `sft_short_steps` drop each conversation's system prompt: it is the same for every
    problem, so those steps teach the copies the team makes (problem -> code, printed value ->
    answer) for less; the last `sft_steps` see the prompts exactly as the agents will. Each batch
    holds one role's actions (the roles take turns): a role's conversations have about the same
    length, so the Problem Solver's short ones are not padded to the Verifier's. A random model
    needs a few hundred steps before it copies at all.
    """
    done = out_dir / "warm_start.json"
    if done.exists():
        return json.loads(done.read_text())
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mappa_train.generation import chat_prompt_ids

    tok = AutoTokenizer.from_pretrained(base)
    full, short = {}, {}  # role (its system prompt) -> (prompt ids, action ids)
    for messages, action in scripted_pairs(cfg, spec):
        action_ids = tok.encode(action, add_special_tokens=False) + [tok.eos_token_id]
        role = messages[0]["content"]
        full.setdefault(role, []).append((chat_prompt_ids(tok, messages), action_ids))
        short.setdefault(role, []).append((chat_prompt_ids(tok, [m for m in messages if m["role"] != "system"]),
                                           action_ids))
    roles = sorted(full)
    torch.manual_seed(cfg.seed)
    model = AutoModelForCausalLM.from_pretrained(base)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.sft_lr)
    from tqdm.auto import tqdm

    rng, losses, total = random.Random(cfg.seed), [], spec.sft_short_steps + spec.sft_steps
    for step in tqdm(range(total), desc="warm start", unit="step", disable=not cfg.log.progress):
        data = (short if step < spec.sft_short_steps else full)[roles[step % len(roles)]]
        batch = rng.sample(data, min(spec.sft_batch, len(data)))
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((len(batch), width), tok.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (p, a) in enumerate(batch):
            ids[i, :len(p) + len(a)] = torch.tensor(p + a)
            labels[i, len(p):len(p) + len(a)] = torch.tensor(a)
            attention[i, :len(p) + len(a)] = 1
        for group in opt.param_groups:
            group["lr"] = spec.sft_lr * min(1.0, (step + 1) / 20) * (1 - 0.9 * step / total)
        loss = _action_loss(model, ids, attention, labels)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    summary = {"pairs": sum(map(len, full.values())), "steps": total, "first_loss": sum(losses[:10]) / len(losses[:10]),
               "last_loss": sum(losses[-10:]) / len(losses[-10:]),
               "parameters": sum(p.numel() for p in model.parameters())}
    done.write_text(json.dumps(summary))
    return summary


def _action_loss(model, ids, attention, labels):
    """Next-token loss on the labelled (action) tokens only: the output head runs on those positions
    alone, not on the whole prompt, which is most of a supervised step's cost for a model this small."""
    import torch

    hidden = model.model(input_ids=ids, attention_mask=attention).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    keep = targets != -100
    return torch.nn.functional.cross_entropy(model.lm_head(hidden[keep]), targets[keep])


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
