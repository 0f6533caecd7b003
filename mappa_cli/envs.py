"""`mappa envs`: the registered environments (task sources, Gymnasium ids) and the shipped team specs."""
from __future__ import annotations

import argparse


def configure(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    import mappa_envs
    from mappa_envs.core.team import load_team, shipped_specs
    from mappa_envs.registration import accepted_kwargs, load_callable

    teams = {name: load_team(name) for name in shipped_specs()}
    built_from = {team.name: name for name, team in teams.items()}
    width = max(map(len, mappa_envs.registry))
    pad = " " * (width + 2)
    for env_id, spec in sorted(mappa_envs.registry.items()):
        team = f"  [team spec: {built_from[env_id]}]" if env_id in built_from else ""
        print(f"{env_id:<{width}}  {spec.description}{team}")
        if spec.task_sources:
            takes_tasks = "tasks" in (accepted_kwargs(load_callable(spec.entry_point)) or ())
            print(f"{pad}{'tasks=' if takes_tasks else 'tasks'}: {' | '.join(spec.task_sources)}")
        print(f"{pad}gymnasium: mappa/{env_id} (one text stream: mappa_envs.wrappers.TextEnv)")
    print('\nTeam specs shipped with the package (make("Team-v0", spec=NAME); a YAML path or a dict works too):')
    width = max(map(len, teams))
    for name, team in teams.items():
        loops = "".join(f"; {lp.sender} may send back to {lp.to} (<= {lp.max_rounds}x)" for lp in team.loops)
        print(f"  {name:<{width}}  {team.name}: {' -> '.join(team.names)}{loops}")
    print("\nnamed eval sets of these envs: `mappa eval --list-sets`")
    return 0
