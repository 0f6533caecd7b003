"""Run health: what the machine has, and the checks that keep a broken run from looking like a result.

- `use_available_cpus`: torch's thread pools sized to the CPUs this process may use, so CPU time does
  not grow with the machine's load (threads beyond the CPUs spin and wait on each other).
- `nothing_trained`: why a step trained on no action; the driver warns on each such step and stops
  after `max_empty_steps` of them in a row with `NothingTrained`, naming the cause and the fix.
- `logprob_gap`: generator vs learner log-probs, which a broken weight sync shows at once.
- `masked_length_cut`: a step where most kept actions were cut at max_new_tokens and, with
  `algo.mask_length_cut`, left out of the loss: nothing penalises them, so a policy drifting into
  actions that never end is not pulled back; `EmptySteps.check` warns.
"""
from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

import torch

from mappa_envs.errors import MappaError


class NothingTrained(MappaError, RuntimeError):
    """`max_empty_steps` steps in a row trained on no action: the run is broken, not learning."""


CPU_SHARE_FILE = "MAPPA_CPUS_FILE"  # env: a file holding this process's CPU share, rewritten by its parent


def available_cpus() -> int:
    """CPUs this process may run on: its affinity mask, capped by a cgroup CPU quota (a container's
    `--cpus`), whichever is smaller; os.cpu_count() counts the host's, which oversubscribes. A parent
    that runs jobs side by side gives each its share in the file named by `MAPPA_CPUS_FILE` (the share
    grows as siblings end), or a fixed one in `MAPPA_CPUS`."""
    for share in (_read(os.environ.get(CPU_SHARE_FILE)), os.environ.get("MAPPA_CPUS", "")):
        if share.isdigit() and int(share) > 0:
            return int(share)
    n = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            n = min(n, max(1, math.ceil(int(quota) / int(period))))
    except (OSError, ValueError):
        pass
    return n


def _read(path: str | None) -> str:
    try:
        return Path(path).read_text().strip() if path else ""
    except OSError:
        return ""


def use_available_cpus() -> int:
    """torch's intra- and inter-op thread pools sized to `available_cpus()`: more threads than CPUs
    spin and wait on each other, so CPU time grows with the machine's load. Cheap when nothing changed:
    the trainer calls it each step and the rollout before each generation batch, so a job run beside
    others takes the cores they leave when they end. Call it from the main thread (torch's thread count
    is kept per thread). Returns the count."""
    n = available_cpus()
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)
    try:
        torch.set_num_interop_threads(n)
    except RuntimeError:  # settable once, before the first inter-op work: an earlier call did
        pass
    return n


@contextmanager
def torch_threads(n: int) -> Iterator[None]:
    """torch's intra-op thread count set to `n` within, the one before restored after."""
    before = torch.get_num_threads()
    if n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


class EmptySteps:
    """Counts the steps in a row that trained on nothing: warns on each, raises `NothingTrained` at
    `cfg.max_empty_steps` (0: never)."""

    def __init__(self, cfg):
        self.cfg, self.in_a_row = cfg, 0

    def check(self, step: int, metrics: Mapping[str, float], result, before_stop: Callable[[], object]) -> None:
        self.in_a_row = 0 if metrics["actions"] else self.in_a_row + 1
        if self.in_a_row == 0 and (why := masked_length_cut(self.cfg, metrics)):
            warnings.warn(f"step {step}: {why}", stacklevel=2)
        if not self.in_a_row:
            if result.dropped:  # some actions trained, some lost: say why, or a failing coach thins the batch silently
                warnings.warn(f"step {step}: {result.dropped} actions lost to coach failures were left out of the "
                              f"update ({_first_errors(result)}); check the coach (env.coach, env.coach_kwargs)",
                              stacklevel=2)
            return
        reason, fix = nothing_trained(self.cfg, metrics, result)
        limit = self.cfg.max_empty_steps
        if limit and self.in_a_row >= limit:
            before_stop()
            raise NothingTrained(f"{self.in_a_row} steps in a row trained on nothing (max_empty_steps={limit}); "
                                 f"step {step} {reason}: {fix}")
        warnings.warn(f"step {step} trained on nothing: {reason}; {fix}", stacklevel=3)


