"""mappa_train: a REINFORCE++ trainer for teams of LLM agents with per-action coach rewards.

Importing the package is cheap: torch, deepspeed, ray and vllm are imported by the submodules that
need them (`algo`, `learner`, `generation`, `ray_mode`), never here.
"""
from __future__ import annotations

__all__ = ["algo", "config", "tiny_model"]
