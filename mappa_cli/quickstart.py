"""`mappa quickstart`: a real model's team gets better with MAPPA, beside a control arm
(mappa_train/experiments/quickstart.py)."""
from __future__ import annotations

import argparse
from pathlib import Path


def configure(parser: argparse.ArgumentParser) -> None:
    from mappa_cli.args import non_negative_int, positive_int
    from mappa_train.experiments.confirmation import DEFAULT_PROBLEMS
    from mappa_train.experiments.quickstart import PRESET

    parser.add_argument("--out", default="runs/quickstart", help="output directory (reused: an existing run resumes)")
    parser.add_argument("--config", default=str(PRESET), help="the training preset")
    parser.add_argument("--sft-episodes", type=positive_int, help="scripted episodes for the warm start "
                        "(default: the model's recipe, mappa_train.experiments.warm_start.recipe_for)")
    parser.add_argument("--sft-short-steps", type=non_negative_int,
                        help="warm-start steps on conversations without their system prompts (cheaper)")
    parser.add_argument("--sft-steps", type=non_negative_int, help="then warm-start steps on full conversations")
    parser.add_argument("--sft-batch", type=positive_int, help="conversations per warm-start step")
    parser.add_argument("--teacher-code-skill", type=float,
                        help="how often the teacher's code runs; the rest raises NameError (default 0.5)")
    parser.add_argument("--n-boot", type=int, default=10_000, help="bootstrap resamples for the interval")
    parser.add_argument("--confirmation-problems", type=int, default=DEFAULT_PROBLEMS,
                        help="held-out problems after the dev set's, evaluated before and after only (0: none)")
    parser.add_argument("--seeds", default="", help="comma-separated training seeds, e.g. 0,1,2: one whole run per "
                        "seed under OUT/seed_N, then OUT/seeds.json and seeds.md: the mean change over seeds with a "
                        "95%% t-interval, and each seed's paired bootstrap")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="training config overrides (see mappa train --help)")


def run(args: argparse.Namespace) -> int:
    from mappa_train.config import ConfigError, load_config
    from mappa_train.experiments.quickstart import run_quickstart, run_seeds
    from mappa_train.experiments.warm_start import recipe_for

    model = load_config(args.config, args.overrides).model.path
    spec = recipe_for(model, sft_episodes=args.sft_episodes, sft_short_steps=args.sft_short_steps,
                      sft_steps=args.sft_steps, sft_batch=args.sft_batch, code_skill=args.teacher_code_skill)
    if not 0 <= spec.code_skill <= 1:
        raise ConfigError(f"--teacher-code-skill must be in [0, 1], got {spec.code_skill}")
    if spec.sft_short_steps + spec.sft_steps < 1:
        raise ConfigError("the warm start needs at least one step: raise --sft-short-steps or --sft-steps")
    if args.confirmation_problems < 0:
        raise ConfigError(f"--confirmation-problems must be >= 0, got {args.confirmation_problems}")
    if not args.seeds:
        run_quickstart(args.config, Path(args.out), spec, args.overrides, args.n_boot, args.confirmation_problems)
        return 0
    print(run_seeds(args.config, Path(args.out), spec, args.overrides, parse_seeds(args.seeds), args.n_boot,
                    args.confirmation_problems))
    return 0


def parse_seeds(text: str) -> list[int]:
    from mappa_train.config import ConfigError

    try:
        seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ConfigError(f"--seeds takes comma-separated integers, e.g. 0,1,2; got {text!r}") from None
    if len(seeds) < 2 or len(set(seeds)) != len(seeds):
        raise ConfigError(f"--seeds needs at least two distinct seeds (one seed gives no interval); got {text!r}")
    return seeds
