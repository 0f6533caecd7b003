"""Per-prompt seeds: a prompt's sample depends on its own seed, not on the batch it shares a call with
(the episode driver batches whichever envs are ready, so batches differ from run to run)."""
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from mappa_train.generation import SamplingParams, chat_prompt_ids
from mappa_train.generation.hf import HFGenerator, warped_logprobs


@pytest.fixture(scope="module")
def gen(tiny_model_dir):
    return HFGenerator(tiny_model_dir)


def test_a_seeded_prompt_samples_the_same_alone_or_in_any_batch(gen):
    tok = gen.tokenizer
    prompts = [chat_prompt_ids(tok, [{"role": "user", "content": f"Question {i}: what is {i} + {i}?"}])
               for i in range(4)]
    params = SamplingParams(max_new_tokens=12, temperature=1.0)
    together = gen.generate(prompts, SamplingParams(**{**params.__dict__, "seeds": (11, 12, 13, 14)}))
    shuffled = gen.generate(prompts[::-1], SamplingParams(**{**params.__dict__, "seeds": (14, 13, 12, 11)}))[::-1]
    alone = [gen.generate([p], SamplingParams(**{**params.__dict__, "seeds": (s,)}))[0]
             for p, s in zip(prompts, (11, 12, 13, 14))]
    for a, b, c in zip(together, shuffled, alone):
        assert a.token_ids == b.token_ids == c.token_ids
        assert a.logprobs == pytest.approx(c.logprobs, abs=1e-4)
    other = gen.generate(prompts, SamplingParams(**{**params.__dict__, "seeds": (21, 22, 23, 24)}))
    assert [g.token_ids for g in other] != [g.token_ids for g in together]  # the seed does steer the sample


def test_seeded_sampling_reports_the_logprobs_of_the_distribution_it_drew_from(gen):
    tok = gen.tokenizer
    prompt = chat_prompt_ids(tok, [{"role": "user", "content": "Compute 17 * 3."}])
    params = SamplingParams(max_new_tokens=10, temperature=0.7, top_k=20, seeds=(5,))
    out = gen.generate([prompt], params)[0]
    with torch.no_grad():
        logits = gen.model(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1:-1]
    expected = warped_logprobs(logits, params).gather(1, torch.tensor(out.token_ids)[:, None])[:, 0]
    assert out.logprobs == pytest.approx(expected.tolist(), abs=1e-4)
    assert all(lp > float("-inf") for lp in out.logprobs)


def test_seeds_must_match_the_prompts(gen):
    prompt = chat_prompt_ids(gen.tokenizer, [{"role": "user", "content": "hi"}])
    with pytest.raises(ValueError, match="2 seeds for 1 prompts"):
        gen.generate([prompt], SamplingParams(max_new_tokens=2, seeds=(1, 2)))


def test_unseeded_calls_do_not_repeat_each_other(gen):
    prompt = chat_prompt_ids(gen.tokenizer, [{"role": "user", "content": "Say anything."}])
    params = SamplingParams(max_new_tokens=16, temperature=1.0)
    samples = {tuple(gen.generate([prompt], params)[0].token_ids) for _ in range(4)}
    assert len(samples) > 1


def test_seeded_rows_draw_from_the_warped_distribution_and_never_a_masked_token():
    """Per-row seeded sampling (inverse CDF on each row's own RNG) matches the top-k-warped
    probabilities in frequency, and a token top-k removed is never drawn."""
    from mappa_train.generation.hf import _WarpAndRecord

    params = SamplingParams(max_new_tokens=1, temperature=1.0, top_k=3)
    logits = torch.tensor([[2.0, 1.0, 0.5, 0.2, -1.0, 3.0]]).repeat(4000, 1)
    rows = [torch.Generator().manual_seed(s) for s in range(len(logits))]
    chosen = _WarpAndRecord(params, rows)(torch.zeros(len(logits), 1, dtype=torch.long), logits).argmax(1)
    want = warped_logprobs(logits[:1], params).exp()[0]
    seen = torch.bincount(chosen, minlength=logits.shape[1]) / len(chosen)
    assert seen[want == 0].sum() == 0
    assert torch.allclose(seen, want, atol=0.03), (seen, want)
