"""Rollout throughput with 16 LoRA adapters as a ratio of 3 adapters, measured side by side in one run.

    python benchmarks/bench_adapters.py [--quick] [--backend hf|vllm] [--envs 8] [--episodes 16] [--repeats 2]
                                        [--threads 1] [--json figures.json]

Chain-v0 at depth 16 (16 roles) on the local sandbox with the rule coach; one frozen base (the tiny
offline Qwen2, or `--model PATH`) carries the adapters in one engine (`lora.lora_generators`, the
trainer's own: HF switches adapters per batch, vLLM tags each request with its adapter). Two variants
play the same episodes with the same seeds:
- 16 adapters: one per role (`model.policies=lora`, the default map);
- 3 adapters: the roles in three groups (`lora.groups`: step_1-5, step_6-11, step_12-16).
Freshly initialised LoRA adapters leave the base's outputs unchanged (B = 0), so both variants
sample the same tokens: the work is equal and only the adapter routing differs (more, smaller
batches with 16). Envs that stay in lock-step all wait on the same role and make the same calls in
both variants; tool use desynchronises them in real runs, so here the first action of a share of
turns (`--code-share`, chosen by a hash of the prompt: the same turns in both variants) is a fixed
code cell, and those agents take a second action: envs drift apart and their requests spread over
the adapters. The variants alternate within each repeat (a load change on a shared machine hits
both alike); the best wall time per variant counts. Prints actions/s, tokens/s and generate calls
per variant, then the 16/3 throughput ratio (target >= 0.7).
"""
from __future__ import annotations

import argparse
import json
import tempfile
import zlib
from dataclasses import replace

import mappa_envs
from mappa_train.config import load_config
from mappa_train.generation import Generation, SamplingParams
from mappa_train.rollout import collect

DEPTH = 16
GROUPS = {"early": range(1, 6), "middle": range(6, 12), "late": range(12, 17)}


def variant_config(adapters: int, rank: int, backend: str):
    groups = {} if adapters == DEPTH else {g: [f"step_{k}" for k in ks] for g, ks in GROUPS.items()}
    group_text = "{" + ", ".join(f"{g}: [{', '.join(v)}]" for g, v in groups.items()) + "}"
    return load_config(None, ["model.policies=lora", f"lora.rank={rank}", f"lora.groups={group_text}",
                              f"generation.backend={backend}"])


class ToolUse:
    """A generator view that answers a share of turn openings with a fixed code cell, the rest through
    `inner` (the adapter's generator): deterministic in the prompt, so both variants do the same."""

    CELL = "Let me check.\n```python\nprint(1 + 1)\n```"

    def __init__(self, inner, share: float):
        self.inner, self.share, self.tokenizer = inner, share, inner.tokenizer
        self.cell = self.tokenizer.encode(self.CELL, add_special_tokens=False) + [self.tokenizer.eos_token_id]

    def _coded(self, prompt: list[int]) -> bool:
        text = self.tokenizer.decode(prompt[-64:])
        return "Output of your code" not in text and zlib.crc32(str(prompt).encode()) % 1000 < 1000 * self.share

    def generate(self, prompts, params):
        coded = [self._coded(p) for p in prompts]
        if params.seeds is not None:  # the sampled prompts keep their own seeds
            params = replace(params, seeds=[s for s, c in zip(params.seeds, coded) if not c])
        rest = iter(self.inner.generate([p for p, c in zip(prompts, coded) if not c], params)
                    if not all(coded) else [])
        return [Generation(list(self.cell), [0.0] * len(self.cell), self.CELL, "stop") if c else next(rest)
                for c in coded]

    def load_weights(self, named_tensors):
        self.inner.load_weights(named_tensors)


