"""A run on disk: its checkpoints (save, find the newest, resume from it) and its final outputs.

    out_dir/checkpoints/step_NNNNNN/<policy>/     each learner's model and optimizer state
                                   coach_state.json   a stateful coach's statistics (else absent)
                                   state.json         {"step": N}, written last: marks it complete
    out_dir/final/<policy>/                       the trained policy with its tokenizer (LoRA: adapters)
                 ...                              and what the policy layout adds (LoRA: lora.json, merged/)

Whether a new config may resume the run in out_dir is `mappa_train.resume_config`'s to say.
"""
from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from mappa_envs.coach.stateful import load_coach_state, plot_run_corrections, save_coach_state
from mappa_train.config import TrainConfig
from mappa_train.policy_layout import policy_layout
from mappa_train.runlog import METRICS_FILE, plot_curves

if TYPE_CHECKING:
    from mappa_train.experience import ExperienceSource
    from mappa_train.learner import Learner


def latest_checkpoint(out_dir: Path) -> tuple[int, Path | None]:
    """(finished steps, directory) of the newest complete checkpoint, or (0, None). One whose state.json
    cannot be read is not complete."""
    done = []
    for state in (out_dir / "checkpoints").glob("step_*/state.json"):
        try:
            done.append((int(json.loads(state.read_text())["step"]), state.parent))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # a checkpoint cut short is not one to resume from
    return max(done, default=(0, None))


def save_checkpoint(out_dir: Path, step: int, learners: Mapping[str, Learner], keep: int, coach=None) -> None:
    ckpt = out_dir / "checkpoints" / f"step_{step:06d}"
    for name, learner in learners.items():
        learner.save_checkpoint(ckpt / name)
    save_coach_state(coach, ckpt)  # a stateful coach's running statistics and corrections (else nothing)
    (ckpt / "state.json").write_text(json.dumps({"step": step}))  # written last: marks it complete
    for old in sorted((out_dir / "checkpoints").glob("step_*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


def resume(cfg: TrainConfig, out: Path, experience: ExperienceSource, learners: Mapping[str, Learner]) -> int:
    """Load the newest checkpoint, if any, into the learners (and a stateful coach); returns its step."""
    start, ckpt = latest_checkpoint(out)
    if ckpt is not None:
        for name, learner in learners.items():
            learner.load_checkpoint(ckpt / name)
        load_coach_state(experience.coach, ckpt)
    if ckpt is not None or not policy_layout(cfg).starts_in_sync:
        experience.sync({name: learner.state_dict() for name, learner in learners.items()})
    return start


def save_final(cfg: TrainConfig, out: Path, model_path: Path, learners: Mapping[str, Learner],
               experience: ExperienceSource) -> None:
    """final/<policy>/ (a model or an adapter, with its tokenizer), what the layout adds, the plots."""
    from transformers import AutoTokenizer  # heavy, and for the run's end only: finding a checkpoint stays light

    layout = policy_layout(cfg)
    paths = layout.starts(learners, model_path)
    for name, learner in learners.items():
        learner.save_pretrained(out / "final" / name)
        if learner.rank == 0:
            AutoTokenizer.from_pretrained(paths[name]).save_pretrained(out / "final" / name)
    layout.finish(out / "final", model_path, experience.policy_of)
    if cfg.log.plot:
        plot_curves(out / METRICS_FILE, out / "curves.png", title=f"MAPPA on {cfg.env.id}")
        plot_run_corrections(experience.coach, out)  # the stateful coach's offsets over the run (else nothing)
