"""A training run's log: metrics as JSON lines (the record), TensorBoard and optional W&B (views),
one line per training and evaluation episode, and a learning-curve PNG.

Rows are `{"kind": "train" | "eval", "step": N, ...numbers}`; `step` counts finished updates, so the
evaluation before the first update is step 0. On resume from a checkpoint taken after `step`
updates, rows the killed run wrote past that point are dropped, so every step appears once.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

from mappa_train.config import LogConfig

METRICS_FILE = "metrics.jsonl"
EVAL_EPISODES_FILE = "eval_episodes.jsonl"
TRAIN_EPISODES_FILE = "train_episodes.jsonl"
ANSWER_LOG_CHARS = 2_000  # an answer this long is never a match (MAX_ANSWER_CHARS): the rest is not kept


class MetricsLogger:
    """Appends rows to <out_dir>/metrics.jsonl and mirrors numbers to TensorBoard / W&B."""

    def __init__(self, out_dir: str | Path, cfg: LogConfig, resume_step: int = 0, run_config: dict | None = None):
        self.out_dir = Path(out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.path = self.out_dir / METRICS_FILE
        rows = [r for r in read_metrics(self.path) if _kept(r, resume_step)]
        self.path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        self.tb = self.wandb = None
        if cfg.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self.tb = SummaryWriter(str(self.out_dir / "tb"), purge_step=resume_step or None)
        if cfg.wandb_project:
            try:
                import wandb
            except ImportError as e:
                raise ImportError("log.wandb_project is set but wandb is not installed: pip install wandb") from e
            self.wandb = wandb.init(project=cfg.wandb_project, dir=str(self.out_dir), config=run_config,
                                    id=self.out_dir.name, resume="allow")

    def log(self, kind: str, step: int, metrics: dict[str, float]) -> None:
        row = {"kind": kind, "step": step, **metrics}
        with self.path.open("a") as f:
            f.write(json.dumps(row) + "\n")
            f.flush()
            os.fsync(f.fileno())
        numbers = {f"{kind}/{k}": v for k, v in metrics.items() if isinstance(v, (int, float)) and math.isfinite(v)}
        if self.tb is not None:
            for k, v in numbers.items():
                self.tb.add_scalar(k, v, step)
            self.tb.flush()
        if self.wandb is not None:
            self.wandb.log(numbers, step=step)

    def close(self) -> None:
        if self.tb is not None:
            self.tb.close()
        if self.wandb is not None:
            self.wandb.finish()


def cpu_seconds() -> float:
    """CPU seconds so far of this process (all its threads), its reaped children and its live
    descendants (the sandbox kernels, which live for the whole run). Differences of two readings give
    a phase's CPU time. The descendants need psutil (a dependency of accelerate and ray)."""
    import resource

    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    total = me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime
    try:
        import psutil
    except ImportError:
        return total
    for child in psutil.Process().children(recursive=True):
        try:
            t = child.cpu_times()
            total += t.user + t.system
        except psutil.Error:  # it ended between listing and reading: its time moves to RUSAGE_CHILDREN
            continue
    return total


def _kept(row: dict, resume_step: int) -> bool:
    # an eval at step N used checkpoint N's weights, which the resumed run starts from: it stays, not repeated
    return row["step"] <= resume_step


def read_metrics(path: str | Path) -> list[dict]:
    """Rows of a metrics.jsonl; a torn last line (a killed writer) is ignored."""
    path = Path(path)
    if not path.exists():
        return []
    rows = []
    for line in path.read_text().splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows


def append_eval_episodes(out_dir: str | Path, step: int, eval_set: str, episodes, samples: int) -> None:
    """One line per evaluation episode (step, set, task, sample, correct, score, the extracted answer
    that was judged) in EVAL_EPISODES_FILE. Episode i of an evaluation is sample i % samples of its
    task. A run killed during an evaluation repeats it when resumed: readers keep the last line of each
    (step, set, task, sample)."""
    with (Path(out_dir) / EVAL_EPISODES_FILE).open("a") as f:
        for e in episodes:
            f.write(json.dumps({"step": step, "set": eval_set, "task_id": e.task_id, "sample": e.episode_id % samples,
                                "correct": bool(e.correct), "score": e.score, "answer": _clip(e.answer)}) + "\n")


def append_train_episodes(out_dir: str | Path, step: int, episodes) -> None:
    """One line per training episode of `step` in TRAIN_EPISODES_FILE: its task, the extracted answer
    the env judged, correct, score, and why it failed or stopped early, so anyone can check what the
    reward counted."""
    with (Path(out_dir) / TRAIN_EPISODES_FILE).open("a") as f:
        for e in episodes:
            f.write(json.dumps({"step": step, "episode": e.episode_id, "task_id": e.task_id, "answer": _clip(e.answer),
                                "correct": e.correct, "score": e.score, "error": e.error, "stopped": e.stopped},
                               ensure_ascii=False) + "\n")


def _clip(answer: str | None) -> str | None:
    return answer if answer is None or len(answer) <= ANSWER_LOG_CHARS else answer[:ANSWER_LOG_CHARS] + "...[cut]"


def eval_outcomes(out_dir: str | Path, step: int, eval_set: str) -> dict[str, list[float]]:
    """task id -> the correctness (0/1) of each sample in the evaluation at `step` (see append_eval_episodes)."""
    rows = {(r["task_id"], r["sample"]): r for r in read_metrics(Path(out_dir) / EVAL_EPISODES_FILE)
            if r["step"] == step and r["set"] == eval_set}
    out: dict[str, list[float]] = {}
    for (task, _), r in sorted(rows.items()):
        out.setdefault(task, []).append(float(r["correct"]))
    return out


def plot_curves(metrics_path: str | Path, out_png: str | Path, title: str = "MAPPA training") -> Path:
    """Learning curves against training step: held-out accuracy, per-role coach scores (training
    episodes and held-out), and the KL to the reference model."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    train = [r for r in rows if r["kind"] == "train"]
    evals = [r for r in rows if r["kind"] == "eval"]
    fig, axes = plt.subplots(2, 2, figsize=(10, 7))
    panels = [
        (axes[0, 0], evals, [k for k in (evals[0] if evals else {}) if k.endswith("accuracy")], "held-out accuracy"),
        (axes[0, 1], train, sorted({k for r in train for k in r if k.startswith("coach/")}),
         "coach score (0-10) by role"),
        (axes[1, 0], train, ["kl"], "KL to reference (k1, per token)"),
        (axes[1, 1], evals, sorted({k for r in evals for k in r if "/coach/" in k}), "held-out coach score by role"),
    ]
    for ax, data, keys, name in panels:
        for key in keys:
            points = [(r["step"], r[key]) for r in data if isinstance(r.get(key), (int, float))]
            if points:
                ax.plot(*zip(*points), marker="o", markersize=3, label=key.split("coach/")[-1])
        ax.set_title(name)
        ax.set_xlabel("step")
        if len(keys) > 1:
            ax.legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(out_png, dpi=100)
    plt.close(fig)
    return Path(out_png)
