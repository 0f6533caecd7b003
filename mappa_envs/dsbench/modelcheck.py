"""Does the Modeler's model.pkl load and predict? Checked inside the sandbox, never on the host.

Unpickling runs code, so the check is a cell in a kernel of its own (`KERNEL`, restarted before every
check so nothing a previous pickle did survives): it loads model.pkl, finds a predictor (the object
itself, or one inside a dict/list/tuple up to three levels deep, as teams bundle per-target models),
and predicts on the first `ROWS` rows of X_train.csv (what the Modeler fitted on, so an X_test.csv the
Engineer got wrong is never the Modeler's failure; else X_test.csv) without the id column. The verdict
is one JSON line behind a random token; anything else (no line, a crash, a timeout) is a failed check.
A 1-byte file, a pickled string, an estimator that was never fitted, or one that predicts the same for
every row (a DummyClassifier: a constant, not a model) fails; a fitted model passes.

Not defended: a pickle that runs code at load time can read the cell's source from its frames and
print a forged verdict. That takes a crafted exploit, not a shortcut a policy stumbles into; the
submission it leads to is scored on the hidden answers all the same.
"""
from __future__ import annotations

import json
import secrets

from mappa_envs.core.untrusted import one_line

KERNEL = "model_check"
ROWS = 200
TIMEOUT_S = 60.0

_CODE = '''
import json, pickle
import pandas as pd


def _mappa_find(obj, depth=0):
    if callable(getattr(obj, "predict", None)) or callable(getattr(obj, "predict_proba", None)):
        return obj
    if depth < 3:
        items = obj.values() if isinstance(obj, dict) else obj if isinstance(obj, (list, tuple)) else ()
        for item in list(items)[:100]:
            found = _mappa_find(item, depth + 1)
            if found is not None:
                return found
    return None


def _mappa_check():
    try:
        with open("model.pkl", "rb") as f:
            model = pickle.load(f)
    except BaseException as e:
        return f"model.pkl does not load: {type(e).__name__}: {e}"
    est = _mappa_find(model)
    if est is None:
        return f"model.pkl holds no model: a {type(model).__name__} with no predict() or predict_proba() in it"
    X, name = None, None
    for name in ("X_train.csv", "X_test.csv"):
        try:
            X = pd.read_csv(name, nrows=ROWS).drop(columns=[ID], errors="ignore")
            break
        except Exception:
            X = None
    if X is None:
        return "there is no readable X_test.csv or X_train.csv to predict on"
    wanted = getattr(est, "feature_names_in_", None)
    if wanted is not None and set(wanted) <= set(X.columns):
        X = X[list(wanted)]
    try:
        pred = est.predict(X) if callable(getattr(est, "predict", None)) else est.predict_proba(X)
        n = len(pred)
    except BaseException as e:
        return f"the model in model.pkl does not predict on {name}: {type(e).__name__}: {e}"
    if n != len(X):
        return f"the model predicted {n} values for {len(X)} rows of {name}"
    try:
        rows = [repr(row) for row in (pred.tolist() if hasattr(pred, "tolist") else list(pred))]
    except BaseException:
        rows = []
    if len(rows) > 1 and len(set(rows)) == 1:
        return f"the model predicts the same for all {n} rows of {name}: a constant is not a model"
    return None


print(TOKEN + json.dumps({"problem": _mappa_check()}))
'''


def model_problem(session, id_column: str, timeout: float = TIMEOUT_S) -> str | None:
    """None when model.pkl loads and predicts in the sandbox; else what is wrong, on one line."""
    token = "MAPPA-MODEL-CHECK-" + secrets.token_hex(12) + " "
    code = _CODE.replace("TOKEN", repr(token)).replace("ROWS", str(ROWS)).replace("[ID]", f"[{id_column!r}]")
    try:
        session.restart(KERNEL)
        r = session.run(code, timeout=timeout, kernel=KERNEL)
    except Exception as e:  # the sandbox could not run the check: the model is not shown to work
        return f"the model check could not run: {type(e).__name__}: {one_line(e)[:200]}"
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(token)]
    if not r.ok or len(lines) != 1:
        why = r.error or "it printed no verdict"
        return f"the model check failed while loading or running model.pkl: {one_line(why)[:300]}"
    try:
        problem = json.loads(lines[0][len(token):])["problem"]
    except (ValueError, KeyError, TypeError):
        return "the model check printed a malformed verdict"
    return None if problem is None else one_line(str(problem))[:300]


__all__ = ["KERNEL", "ROWS", "model_problem"]
