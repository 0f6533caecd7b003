"""A scripted DSBench team: hand-written engineer, modeler and analyst code for any task.

It knows the tasks it plays (it finds each by its description in the prompt) and writes the
code a careful team would: one-hot features with train medians for gaps, a gradient-boosting model
suited to the metric, and a submission in the metric's format. `forget` makes the Data Engineer drop
files from the contract (e.g. `forget=("X_test.csv",)`) to stage failure cascades in tests and demos;
with `skill < 1` it forgets one of its files at random at that rate (a tunable error rate for smoke runs).
"""
from __future__ import annotations

import random
from collections.abc import Sequence

from mappa_envs.dsbench.metrics import get_metric
from mappa_envs.dsbench.prompts import ENGINEER_FILES
from mappa_envs.dsbench.tasks import DSTask
from mappa_envs.errors import InputError
from mappa_envs.policy import action_rngs

_DONE = {
    "data_engineer": "Features are ready: X_train.csv, y_train.csv and X_test.csv.",
    "modeler": "The model is fitted and saved to model.pkl.",
    "analyst": "submission.csv is written and checked.",
}


def engineer_code(task: DSTask, forget: Sequence[str] = ()) -> str:
    lines = [
        "import pandas as pd",
        "train, test = pd.read_csv('train.csv'), pd.read_csv('test.csv')",
        f"ID, TARGETS = {task.id_column!r}, {list(task.target_columns)!r}",
        "features = [c for c in test.columns if c != ID]",
        "both = pd.concat([train[features], test[features]], keys=['train', 'test'])",
        "categorical = [c for c in features if not pd.api.types.is_numeric_dtype(both[c])]",
        "both = pd.get_dummies(both, columns=categorical, dummy_na=True, dtype=float)",
        "both = both.fillna(both.loc['train'].median()).fillna(0)",
        "X_train, X_test = both.loc['train'].copy(), both.loc['test'].copy()",
        "X_train.insert(0, ID, train[ID].values)",
        "X_test.insert(0, ID, test[ID].values)",
    ]
    for name, frame in (("X_train.csv", "X_train"), ("y_train.csv", "train[TARGETS]"), ("X_test.csv", "X_test")):
        if name not in forget:
            lines.append(f"{frame}.to_csv({name!r}, index=False)")
    lines.append("print('X_train', X_train.shape, 'X_test', X_test.shape)")
    return "\n".join(lines)


def modeler_code(task: DSTask) -> str:
    metric = get_metric(task.metric)
    lines = [
        "import pickle, pandas as pd, numpy as np",
        "from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor",
        "X = pd.read_csv('X_train.csv').drop(columns=[" + repr(task.id_column) + "])",
        "y = pd.read_csv('y_train.csv')",
    ]
    if metric.predicts == "number":
        log = metric.name == "rmsle"
        lines += [
            "models = {}",
            "for col in y.columns:",
            f"    target = {'np.log1p(y[col])' if log else 'y[col]'}",
            "    models[col] = HistGradientBoostingRegressor(max_iter=150, random_state=0).fit(X, target)",
            f"bundle = {{'kind': 'regression', 'models': models, 'log': {log}}}",
        ]
    elif metric.name == "log_loss" and len(task.target_columns) > 1:  # one-hot class columns
        lines += [
            "label = y.to_numpy().argmax(axis=1)",
            "model = HistGradientBoostingClassifier(max_iter=100, random_state=0).fit(X, label)",
            "bundle = {'kind': 'class_probabilities', 'model': model, 'columns': list(y.columns)}",
        ]
    else:
        lines += [
            "models = {}",
            "for col in y.columns:",
            "    models[col] = HistGradientBoostingClassifier(max_iter=100, random_state=0).fit(X, y[col])",
            f"bundle = {{'kind': {metric.predicts!r}, 'models': models}}",
        ]
    lines += ["pickle.dump(bundle, open('model.pkl', 'wb'))", "print('trained', bundle['kind'])"]
    return "\n".join(lines)


