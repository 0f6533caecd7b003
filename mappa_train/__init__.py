"""mappa_train: a REINFORCE++ trainer for teams of LLM agents with per-action coach rewards.

Importing the package is cheap: torch, deepspeed, ray and vllm are imported by the submodules that
need them (`algo`, `learner`, `generation`, `ray_mode`), never here.
"""
from __future__ import annotations

import os

# OpenMP threads that wait for work spin by default; on a loaded machine a spinning thread burns the
# CPU its partner needs, and a tiny model's many small kernels wait often: measured at load 20 on
# 2 cores, a tiny-model train/generate loop took 6x the CPU and wall time spinning than sleeping.
# Read once, when torch loads its OpenMP runtime: set here, before any submodule imports torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

__all__ = ["algo", "config", "tiny_model"]
