"""DSBench pays for models, not artefacts (issue 21 §4), through the real env and real sandboxes, both backends:
constant submissions are never paid; a role whose part is done earns more for its closing summary than for
padding code; model.pkl must load and predict; the writer answers for a file it broke or deleted, whatever
mtime it sets or however many files it floods the workspace with; the Engineer is not blamed for it."""
from __future__ import annotations

import pytest

from mappa_envs.dsbench.env import DSBenchEnv
from mappa_envs.dsbench.scripted import analyst_code, engineer_code, modeler_code
from mappa_envs.sandbox import make_sandbox
from tests.sandbox_helpers import require_docker

BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker)]
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module", params=BACKENDS)
def sandbox(request):
    if request.param == "docker":
        require_docker()
    sb = make_sandbox(request.param, pool_size=1, timeout_s=60, memory_mb=1024, max_file_mb=64, workspace_mb=256)
    yield sb
    sb.close()


def cell(code: str) -> str:
    return f"```python\n{code}\n```"


class Episode:
    """One DSBench episode on a task, stepped by hand: `.step(text)` returns the acting role's reward."""

    def __init__(self, sandbox, task_id: str, max_actions: int = 2):
        self.env = DSBenchEnv(sandbox=sandbox, max_actions=max_actions, limits={"cell_timeout_s": 60})
        self.env.reset(options={"task_id": task_id})
        self.task = next(t for t in self.env.scenario.task_list if t.id == task_id)

    def step(self, text: str) -> float:
        self.env.step(text)
        return self.env.last_action.reward

    @property
    def checks(self) -> dict:
        return self.env.last_action.checks

    def close(self) -> None:
        self.env.close()


@pytest.fixture
def play(sandbox):
    opened = []

    def start(task_id: str = "wine-cultivar", max_actions: int = 2) -> Episode:
        opened.append(Episode(sandbox, task_id, max_actions))
        return opened[-1]

    yield start
    for e in opened:
        e.close()


CONSTANT = ("import pandas as pd\nTARGET = {target!r}\nsub = pd.read_csv('test.csv')[[{id!r}]]\nsub[TARGET] = {value}\n"
            "sub.to_csv('submission.csv', index=False)\nprint(sub.shape)")


@pytest.mark.parametrize(("task_id", "value"), [
    ("breast-cancer-diagnosis", "'M'"), ("breast-cancer-diagnosis", "'B'"),  # binary F1: all-positive/negative
    ("playground-store-sales", "float(pd.read_csv('train.csv')[TARGET].median())"),  # SMAPE: the median
    ("wine-cultivar", "pd.read_csv('train.csv')[TARGET].mode()[0]"),
])
def test_a_constant_submission_is_never_correct_nor_beats_the_baseline(play, task_id, value):
    ep = play(task_id, max_actions=1)
    target = ep.task.target_columns[0]
    ep.step("Nothing to engineer.")
    ep.step("Nothing to model.")
    ep.step(cell(CONSTANT.format(id=ep.task.id_column, target=target, value=value)))
    assert ep.checks["submission_valid"] is True
    assert ep.checks["beats_baseline"] is False
    outcome = ep.env.outcome
    assert outcome.correct is False
    assert outcome.score == 0.0
    assert outcome.details["constant"] is True


def test_the_scripted_model_is_paid(play):
    ep = play("breast-cancer-diagnosis", max_actions=1)
    for code in (engineer_code(ep.task), modeler_code(ep.task), analyst_code(ep.task)):
        ep.step(cell(code))
    assert ep.checks["beats_baseline"] is True
    assert ep.env.outcome.correct is True
    assert ep.env.outcome.details["informative"] is True


SUMMARY = "Done: my part is finished and its files are written."
ROLES = ("data_engineer", "modeler", "analyst")


@pytest.mark.parametrize("role", ROLES)
def test_closing_summary_beats_padding_once_the_part_is_done(play, role):
    rewards = {}
    for ending in ("summary", "padding"):
        ep = play(max_actions=3)
        codes = dict(zip(ROLES, (engineer_code(ep.task), modeler_code(ep.task), analyst_code(ep.task))))
        for r in ROLES:
            ep.step(cell(codes[r]))
            if r == role:
                rewards[ending] = ep.step(SUMMARY if ending == "summary" else cell("print('done')"))
                assert ep.checks["closing_report"] is (ending == "summary")
                break
            ep.step(SUMMARY)
    assert rewards["summary"] > rewards["padding"], rewards


DUMMY = ("import pickle, pandas as pd\nfrom sklearn.dummy import DummyClassifier\n"
         "X = pd.read_csv('X_train.csv').drop(columns=[{id!r}])\ny = pd.read_csv('y_train.csv').iloc[:, 0]\n"
         "pickle.dump(DummyClassifier().fit(X, y), open('model.pkl', 'wb'))\nprint('saved')")


