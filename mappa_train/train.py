"""The MAPPA driver: rollout; update; sync weights into the generator; evaluate every N; checkpoint.

    start = resume(newest checkpoint)                         # learners, a stateful coach (checkpoints.py)
    for step in range(start, cfg.steps):
        evaluate (every eval_every steps)                     # held-out sets (evaluation/heldout.py)
        transitions = rollout(tasks of this step)             # B envs, batched generation
        metrics = update(learners, transitions)               # KL, token rewards, returns, whitening, PPO
        sync generator weights from the learners
        log metrics; checkpoint
    evaluate; save final/ and the curves

The blocks it drives (model, envs, generators, learners) are built by factories.py (ray_mode.py with Ray).

Determinism and resume: everything random in step N (its tasks, env seeds, sampling seeds) derives
from (cfg.seed, N), and a checkpoint holds the learners' model and optimizer states. A run killed
at any point and restarted with the same out_dir resumes after its last checkpoint: it neither
skips nor repeats a step's experience, and (on CPU, seeded) logs the same metrics the uninterrupted
run would have.
"""
from __future__ import annotations

import random
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from mappa_envs.coach.stateful import coach_metrics
from mappa_envs.seeding import stride_seed
from mappa_train import algo
from mappa_train.checkpoints import resume, save_checkpoint, save_final
from mappa_train.config import TrainConfig, to_dict
from mappa_train.evaluation.heldout import has_eval, heldout_metrics
from mappa_train.experience import ExperienceSource, step_seed
from mappa_train.factories import local_experience, make_learners, resolve_checked_model
from mappa_train.health import EmptySteps, logprob_gap, no_spread_roles, use_available_cpus
from mappa_train.learner import Learner, lr_at
from mappa_train.precision import resolve_precision
from mappa_train.resume_config import prepare_out_dir
from mappa_train.runlog import MetricsLogger, append_train_episodes, cpu_seconds

if TYPE_CHECKING:
    from mappa_train.rollout import Rollout


def dry_run(cfg: TrainConfig) -> int:
    """`mappa train --dry-run`: resolve the model, check its template, print the placement plan (placement.py)."""
    from mappa_train.placement import dry_run as check

    return check(cfg)


