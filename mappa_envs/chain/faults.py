"""Chain-v0's fault facts (`mappa blame`, `mappa coach-eval`): one agent of four always slips on its step,
the others doing theirs on whatever value they are handed."""
from __future__ import annotations

from mappa_envs.chain.scripted import ScriptedChainPolicy
from mappa_envs.coach_eval.faults import NONE, Faults

ROLES = {NONE: None, "step_1_slips": "step_1", "step_2_slips": "step_2", "step_4_slips": "step_4"}


def faulty_team(env, fault: str) -> ScriptedChainPolicy:
    faulty = ROLES[fault]
    return ScriptedChainPolicy(skill={faulty: 0.0} if faulty else 1.0)


FAULTS = Faults(roles=ROLES, team=faulty_team, kwargs={"depth": 4, "num_tasks": 20, "task_seed": 1})
