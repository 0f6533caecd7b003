"""The transformers backend samples exactly what it reports; the text policies and the endpoint client."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mappa_envs.policy import Team
from mappa_train.generation import SamplingParams, chat_prompt_ids, make_generator
from mappa_train.generation.hf import HFGenerator, warped_logprobs
from mappa_train.generation.openai_chat import OpenAIChat
from mappa_train.text_policies import EndpointPolicy, GeneratorPolicy
from tests.openai_stub import StubServer


@pytest.fixture(scope="module")
def model_dir(tiny_model_dir):
    return tiny_model_dir


@pytest.fixture(scope="module")
def gen(model_dir):
    return HFGenerator(model_dir)


@pytest.fixture(scope="module")
def prompts(gen):
    conversations = [
        [{"role": "user", "content": "What is 2 + 3?"}],
        [{"role": "system", "content": "You are the Verifier."}, {"role": "user", "content": "Compute 17 * 3."}],
    ]
    return [chat_prompt_ids(gen.tokenizer, c) for c in conversations]


def forward_logprobs(model, prompt: list[int], action: list[int], params: SamplingParams) -> torch.Tensor:
    """What the learner computes: one unpadded forward pass over prompt + action."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + action])).logits[0, len(prompt) - 1:-1]
    return warped_logprobs(logits, params).gather(1, torch.tensor(action)[:, None])[:, 0]


@pytest.mark.parametrize("params", [
    SamplingParams(max_new_tokens=12, seed=1),
    SamplingParams(max_new_tokens=12, seed=2, temperature=0.7, top_k=40, top_p=0.9),
], ids=["t1", "t0.7-topk-topp"])
def test_reported_logprobs_are_those_of_the_sampling_distribution(gen, prompts, params):
    # prompts of different lengths share a left-padded batch; each row must match its own forward pass
    assert len(prompts[0]) != len(prompts[1])
    for prompt, out in zip(prompts, gen.generate(prompts, params)):
        assert len(out.token_ids) == len(out.logprobs) >= 1
        expected = forward_logprobs(gen.model, prompt, out.token_ids, params)
        assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4), (out.logprobs, expected)
        assert out.text == gen.tokenizer.decode(out.token_ids, skip_special_tokens=True)


def test_temperature_one_logprobs_equal_the_plain_learner_logprobs(gen, prompts):
    out = gen.generate(prompts[:1], SamplingParams(max_new_tokens=10, seed=3))[0]
    with torch.no_grad():
        logits = gen.model(torch.tensor([prompts[0] + out.token_ids])).logits[0, len(prompts[0]) - 1:-1]
    plain = torch.log_softmax(logits, -1).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert torch.allclose(torch.tensor(out.logprobs), plain, atol=1e-4)


def test_the_checkpoints_sampling_defaults_do_not_leak_in(model_dir, prompts):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    model.generation_config.update(repetition_penalty=1.5, top_k=3, temperature=0.3, do_sample=True)
    sampler = HFGenerator(model, AutoTokenizer.from_pretrained(model_dir))
    params = SamplingParams(max_new_tokens=10, seed=6)
    out = sampler.generate(prompts[:1], params)[0]
    expected = forward_logprobs(model, prompts[0], out.token_ids, params)
    assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)


def test_seeded_calls_repeat_and_leave_the_global_rng_alone(gen, prompts):
    params = SamplingParams(max_new_tokens=8, seed=11)
    torch.manual_seed(0)
    before = torch.get_rng_state()
    a = gen.generate(prompts, params)
    assert torch.equal(torch.get_rng_state(), before)
    b = gen.generate(prompts, params)
    assert [g.token_ids for g in a] == [g.token_ids for g in b]
    c = gen.generate(prompts, SamplingParams(max_new_tokens=8, seed=12))
    assert [g.token_ids for g in a] != [g.token_ids for g in c]


def test_greedy_takes_the_argmax(gen, prompts):
    out = gen.generate(prompts[:1], SamplingParams(max_new_tokens=6, temperature=0))[0]
    ids = list(prompts[0])
    for token in out.token_ids:
        with torch.no_grad():
            assert gen.model(torch.tensor([ids])).logits[0, -1].argmax().item() == token
        ids.append(token)


