"""Resuming into an existing out_dir: compare the new config with the run's before anything is written.

`mappa train` into an out_dir that holds a checkpoint resumes that run. A config that differs from
the run's `config.json` is checked key by key first, so nothing on disk changes unless it can resume:

- a key the checkpoints depend on (FIXED: the model, the policies, the LoRA shape, ...) cannot change:
  the weights or optimizer states would not load. One line says which and what to do instead.
- any other change to what is learnt (learning rate, rollout, coach, ...) is refused too unless
  `allow_config_change=true` (CLI: `--allow-config-change`): a resumed run should not silently train
  on with other settings. The line lists each changed key, old -> new.
- FREE keys (where files go, logging, placement, how long the run goes) change freely.

When it resumes it prints "resuming from step N"; an allowed change keeps the run's earlier config as
`config.before_step_N.json` beside the new `config.json`, so the run's history stays readable.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from mappa_train.checkpoints import latest_checkpoint
from mappa_train.config import ConfigError, TrainConfig, from_dict, to_dict
from mappa_train.policy_layout import TINY_DIR, policy_layout

# Keys whose change makes the checkpoints unloadable (shapes, parameter sets, one learner per policy).
FIXED = ("model.path", "model.policies", "model.role_paths", "model.dtype", "env.id", "lora.rank",
         "lora.target_modules", "lora.groups", "learner.zero_stage")
# Keys that change nothing a checkpoint holds or a step learns (prefixes end with a dot).
FREE = ("out_dir", "steps", "checkpoint_every", "keep_checkpoints", "log.", "ray.",
        "hardware.")
CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class ResumePoint:
    step: int  # finished steps of the run being resumed (0: a fresh run)
    changed: dict  # key -> (old, new), the changes allowed


def prepare_out_dir(cfg: TrainConfig) -> ResumePoint:
    """Check `cfg` against the run in `cfg.out_dir` (raising ConfigError before touching it), then write
    `config.json`. Call it first thing in `train`."""
    out = Path(cfg.out_dir)
    step = latest_checkpoint(out)[0]
    previous = out / CONFIG_FILE
    if out.is_dir() and any(p.name != TINY_DIR for p in out.iterdir()) and not _is_run_config(previous):
        raise ConfigError(f"out_dir {out} holds files but no mappa run (no config.json `mappa train` wrote); "
                          "choose a new or empty folder, or the out_dir of the run to resume")
    changed: dict = {}
    if step and previous.is_file():
        changed = check_changes(cfg, _load(previous), out, step)
        if changed:
            previous.replace(out / f"config.before_step_{step}.json")
    out.mkdir(parents=True, exist_ok=True)
    (out / CONFIG_FILE).write_text(json.dumps(to_dict(cfg), indent=2))
    if step:
        said = f" with {_describe(changed)}" if changed else ""
        print(f"mappa train: resuming from step {step} of {out}{said}", flush=True)
    return ResumePoint(step, changed)


def config_changes(old: dict, new: dict) -> dict:
    """Dotted key -> (old, new) for every leaf that differs (dict-valued settings compared key by key)."""
    a, b = _flatten(old), _flatten(new)
    missing = object()
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if a.get(k, missing) != b.get(k, missing)}


def check_changes(cfg: TrainConfig, old: dict, out: Path, step: int) -> dict:
    """The changes from the run's config `old` to `cfg`, or a ConfigError saying why it cannot resume."""
    new = to_dict(cfg)
    changes = config_changes(old, new)
    changes.pop("allow_config_change", None)  # the permission itself is no change to the run
    # settings neither run's policy layout reads (lora.* without adapters) change nothing either run holds
    old_layout = policy_layout(cfg, old.get("model", {}).get("policies"))
    unused = tuple(set(policy_layout(cfg).unused_settings) & set(old_layout.unused_settings))
    changes = {k: v for k, v in changes.items() if not k.startswith(unused)}
    fixed = {k: v for k, v in changes.items() if any(k == f or k.startswith(f + ".") for f in FIXED)}
    if fixed:
        raise ConfigError(f"{out} holds a run at step {step} whose checkpoints cannot load with {_describe(fixed)}; "
                          f"train into another out_dir, or delete {out} to start over")
    learnt = {k: v for k, v in changes.items() if not any(k == f or k.startswith(f) for f in FREE)}
    if learnt and not cfg.allow_config_change:
        raise ConfigError(f"{out} holds a run at step {step} trained with another config: {_describe(learnt)}; "
                          "to resume it with these changes pass --allow-config-change (allow_config_change=true), "
                          "or train into another out_dir")
    return changes


def _is_run_config(path: Path) -> bool:
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(raw, dict) and {"model", "env", "algo", "out_dir"} <= set(raw)


def _load(path: Path) -> dict:
    """The run's config with today's defaults filled in (a key added since reads as its default)."""
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} cannot be read ({e}); it should be the config.json `mappa train` wrote") from None
    try:
        return to_dict(from_dict(raw))
    except ConfigError:
        return raw  # written by another version: compare what it says


def _flatten(node, prefix: str = "") -> dict:
    if isinstance(node, dict) and node:
        out: dict = {}
        for k, v in node.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out
    return {prefix[:-1]: node}


def _describe(changes: dict) -> str:
    return ", ".join(f"{k} {old!r} -> {new!r}" for k, (old, new) in changes.items())
