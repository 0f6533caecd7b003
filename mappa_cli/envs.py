"""`mappa envs`: list the registered environments."""
from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    import mappa_envs

    width = max(map(len, mappa_envs.registry))
    for env_id, spec in sorted(mappa_envs.registry.items()):
        print(f"{env_id:<{width}}  {spec.description}")
    return 0
