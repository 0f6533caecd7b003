"""`mappa`: the command line. Each subcommand lives in its owner's module and is imported on use.

A subcommand module exposes `configure(parser)` (add arguments) and `run(args) -> int | None`.
"""
from __future__ import annotations

import argparse
import importlib
import sys

# name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "envs": ("mappa_envs.commands", "list registered environments"),
    "run": ("mappa_envs.commands", "play episodes with a policy and write transcripts (JSON lines)"),
    "sandbox": ("mappa_envs.sandbox.cli", "build the sandbox image offline, or check a backend"),
    "train": ("mappa_train.cli", "train a team with MAPPA (REINFORCE++ on coach rewards)"),
    "quickstart": ("mappa_train.quickstart", "build a tiny model offline and watch it learn (<= 10 min on CPU)"),
    "eval": ("mappa_train.evaluation.cli", "evaluate agent teams on eval sets; leaderboard and comparisons"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="mappa", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    if not argv or argv[0] not in COMMANDS:
        parser.print_help() if not argv or argv[0] in ("-h", "--help") else parser.parse_args(argv)
        return 0 if not argv or argv[0] in ("-h", "--help") else 2
    name = argv[0]
    module = importlib.import_module(COMMANDS[name][0])
    cmd_parser = argparse.ArgumentParser(prog=f"mappa {name}", description=COMMANDS[name][1])
    configure = getattr(module, f"configure_{name}", None) or module.configure
    execute = getattr(module, f"run_{name}", None) or module.run
    configure(cmd_parser)
    return int(execute(cmd_parser.parse_args(argv[1:])) or 0)


if __name__ == "__main__":
    sys.exit(main())
