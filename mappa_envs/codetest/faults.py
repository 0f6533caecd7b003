"""CodeTest-v0's fault facts (`mappa blame`, `mappa coach-eval`): its scripted team takes the fault itself
(a Coder's bug, a Test Writer's wrong test, a Reviewer that breaks working code)."""
from __future__ import annotations

from mappa_envs.coach_eval.faults import Faults
from mappa_envs.codetest.scripted import FAULTS as ROLES
from mappa_envs.codetest.scripted import for_env

FAULTS = Faults(
    roles=ROLES,
    team=lambda env, fault: for_env(env, fault=fault),
    kwargs={"split": "eval", "with_examples": True, "num_tasks": 20},
)
