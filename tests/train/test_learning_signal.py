"""A test that fails when the update is broken: the reward moves the policy, and a flipped sign does not.

The task has a clean per-action reward and a one-token answer: every problem ("Question 17: lamp
river stone?") is answered with one of eight letters, and the reward pays 10 for "C", 0 otherwise.
The tiny model is first taught, by supervised steps on a teacher that picks a letter uniformly, to
answer with a letter (so about 1 in 8 answers is right: the start is below 0.2 and every step's
batch holds right and wrong answers). Then a seeded run of a fixed number of REINFORCE++ steps goes
through the trainer's own parts: the HF generator samples (token ids and log-probs kept),
`train.update` computes the KL, the whitened advantages and the PPO loss and steps the learner, and
the generator is synced with the learner's weights. Held-out problems are new draws of the training
distribution, disjoint from the training problems by text.

The same run with the reward's sign flipped (so the whitened advantages of the reward flip; only
the β-weighted KL term keeps its sign) must not learn the answer: a broken sign, a reward landing on
the wrong token, an update that does not reach the generator, or no update at all fails one of the
two runs.
"""
import dataclasses
import random

import pytest

import mappa_train  # noqa: F401  (first: it makes OpenMP threads sleep, not spin, before torch starts them)

pytest.importorskip("torch")
pytest.importorskip("deepspeed")

LETTERS = "ABCDEFGH"
RIGHT = "C"
WORDS = ("lamp", "river", "stone", "cloud", "seed", "glass", "wolf", "paper", "salt", "bell", "moss", "iron")
STEPS = 16
BATCH = 32


def draw_problems(n: int, seed: int) -> list[str]:
    """`n` distinct problems of the one distribution (a number and three words)."""
    rng, seen = random.Random(seed), []
    while len(seen) < n:
        text = f"Question {rng.randint(0, 999)}: {' '.join(rng.sample(WORDS, 3))}? Answer with one letter A-H."
        if text not in seen:
            seen.append(text)
    return seen


@pytest.fixture(scope="module")
def start(tmp_path_factory):
    return teach_letters(tmp_path_factory.mktemp("signal") / "model")


def teach_letters(where):
    """The tiny model taught to answer with a uniformly chosen letter; returns (model dir, train, held-out)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mappa_train.tiny_model import build_tiny_model

    problems = draw_problems(400, seed=1)
    train, heldout = problems[:300], problems[300:]
    assert not set(train) & set(heldout)
    path = build_tiny_model(where, seed=0)
    tok = AutoTokenizer.from_pretrained(path)
    assert all(len(tok.encode(x, add_special_tokens=False)) == 1 for x in LETTERS)  # one-token answers
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(path)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    rng = random.Random(2)
    for _ in range(150):
        rows = [tok.encode(p, add_special_tokens=False) + tok.encode(rng.choice(LETTERS), add_special_tokens=False)
                + [tok.eos_token_id] for p in rng.sample(train, 16)]
        width = max(map(len, rows))
        ids = torch.tensor([r + [tok.pad_token_id] * (width - len(r)) for r in rows])
        labels = torch.tensor([[-100] * (len(r) - 2) + r[-2:] + [-100] * (width - len(r)) for r in rows])
        attention = torch.tensor([[1] * len(r) + [0] * (width - len(r)) for r in rows])
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(path)
    return path, train, heldout


def run(path, train: list[str], heldout: list[str], sign: float) -> dict:
    """STEPS seeded REINFORCE++ steps paying `sign` * 10 for the right letter; the training reward
    (share right) of each step and the held-out accuracy before and after (one sample per problem at
    temperature 1, the same seeds both times)."""
    import torch

    from mappa_train.config import TrainConfig
    from mappa_train.factories import make_generators, make_learners
    from mappa_train.generation import SamplingParams
    from mappa_train.rollout import Transition
    from mappa_train.train import update

    base = TrainConfig()
    cfg = dataclasses.replace(
        # float32: the test is about the update's sign and plumbing, the same on every CPU (in bf16 on this
        # machine's AMX the generator and learner round differently)
        base, model=dataclasses.replace(base.model, path=str(path), dtype="float32"),
        generation=dataclasses.replace(base.generation, max_new_tokens=2, max_prompt_tokens=64),
        algo=dataclasses.replace(base.algo, whiten="global", reward_scale=0.1),
        # lr 1.5e-3: at 3e-3 the run sat at the edge of collapse (one step fell to 0.06 right; after
        # later changes to the update it fell to 0.00 there and stayed)
        learner=dataclasses.replace(base.learner, lr=1.5e-3, train_batch_size=BATCH, micro_batch_size=BATCH))
    torch.manual_seed(0)
    generator = make_generators(cfg, path, ["shared"])["shared"]
    learner = make_learners(cfg, path, ["shared"])["shared"]
    tok = generator.tokenizer

    def answer(problems: list[str], seed: int):
        prompts = [tok.encode(p, add_special_tokens=False) for p in problems]
        params = SamplingParams(max_new_tokens=2, seeds=tuple(range(seed, seed + len(prompts))))
        outs = generator.generate(prompts, params)
        return prompts, outs, [o.text.strip() == RIGHT for o in outs]

    def accuracy() -> float:
        return sum(answer(heldout, 10_000)[2]) / len(heldout)

    before, rewards, rng = accuracy(), [], random.Random(3)
    for step in range(STEPS):
        prompts, outs, right = answer(rng.sample(train, BATCH), 100 * step)
        transitions = [Transition(role="answerer", policy="shared", prompt_ids=p, action_ids=o.token_ids,
                                  logprobs=o.logprobs, coach_reward=sign * 10.0 * r, coach_ok=True, end_reward=0.0,
                                  outcome_reward=float(r), episode_id=i, action_index=0, turn_index=0,
                                  task_id=f"t{i}", finish_reason=o.finish_reason)
                       for i, (p, o, r) in enumerate(zip(prompts, outs, right))]
        update(cfg, {"shared": learner}, {"answerer": "shared"}, transitions, cfg.learner.lr)
        generator.load_weights(learner.state_dict().items())
        rewards.append(sum(right) / BATCH)
    return {"before": before, "after": accuracy(), "rewards": rewards}


@pytest.mark.slow
def test_the_update_learns_what_the_reward_pays_for_and_a_flipped_sign_does_not(start):
    path, train, heldout = start
    learnt = run(path, train, heldout, sign=1.0)
    assert learnt["before"] < 0.2, learnt
    assert learnt["rewards"][0] < 0.2, learnt
    assert learnt["after"] > 0.8, learnt
    assert min(learnt["rewards"][-2:]) > 0.8, learnt
    flipped = run(path, train, heldout, sign=-1.0)
    assert flipped["before"] == learnt["before"]  # the same start and seeds
    assert flipped["after"] < 0.2, flipped
    assert max(flipped["rewards"][-2:]) < 0.2, flipped
