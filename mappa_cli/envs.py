"""`mappa envs`: list the registered environments, what tasks each takes, and their Gymnasium ids."""
from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    import mappa_envs

    width = max(map(len, mappa_envs.registry))
    pad = " " * (width + 2)
    for env_id, spec in sorted(mappa_envs.registry.items()):
        print(f"{env_id:<{width}}  {spec.description}")
        if spec.task_sources:
            print(f"{pad}tasks=: {' | '.join(spec.task_sources)}")
        print(f"{pad}gymnasium: mappa/{env_id} (one text stream: mappa_envs.wrappers.TextEnv)")
    print("\nnamed eval sets of these envs: `mappa eval --list-sets`")
    return 0
