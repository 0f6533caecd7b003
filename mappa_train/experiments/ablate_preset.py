"""`mappa ablate`'s preset: its schema, how it is read, and the conditions, arms and run folders it names.

A preset's `sweep` sets one training config key to each of its values, a condition each (Chain-v0's
depth: `sweep: {key: env.kwargs.depth, values: [2, 4, 8]}`); `coach_noise` crosses those conditions
with rule-coaches wrong at rate ε. Both `ablate` (which trains) and `ablate_report` (which summarises)
read the grid from here.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mappa_envs.core.pipeline import RewardMode
from mappa_train.config import ConfigError, Normalization, doc, load_section
from mappa_train.config.schema import OutcomeCredit
from mappa_train.experiments.warm_start import StartConfig


@dataclass
class Arm:
    reward: RewardMode = doc("process", "process (coach score per action), outcome (team result ×10), process+outcome "
                                    "or backprop (team result ×10 split over the actions by blame)")
    whiten: Normalization = doc("global", "advantage normalisation")
    outcome_credit: OutcomeCredit = doc("every_action", "which actions the outcome reaches (algo.outcome_credit): "
                                                        "every action of each agent, or its last only (an ablation)")
    stop_below: dict = doc({}, "curriculum filtering: rollout.stop_below, role -> coach score")
    overrides: list = doc([], "other training overrides, key=value; {seed} is replaced by the training seed")


@dataclass
class Sweep:
    key: str = doc("", "the training config key each condition sets, e.g. env.kwargs.depth; empty: no sweep")
    values: list = doc([], "the key's values, a condition each")
    name: str = doc("", "the axis' name in run folders, records and tables (runs/depth2/); default: the key's last "
                        "part")

    @property
    def axis(self) -> str:
        return self.name or self.key.rpartition(".")[2]


@dataclass
class AblateConfig:
    train_config: str = doc("quickstart.yaml",
                            "training preset every arm starts from (a path relative to the preset file)")
    overrides: list = doc([], "training overrides for every arm, key=value")
    seeds: list = doc([0, 1, 2], "training seeds; every arm runs each")
    target_accuracy: float = doc(0.5, "held-out accuracy whose first crossing is reported per arm")
    eval_set: str = doc("heldout", "which of the training config's env.eval_sets is the held-out set")
    warm_start: bool = doc(True, "start from the quickstart's tiny warm start (`start`); false: from the training "
                                 "preset's own model.path")
    start: StartConfig = field(default_factory=StartConfig)
    arms: dict = doc({}, "arm name -> Arm fields")
    target_gain: float | None = doc(None, "if set, each run's target is its start accuracy plus this (rollouts to "
                                          "a target relative to the start); else target_accuracy")
    baseline: str | list = doc("outcome", "the arm every other arm is paired with, seed by seed; or a list of arms "
                                          "(the outcome variants), of which the strongest in each condition at the "
                                          "budget (highest mean accuracy after the start) is the one")
    target_gains: list = doc([0.1, 0.2], "gains over each run's start whose first crossing is costed per arm "
                                         "(rollouts, coach calls, tokens, wall) and compared as a rollouts ratio")
    budget_gain: float | None = doc(None, "if set, the budget pre-flight: `budget_arm` trains until its accuracy "
                                          "rises by this over its start, and the grid's steps are fixed from it")
    budget_arm: str = doc("process", "the arm the budget pre-flight trains")
    budget_seed: int = doc(1000, "the budget pre-flight's training seed (outside the grid's seeds)")
    budget_max_steps: int = doc(48, "the budget pre-flight gives up (and stops the ablation) after this many steps")
    budget_factor: float = doc(2.0, "the grid's steps: this × the steps the budget pre-flight took to rise, rounded "
                                    "up to whole evaluations")
    sweep: Sweep = field(default_factory=Sweep)
    coach_noise: list = doc([0.0], "rule-coach error rates, a condition each (0: the plain coach)")
    noise_at: list = doc([], "the sweep values at which the noisy coaches run; empty: every value")
    noise_arms: list = doc([], "the arms trained with the noisy coaches; empty: every arm (the outcome arm's "
                               "noise-free runs stand for it)")
    start_per_value: bool = doc(False, "a warm start per sweep value, each imitating its own condition's team "
                                       "(start/<axis><value>/); false: one start imitating every condition")
    preflight_episodes: int = doc(0, "training episodes the start plays before any arm trains (0: no pre-flight)")
    preflight_min_right: float = doc(0.05, "the least share of the start's actions passing all their checks")


@dataclass(frozen=True)
class Condition:
    """One cell of the grid: a value of the swept key (none: the preset's setting) and the coach's error rate."""

    key: str = ""  # the swept training config key ("": no sweep)
    axis: str = ""  # its name in folders and tables
    value: Any = None
    noise: float = 0.0

    @property
    def name(self) -> str:
        """Its folder under runs/ ("" for the plain preset, so that single-condition ablations keep their layout)."""
        swept = [f"{self.axis}{self.value}"] if self.key else []
        return "_".join(swept + ([f"noise{self.noise:g}"] if self.noise else []))

    @property
    def plain(self) -> Condition:
        """The same setting with the plain coach."""
        return replace(self, noise=0.0)

    def overrides(self) -> list[str]:
        """The training override that sets the swept key (none without a sweep)."""
        return [f"{self.key}={json.dumps(self.value)}"] if self.key else []

    def coordinate(self) -> dict:
        """{axis: value} in records and tables (nothing without a sweep)."""
        return {self.axis: self.value} if self.key else {}

    def where(self) -> str:
        """" at depth 2" in progress lines ("" without a sweep)."""
        return f" at {self.axis} {self.value}" if self.key else ""


def conditions(cfg: AblateConfig) -> list[Condition]:
    """Every sweep value with the plain coach, then the noisy coaches at `noise_at` (or every value)."""
    sweep, out = cfg.sweep, []
    for value in sweep.values or [None]:
        out += [Condition(sweep.key, sweep.axis if sweep.key else "", value, float(e)) for e in cfg.coach_noise
                if e == 0 or not cfg.noise_at or value in cfg.noise_at]
    return out


def calls_coach(arm: Arm) -> bool:
    """Whether the arm's reward asks the coach (every mode but the plain outcome does)."""
    return arm.reward != "outcome"


def arms_at(cfg: AblateConfig, arms: dict[str, Arm], cond: Condition) -> dict[str, Arm]:
    """The arms of a condition: all of them with the plain coach; with a noisy one `noise_arms` (or all) and
    the outcome arms, whose noise-free runs stand for them."""
    if not cond.noise or not cfg.noise_arms:
        return arms
    return {n: a for n, a in arms.items() if n in cfg.noise_arms or not calls_coach(a)}


def run_dir(out: Path, cond: Condition, name: str, arm: Arm, seed: int) -> Path:
    """A run's folder. The outcome arm asks no coach: its noise-free run stands for it at every error rate."""
    if not calls_coach(arm):
        cond = cond.plain
    return out / "runs" / cond.name / name / f"seed{seed}"


def start_file(stem: str, cond: Condition, suffix: str = "") -> str:
    """A start/ file of a sweep value: "preflight.json" without a sweep, "preflight_depth2.json" with one."""
    return f"{stem}_{cond.name}{suffix}" if cond.name else f"{stem}{suffix}"


def baselines(cfg: AblateConfig) -> list[str]:
    """The arms that may be the baseline: `baseline`, one name or a list (the outcome variants)."""
    return [cfg.baseline] if isinstance(cfg.baseline, str) else list(cfg.baseline)


# ---- reading a preset --------------------------------------------------------------------------------

RETIRED = {"depths": "sweep: {key: env.kwargs.depth, values: [...]}", "noise_depths": "noise_at",
           "start_per_depth": "start_per_value"}


def load_ablation(path: str | Path) -> tuple[AblateConfig, dict[str, Arm]]:
    path = Path(path)
    data = _read_preset(path)
    retired = [f"{old} (now {new})" for old, new in RETIRED.items() if old in data]
    if retired:
        raise ConfigError(f"{path}: the depth sweep is a generic sweep now; replace {', '.join(retired)}")
    cfg = load_section(AblateConfig, data, str(path))
    if not cfg.arms or not all(isinstance(v, dict) for v in cfg.arms.values()):
        raise ConfigError(f"{path}: arms must map arm names to their fields (reward, whiten, stop_below, overrides)")
    arms = {name: load_section(Arm, spec, f"{path}: arms.{name}") for name, spec in cfg.arms.items()}
    if len(cfg.seeds) < 1 or not all(isinstance(s, int) for s in cfg.seeds):
        raise ConfigError(f"{path}: seeds must be a non-empty list of integers, got {cfg.seeds!r}")
    _check_grid(cfg, arms, path)
    return cfg, arms


def _read_preset(path: Path, children: tuple[Path, ...] = ()) -> dict:
    """A preset's fields, on top of those of the preset it `extends` (a path relative to it): mappings
    (`arms`, `start`, `sweep`) are merged key by key, anything else replaced; `train_config` is resolved
    against the file that names it."""
    from mappa_envs.yaml_data import YamlDataError, read_yaml

    if not path.exists():
        where = f" (extended by {children[-1]})" if children else ""
        raise ConfigError(f"ablation preset {path}{where} does not exist (presets: configs/ablate/*.yaml)")
    try:
        data = read_yaml(path, "ablation preset") or {}
    except YamlDataError as e:
        raise ConfigError(str(e)) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: an ablation preset is a mapping of fields, got {type(data).__name__}")
    if "train_config" in data:
        data["train_config"] = str((path.parent / str(data["train_config"])).resolve())
    parent = data.pop("extends", None)
    if parent is None:
        data.setdefault("train_config", str((path.parent / AblateConfig.train_config).resolve()))
        return data
    base_path = (path.parent / str(parent)).resolve()
    if base_path in (*children, path.resolve()):
        raise ConfigError(f"{path}: extends {parent!r}, which extends it back (a cycle)")
    base = _read_preset(base_path, (*children, path.resolve()))
    return {key: {**base[key], **value} if isinstance(value, dict) and isinstance(base.get(key), dict) else value
            for key, value in {**base, **data}.items()}


_FOLDER = re.compile(r"^[\w.+-]+\Z")


def _check_sweep(sweep: Sweep, path: Path) -> None:
    if bool(sweep.key) != bool(sweep.values):
        raise ConfigError(f"{path}: a sweep needs both a key and its values (e.g. sweep: {{key: env.kwargs.depth, "
                          f"values: [2, 4, 8]}}), got key {sweep.key!r} and values {sweep.values!r}")
    scalar = all(isinstance(v, (int, float, str)) and not isinstance(v, bool) for v in sweep.values)
    names = [f"{sweep.axis}{v}" for v in sweep.values]
    if not scalar or len(set(names)) != len(names) or not all(_FOLDER.match(n) for n in names):
        raise ConfigError(f"{path}: sweep values must be distinct numbers or words that make folder names "
                          f"(letters, digits, . + - _), got {sweep.values!r}")


def _check_grid(cfg: AblateConfig, arms: dict[str, Arm], path: Path) -> None:
    _check_sweep(cfg.sweep, path)
    if not cfg.coach_noise or 0 not in cfg.coach_noise or not all(
            isinstance(e, (int, float)) and 0 <= e <= 1 for e in cfg.coach_noise):
        raise ConfigError(f"{path}: coach_noise must be rates in [0, 1] including 0 (the plain coach), "
                          f"got {cfg.coach_noise!r}")
    if not all(v in cfg.sweep.values for v in cfg.noise_at):
        raise ConfigError(f"{path}: noise_at {cfg.noise_at} must be among the sweep values {cfg.sweep.values}")
    if cfg.preflight_episodes < 0 or not 0 <= cfg.preflight_min_right <= 1:
        raise ConfigError(f"{path}: preflight_episodes must be >= 0 and preflight_min_right in [0, 1]")
    if not baselines(cfg) or not set(baselines(cfg)) <= set(arms):
        raise ConfigError(f"{path}: baseline {cfg.baseline!r} must name one or more of the arms {sorted(arms)}")
    if not cfg.target_gains or not all(isinstance(g, (int, float)) and not isinstance(g, bool) and g > 0
                                       for g in cfg.target_gains):
        raise ConfigError(f"{path}: target_gains must be a non-empty list of gains > 0, got {cfg.target_gains!r}")
    if cfg.budget_gain is not None and (cfg.budget_gain <= 0 or cfg.budget_arm not in arms
                                        or cfg.budget_max_steps < 1 or cfg.budget_factor < 1):
        raise ConfigError(f"{path}: the budget pre-flight needs budget_gain > 0, budget_arm among the arms "
                          f"{sorted(arms)}, budget_max_steps >= 1 and budget_factor >= 1; got {cfg.budget_gain}, "
                          f"{cfg.budget_arm!r}, {cfg.budget_max_steps}, {cfg.budget_factor}")
    if not set(cfg.noise_arms) <= set(arms):
        raise ConfigError(f"{path}: noise_arms {cfg.noise_arms} must be among the arms {sorted(arms)}")