def tasks_for_step(task_ids: Sequence[str], step: int, cfg: TrainConfig) -> list[str]:
    """The step's tasks: consecutive slices of per-pass seeded shuffles, so every task is used once
    per pass, in an order fixed by the seed; each is repeated samples_per_prompt times."""
    n, per_step = len(task_ids), cfg.rollout.prompts_per_step
    out = []
    for i in range(step * per_step, (step + 1) * per_step):
        order = list(task_ids)
        random.Random(stride_seed(cfg.seed, i // n)).shuffle(order)
        out.append(order[i % n])
    return [t for t in out for _ in range(cfg.rollout.samples_per_prompt)]


# ---- the update --------------------------------------------------------------------------------------

def update(cfg: TrainConfig, learners: Mapping[str, Learner], policy_of: Mapping[str, str], transitions: Sequence,
           lr: float) -> dict[str, float]:
    """One REINFORCE++ update from a step's transitions (the RL math: mappa_train.algo); returns metrics."""
    batch = algo.Batch.of(transitions, cfg.algo)
    metrics = dict(batch.counts)
    if not any(batch.trained):
        return metrics
    ref = _logprobs(learners, policy_of, batch, reference=True)
    # π_θ_old as the learner sees it: a pass of its own, unless PPO takes the generator's log-probs;
    # then the update's first forward gives the learner's view for the gap check, a pass saved
    learner_logp = _logprobs(learners, policy_of, batch) if cfg.algo.old_logprobs == "learner" else None
    metrics["no_spread_roles"] = no_spread_roles(batch.reward, batch.role, cfg.algo.std_floor)
    scored = batch.score(learner_logp, ref, cfg.algo)
    for name, learner in learners.items():
        if rows := batch.rows(policy_of, name, trained_only=True):
            m = learner.train([batch.samples[i] for i in rows], lr)
            metrics.update({k if len(learners) == 1 else f"{k}/{name}": v for k, v in m.items()})
    seen = learner_logp or [s.first_logp for s in batch.samples]
    pairs = [(gen, lp) for gen, lp in zip(batch.generator_logp, seen) if lp is not None]
    if pairs:
        metrics.update(logprob_gap(*zip(*pairs), cfg.algo.logprob_gap_warn))
    metrics.update(scored, lr=lr)
    if len(learners) > 1:  # a token-weighted loss over policies, for the plot
        metrics["loss"] = _pooled_loss(metrics, learners)
    return metrics


def _pooled_loss(metrics: Mapping[str, float], policies: Iterable[str]) -> float:
    trained = [n for n in policies if f"loss/{n}" in metrics]
    tokens = sum(metrics[f"tokens/{n}"] for n in trained)
    return sum(metrics[f"loss/{n}"] * metrics[f"tokens/{n}"] for n in trained) / tokens


def _logprobs(learners: Mapping[str, Learner], policy_of: Mapping[str, str], batch: algo.Batch,
              reference: bool = False) -> list:
    """Each row's action log-probs under its policy's learner (or that learner's reference)."""
    out: list = [None] * len(batch.samples)
    for name, learner in learners.items():
        rows = batch.rows(policy_of, name)
        if rows:
            for i, lp in zip(rows, learner.logprobs([batch.samples[i] for i in rows], reference=reference)):
                out[i] = lp
    return out


# ---- the loop -------------------------------------------------------------------------------------

def train(cfg: TrainConfig, experience: ExperienceSource | None = None,
          learners: Mapping[str, Learner] | None = None) -> Path:
    """Run (or resume) training as configured; returns the output directory."""
    out = Path(cfg.out_dir)
    prepare_out_dir(cfg)  # refuses a config the run in out_dir cannot resume with, before anything is written
    use_available_cpus()
    print(f"mappa train: {resolve_precision(cfg.model.dtype).describe()}", flush=True)
    torch.manual_seed(cfg.seed)
    model_path = resolve_checked_model(cfg)  # a bad chat template stops the run before anything starts
    experience = experience or local_experience(cfg, model_path)
    if learners is None:
        learners = make_learners(cfg, model_path, sorted(set(experience.policy_of.values())))
    start = resume(cfg, out, experience, learners)
    log = MetricsLogger(out, cfg.log, resume_step=start, run_config=to_dict(cfg))
    progress = _progress(cfg, start)
    empty = EmptySteps(cfg)
    for step in range(start, cfg.steps):
        use_available_cpus()
        if cfg.eval_every and step % cfg.eval_every == 0 and not (step == start and has_eval(out, step)):
            log.log("eval", step, heldout_metrics(cfg, experience, step, out))
        result, metrics = train_step(cfg, experience, learners, step)
        log.log("train", step + 1, metrics)
        append_train_episodes(out, step + 1, result.episodes)
        empty.check(step + 1, metrics, result, before_stop=lambda: (progress.close(), log.close(), experience.close()))
        if cfg.checkpoint_every and ((step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps):
            save_checkpoint(out, step + 1, learners, cfg.keep_checkpoints, experience.coach)
        progress.update(1)
        progress.set_postfix(reward=f"{metrics.get('reward', float('nan')):.2f}", kl=f"{metrics.get('kl', 0):.4f}")
    progress.close()
    if cfg.eval_every and (start < cfg.steps or not has_eval(out, cfg.steps)):
        log.log("eval", cfg.steps, heldout_metrics(cfg, experience, cfg.steps, out))
    log.close()
    experience.close()
    save_final(cfg, out, model_path, learners, experience)
    return out


def train_step(cfg: TrainConfig, experience: ExperienceSource, learners: Mapping[str, Learner],
               step: int) -> tuple[Rollout, dict[str, float]]:
    """Rollout, update, sync the generators: one step, timed; returns its rollout and metrics."""
    t0, c0 = time.perf_counter(), cpu_seconds()
    result = experience.collect(tasks_for_step(experience.train_tasks, step, cfg), step_seed(cfg, step), None)
    t1, c1 = time.perf_counter(), cpu_seconds()
    metrics = update(cfg, learners, experience.policy_of, result.transitions, lr_at(step, cfg.learner, cfg.steps))
    t2, c2 = time.perf_counter(), cpu_seconds()
    weights = {name: learner.state_dict() for name, learner in learners.items() if not learner.frozen}
    experience.sync(weights)
    t3, c3 = time.perf_counter(), cpu_seconds()
    if all(isinstance(w, Mapping) for w in weights.values()):  # Ray passes object refs: not sized here
        metrics["sync_bytes"] = float(sum(t.nbytes for w in weights.values() for t in w.values()))
    metrics.update(result.episode_metrics(), **result.counts(), time_rollout_s=t1 - t0, time_update_s=t2 - t1,
                   time_sync_s=t3 - t2, cpu_rollout_s=c1 - c0, cpu_update_s=c2 - c1, cpu_sync_s=c3 - c2)
    metrics.update({f"time_{k}": v for k, v in result.timing().items()}, **coach_metrics(experience.coach))
    return result, metrics


def _progress(cfg: TrainConfig, start: int):
    from tqdm.auto import tqdm

    return tqdm(total=cfg.steps, initial=start, desc="mappa train", disable=not cfg.log.progress, unit="step")
