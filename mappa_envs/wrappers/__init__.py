"""Small composable wrappers for plugging MAPPA envs into other RL code.

- `TextEnv`: one team episode as a single text stream (`reset` / `step(text)`, the Gym/GEM-style API).
- `VectorRunner`: many env instances, one batched `TextPolicy.respond` call per round.
- `OutcomeReward`, `ScaleReward`: reward ablations (PettingZoo AEC wrappers).
- `TranscriptRecorder`: one JSON line per episode.

They compose: `TextEnv(TranscriptRecorder(ScaleReward(env, 0.1), "runs/t.jsonl"))`.
See docs/plugins.md for how each maps onto a trainer.
"""
from mappa_envs.wrappers.reward import OutcomeReward, ScaleReward
from mappa_envs.wrappers.text_env import TextEnv
from mappa_envs.wrappers.transcript import TranscriptRecorder
from mappa_envs.wrappers.vector import EpisodeResult, Turn, VectorRunner

__all__ = ["EpisodeResult", "OutcomeReward", "ScaleReward", "TextEnv", "TranscriptRecorder", "Turn", "VectorRunner"]
