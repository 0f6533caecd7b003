"""Small composable wrappers for plugging MAPPA envs into other RL code.

- `TextEnv`: one team episode as a single text stream (`reset` / `step(text)`, the Gym/GEM-style API).
- `VectorRunner`: many env instances, one batched `TextPolicy.respond` call per round.
- `TranscriptRecorder`: one JSON line per episode.

They compose: `TextEnv(TranscriptRecorder(env, "runs/t.jsonl"))`. Reward ablations are the env's own
`reward_mode` ("process", "outcome", "process+outcome", "backprop"); scaling is the trainer's (`algo.reward_scale`).
See docs/plugins.md for how each maps onto a trainer.
"""
from mappa_envs.wrappers.text_env import TextEnv
from mappa_envs.wrappers.transcript import TranscriptRecorder
from mappa_envs.wrappers.vector import EpisodeResult, Turn, VectorRunner

__all__ = ["EpisodeResult", "TextEnv", "TranscriptRecorder", "Turn", "VectorRunner"]
