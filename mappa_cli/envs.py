"""`mappa envs`: list the registered environments and the team specs shipped for `Team-v0`."""
from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    import mappa_envs
    from mappa_envs.core.team import load_team, shipped_specs

    teams = {name: load_team(name) for name in shipped_specs()}
    built_from = {team.name: name for name, team in teams.items()}
    width = max(map(len, mappa_envs.registry))
    for env_id, spec in sorted(mappa_envs.registry.items()):
        team = f"  [team spec: {built_from[env_id]}]" if env_id in built_from else ""
        print(f"{env_id:<{width}}  {spec.description}{team}")
    print('\nTeam specs shipped with the package (make("Team-v0", spec=NAME); a YAML path or a dict works too):')
    width = max(map(len, teams))
    for name, team in teams.items():
        loops = "".join(f"; {lp.sender} may send back to {lp.to} (<= {lp.max_rounds}x)" for lp in team.loops)
        print(f"  {name:<{width}}  {team.name}: {' -> '.join(team.names)}{loops}")
    return 0
