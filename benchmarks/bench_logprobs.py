"""Chunked vs naive log-probs for one learner micro-batch on SmolLM2-135M, CPU: peak memory and time.

    python benchmarks/bench_logprobs.py [--prompt 1024 --action 7168] [--whole-prompt 512 --whole-action 1536]

naive: the model's full logits [T, V], upcast to fp32, log-softmax over every position, the action
tokens picked afterwards (what the learner did before). chunked: what `mappa_train.learner` does:
hidden states at the action-scoring positions only, LM head + log-softmax in chunks of `--chunk`
rows, each recomputed in backward. Two measurements per variant, forward + backward each:
- log-prob head: from the final hidden states to the loss, the part chunking changes, at the
  learner's default micro-batch (`learner.micro_batch_tokens` = 8192 tokens) and chunk (512);
- micro-batch: the whole model (gradient checkpointing on, as in the GPU presets) at 2048 tokens,
  the most this 2-core machine runs in minutes. Its saving is bounded by what chunking does not
  touch, the checkpointed layer inputs (T × hidden × layers).

The head's saving grows with T/chunk (the presets' 32768-token micro-batches and Qwen's 152k
vocabulary: ~18 GiB per fp32 copy of the full logits, against 0.3 GiB per chunk).

Peak memory is the process's resident-set high-water mark above its level just before the measured
pass (Linux: /proc/self/clear_refs resets the mark), so every allocation counts. Each measurement
runs in its own process; times are medians of passes alternating between the variants in one process.
Prints ratios side by side; asserts nothing.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from mappa_train.config import LearnerConfig  # noqa: E402


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def head_loss(variant: str, hidden, head, ids, prompt: int, chunk: int):
    """-sum log p(action tokens) from final hidden states [1, T, H], the naive or the chunked way."""
    import torch

    from mappa_train.learner import action_logprobs

    if variant == "naive":
        logits = head(hidden)[:, :-1].float()  # [1, T-1, V]
        token_logp = -torch.nn.functional.cross_entropy(logits[0], ids[0, 1:], reduction="none")
        return -token_logp[prompt - 1:].sum()
    cols = torch.arange(prompt - 1, ids.shape[1] - 1)
    return -action_logprobs(hidden[0, cols], head, ids[0, cols + 1], 1.0, chunk).sum()


def peak_mib(step) -> float:
    """Peak MiB of `step()` above the level just before it, after a warm-up (which allocates the .grads)."""
    step()
    Path("/proc/self/clear_refs").write_text("5")  # reset the resident-set high-water mark
    before = _status_kib("VmRSS")
    step()
    return (_status_kib("VmHWM") - before) / 1024


def child(args) -> None:
    """One model; either one variant's peak memory (`--child naive|chunked`) or both variants' times,
    alternating pass by pass so that a change in machine load hits both alike (`--child time`)."""
    import torch
    from transformers import AutoModelForCausalLM

    from mappa_train.learner import final_hidden, output_head
    from mappa_train.model_source import resolve_model

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(args.model), dtype=torch.float32)
    model.config.use_cache = False
    model.gradient_checkpointing_enable()
    model.train()
    head = output_head(model)
    if args.part == "whole":
        ids = torch.randint(100, model.config.vocab_size, (1, args.whole_prompt + args.whole_action))
        prompt = args.whole_prompt
    else:
        ids = torch.randint(100, model.config.vocab_size, (1, args.prompt + args.action))
        prompt = args.prompt
        hidden = torch.randn(1, ids.shape[1], model.config.hidden_size)  # the head's input; values do not matter

    def step(variant: str) -> float:
        model.zero_grad(set_to_none=False)
        h = final_hidden(model, input_ids=ids) if args.part == "whole" else hidden.detach().requires_grad_(True)
        loss = head_loss(variant, h, head, ids, prompt, args.chunk)
        loss.backward()
        return float(loss)

    if args.child != "time":
        print(json.dumps({"mib": peak_mib(lambda: step(args.child)), "loss": step(args.child)}))
        return
    times: dict[str, list[float]] = {"naive": [], "chunked": []}
    for variant in times:
        step(variant)  # warm-up
    for _ in range(args.repeats):
        for variant in times:
            t0 = time.perf_counter()
            step(variant)
            times[variant].append(time.perf_counter() - t0)
    print(json.dumps(times))


def run(child: str, part: str, args) -> dict:
    cmd = [sys.executable, __file__, "--child", child, "--part", part, "--model", args.model,
           "--chunk", str(args.chunk), "--repeats", str(args.repeats)]
    for key in ("prompt", "action", "whole_prompt", "whole_action"):
        cmd += [f"--{key.replace('_', '-')}", str(getattr(args, key))]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="smollm2-135m", help="any model.path (default: the built-in SmolLM2-135M)")
    parser.add_argument("--prompt", type=int, default=1024, help="prompt tokens of the head's micro-batch")
    parser.add_argument("--action", type=int, default=7168, help="action (trained) tokens of the head's micro-batch")
    parser.add_argument("--whole-prompt", type=int, default=512, help="prompt tokens of the whole-model micro-batch")
    parser.add_argument("--whole-action", type=int, default=1536, help="action tokens of the whole-model micro-batch")
    parser.add_argument("--chunk", type=int, default=LearnerConfig().logprob_chunk_tokens,
                        help="LM-head rows per chunk (learner.logprob_chunk_tokens)")
    parser.add_argument("--repeats", type=int, default=3, help="timed passes of each variant (alternating)")
    parser.add_argument("--child", choices=["naive", "chunked", "time"], help=argparse.SUPPRESS)
    parser.add_argument("--part", choices=["head", "whole"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    r = {part: {v: run(v, part, args) for v in ("naive", "chunked", "time")} for part in ("head", "whole")}
    print(f"{args.model}, fp32, CPU, forward + backward, LM-head chunk {args.chunk} rows:")
    print(f"  log-prob head: {args.prompt} prompt + {args.action} action tokens; micro-batch (whole model, gradient "
          f"checkpointing): {args.whole_prompt} prompt + {args.whole_action} action tokens")
    for part, res in r.items():
        name = {"whole": "micro-batch  ", "head": "log-prob head"}[part]
        secs = {v: statistics.median(res["time"][v]) for v in ("naive", "chunked")}
        for v in secs:
            print(f"  {name} {v:8s} peak +{res[v]['mib']:8.1f} MiB  {secs[v]:7.2f} s")
        print(f"  {name} chunked vs naive: {res['naive']['mib'] / max(res['chunked']['mib'], 1e-9):.1f}x "
              f"less peak memory at {secs['chunked'] / secs['naive']:.2f}x the time")
    whole = r["whole"]
    print(f"  same loss: naive {whole['naive']['loss']:.3f}, chunked {whole['chunked']['loss']:.3f}")


if __name__ == "__main__":
    main()
