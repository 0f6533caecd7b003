"""Each example in examples/ runs end to end with short budgets, its reward coming from the real
MathChat-v0 env, the offline RuleCoach and the local sandbox, on the offline tiny model."""
import importlib.util
import json
from pathlib import Path

import pytest

import mappa_envs
from mappa_envs.sandbox import make_sandbox

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ROLES = ("problem_solver", "code_executor", "verifier")


def load(name: str):
    spec = importlib.util.spec_from_file_location(f"mappa_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def make_env(**kwargs):
    """MathChat-v0 on the real local sandbox; its code needs no numpy/pandas preimport (seconds per session)."""
    return mappa_envs.make("MathChat-v0", task_source="synthetic", sandbox=make_sandbox("local", preimport=()),
                           **kwargs)


@pytest.fixture
def tiny_model(tiny_model_dir):
    return tiny_model_dir


def test_reinforce_credits_aec_rewards_to_the_right_actions(tiny_model, tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    reinforce = load("reinforce")
    args = reinforce.argparse.Namespace(max_new_tokens=8, max_prompt_tokens=128)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    env = make_env(num_tasks=4)
    try:
        steps, outcome = reinforce.play(env, model, tok, seed=0, args=args)
        recorded = env.unwrapped.transcript()["actions"]  # what the env itself paid, action by action
        assert [s["agent"] for s in steps] == [a["role"] for a in recorded]
        assert [s["reward"] for s in steps] == [a["reward"] for a in recorded]
        assert all(a["coach"]["ok"] for a in recorded)
        assert "correct" in outcome
    finally:
        env.close()
        env.unwrapped.sandbox.close()


def test_reinforce_example_trains(tiny_model, tmp_path):
    out = load("reinforce").main(["--model", str(tiny_model), "--out", str(tmp_path), "--iterations", "1",
                                  "--episodes", "2", "--max-new-tokens", "8", "--max-prompt-tokens", "128"])
    history = out["history"]
    assert len(history) == 1
    for h in history:
        assert h["actions"] >= 2 * len(ROLES)
        assert set(h["roles"]) == set(ROLES)
        assert all(0.0 <= r <= 10.0 for r in h["rewards"])
        assert h["loss"] == h["loss"]  # not NaN


def test_trl_env_reward_scores_through_the_env(tmp_path):
    trl_grpo = load("trl_grpo")
    env = make_env(num_tasks=2)
    try:
        data = trl_grpo.prompt_dataset(env, 2)
        assert data[0]["prompt"][0]["role"] == "system"
        assert data[0]["task_id"]
        task = next(t for t in env.unwrapped.scenario.tasks() if t.id == data[0]["task_id"])
        per_action = trl_grpo.EnvReward(env, "action")
        completions = [[{"role": "assistant", "content": f"\\boxed{{{task.answer}}}"}],
                       [{"role": "assistant", "content": "no idea"}]]
        right, wrong = per_action(data["prompt"][:1] * 2, completions, task_id=[task.id] * 2)
        assert right > wrong  # the rule coach rewards a present, correct answer
        episode = trl_grpo.EnvReward(env, "episode")
        total = episode.score(task.id, f"\\boxed{{{task.answer}}}")
        log = episode.episodes[-1]
        assert total == log["team_total"] > log["action_reward"] == right
        assert log["correct"] is True
        with pytest.raises(ValueError, match="reward shape"):
            trl_grpo.EnvReward(env, "turn")
    finally:
        env.close()
        env.unwrapped.sandbox.close()


@pytest.mark.slow
def test_trl_grpo_example_trains(tiny_model, tmp_path):
    pytest.importorskip("trl")
    out = load("trl_grpo").main(["--model", str(tiny_model), "--out", str(tmp_path), "--max-steps", "1",
                                 "--prompts", "2", "--generations", "2", "--max-completion-length", "8"])
    assert out["steps"] == 1
    assert out["episodes"] == 2
    assert len(out["mean_reward"]) == 1
    assert all(0.0 <= e["action_reward"] <= 10.0 for e in out["reward_log"])


def test_benchmark_example_covers_every_registered_env(tmp_path):
    transcripts = tmp_path / "bench.jsonl"
    rows = load("benchmark_policies").main(["--episodes", "2", "--envs", "2", "--transcripts", str(transcripts)])
    assert {row["env"] for row in rows} == set(mappa_envs.registry)
    math = {row["policy"]: row for row in rows if row["env"] == "MathChat-v0"}
    assert set(math) == {"random", "scripted"}
    assert math["scripted"]["outcome"] == 1.0
    assert math["random"]["outcome"] < math["scripted"]["outcome"]
    assert math["scripted"]["returns"]["code_executor"] > math["random"]["returns"]["code_executor"]
    lines = [json.loads(line) for line in transcripts.read_text().splitlines()]
    math_lines = [x for x in lines if x["env_id"] == "MathChat-v0"]
    assert len(math_lines) == 4
    assert all(x["finished"] for x in math_lines)