def masked_length_cut(cfg, metrics: Mapping[str, float], share: float = 0.5) -> str | None:
    """Why a step that trained on something left most of its actions, cut at max_new_tokens, unpenalised
    (None when fewer than `share` of them were cut, or `algo.mask_length_cut` is off)."""
    cut, trained = metrics.get("length_cut", 0.0), metrics.get("actions", 0.0)
    if not cfg.algo.mask_length_cut or cut <= share * (cut + trained):
        return None
    return (f"{int(cut)} of {int(cut + trained)} kept actions were cut at generation.max_new_tokens="
            f"{cfg.generation.max_new_tokens} and left out of the loss (algo.mask_length_cut), so nothing penalises "
            "them and a policy drifting into actions that never end is not pulled back; raise "
            "generation.max_new_tokens or set algo.mask_length_cut=false (the coach then judges the cut text)")


def no_spread_roles(reward: torch.Tensor, role: torch.Tensor, floor: float) -> float:
    """How many roles' scaled rewards [N] spread by σ <= floor this step: with per-role whitening their
    actions get no reward advantage (mappa_train.algo); many such steps mean a reward too coarse to learn from."""
    return float(sum(bool(reward[role == r].std(unbiased=False) <= floor) for r in role.unique()))


def nothing_trained(cfg, metrics: Mapping[str, float], result) -> tuple[str, str]:
    """(why a step trained on no action, what to change), from the step's counts."""
    n = len(result.transitions) + result.dropped
    if not n:
        return (f"collected no actions ({result.failed} of {len(result.episodes) + result.failed} episodes failed)",
                "see the episode errors warned above")
    causes, fixes = [], []
    if result.dropped:
        causes.append(f"{result.dropped} lost to coach failures: {_first_errors(result)}")
        fixes.append("check the coach (env.coach, env.coach_kwargs) and its warnings")
    if metrics.get("length_cut") and cfg.algo.mask_length_cut:
        causes.append(f"{int(metrics['length_cut'])} cut at generation.max_new_tokens={cfg.generation.max_new_tokens}")
        fixes.append("raise generation.max_new_tokens (or set algo.mask_length_cut=false)")
    if metrics.get("excused") and cfg.algo.mask_excused:
        causes.append(f"{int(metrics['excused'])} excused (an upstream role broke their inputs)")
        fixes.append("fix the upstream role's failures (or set algo.mask_excused=false)")
    emptied = sum(t.coach_ok and t.judged_tokens == 0 for t in result.transitions)
    if emptied:
        causes.append(f"{emptied} of which the env kept no text")
        fixes.append("see the env's limits on action text")
    return f"trained on 0 of {n} actions ({'; '.join(causes) or 'no cause counted'})", "; ".join(fixes) or \
        "see the step's metrics"


def _first_errors(result) -> str:
    errors = result.coach_errors
    return f"first {'errors' if len(errors) > 1 else 'error'}: {' | '.join(errors)}" if errors else "no error text"


def logprob_gap(generator: Sequence[torch.Tensor], learner: Sequence[torch.Tensor],
                warn_above: float) -> dict[str, float]:
    """Mean and max |generator − learner| log-prob over action tokens; warns when the mean is above
    `warn_above` (a broken weight sync, a template or dtype mismatch)."""
    gap = torch.cat([(gen - learn.float()).abs() for gen, learn in zip(generator, learner)])
    mean, biggest = float(gap.mean()), float(gap.max())
    if mean > warn_above:
        warnings.warn(f"generator and learner log-probs differ by {mean:.4f} on average (max {biggest:.3f}) > "
                      f"algo.logprob_gap_warn={warn_above}: are the generator's weights synced and the dtypes "
                      "the same?", stacklevel=2)
    return {"logprob_gap_mean": mean, "logprob_gap_max": biggest}
