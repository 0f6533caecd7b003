"""One short check for a lent GPU: the figures the CPU machine cannot measure, with torch alone.

    python benchmarks/gpu_check.py              # on a CUDA GPU (DeepSpeed optional: pip install deepspeed)
    python benchmarks/gpu_check.py --cpu-smoke  # the same code paths, a tiny model, on CPU (a test runs it)

The model has SmolLM2-135M's shapes (Llama: 30 layers, hidden 576, 9/3 heads, vocab 49152), randomly
initialised in plain torch, so no weights or transformers are needed; speed and memory depend on
shapes only. It prints:
1. chunked vs naive log-prob peak memory and time (the learner's `action_logprobs` against full
   [T, V] fp32 logits), forward + backward of the LM head;
2. packed vs padded learner tokens/s (forward + backward over the same samples; packed rows use a
   block-diagonal mask through sdpa);
3. one bf16 DeepSpeed ZeRO-3 optimizer step (skipped, saying so, without deepspeed);
4. greedy generation tokens/s with a KV cache, batch 32.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mappa_train.learner import action_logprobs  # noqa: E402  (torch only)

SMOLLM2 = dict(vocab=49152, hidden=576, intermediate=1536, layers=30, heads=9, kv_heads=3)
TINY = dict(vocab=512, hidden=64, intermediate=128, layers=2, heads=2, kv_heads=1)


class Block(nn.Module):
    def __init__(self, hidden, intermediate, heads, kv_heads):
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, hidden // heads
        self.norm1, self.norm2 = nn.RMSNorm(hidden, eps=1e-5), nn.RMSNorm(hidden, eps=1e-5)
        self.qkv = nn.Linear(hidden, (heads + 2 * kv_heads) * self.dim, bias=False)
        self.out = nn.Linear(hidden, hidden, bias=False)
        self.gate_up = nn.Linear(hidden, 2 * intermediate, bias=False)
        self.down = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x, cos, sin, mask, cache=None):
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm1(x)).split([self.heads * self.dim, self.kv_heads * self.dim,
                                                 self.kv_heads * self.dim], -1)
        q, k, v = (y.view(b, t, -1, self.dim).transpose(1, 2) for y in (q, k, v))
        q, k = _rope(q, cos, sin), _rope(k, cos, sin)
        if cache is not None:  # generation: append to this layer's (k, v)
            if cache:
                k, v = torch.cat([cache[0], k], 2), torch.cat([cache[1], v], 2)
            cache[:] = [k, v]
        k, v = (y.repeat_interleave(self.heads // self.kv_heads, 1) for y in (k, v))
        attn = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None and t > 1)
        x = x + self.out(attn.transpose(1, 2).reshape(b, t, -1))
        gate, up = self.gate_up(self.norm2(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * up)


class Llama(nn.Module):
    """A Llama decoder with tied embeddings; forward returns the final hidden states [B, T, H]."""

    def __init__(self, vocab, hidden, intermediate, layers, heads, kv_heads):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.blocks = nn.ModuleList(Block(hidden, intermediate, heads, kv_heads) for _ in range(layers))
        self.norm = nn.RMSNorm(hidden, eps=1e-5)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.embed.weight
        self.dim = hidden // heads

    def forward(self, ids, positions=None, mask=None, caches=None):
        if positions is None:
            positions = torch.arange(ids.shape[1], device=ids.device)[None]
        inv = 1e5 ** (-torch.arange(0, self.dim, 2, device=ids.device).float() / self.dim)
        angles = positions[..., None].float() * inv  # [B, T, dim/2]
        cos, sin = angles.cos()[:, None].to(self.embed.weight.dtype), angles.sin()[:, None].to(self.embed.weight.dtype)
        x = self.embed(ids)
        for i, block in enumerate(self.blocks):
            x = block(x, cos, sin, mask, None if caches is None else caches[i])
        return self.norm(x)


def _rope(x, cos, sin):
    a, b = x[..., ::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)


def timed(fn, device) -> float:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - t0


def peak_bytes(fn, device) -> tuple[int, float]:
    """(peak bytes above the start, seconds) of fn(); CPU: the RSS high-water mark (Linux)."""
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start = torch.cuda.memory_allocated()
        seconds = timed(fn, device)
        return torch.cuda.max_memory_allocated() - start, seconds
    Path("/proc/self/clear_refs").write_text("5")
    status = lambda key: next(int(x.split()[1]) for x in Path("/proc/self/status").read_text().splitlines()  # noqa: E731
                              if x.startswith(key)) * 1024
    start = status("VmRSS:")
    seconds = timed(fn, device)
    return status("VmHWM:") - start, seconds


def check_logprobs(model, device, tokens: int, chunk: int) -> None:
    hidden = torch.randn(tokens, model.lm_head.in_features, device=device, dtype=model.lm_head.weight.dtype)
    targets = torch.randint(0, model.lm_head.out_features, (tokens,), device=device)

    def naive():
        h = hidden.detach().requires_grad_(True)
        (-torch.log_softmax(model.lm_head(h).float(), -1).gather(1, targets[:, None]).sum()).backward()

    def chunked():
        h = hidden.detach().requires_grad_(True)
        (-action_logprobs(h, model.lm_head, targets, 1.0, chunk).sum()).backward()

    naive(), chunked()  # warm-up
    (m_naive, t_naive), (m_chunked, t_chunked) = peak_bytes(naive, device), peak_bytes(chunked, device)
    print(f"log-probs over {tokens} tokens, vocab {model.lm_head.out_features}, chunk {chunk}: naive "
          f"{m_naive / 2**20:.0f} MiB {t_naive * 1e3:.1f} ms, chunked {m_chunked / 2**20:.0f} MiB "
          f"{t_chunked * 1e3:.1f} ms"
          f" -> {m_naive / max(m_chunked, 1):.1f}x less memory at {t_chunked / t_naive:.2f}x the time")


def layouts(lengths: list[int], rows: int, row_tokens: int):
    """Padded micro-batches of `rows` samples and packed rows of <= row_tokens: (ids, positions, mask) each."""
    padded = [lengths[i:i + rows] for i in range(0, len(lengths), rows)]
    packed, current = [], []
    for n in lengths:
        if current and sum(current) + n > row_tokens:
            packed.append(current)
            current = []
        current.append(n)
    return padded, packed + [current]


def check_packing(model, device, dtype, lengths: list[int], rows: int, row_tokens: int) -> None:
    vocab = model.lm_head.out_features
    padded, packed = layouts(lengths, rows, row_tokens)

    def run_padded():
        for group in padded:
            width = max(group)
            ids = torch.randint(0, vocab, (len(group), width), device=device)
            keep = torch.arange(width, device=device)[None] < torch.tensor(group, device=device)[:, None]
            mask = (torch.ones(width, width, dtype=torch.bool, device=device).tril()[None] & keep[:, None, :])[:, None]
            model(ids, mask=mask).float().mean().backward()

    def run_packed():
        for group in packed:
            ids = torch.randint(0, vocab, (1, sum(group)), device=device)
            positions = torch.cat([torch.arange(n, device=device) for n in group])[None]
            segment = torch.cat([torch.full((n,), i, device=device) for i, n in enumerate(group)])
            causal = torch.ones(len(segment), len(segment), dtype=torch.bool, device=device).tril()
            mask = (causal & (segment[:, None] == segment[None, :]))[None, None]
            model(ids, positions, mask).float().mean().backward()

    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        run_padded(), run_packed()  # warm-up
        t_padded, t_packed = timed(run_padded, device), timed(run_packed, device)
    total = sum(lengths)
    print(f"learner forward+backward over {len(lengths)} samples ({total} tokens): padded ({rows} rows) "
          f"{total / t_padded:,.0f} tok/s, packed (<= {row_tokens} tokens a row) {total / t_packed:,.0f} tok/s "
          f"-> packed/padded {t_padded / t_packed:.2f}x")


def check_zero3(dims: dict, device, tokens: int) -> None:
    try:
        import deepspeed
    except ImportError:
        print("ZeRO-3 step: skipped, deepspeed is not installed (pip install deepspeed)")
        return
    from mappa_train.learner import init_distributed

    init_distributed()
    model = Llama(**dims)
    config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 3},
              "bf16": {"enabled": True}, "gradient_clipping": 1.0, "steps_per_print": 1 << 30,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-5, "torch_adam": True}}}
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    ids = torch.randint(0, dims["vocab"], (1, tokens), device=engine.device)

    def step():
        hidden = engine(ids)
        loss = -action_logprobs(hidden[0, :-1], engine.module.lm_head, ids[0, 1:], 1.0, 1024).mean()
        engine.backward(loss)
        engine.step()
        assert torch.isfinite(loss), "ZeRO-3 step: the loss is not finite"

    step()  # warm-up
    memory, seconds = peak_bytes(step, device)
    print(f"bf16 ZeRO-3 step (1 rank, {tokens} tokens): {seconds:.3f} s, {tokens / seconds:,.0f} tok/s, "
          f"peak +{memory / 2**20:.0f} MiB")


@torch.no_grad()
def check_generation(model, device, dtype, batch: int, prompt: int, new: int) -> None:
    vocab = model.lm_head.out_features

    def generate():
        caches = [[] for _ in model.blocks]
        ids = torch.randint(0, vocab, (batch, prompt), device=device)
        hidden = model(ids, caches=caches)
        for t in range(new):
            ids = model.lm_head(hidden[:, -1:]).argmax(-1)
            positions = torch.full((batch, 1), prompt + t, device=device)
            hidden = model(ids, positions, caches=caches)

    with torch.autocast(device.type, dtype=dtype, enabled=dtype != torch.float32):
        generate()  # warm-up
        seconds = timed(generate, device)
    print(f"greedy generation, batch {batch}, {prompt}-token prompts: {batch * new / seconds:,.0f} new tok/s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cpu-smoke", action="store_true", help="a tiny model on CPU: checks the script, not the GPU")
    args = parser.parse_args()
    if args.cpu_smoke:
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        device, dims, dtype = torch.device("cpu"), TINY, torch.float32
        sizes = dict(lp_tokens=512, lp_chunk=64, lengths=[40, 90, 17, 64, 120, 33], rows=2, row_tokens=256,
                     zero_tokens=128, batch=4, prompt=16, new=8)
    else:
        if not torch.cuda.is_available():
            print("no CUDA GPU here: run with --cpu-smoke to check the script on CPU")
            return 1
        device, dims, dtype = torch.device("cuda"), SMOLLM2, torch.bfloat16
        lengths = [int(x) for x in torch.randint(256, 4096, (32,), generator=torch.Generator().manual_seed(0))]
        sizes = dict(lp_tokens=32768, lp_chunk=1024, lengths=lengths, rows=4, row_tokens=16384, zero_tokens=8192,
                     batch=32, prompt=512, new=128)
        print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    torch.manual_seed(0)
    model = Llama(**dims).to(device)
    check_logprobs(model, device, sizes["lp_tokens"], sizes["lp_chunk"])
    check_packing(model, device, dtype, sizes["lengths"], sizes["rows"], sizes["row_tokens"])
    check_generation(model.eval(), device, dtype, sizes["batch"], sizes["prompt"], sizes["new"])
    del model
    check_zero3(dims, device, sizes["zero_tokens"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
