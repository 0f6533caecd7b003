"""`mappa eval --spec PATH`: a team spec the user wrote plays the eval sets (Team-v0 on the sets' tasks)."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.user_specs import write_specs

ROOT = Path(__file__).resolve().parents[3]


def mappa(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "mappa_cli.main", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=600, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.parametrize("which, roles", [(0, {"coder", "reasoner", "judge"}), (1, {"solver", "checker"})])
def test_a_user_spec_plays_the_sets_with_its_own_roles(tmp_path, which, roles):
    spec = write_specs(tmp_path)[which]
    done = mappa("eval", "--team", "scripted:0.7", "--spec", spec, "--sets", "synthetic:3", "--k", "2",
                 "--out", "out", "--no-progress", "--no-plots", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / "out/scripted_0.7/transcripts.jsonl").open()]
    assert len(records) == 6
    assert {r["env_id"] for r in records} == {("FanIn-v0", "Loop-v0")[which]}
    assert {a["role"] for r in records for a in r["actions"]} == roles
    run = json.loads((tmp_path / "out/scripted_0.7/run.json").read_text())
    assert spec in json.dumps(run)


def test_bad_spec_and_foreign_sets_are_one_line_errors(tmp_path):
    fan_in, _ = write_specs(tmp_path)
    missing = mappa("eval", "--team", "scripted", "--spec", "nope.yaml", "--sets", "synthetic:2", cwd=tmp_path)
    foreign = mappa("eval", "--team", "scripted", "--spec", fan_in, "--sets", "dsbench", cwd=tmp_path)
    for done, says in [(missing, "nope.yaml"), (foreign, "cannot play dsbench")]:
        assert done.returncode != 0
        last = done.stderr.strip().splitlines()[-1]
        assert says in last
        assert "Traceback" not in done.stderr
    assert not (tmp_path / "runs").exists()
