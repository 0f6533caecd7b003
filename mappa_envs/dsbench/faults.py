"""DSBench-v0's fault facts (`mappa blame`, `mappa coach-eval`): its scripted team
(mappa_envs.dsbench.scripted) with the Data Engineer's hand-off files missing one or inconsistent, or a
Modeler that saves no model. Its tasks are a list (cut to the first n built-in ones) and group by
metric kind (classification / regression)."""
from __future__ import annotations

import re

from mappa_envs.coach_eval.faults import NONE, Faults, family


class DSTeam:
    """DSBench's scripted team with one of `FAULTS` injected."""

    def __init__(self, env, fault: str):
        from mappa_envs.dsbench.scripted import for_env

        forget = ("X_test.csv",) if fault == "engineer_missing_file" else ()
        self.inner, self.fault = for_env(env, forget=forget), fault

    def respond(self, conversations: list[list[dict]], roles: list[str]) -> list[str]:
        return [self._spoil(text, role) for text, role in zip(self.inner.respond(conversations, roles), roles)]

    def _spoil(self, text: str, role: str) -> str:
        if "```python" not in text:
            return text
        if self.fault == "engineer_inconsistent" and role == "data_engineer":
            extra = "X_test.drop(columns=X_test.columns[-1]).to_csv('X_test.csv', index=False)"
            return text[: text.rindex("```")] + extra + "\n```"
        if self.fault == "modeler_no_model" and role == "modeler":
            saving = r"pickle\.dump\(bundle, open\('model\.pkl', 'wb'\)\)"
            return re.sub(saving, "pass  # (the model is not saved)", text)
        return text


def first_tasks(kwargs: dict, n: int) -> dict:
    """`kwargs` with its task list (else the built-in tasks) cut to the first `n`: DSBench takes no `num_tasks`."""
    from mappa_envs.dsbench import builtin_tasks

    return {**kwargs, "tasks": list(kwargs.get("tasks") or builtin_tasks())[:n]}


def task_type(task) -> str:
    """Classification or regression, from the task's metric."""
    if task.meta.get("metric"):
        from mappa_envs.coach.stateful import metric_kind

        return metric_kind(task.meta["metric"])
    return family(task)


FAULTS = Faults(
    roles={NONE: None, "engineer_missing_file": "data_engineer", "engineer_inconsistent": "data_engineer",
           "modeler_no_model": "modeler"},
    team=DSTeam,
    first_tasks=first_tasks,
    task_type=task_type,
)
