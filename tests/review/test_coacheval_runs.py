"""A real `mappa coach-eval` folder under review: its episodes with the known fault, every coach's score on
each action, and the disagreements between coaches and against the fault label, read and served."""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from mappa_envs.coach_eval.blame import faults_of
from mappa_train.review.server import prepare
from mappa_train.review.transcripts import COACHES_APART, HIGH, load

COACHES = ["rule", "rule:noise=1"]  # the rule coach and its mirror image: wrong on every action, by design
HOST = "127.0.0.1:8765"


@pytest.fixture(scope="module")
def coach_eval(tmp_path_factory) -> Path:
    from mappa_cli.main import main

    out = tmp_path_factory.mktemp("coach-eval") / "run"
    argv = ["coach-eval", "--env", "Chain-v0", "--num-tasks", "1", "--probe-tasks", "1", "--no-backprop",
            "--out", str(out)]
    assert main([*argv, *(w for c in COACHES for w in ("--coach", c))]) == 0
    return out


def raw(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "transcripts.jsonl").read_text().splitlines()]


def test_a_coach_eval_folder_lists_its_episodes_with_the_fault_and_every_coachs_score(coach_eval):
    index, rows = load([coach_eval]), raw(coach_eval)
    assert len(index.episodes) == len(rows) == json.loads((coach_eval / "results.json").read_text())["episodes"]
    assert {e.env_id for e in index.episodes} == {"Chain-v0"}
    faults = {e.fault for e in index.episodes}
    assert "none" in faults
    assert any(f.startswith("probe:") for f in faults)
    assert len(faults) > 3
    culprits = faults_of("Chain-v0")
    for e in index.episodes:
        probe = e.fault.startswith("probe:")
        assert e.faulty_role == (e.fault.split(":")[2] if probe else culprits[e.fault] or "")
        assert bool(e.faulty_role) == (e.fault != "none")
        assert e.actions
        assert e.correct is not None
        for a in e.actions:
            assert list(a.coaches) == COACHES
            rule, mirror = (a.coaches[c]["score"] for c in COACHES)
            assert a.coach_score == rule
            assert mirror == 10.0 - rule
            assert a.faulty is not None
    faulty = [(e, a) for e in index.episodes for a in e.actions if a.faulty]
    assert faulty
    assert all(a.role == e.faulty_role for e, a in faulty)


def test_disagreements_follow_the_coaches_and_the_fault_label(coach_eval):
    index = load([coach_eval])
    actions = [a for e in index.episodes for a in e.actions]
    for a in actions:
        scores = [v["score"] for v in a.coaches.values()]
        assert ("coaches" in a.disagreements) == (max(scores) - min(scores) >= COACHES_APART)
        assert ("fault" in a.disagreements) == (a.faulty and max(scores) >= HIGH)
    assert any("fault" in a.disagreements for a in actions)
    assert all("fault" in a.disagreements for a in actions if a.faulty)  # the mirror pays every fault
    assert any("coaches" not in a.disagreements for a in actions)  # a score of 5 is its own mirror


def test_the_list_filters_by_kind_of_disagreement_and_the_episode_shows_every_coach(coach_eval, tmp_path):
    served = prepare([coach_eval], tmp_path / "verdicts.sqlite", "127.0.0.1", 8765, None, "ann")
    c = TestClient(served.app, base_url=f"http://{HOST}", follow_redirects=False)
    index = load([coach_eval])

    def listed(query: str) -> list[int]:
        html = c.get(f"/?{query}").text
        return [int(i) for i in re.findall(r'<a href="/episode/(\d+)">', html)]

    for kind in ("fault", "coaches"):
        want = [e.id for e in index.episodes if any(kind in a.disagreements for a in e.actions)]
        assert want
        assert listed(f"disagree={kind}") == want
    fault_free = [e.id for e in index.episodes if e.fault == "none"]
    assert fault_free
    assert not set(listed("disagree=fault")) & set(fault_free)
    assert listed("disagree=1") == [e.id for e in index.episodes if e.disagreements]
    assert listed("disagree=1&env=Chain-v0&role=step_1")
    e = next(e for e in index.episodes if any("fault" in a.disagreements for a in e.actions))
    html = c.get(f"/episode/{e.id}").text
    assert f'fault <b id="fault">{e.fault}</b> (known culprit: {e.faulty_role})' in html
    assert html.count("disagrees: fault") == sum("fault" in a.disagreements for a in e.actions)
    for a in e.actions:
        for spec in COACHES:
            assert f"<td>{spec}</td><td class=\"num\">{a.coaches[spec]['score']}</td>" in html


def test_a_hand_made_record_with_odd_coach_verdicts_renders_escaped(tmp_path):
    row = {"env_id": "Chain-v0", "task_id": "t", "fault": "<i>f</i>", "faulty_role": "step_1", "outcome": {},
           "actions": [{"role": "step_1", "text": "x", "faulty": True,
                        "coaches": {"<b>judge</b>": {}, "rule": {"score": "high", "error": "<script>x</script>"},
                                    "lazy": {"score": 9}, "junk": 3}}]}
    (tmp_path / "transcripts.jsonl").write_text(json.dumps(row) + "\n")
    a = load([tmp_path]).episodes[0].actions[0]
    assert list(a.coaches) == ["<b>judge</b>", "rule", "lazy"]
    assert a.coach_score is None
    assert a.disagreements == ["fault"]  # lazy paid the known fault; the unscored ones say nothing
    served = prepare([tmp_path], tmp_path / "v.sqlite", "127.0.0.1", 8765, None, "ann")
    html = TestClient(served.app, base_url=f"http://{HOST}").get("/episode/0").text
    assert "&lt;b&gt;judge&lt;/b&gt;" in html
    assert "&lt;script&gt;x&lt;/script&gt;" in html
    assert "&lt;i&gt;f&lt;/i&gt;" in html
    assert "<script>" not in html
