"""`mappa train --config FILE key=value ...`: train a team with MAPPA."""
from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    from mappa_train.config import help_lines

    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--config",
                        help="a YAML preset (configs/mathchat.yaml, configs/dsbench.yaml, configs/quickstart.yaml)")
    parser.add_argument("overrides", nargs="*", metavar="key=value",
                        help="override config keys, e.g. learner.lr=1e-5 steps=10; a key inside a mapping "
                        "(env.kwargs, env.eval_sets, ...) is set on its own: env.kwargs.num_tasks=64")
    parser.add_argument("--allow-config-change", action="store_true",
                        help="resume the run in out_dir with a config that changes what it learns "
                        "(allow_config_change=true)")
    parser.add_argument("--print-config", action="store_true", help="print the resolved config as YAML and exit")
    parser.add_argument("--dry-run", action="store_true", help="resolve the model, check its chat template, print the "
                        "GPU placement and memory plan against `hardware`, and exit (0: it fits)")
    parser.epilog = "config keys (key = default  [type]  meaning):\n  " + "\n  ".join(help_lines())


def run(args: argparse.Namespace) -> int:
    from mappa_train.config import load_config

    overrides = [*args.overrides, *(["allow_config_change=true"] if args.allow_config_change else [])]
    cfg = load_config(args.config, overrides)  # its ConfigError (bad file, YAML, key, value) is one line
    if args.print_config:
        import yaml

        from mappa_train.config import to_dict

        print(yaml.safe_dump(to_dict(cfg), sort_keys=False))
        return 0
    if args.dry_run:
        from mappa_train.train import dry_run

        return dry_run(cfg)
    if cfg.ray.enabled:
        from mappa_train.ray_mode import train_with_ray

        out = train_with_ray(cfg)
    else:
        from mappa_train.train import train

        out = train(cfg)
    print(f"done: metrics, curves.png and the final model are in {out}")
    return 0

