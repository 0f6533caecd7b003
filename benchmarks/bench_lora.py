"""Memory and time of 3 roles' policies: `per_role` (a full model per role) vs `lora` (one base, an adapter per role).

    python benchmarks/bench_lora.py [--model tiny|smollm2-135m] [--steps 3] [--samples 4] [--rank 16]

Each variant runs in its own process (so its peak RSS is its own), through the trainer's own
`make_learners` / `make_generators` (transformers generators, as on CPU). A step is what the driver
does per role: reference and actor log-probs, a PPO update, then a weight sync into the generator.
Prints, per variant: parameters held (learners, references and generators; shared tensors once),
trainable parameters, optimizer state bytes, peak RSS, seconds per step, bytes synced per step;
then lora / per_role ratios from this one run.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROLES = ("problem_solver", "code_executor", "verifier")


def measure(variant: str, model: str, steps: int, n_samples: int, rank: int, out_dir: str) -> dict:
    import torch

    from mappa_train.config import load_config
    from mappa_train.factories import make_generators, make_learners, policy_map, resolve_model
    from mappa_train.learner import Sample

    cfg = load_config(None, [f"model.path={model}", f"model.policies={variant}", f"out_dir={out_dir}",
                             "learner.lr=1e-4", f"lora.rank={rank}", "generation.max_prompt_tokens=1024",
                             "generation.max_new_tokens=64"])
    path = resolve_model(cfg)
    policy_of = policy_map(cfg, ROLES)
    names = sorted(set(policy_of.values()))
    learners = make_learners(cfg, path, names)
    generators = make_generators(cfg, path, names)
    g = torch.Generator().manual_seed(0)
    def ids(lo: int, hi: int) -> list[int]:
        return torch.randint(5, 2000, (int(torch.randint(lo, hi, (1,), generator=g)),), generator=g).tolist()

    batches = {n: [Sample(ids(64, 256), ids(16, 64)) for _ in range(n_samples)] for n in names}  # prompt, action
    step_s, sync_s, sync_bytes = [], [], 0
    for step in range(steps + 1):  # step 0 warms up
        t0 = time.perf_counter()
        for name, learner in learners.items():
            batch = batches[name]
            learner.logprobs(batch, reference=True)
            for s, lp in zip(batch, learner.logprobs(batch)):
                s.old_logp, s.advantages = lp, torch.randn(len(lp), generator=g)
            learner.train(batch, 1e-4)
        t1 = time.perf_counter()
        weights = {name: learner.state_dict() for name, learner in learners.items()}
        for name, gen in generators.items():
            gen.load_weights(weights[name].items())
        t2 = time.perf_counter()
        sync_bytes = sum(t.numel() * t.element_size() for w in weights.values() for t in w.values())
        if step:
            step_s.append(t1 - t0)
            sync_s.append(t2 - t1)
    modules = [learner.engine.module for learner in _engines(learners)]
    modules += [learner.ref for learner in _engines(learners) if learner.ref is not None]
    modules += list({id(m): m for m in (_model(gen) for gen in generators.values())}.values())
    held = {id(p): p for m in modules for p in m.parameters()}
    optimizers = [learner.engine.optimizer for learner in _engines(learners)]
    trainable = sum(p.numel() for opt in optimizers for group in opt.param_groups for p in group["params"])
    state = sum(t.numel() * t.element_size() for opt in optimizers for st in opt.state.values()
                for t in st.values() if torch.is_tensor(t))
    return {"variant": variant, "params_held": sum(p.numel() for p in held.values()), "trainable_params": trainable,
            "optimizer_state_bytes": state, "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            "step_s": sum(step_s) / len(step_s), "sync_s": sum(sync_s) / len(sync_s), "sync_bytes": sync_bytes}


def _engines(learners: dict) -> list:
    """The distinct PolicyLearners (LoRA's adapter views share one)."""
    return list({id(x): x for x in (getattr(v, "learner", v) for v in learners.values())}.values())


def _model(gen):
    return getattr(gen, "generator", gen).model  # an AdapterGenerator views a shared HFGenerator


ROWS = [("params_held", "parameters held", 1e6, "M"), ("trainable_params", "trainable parameters", 1e6, "M"),
        ("optimizer_state_bytes", "optimizer state", 2**20, "MiB"), ("peak_rss_bytes", "peak RSS", 2**20, "MiB"),
        ("step_s", "update s/step (3 roles)", 1, "s"), ("sync_s", "sync s/step", 1, "s"),
        ("sync_bytes", "sync bytes/step", 2**20, "MiB")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="tiny", help="tiny, smollm2-135m, or a model dir")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--samples", type=int, default=4, help="actions per role per step")
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--variant", help=argparse.SUPPRESS)  # the child process: measure one variant, print JSON
    args = ap.parse_args()
    if args.variant:
        with tempfile.TemporaryDirectory() as tmp:
            print(json.dumps(measure(args.variant, args.model, args.steps, args.samples, args.rank, tmp)))
        return
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    results = {}
    for variant in ("per_role", "lora"):
        cmd = [sys.executable, __file__, "--variant", variant, "--model", args.model, "--steps", str(args.steps),
               "--samples", str(args.samples), "--rank", str(args.rank)]
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        if done.returncode:
            sys.exit(f"{variant} failed:\n{done.stderr[-3000:]}")
        results[variant] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"model {args.model}, 3 roles, lora rank {args.rank}, {args.samples} actions/role/step, {args.steps} steps")
    print(f"{'':26}{'per_role':>14}{'lora':>14}{'lora/per_role':>16}")
    for key, label, unit, suffix in ROWS:
        a, b = results["per_role"][key], results["lora"][key]
        ratio = b / a if a else float("nan")
        print(f"{label:26}{a / unit:>11.3f} {suffix:<3}{b / unit:>10.3f} {suffix:<3}{ratio:>15.4f}")


if __name__ == "__main__":
    main()
