"""make_coach: one spec vocabulary and typed key=value settings, checked over real HTTP (tests/openai_stub.py)."""
from __future__ import annotations

import json
from urllib.parse import urlsplit

import pytest

from mappa_cli.main import main
from mappa_envs.coach import CachedCoach, CoachConfigError, CoachRequest, LLMCoach, RuleCoach, make_coach
from tests.openai_stub import StubServer

pytestmark = pytest.mark.unit

FAST = ["--sets", "synthetic:1", "--no-plots", "--preimport", "", "--no-progress"]


@pytest.fixture
def stub():
    with StubServer(reply='{"rationale": "checked the sum", "score": 8}') as server:
        yield server


def request() -> CoachRequest:
    return CoachRequest(env_id="MathChat-v0", role="verifier", role_duties="Check the work.", task="What is 1 + 1?",
                        action="\\boxed{2}", ground_truth="2")


def test_model_at_url_with_typed_settings(stub):
    coach = make_coach(f"judge@{stub.url}", {"structured_output": "true", "max_tokens": "256", "rpm": "none",
                                             "temperature": "0.5", "api_key_env": "none"})
    score = coach.score(request())
    body = stub.requests[0]
    assert (body["model"], body["max_tokens"], body["temperature"]) == ("judge", 256, 0.5)
    assert body["response_format"]["json_schema"]["name"] == "coach_verdict"
    assert (score.ok, score.score, score.rationale) == (True, 8.0, "checked the sum")


def test_vllm_local_on_another_port_and_with_a_model(stub):
    port = urlsplit(stub.url).port
    coach = make_coach(f"vllm-local:{port}", {"model": "served"})
    assert coach.config.base_url == f"http://127.0.0.1:{port}/v1"
    assert coach.config.structured_output
    assert coach.score(request()).score == 8.0
    assert stub.requests[0]["model"] == "served"
    named = make_coach("vllm-local:qwen3-0.6b", {"base_url": stub.url})
    assert named.config.model == "qwen3-0.6b"
    assert named.score(request()).ok


def test_dict_llm_and_preset_specs(stub, monkeypatch):
    monkeypatch.setenv("GEMINI_API_KEY", "test-key")
    from_dict = make_coach({"model": "judge", "base_url": stub.url, "api_key_env": None, "max_tokens": 64})
    assert isinstance(from_dict, LLMCoach)
    assert from_dict.config.max_tokens == 64
    llm = make_coach("llm", {"preset": "gemini-2.5-flash", "rpm": 10})  # the training config's coach: llm
    assert (llm.config.model, llm.config.rpm) == ("gemini-2.5-flash", 10.0)
    assert make_coach("gemini-2.5-pro:gemini-2.5-flash").config.model == "gemini-2.5-flash"
    assert isinstance(make_coach(None), RuleCoach)
    assert isinstance(make_coach("rule"), RuleCoach)
    ready = RuleCoach()
    assert make_coach(ready) is ready


def test_cache_wraps_any_coach(stub, tmp_path):
    coach = make_coach(f"judge@{stub.url}", {"api_key_env": "none"}, cache=tmp_path / "c.sqlite")
    assert isinstance(coach, CachedCoach)
    coach.score(request())
    coach.score(request())
    assert stub.calls == 1
    assert coach.hits == 1


@pytest.mark.parametrize("spec, settings, message", [
    ("judge@http://127.0.0.1:1/v1", {"max_token": "3"},
     "unknown coach setting 'max_token' (did you mean 'max_tokens'?)"),
    ("judge@http://127.0.0.1:1/v1", {"max_tokens": "lots"}, "max_tokens must be an integer, got 'lots'"),
    ("judge@http://127.0.0.1:1/v1", {"structured_output": "maybe"}, "structured_output must be true or false"),
    ("judge@http://127.0.0.1:1/v1", {"on_failure": "ignore"}, "on_failure must be one of 'raise', 'skip', 'neutral'"),
    ("judge@http://127.0.0.1:1/v1", {"extra_body": "{oops"}, "not valid JSON"),
    ("judge@", {}, "expected MODEL@BASE_URL"),
    ("vllm-local", {}, "needs the served model name"),
    ("gemini-3", {}, "unknown coach 'gemini-3'"),
    ("rule", {"max_tokens": "3"}, "the rule coach has no settings"),
    ("vllm-local:m", {"preset": "openai"}, "already names its preset"),
])
def test_bad_specs_and_settings_say_what_is_wrong(spec, settings, message):
    with pytest.raises(CoachConfigError) as err:
        make_coach(spec, settings)
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_cli_reaches_every_coach_setting(stub, tmp_path):
    rc = main(["eval", "--team", "scripted", "--coach", f"judge@{stub.url}", "--coach-set", "structured_output=true",
               "--coach-set", "max_tokens=256", "--coach-set", "api_key_env=none", "--out", str(tmp_path), *FAST])
    assert rc == 0
    assert {r["max_tokens"] for r in stub.requests} == {256}
    assert all(r["response_format"]["type"] == "json_schema" for r in stub.requests)
    episode = json.loads((tmp_path / "scripted" / "transcripts.jsonl").read_text())
    assert {a["coach"]["rationale"] for a in episode["actions"]} == {"checked the sum"}


def test_cli_bad_coach_setting_is_one_line(tmp_path, capsys):
    rc = main(["eval", "--team", "scripted", "--coach", "judge@http://127.0.0.1:1/v1", "--coach-set", "max_tokens=many",
               "--out", str(tmp_path), *FAST])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert err == ["mappa eval: coach setting max_tokens must be an integer, got 'many'"]
