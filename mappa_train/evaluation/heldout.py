"""A training run's held-out evaluation: every eval set played at eval temperature with the same dice
each time, so two evaluations of a run differ by the policy only (docs/training.md, "Evaluation")."""
from __future__ import annotations

import time
from pathlib import Path

from mappa_train.config import TrainConfig
from mappa_train.experience import ExperienceSource, step_seed
from mappa_train.runlog import METRICS_FILE, append_eval_episodes, cpu_seconds, read_metrics


def heldout_metrics(cfg: TrainConfig, experience: ExperienceSource, step: int,
                    out_dir: Path | None = None) -> dict[str, float]:
    """Accuracy (mean outcome) and coach scores on every eval set, at eval temperature. With `out_dir`,
    each episode's outcome also goes to its eval_episodes.jsonl, for paired comparisons of steps."""
    out: dict[str, float] = {}
    t0, c0 = time.perf_counter(), cpu_seconds()
    for name, tasks in experience.eval_tasks.items():
        chosen = [t for t in tasks[:cfg.eval_episodes] for _ in range(cfg.eval_samples)]
        result = experience.collect(chosen, eval_seed(cfg), name)
        out.update({f"{name}/{k}": v for k, v in result.episode_metrics().items()})
        if out_dir is not None:
            append_eval_episodes(out_dir, step, name, result.episodes, cfg.eval_samples)
    out.update(time_eval_s=time.perf_counter() - t0, cpu_eval_s=cpu_seconds() - c0)
    return out


def eval_seed(cfg: TrainConfig) -> int:
    """The held-out episodes' seed (env and sampling seeds derive from it): the same at every evaluation,
    so two evaluations of a run differ by the policy only, not by the dice."""
    return step_seed(cfg, 0) + 7


def has_eval(out: Path, step: int) -> bool:
    """Whether the run in `out` has logged an evaluation at `step` (a resumed finished run has its last)."""
    return any(r["kind"] == "eval" and r["step"] == step for r in read_metrics(out / METRICS_FILE))