def analyst_code(task: DSTask) -> str:
    lines = [
        "import pickle, pandas as pd, numpy as np",
        "bundle = pickle.load(open('model.pkl', 'rb'))",
        "X = pd.read_csv('X_test.csv')",
        f"ID = {task.id_column!r}",
        "sub = pd.DataFrame({ID: X.pop(ID)})",
        "kind = bundle['kind']",
        "if kind == 'regression':",
        "    for col, m in bundle['models'].items():",
        "        p = m.predict(X)",
        "        sub[col] = np.clip(np.expm1(p), 0, None) if bundle['log'] else p",
        "elif kind == 'class_probabilities':",
        "    proba = np.zeros((len(X), len(bundle['columns'])))",
        "    proba[:, bundle['model'].classes_] = bundle['model'].predict_proba(X)",
        "    for j, col in enumerate(bundle['columns']):",
        "        sub[col] = proba[:, j]",
        "else:",
        "    for col, m in bundle['models'].items():",
        "        if kind == 'probability':",
        "            sub[col] = m.predict_proba(X)[:, -1]  # the positive (largest) class",
        "        elif kind == 'ranked':",
        "            top = np.argsort(-m.predict_proba(X), axis=1)[:, :3]",
        "            sub[col] = [' '.join(str(c) for c in m.classes_[row]) for row in top]",
        "        else:",
        "            sub[col] = m.predict(X)",
        "sub.to_csv('submission.csv', index=False)",
        "print(sub.shape)",
        "print(sub.head(3))",
    ]
    return "\n".join(lines)


class ScriptedDSPolicy:
    """A `TextPolicy` for DSBench-v0's three roles: one code action, then a closing summary."""

    def __init__(self, tasks: Sequence[DSTask], forget: Sequence[str] = (), skill: float = 1.0, seed: int = 0):
        if isinstance(skill, bool) or not isinstance(skill, (int, float)) or not 0 <= skill <= 1:
            raise InputError(f"ScriptedDSPolicy: skill must be a number in [0, 1], got {skill!r}")
        self.tasks = list(tasks)
        self.forget = tuple(forget)
        self.skill = skill
        self.seed, self.rng = seed, random.Random(seed)

    def respond(self, conversations: list[list[dict]], roles: list[str],
                seeds: Sequence[int | None] | None = None) -> list[str]:
        """With the driver's per-action `seeds`, each action's coin flips depend on its seed alone, not
        on the order in which concurrent episodes happen to ask (reproducible under async play)."""
        rngs = action_rngs(self.seed, self.rng, seeds, len(conversations))
        return [self._act(conv, role, rng) for conv, role, rng in zip(conversations, roles, rngs)]

    def _task(self, conversation: list[dict]) -> DSTask:
        user = next((m["content"] for m in conversation if m["role"] == "user"), "")
        for t in self.tasks:
            if t.description and user.startswith(t.description):
                return t
        raise KeyError("ScriptedDSPolicy does not know the task in this conversation")

    def _act(self, conversation: list[dict], role: str, rng: random.Random) -> str:
        if conversation[-1]["role"] == "user" and conversation[-1]["content"].startswith("Output of your code"):
            return _DONE[role]
        task = self._task(conversation)
        if role == "data_engineer":
            slip = (rng.choice(ENGINEER_FILES),) if rng.random() >= self.skill else ()
            code = engineer_code(task, self.forget + slip)
        elif role == "modeler":
            code = modeler_code(task)
        elif role == "analyst":
            code = analyst_code(task)
        else:
            raise ValueError(f"ScriptedDSPolicy has no script for role {role!r}")
        return f"Here is my code.\n```python\n{code}\n```"


def for_env(env, forget: Sequence[str] = (), skill: float = 1.0, seed: int = 0) -> ScriptedDSPolicy:
    """The scripted team for a DSBench env (it plays that env's tasks)."""
    return ScriptedDSPolicy(env.unwrapped.scenario.task_list, forget=forget, skill=skill, seed=seed)
