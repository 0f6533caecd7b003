"""Print (and optionally write) the Markdown leaderboard of `mappa eval` runs.

    python benchmarks/leaderboard.py runs/eval [more runs or folders] [--out LEADERBOARD.md]
"""
import sys

from mappa_cli.eval import leaderboard_main

if __name__ == "__main__":
    sys.exit(leaderboard_main())