def engine(adapters: int, model_dir: str, rank: int, backend: str):
    """({policy: generator}, role -> policy) for a variant."""
    from mappa_train.lora import adapter_map, lora_generators

    cfg = variant_config(adapters, rank, backend)
    roles = [f"step_{k}" for k in range(1, DEPTH + 1)]
    role_policy = adapter_map(cfg, roles)
    names = sorted(set(role_policy.values()))
    kwargs = {"max_model_len": 4096} if backend == "vllm" else {}
    return lora_generators(cfg, model_dir, names, **kwargs), role_policy


def play(generators, role_policy, sandbox, n_envs: int, episodes: int, params, code_share: float) -> dict:
    generators = {n: ToolUse(g, code_share) for n, g in generators.items()}
    envs = [mappa_envs.make("Chain-v0", depth=DEPTH, max_actions=2, sandbox=sandbox) for _ in range(n_envs)]
    try:
        r = collect(envs, generators, params, [{"seed": i, "options": {"task_index": i}} for i in range(episodes)],
                    role_policy=role_policy, seed=0, max_prompt_tokens=4096 - params.max_new_tokens)
    finally:
        for env in envs:
            env.close()
    tokens = sum(len(t.action_ids) for t in r.transitions)
    return {"wall_s": r.wall_s, "actions": len(r.transitions), "tokens": tokens, "generate_s": r.generate_s,
            "generate_calls": sum(r.generate_calls.values()), "actions_per_s": len(r.transitions) / r.wall_s,
            "tokens_per_s": tokens / r.wall_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="4 envs, 4 episodes, 1 repeat")
    ap.add_argument("--backend", choices=["hf", "vllm"], default="hf")
    ap.add_argument("--model", help="a base model folder (default: the tiny offline Qwen2)")
    ap.add_argument("--envs", type=int, default=8)
    ap.add_argument("--episodes", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--rank", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--code-share", type=float, default=0.3, help="share of turns opened with a code cell")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads (1: on a loaded shared machine more threads spin and distort the ratio)")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    n_envs, episodes, repeats = (4, 4, 1) if args.quick else (args.envs, args.episodes, args.repeats)

    from mappa_envs.sandbox import make_sandbox
    from mappa_train.tiny_model import build_tiny_model

    model_dir = args.model or str(build_tiny_model(tempfile.mkdtemp(prefix="mappa-tiny-")))
    params = SamplingParams(max_new_tokens=args.max_new_tokens)
    variants = {n: engine(n, model_dir, args.rank, args.backend) for n in (3, DEPTH)}
    sandbox = make_sandbox("local", pool_size=n_envs, preimport=())
    best: dict[int, dict] = {}
    try:
        for _ in range(repeats):
            for n, (generators, role_policy) in variants.items():
                row = play(generators, role_policy, sandbox, n_envs, episodes, params, args.code_share)
                if n not in best or row["wall_s"] < best[n]["wall_s"]:
                    best[n] = row
    finally:
        sandbox.close()
    print(f"Chain-v0 depth {DEPTH}, {n_envs} envs, {episodes} episodes, {args.backend} backend, "
          f"{args.max_new_tokens} new tokens per action, {args.code_share:.0%} of turns run code, "
          f"{args.threads} torch thread(s), best of {repeats}")
    print(f"{'adapters':>8} {'actions/s':>9} {'tokens/s':>9} {'wall s':>7} {'generate s':>10} {'gen calls':>9} "
          f"{'tokens':>7}")
    for n, r in best.items():
        print(f"{n:>8} {r['actions_per_s']:>9.2f} {r['tokens_per_s']:>9.1f} {r['wall_s']:>7.2f} "
              f"{r['generate_s']:>10.2f} {r['generate_calls']:>9} {r['tokens']:>7}")
    ratio = best[DEPTH]["tokens_per_s"] / best[3]["tokens_per_s"]
    print(f"throughput 16 adapters / 3 adapters (tokens/s): {ratio:.2f} (target >= 0.7)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"variants": best, "ratio_16_to_3": ratio}, f, indent=2)


if __name__ == "__main__":
    main()