def test_a_junk_or_constant_model_earns_less_than_a_fitted_one_and_excuses_the_analyst(play):
    rewards = {}
    for kind in ("fitted", "one-byte", "string", "constant"):
        ep = play(max_actions=1)
        ep.step(cell(engineer_code(ep.task)))
        code = {"fitted": modeler_code(ep.task), "one-byte": "open('model.pkl', 'wb').write(b'x')\nprint('saved')",
                "string": "import pickle\npickle.dump('a model', open('model.pkl', 'wb'))\nprint('saved')",
                "constant": DUMMY.format(id=ep.task.id_column)}[kind]
        rewards[kind] = ep.step(cell(code))
        assert ep.checks["expected_files_present"] is True
        assert ep.checks["model_works"] is (kind == "fitted")
        ep.step(cell(analyst_code(ep.task)))
        assert ep.checks["inputs_ready"] is (kind == "fitted")  # a broken model is not the Analyst's failure
    assert rewards["fitted"] > rewards["one-byte"]
    assert rewards["fitted"] > rewards["string"]
    assert rewards["fitted"] > rewards["constant"]


def test_a_pickle_that_deletes_a_file_when_loaded_is_the_modelers_doing(play):
    ep = play(max_actions=1)
    ep.step(cell(engineer_code(ep.task)))
    evil = ("import pickle, os\nclass Evil:\n    def __reduce__(self):\n"
            "        return (os.remove, ('X_test.csv',))\npickle.dump(Evil(), open('model.pkl', 'wb'))\n"
            "print('saved')")
    ep.step(cell(evil))
    assert ep.checks["model_works"] is False
    assert ep.checks["others_files_intact"] is False
    assert ep.env.episode.file_history["X_test.csv"][-1] == {"role": "modeler", "change": "deleted"}
    ep.step("Nothing I can do.")
    assert ep.env.outcome.details["failure"]["root_cause"]["owner"] == "modeler"


# every value zeroed, digit for digit, in place; then the old mtime put back: size and mtime are unchanged
REWRITE_IN_PLACE = """import os
st = os.stat('X_test.csv')
lines = open('X_test.csv', 'rb').read().split(b'\\n')
bad = b'\\n'.join([lines[0]] + [b','.join(b'0' * len(f) for f in ln.split(b',')) for ln in lines[1:]])
open('X_test.csv', 'r+b').write(bad)
try:  # allowed where kernels share a uid; with a uid per kernel only the Engineer may set its file's times
    os.utime('X_test.csv', ns=(st.st_atime_ns, st.st_mtime_ns))
except PermissionError:
    pass
assert os.stat('X_test.csv').st_size == st.st_size"""


@pytest.mark.parametrize("damage", ["delete", "empty", "rewrite-same-size-and-mtime"])
def test_the_modeler_that_breaks_the_engineers_file_is_blamed_and_scored_down(play, damage):
    code = {
        "delete": "import os\nos.remove('X_test.csv')",
        "empty": "open('X_test.csv', 'w').close()",
        # the same size and the old mtime: only the inode/ctime/hash fingerprint can tell
        "rewrite-same-size-and-mtime": REWRITE_IN_PLACE,
    }[damage]
    rewards = {}
    for variant in ("honest", damage):
        ep = play(max_actions=1)
        ep.step(cell(engineer_code(ep.task)))
        rewards[variant] = ep.step(cell(modeler_code(ep.task) + ("" if variant == "honest" else "\n" + code)))
        if variant == "honest":
            continue
        assert ep.checks["others_files_intact"] is False
        history = ep.env.episode.file_history["X_test.csv"]
        assert history[-1]["role"] == "modeler"
        assert ep.env.episode.file_owners.get("X_test.csv", "modeler") == "modeler"
        ep.step(cell(analyst_code(ep.task)))
        if damage == "rewrite-same-size-and-mtime":  # still a table of the right shape: the Analyst can work
            continue
        assert ep.checks["inputs_ready"] is False  # the Analyst is excused
        failure = ep.env.outcome.details["failure"]
        assert failure["root_cause"]["owner"] == "modeler", failure
        assert failure["root_cause"]["file"] == "X_test.csv"
        if damage == "delete":
            assert ep.env.outcome.details["missing_files"]["X_test.csv"] == "modeler"
    assert rewards[damage] < rewards["honest"], rewards


def test_a_flooded_workspace_never_reads_as_deletions(play):
    ep = play(max_actions=1)
    ep.step(cell(engineer_code(ep.task)))
    flood = "import os\nos.makedirs('junk', exist_ok=True)\nfor i in range(20_000):\n    open(f'junk/{i}', 'w').close()"
    ep.step(cell(modeler_code(ep.task) + "\n" + flood))
    assert "others_files_intact" not in ep.checks
    history = ep.env.episode.file_history
    for f in ("train.csv", "test.csv", "X_train.csv", "y_train.csv", "X_test.csv"):
        assert all(h["change"] != "deleted" for h in history[f]), (f, history[f])
        assert f in ep.env.episode.file_owners
    ep.step(cell(analyst_code(ep.task)))
    assert ep.checks["inputs_ready"] is True  # the Analyst is not excused by a flood
    assert ep.env.outcome.correct is True


def test_a_flood_does_not_hide_a_deletion(play):
    ep = play(max_actions=1)
    ep.step(cell(engineer_code(ep.task)))
    flood = ("import os\nos.makedirs('junk', exist_ok=True)\nfor i in range(20_000):\n"
             "    open(f'junk/{i}', 'w').close()\nos.remove('X_test.csv')")
    ep.step(cell(modeler_code(ep.task) + "\n" + flood))
    assert ep.checks["others_files_intact"] is False
    assert "X_test.csv" not in ep.env.episode.file_owners
