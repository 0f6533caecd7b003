"""The review server over real runs, through HTTP: pages, filters, verdicts, and each safety property."""
from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request

import pytest
from starlette.testclient import TestClient

from mappa_train.review.server import prepare
from mappa_train.review.transcripts import load

HOST = "127.0.0.1:8765"
SAME = {"origin": f"http://{HOST}"}


def client(runs, db=None, host="127.0.0.1", token=None) -> TestClient:
    served = prepare([runs], db, host, 8765, token, "ann")
    return TestClient(served.app, base_url=f"http://{HOST}", follow_redirects=False)


def ids(html: str) -> list[int]:
    return [int(i) for i in re.findall(r'<a href="/episode/(\d+)">', html)]


def test_the_list_shows_every_episode_and_the_filters_narrow_it(runs):
    c, index = client(runs), load([runs])
    assert ids(c.get("/").text) == [e.id for e in index.episodes]
    wrong = ids(c.get("/?outcome=wrong").text)
    assert wrong == [e.id for e in index.episodes if e.correct is False]
    assert 0 < len(wrong) < len(index.episodes)
    assert ids(c.get("/?step=3").text) == [e.id for e in index.episodes if e.step == 3]
    low = ids(c.get("/?role=step_2&max=3").text)
    assert low == [e.id for e in index.episodes if any(a.role == "step_2" and a.coach_score <= 3 for a in e.actions)]
    flagged = ids(c.get("/?disagree=1").text)
    assert flagged == [e.id for e in index.episodes if e.disagreements]
    assert flagged


def test_an_episode_page_shows_each_turn_in_order(runs):
    c, index = client(runs), load([runs])
    e = next(e for e in index.episodes if any(a.tool_results for a in e.actions))
    html = c.get(f"/episode/{e.id}").text
    positions = [html.index(f'id="a{k}"') for k in range(len(e.actions))]
    assert positions == sorted(positions)
    a = next(a for a in e.actions if a.tool_results)
    assert a.tool_results[0]["stdout"] in html  # the sandbox's output
    assert "prompt as the agent saw it" in html
    assert f"reward trained on: {a.reward}" in html


def test_hostile_agent_text_renders_as_text(runs):
    c = client(runs)
    e = next(e for e in load([runs]).episodes if e.source.endswith("hostile/transcripts.jsonl"))
    html = c.get(f"/episode/{e.id}").text
    assert "<script>document.title" not in html
    assert "&lt;script&gt;document.title=&#34;pwned&#34;&lt;/script&gt;" in html
    assert "<img src=x" not in html
    assert "{{ 7*7 }}" in html  # agent text is never a template
    r = c.get("/")
    assert "script-src" not in r.headers["content-security-policy"]  # default-src 'none': no script runs at all
    assert "default-src 'none'" in r.headers["content-security-policy"]


def test_a_verdict_is_recorded_and_shown(runs):
    c = client(runs)
    r = c.post("/episode/0/verdict", data={"action": "1", "score": "3.5", "right": "0", "note": "<b>wrong sum</b>",
                                           "reviewer": "ann"}, headers=SAME)
    assert (r.status_code, r.headers["location"]) == (303, "/episode/0#a1")
    html = c.get("/episode/0").text
    assert "score 3.5" in html
    assert "&lt;b&gt;wrong sum&lt;/b&gt;" in html
    assert (runs / "review.sqlite").is_file()
    listed = c.get("/").text
    assert re.search(r'<a href="/episode/0">0</a>.*?<td class="num">1</td></tr>', listed, re.S)
    assert 'href="/episode/0#a1"' not in c.get("/queue").text  # reviewed: out of the queue


@pytest.mark.parametrize(("form", "status"), [
    ({"action": "99", "score": "5", "reviewer": "ann"}, 400),
    ({"action": "0", "score": "eleven", "reviewer": "ann"}, 400),
    ({"action": "0", "score": "nan", "reviewer": "ann"}, 400),
    ({"action": "0", "reviewer": "ann"}, 400),
    ({"action": "0", "score": "5", "reviewer": ""}, 400),
    ({"action": "0", "score": "5", "reviewer": "ann", "note": "x" * 20_000}, 413),
    ({"action": "0", "score": "5", "reviewer": "a\r\nb"}, 400),
    ({"action": "0", "score": "5", "reviewer": "a" * 101}, 400),
])
def test_a_bad_verdict_is_refused_and_nothing_is_stored(runs, form, status):
    c = client(runs)
    assert c.post("/episode/0/verdict", data=form, headers=SAME).status_code == status
    assert "verdict</b>" not in c.get("/episode/0").text


def test_a_verdict_that_is_not_a_form_is_refused_by_its_content_type(runs):
    c = client(runs)
    r = c.post("/episode/0/verdict", json={"action": 0, "score": 5, "reviewer": "ann"}, headers=SAME)
    assert (r.status_code, r.text) == (415, "a verdict is a form post (application/x-www-form-urlencoded), "
                                            "got 'application/json'")
    r = c.post("/episode/0/verdict", data={"action": "9" * 5000, "score": "5", "reviewer": "ann"}, headers=SAME)
    assert r.status_code == 400
    assert len(r.text) < 100


