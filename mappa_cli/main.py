"""`mappa`: the command line of MAPPA's environments, trainer and evaluation.

Every subcommand is a module with `configure(parser)` and `run(args) -> int`, imported on use. An
error the user can fix prints one line, `mappa <command>: <what was wrong and how to fix it>`, and
exits 2 (bad input) or 1 (a failure while running); `--debug` or MAPPA_DEBUG=1 shows the traceback.
"""
from __future__ import annotations

import argparse
import importlib
import logging
import os
import sys

from mappa_cli.errors import OneLineLog, UsageError, explain

# name -> (module with configure/run, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "envs": ("mappa_cli.envs", "list registered environments"),
    "run": ("mappa_cli.run", "play episodes with a policy and write transcripts (JSON lines)"),
    "sandbox": ("mappa_cli.sandbox", "build the sandbox image offline, or check a backend"),
    "train": ("mappa_cli.train", "train a team with MAPPA (REINFORCE++ on coach rewards)"),
    "eval": ("mappa_cli.eval", "evaluate agent teams on eval sets; leaderboard and comparisons"),
    "quickstart": ("mappa_cli.quickstart", "the main job: SmolLM2 learns a MathChat team, beside a control arm"),
    "blame": ("mappa_cli.blame", "blame precision: does the coach credit the right (faulty) agent?"),
    "coach-eval": ("mappa_cli.coach_eval", "a coach's report card: AUROC, blame, master keys, calibration"),
    "coach-train": ("mappa_cli.coach_train", "fine-tune a judge model on labelled actions (rule checks, human labels)"),
    "ablate": ("mappa_cli.ablate", "train one start several ways (reward, normalisation, curriculum) x seeds"),
    "export": ("mappa_cli.export", "a training checkpoint as Hugging Face models; transcripts as a datasets dataset"),
    "review": ("mappa_cli.review", "a local web page over a run's transcripts; human verdicts in SQLite"),
}
DEBUG_ENV = "MAPPA_DEBUG"


class Parser(argparse.ArgumentParser):
    """argparse, except that a usage error is one line (not the whole usage block) through `main`."""

    def error(self, message: str):
        raise UsageError(f"{message} (see `{self.prog} --help`)")


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "") not in ("", "0")
    if argv[:1] == ["--debug"]:
        argv = argv[1:]
    if not argv or argv[0] in ("-h", "--help"):
        _top_parser().print_help()
        return 0
    name = argv[0]
    if name not in COMMANDS:
        print(f"mappa: unknown command {name!r}; choose one of {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    if logging.lastResort is not None:  # warnings of a run that goes on (a failed episode) stay one line
        logging.lastResort.setFormatter(None if debug else OneLineLog())
    module_name, help_text = COMMANDS[name]
    parser = Parser(prog=f"mappa {name}", description=help_text)
    parser.add_argument("--debug", action="store_true", help=f"show the traceback of an error (or set {DEBUG_ENV}=1)")
    try:
        module = importlib.import_module(module_name)
        module.configure(parser)
        return int(module.run(parser.parse_args(argv[1:])) or 0)
    except (Exception, KeyboardInterrupt) as exc:
        explained = explain(exc)
        if debug or explained is None:  # asked for, or a bug: the traceback is what helps
            raise
        message, status = explained
        print(f"mappa {name}: {message}", file=sys.stderr)
        return status


def _top_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mappa", description=__doc__.splitlines()[0],
                                     epilog="`mappa COMMAND --help` shows a command's options.")
    parser.add_argument("--debug", action="store_true", help=f"show the traceback of an error (or set {DEBUG_ENV}=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        sub.add_parser(name, help=help_text)
    return parser


if __name__ == "__main__":
    sys.exit(main())
