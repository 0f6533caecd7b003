"""Two team specs as a user would write them (YAML files, not shipped): a fan-in team and a bounded loop,
both on the MathChat scenario with its per-role scripted team (`mappa blame`/`coach-eval --spec`, training)."""
from __future__ import annotations

from pathlib import Path

FAN_IN = """\
name: FanIn-v0
scenario: mappa_envs.mathchat.env:make_scenario
scenario_args: {num_tasks: 8}
scripted: mappa_envs.mathchat.scripted:for_team
roles:
  - {name: coder, prompt: "Compute the answer in a python block, then state it as \\\\boxed{ANSWER}.",
     tools: true, max_actions: 2}
  - {name: reasoner, prompt: "Derive the answer by hand. End with \\\\boxed{ANSWER}."}
  - {name: judge, prompt: "Decide between the two answers. End with \\\\boxed{ANSWER}.", sees: [coder, reasoner]}
start: [coder, reasoner]
flow:
  - {from: [coder, reasoner], to: judge}
"""

LOOP = """\
name: Loop-v0
scenario: mappa_envs.mathchat.env:make_scenario
scenario_args: {num_tasks: 8}
scripted: mappa_envs.mathchat.scripted:for_team
roles:
  - {name: solver, prompt: "Solve the problem. End with \\\\boxed{ANSWER}."}
  - {name: checker, prompt: "Check the solver's answer. End with \\\\boxed{ANSWER}."}
flow:
  - {from: solver, to: checker}
  - {from: checker, to: solver, max_rounds: 2}
"""


def write_specs(folder: Path) -> tuple[str, str]:
    """The fan-in and the loop spec written to `folder`; their paths."""
    fan_in, loop = folder / "fan_in.yaml", folder / "loop.yaml"
    fan_in.write_text(FAN_IN)
    loop.write_text(LOOP)
    return str(fan_in), str(loop)