def test_a_database_locked_by_another_program_is_a_503_and_nothing_half_done(runs):
    import sqlite3

    c = client(runs)
    other = sqlite3.connect(runs / "review.sqlite", isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # a second program in the middle of a write
    try:
        r = c.post("/episode/0/verdict", data={"action": "0", "score": "5", "reviewer": "ann"}, headers=SAME)
        assert r.status_code == 503
        assert "is locked by another program" in r.text
        assert "\n" not in r.text.strip()
        assert c.get("/episode/0").status_code == 503  # reads wait too, and say so
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert c.post("/episode/0/verdict", data={"action": "0", "score": "5", "reviewer": "ann"},
                  headers=SAME).status_code == 303
    assert sqlite3.connect(runs / "review.sqlite").execute("SELECT COUNT(*) FROM verdicts").fetchone() == (1,)


def test_a_tool_result_missing_fields_still_renders(tmp_path):
    import json

    record = {"env_id": "Chain-v0", "task_id": "t", "task": "Start at 1.", "outcome": {"correct": False},
              "actions": [{"role": "adder", "text": "x", "tool_results": [{}, {"stdout": None, "ok": False}]}]}
    (tmp_path / "transcripts.jsonl").write_text(json.dumps(record) + "\n")
    html = client(tmp_path).get("/episode/0")
    assert html.status_code == 200
    assert "sandbox output 2\n <span class=\"tag bad\">failed</span>" in html.text


def test_no_path_from_the_browser_reaches_a_file(runs):
    c = client(runs)
    for path in ("/episode/..%2F..%2Fetc%2Fpasswd", "/episode/-1", "/episode/99999", "/../../etc/passwd",
                 "/static/../../review.sqlite", "/episode/0/../../../etc/passwd"):
        r = c.get(path)
        assert r.status_code == 404, path
        assert "root:" not in r.text


def test_requests_from_other_origins_and_hosts_are_refused(runs):
    c = client(runs)
    assert c.get("/", headers={"origin": "http://evil.example"}).status_code == 403
    assert c.get("/", headers={"host": "evil.example:8765"}).status_code == 403  # DNS rebinding
    assert c.get("/", headers={"sec-fetch-site": "cross-site"}).status_code == 403
    form = {"action": "0", "score": "5", "reviewer": "ann"}
    assert c.post("/episode/0/verdict", data=form, headers={"origin": "http://evil.example"}).status_code == 403
    assert c.post("/episode/0/verdict", data=form).status_code == 403  # neither Origin nor Referer
    assert c.post("/episode/0/verdict", data=form, headers={"referer": f"http://{HOST}/episode/0"}).status_code == 303


def test_a_server_on_another_address_needs_its_token(runs):
    served = prepare([runs], None, "0.0.0.0", 8765, None, "ann")
    token = served.url.split("token=")[1]
    assert len(token) >= 24
    c = TestClient(served.app, base_url="http://10.1.2.3:8765", follow_redirects=False)
    assert c.get("/").status_code == 403
    assert c.get("/?token=wrong").status_code == 403
    r = c.get(f"/?token={token}")
    assert r.status_code == 200
    assert "HttpOnly" in r.headers["set-cookie"]
    assert c.get("/queue").status_code == 200  # the cookie carries it from then on


def test_an_unwritable_database_serves_read_only(runs):
    db = runs / "review.sqlite"
    client(runs).post("/episode/0/verdict", data={"action": "0", "score": "6", "reviewer": "ann"}, headers=SAME)
    os.chmod(db, 0o444)
    c = client(runs)
    html = c.get("/episode/0").text
    assert 'id="read-only"' in html
    assert "<form method=\"post\"" not in html
    assert "score 6.0" in html  # verdicts already given are still shown
    r = c.post("/episode/0/verdict", data={"action": "0", "score": "1", "reviewer": "ann"}, headers=SAME)
    assert r.status_code == 403


def test_the_plots_page_draws_scores_per_role_and_the_run_curves(runs):
    html = client(runs).get("/plots").text
    assert html.count("<svg") == 5  # one histogram per role (step_1..step_4), one curve per metrics.jsonl
    assert "<polyline" in html
    assert "accuracy" in html


def test_mappa_review_serves_on_loopback_and_refuses_bad_input_in_one_line(runs, tmp_path):
    missing = subprocess.run([sys.executable, "-m", "mappa_cli", "review", str(tmp_path / "nothing")],
                             capture_output=True, text=True, timeout=120)
    assert (missing.returncode, missing.stderr.count("\n")) == (2, 1)
    assert "does not exist" in missing.stderr
    proc = subprocess.Popen([sys.executable, "-m", "mappa_cli", "review", str(runs), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
        assert lines[0].startswith(f"{len(load([runs]).episodes)} episodes from {runs}; verdicts -> ")
        url = lines[1].split()[1]
        assert url.startswith("http://127.0.0.1:")
        for _ in range(100):  # the line is printed just before uvicorn binds
            try:
                with urllib.request.urlopen(url, timeout=5) as page:
                    assert "mappa review" in page.read().decode()
                break
            except OSError:
                time.sleep(0.1)
        else:
            raise AssertionError(f"nothing served at {url}")
    finally:
        proc.terminate()
        proc.wait(30)


def test_without_the_review_extra_the_command_says_how_to_install_it(monkeypatch, capsys, tmp_path):
    from mappa_cli.main import main

    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed
    assert main(["review", str(tmp_path)]) == 1
    assert capsys.readouterr().err.strip() == ("mappa review: the review server needs uvicorn, which is not "
                                               "installed: pip install 'mappa[review]'")
