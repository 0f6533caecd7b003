"""A coach endpoint that answers something other than the OpenAI API (an HTML page with status 200) is
named as such: content type, first bytes, the endpoint that was expected (issue 27). Against a real
HTTP server on loopback."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mappa_envs.coach import CoachRequest, LLMCoach
from mappa_envs.coach.llm import CoachError

ROOT = Path(__file__).resolve().parents[3]
PAGE = b"<!DOCTYPE html><html><head><title>Welcome to nginx!</title></head><body>It works.</body></html>"


class WebPage(BaseHTTPRequestHandler):
    """What a wrong base_url often reaches: a web server's page, whatever the request."""

    hits = 0

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        type(self).hits += 1
        self.send_response(200)
        self.send_header("content-type", "text/html; charset=utf-8")
        self.send_header("content-length", str(len(PAGE)))
        self.end_headers()
        self.wfile.write(PAGE)

    def log_message(self, *args):
        pass


@pytest.fixture
def page():
    server = ThreadingHTTPServer(("127.0.0.1", 0), WebPage)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    WebPage.hits = 0
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def coach(url: str, **overrides) -> LLMCoach:
    return LLMCoach(model="judge", base_url=url, api_key_env=None, max_retries=2, backoff_s=0.001, **overrides)


REQUEST = CoachRequest(env_id="MathChat-v0", role="verifier", role_duties="check", task="1+1?", action="2")


def test_an_html_page_is_named_not_an_attribute_error(page):
    verdict = coach(page).score(REQUEST)
    assert not verdict.ok
    assert verdict.score is None
    assert verdict.error.startswith(f"{page}/chat/completions answered HTTP 200 with text/html; charset=utf-8, "
                                    "not an OpenAI chat completion (JSON); it began '<!DOCTYPE html><html>")
    assert verdict.error.endswith(f"Expected an OpenAI-compatible API at {page}/chat/completions: check base_url "
                                  "(it usually ends in /v1)")
    assert WebPage.hits == 1  # no retry: another request gets the same page


def test_async_scoring_says_the_same(page):
    verdict = asyncio.run(coach(page).ascore(REQUEST))
    assert "with text/html; charset=utf-8, not an OpenAI chat completion" in verdict.error


def test_on_failure_raise_carries_the_message(page):
    with pytest.raises(CoachError, match="answered HTTP 200 with text/html"):
        coach(page, on_failure="raise").score(REQUEST)


def test_mappa_eval_with_an_html_coach_fails_and_its_row_says_so(page, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, "-m", "mappa_cli", "eval", "--team", "scripted:0.5", "--name", "noisy", "--sets",
         "synthetic:2", "--coach", f"judge@{page}", "--coach-set", "api_key_env=none", "--out", str(tmp_path),
         "--no-plots", "--no-progress", "--preimport", ""], capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("mappa eval: every coach call failed (last error: ")
    assert "answered HTTP 200 with text/html" in last
    actions = sum(len(json.loads(line)["actions"]) for line in (tmp_path / "noisy" / "transcripts.jsonl").open())
    row = next(line for line in (tmp_path / "leaderboard.md").read_text().splitlines() if "| noisy |" in line)
    assert f"✗ every coach call failed ({actions})" in row
