"""The `unit` tier (`pytest -m unit`) stays torch-free: its modules import none of the heavy stacks."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "transformers", "vllm", "ray", "deepspeed")


def test_unit_modules_import_no_heavy_stack():
    marked = sorted(".".join(p.relative_to(ROOT).with_suffix("").parts) for p in (ROOT / "tests").rglob("test_*.py")
                    if "pytestmark = pytest.mark.unit" in p.read_text(encoding="utf-8"))
    assert len(marked) > 10
    code = (f"import importlib, sys\nfor m in {marked!r}: importlib.import_module(m)\n"
            f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
