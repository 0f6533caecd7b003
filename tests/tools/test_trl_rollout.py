"""examples/trl_rollout.py (issue 27): a TRL multi-turn rollout in which a trained team, not the scripted
oracle, plays the other roles, and the trained role's whole turn is one completion, token-exact, with the
env's tool output masked out of training."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("trl")
torch = pytest.importorskip("torch")

import mappa_envs  # noqa: E402
from mappa_envs.policy import Team  # noqa: E402
from mappa_envs.sandbox import make_sandbox  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def load_example():
    spec = importlib.util.spec_from_file_location("trl_rollout", ROOT / "examples" / "trl_rollout.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Scripted:
    """A stand-in for the trainer's model that writes a cell, then (having seen its output) an answer.
    Everything else in the rollout is real: env, sandbox, coach, tokenizer, chat template."""

    device = torch.device("cpu")

    def __init__(self, tokenizer, texts):
        self.replies = [tokenizer.encode(t, add_special_tokens=False) + [tokenizer.eos_token_id] for t in texts]
        self.prompts = []

    def generate(self, input_ids, **kwargs):
        self.prompts.append(input_ids[0].tolist())
        reply = self.replies[len(self.prompts) - 1]
        sequences = torch.tensor([input_ids[0].tolist() + reply])
        return type("Out", (), {"sequences": sequences, "scores": [torch.zeros(1, 4)] * len(reply)})

    def compute_transition_scores(self, sequences, scores, normalize_logits=True):
        return torch.full((1, len(scores)), -0.25)


class Recording:
    """The other roles' team: records what it was asked (a trained model would answer the same way)."""

    def __init__(self):
        self.roles = []

    def respond(self, conversations, roles, seeds=None):
        self.roles += roles
        return ["The answer is \\boxed{42}." for _ in roles]


@pytest.fixture
def env():
    sandbox = make_sandbox("local", preimport=())
    env = mappa_envs.make("MathChat-v0", tasks=[{"prompt": "What is 6 * 7?", "answer": "42"}], sandbox=sandbox)
    yield env
    env.close()
    sandbox.close()


def test_the_role_turn_is_one_completion_with_tool_output_masked(env, tiny_model_dir):
    from transformers import AutoTokenizer

    example = load_example()
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = Scripted(tokenizer, ["```python\nprint(6 * 7)\n```", "It printed 42, so the answer is \\boxed{42}."])
    team = Recording()
    rollout = example.TeamRollout(env, Team(team), "code_executor", tokenizer, max_new_tokens=64)
    episode = rollout.play(env.unwrapped.tasks[0].id, model)

    assert team.roles == ["problem_solver", "verifier"]  # the team played every other role, not the oracle
    completion, mask = episode["completion_ids"], episode["env_mask"]
    assert len(completion) == len(mask) == len(episode["logprobs"])
    own = [t for t, m in zip(completion, mask) if m == 1]
    feedback = [t for t, m in zip(completion, mask) if m == 0]
    assert own == model.replies[0] + model.replies[1]  # exactly the sampled tokens, trained on
    assert "42" in tokenizer.decode(feedback)  # the sandbox's output sits between them, masked out
    assert all(lp == 0.0 for lp, m in zip(episode["logprobs"], mask) if m == 0)
    # token-exact: the second action was sampled on prompt + completion so far
    assert model.prompts[1] == episode["prompt_ids"] + completion[:len(completion) - len(model.replies[1])]
    assert episode["role_reward"] == rollout.episodes[-1]["role_reward"] > 0
    assert rollout.episodes[-1]["correct"] is True


@pytest.mark.slow
def test_the_example_trains_a_step_with_the_model_as_the_team(tiny_model_dir, tmp_path):
    out = load_example().main(["--model", tiny_model_dir, "--out", str(tmp_path), "--max-steps", "1",
                               "--prompts", "2", "--generations", "2", "--max-new-tokens", "8"])
    assert out["steps"] == 1
    assert out["episodes"] == 2
    assert out["team"] == f"hf:{tiny_model_dir}"
    assert len(out["mean_reward"]) == 1
