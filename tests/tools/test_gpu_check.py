"""benchmarks/gpu_check.py's tiny CPU mode runs every check the GPU run prints (the figures mean nothing here)."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def test_cpu_smoke_runs_every_check():
    pytest.importorskip("deepspeed")
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env = {k: v for k, v in env.items() if k not in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "LOCAL_RANK")}
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--cpu-smoke"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    out = proc.stdout
    for line in ("log-probs over 512 tokens, vocab 512, chunk 64: naive", "learner forward+backward over 6 samples",
                 "greedy generation, batch 4", "bf16 ZeRO-3 step (1 rank, 128 tokens)"):
        assert line in out, out
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=300)
    if not __import__("torch").cuda.is_available():  # without a GPU the real run says what to do instead
        assert proc.returncode == 1
        assert "run with --cpu-smoke" in proc.stdout


@pytest.mark.gpu
def test_the_gpu_run_prints_every_check():
    """The `gpu` tier: benchmarks/gpu_check.py's real run (SmolLM2-135M shapes, bf16) on a CUDA GPU."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("deepspeed")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU here")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    for line in ("log-probs over 32768 tokens", "learner forward+backward over 32 samples",
                 "greedy generation, batch 32", "bf16 ZeRO-3 step (1 rank, 8192 tokens)"):
        assert line in proc.stdout, proc.stdout