def test_stop_tokens_end_the_action_and_are_kept(gen, prompts):
    every_token = tuple(range(len(gen.tokenizer)))
    out = gen.generate(prompts, SamplingParams(max_new_tokens=8, stop_token_ids=every_token, seed=0))
    assert all(g.finish_reason == "stop" and len(g.token_ids) == 1 for g in out)
    out = gen.generate(prompts, SamplingParams(max_new_tokens=5, stop_token_ids=(), seed=0))
    for g in out:
        assert (g.finish_reason, len(g.token_ids)) in {("length", 5)} or g.token_ids[-1] == gen.tokenizer.eos_token_id


def test_batches_larger_than_max_batch_size_are_split(model_dir, prompts):
    small = HFGenerator(model_dir, max_batch_size=1)
    out = small.generate(prompts * 2, SamplingParams(max_new_tokens=4, temperature=0))
    assert len(out) == 4
    assert out[0].token_ids == out[2].token_ids


def test_load_weights_syncs_the_sampler(model_dir, prompts):
    from transformers import AutoModelForCausalLM

    learner = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(5)
    with torch.no_grad():
        for p in learner.parameters():
            p.add_(0.05 * torch.randn_like(p))
    sampler = HFGenerator(model_dir)
    sampler.load_weights(learner.state_dict().items())
    params = SamplingParams(max_new_tokens=8, seed=4)
    out = sampler.generate(prompts[:1], params)[0]
    expected = forward_logprobs(learner, prompts[0], out.token_ids, params)
    assert torch.allclose(torch.tensor(out.logprobs), expected, atol=1e-4)
    with pytest.raises(KeyError, match="no tensor 'nope'"):
        sampler.load_weights([("nope", torch.zeros(1))])


def test_bad_inputs_say_what_is_wrong(gen):
    with pytest.raises(ValueError, match="unknown generation backend 'tgi'"):
        make_generator("tgi", "m")
    with pytest.raises(ValueError, match="top_p"):
        SamplingParams(top_p=0)
    with pytest.raises(ValueError, match="temperature"):
        SamplingParams(temperature=-1)
    with pytest.raises(ValueError, match="at least one token"):
        gen.generate([[]], SamplingParams())


def test_generator_policy_answers_a_team_in_one_call(gen):
    calls = []
    original = gen.generate
    policy = GeneratorPolicy(gen, SamplingParams(max_new_tokens=4, temperature=0))
    gen.generate = lambda p, s: calls.append(len(p)) or original(p, s)
    try:
        convs = [[{"role": "user", "content": f"What is {i} + 1?"}] for i in range(3)]
        texts = Team(policy).respond(convs, ["problem_solver", "verifier", "verifier"])
    finally:
        del gen.generate
    assert calls == [3]
    assert len(texts) == 3
    assert all(isinstance(t, str) for t in texts)
    assert len(policy.last_usage) == 3
    assert all(1 <= u["completion_tokens"] <= 4 and u["prompt_tokens"] > 5 for u in policy.last_usage)


def test_endpoint_policy_over_a_loopback_openai_server(gen):
    local = GeneratorPolicy(gen, SamplingParams(max_new_tokens=6, temperature=0))
    with StubServer(respond=lambda body: local.respond([body["messages"]], ["x"])[0]) as server:
        client = OpenAIChat("tiny", base_url=server.url, api_key="x", max_concurrency=2)
        policy = EndpointPolicy(client, SamplingParams(max_new_tokens=6, temperature=0, seed=3))
        convs = [[{"role": "user", "content": f"What is {i} * 2?"}] for i in range(3)]
        texts = policy.respond(convs, ["verifier"] * 3)
        assert texts == local.respond(convs, ["verifier"] * 3)
        body = server.requests[0]
        assert body["max_tokens"] == 6
        assert body["temperature"] == 0
        assert body["model"] == "tiny"
        assert sorted(r["seed"] for r in server.requests) == [3, 4, 5]
        # the server's own counts come back per conversation (the stub counts words)
        assert policy.last_usage == [{"prompt_tokens": 5, "completion_tokens": len(t.split())} for t in texts]
