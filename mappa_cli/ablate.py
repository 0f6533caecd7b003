"""`mappa ablate`: train one start several ways x seeds (mappa_train/experiments/ablate.py)."""
from __future__ import annotations

import argparse
from pathlib import Path

PRESET = Path(__file__).resolve().parent.parent / "configs" / "ablate" / "cpu.yaml"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", default=str(PRESET),
                        help="ablation preset (configs/ablate/cpu.yaml, configs/ablate/gpu.yaml)")
    parser.add_argument("--out", default="runs/ablate", help="output directory (reused: finished runs are kept)")
    parser.add_argument("--arms", default="", help="comma-separated subset of the preset's arms")
    parser.add_argument("--seeds", default="", help="comma-separated seeds instead of the preset's")
    parser.add_argument("--sweep-values", default="", metavar="VALUES",
                        help="comma-separated subset of the preset's sweep values (sweep.values, e.g. depths 2,4)")
    parser.add_argument("--prior", metavar="RESULTS_JSON",
                        help="the results.json of an earlier run of this preset (e.g. committed from another "
                             "machine): its runs are not trained again and its records join the summary")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="training overrides for every arm")


def run(args: argparse.Namespace) -> int:
    from mappa_train.config import ConfigError
    from mappa_train.experiments.ablate import ablate, base_config
    from mappa_train.experiments.ablate_preset import load_ablation
    from mappa_train.experiments.ablate_prior import load_prior
    from mappa_train.experiments.ablate_report import format_table

    cfg, arms = load_ablation(args.config)  # a ConfigError is one line in the CLI
    if args.arms:
        chosen = [a.strip() for a in args.arms.split(",") if a.strip()]
        unknown = [a for a in chosen if a not in arms]
        if unknown:
            raise ConfigError(f"--arms names {unknown}, not in the preset; its arms: {sorted(arms)}")
        arms = {a: arms[a] for a in chosen}
        if isinstance(cfg.baseline, list):  # the outcome variants run here compete for the baseline
            cfg.baseline = [b for b in cfg.baseline if b in arms] or cfg.baseline
    if args.seeds:
        cfg.seeds = _integers("--seeds", args.seeds)
    if args.sweep_values:
        chosen = _values(args.sweep_values)
        if not cfg.sweep.key or not all(v in cfg.sweep.values for v in chosen):
            raise ConfigError(f"--sweep-values {chosen} must be among the preset's sweep values {cfg.sweep.values}")
        noisy = [v for v in cfg.noise_at if v in chosen]
        if cfg.noise_at and not noisy:  # the noisy coaches ran only at values left out: none here
            cfg.coach_noise = [0.0]
        cfg.sweep.values, cfg.noise_at = chosen, noisy
    cfg.overrides = [*cfg.overrides, *args.overrides]
    if args.prior is not None and not args.prior.strip():
        raise ConfigError("--prior is empty; give the path of a results.json, or leave --prior out")
    prior = load_prior(args.prior) if args.prior is not None else None
    base_config(cfg, Path(args.out))  # fail now, not after the warm start
    results = ablate(cfg, arms, Path(args.out), prior=prior, prior_path=args.prior)
    print(format_table(results))
    print(f"results.json, results.md and accuracy_vs_rollouts.png are in {args.out}")
    return 0


def _values(text: str) -> list:
    """Comma-separated sweep values, each read as YAML (2 -> 2, own -> "own")."""
    from mappa_envs.yaml_data import YamlDataError, plain_yaml
    from mappa_train.config import ConfigError

    try:
        return [plain_yaml(v.strip()) for v in text.split(",")]
    except YamlDataError:
        raise ConfigError(f"--sweep-values must be comma-separated values, e.g. 2,4; got {text!r}") from None


def _integers(flag: str, text: str) -> list[int]:
    from mappa_train.config import ConfigError

    try:
        return [int(s) for s in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag} must be comma-separated integers, e.g. 0,1,2; got {text!r}") from None
