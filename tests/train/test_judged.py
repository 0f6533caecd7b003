"""Training only on what was judged, and the generator-vs-learner log-prob gap, through `train.update`.

Learners are stand-ins that record what they are given (the update's bookkeeping is the point here);
the env-cut path runs the real MathChat env with a small `max_action_chars`.
"""
import warnings

import pytest
import torch

import mappa_envs
from mappa_envs.core.pipeline import EpisodeLimits, Task
from mappa_envs.sandbox import make_sandbox
from mappa_train.config import load_config
from mappa_train.generation import Generation, SamplingParams
from mappa_train.rollout import Transition, collect
from mappa_train.train import update
from tests.chat_fixtures import family_tokenizer


class Recorder:
    """A PolicyLearner stand-in: log-probs are the generator's plus `offset`; train records its samples."""

    rank = 0

    def __init__(self, by_prompt: dict, offset: float = 0.0):
        self.by_prompt, self.offset, self.trained, self.passes = by_prompt, offset, [], []

    def _logp(self, s):
        return torch.tensor(self.by_prompt[tuple(s.prompt_ids)][:len(s.action_ids)]) + self.offset

    def logprobs(self, samples, reference=False):
        self.passes.append("reference" if reference else "old")
        return [self._logp(s) for s in samples]

    def train(self, samples, lr):  # as PolicyLearner's first optimizer step does, π_θ_old's log-probs kept
        for s in samples:
            s.first_logp = self._logp(s)
        self.trained += samples
        return {"loss": 0.0, "tokens": float(sum(len(s.action_ids) for s in samples))}


def transition(prompt, n, finish="stop", judged=None, reward=5.0, episode=None, index=0, end_reward=0.0):
    return Transition(role="verifier", policy="shared", prompt_ids=[prompt], action_ids=list(range(10, 10 + n)),
                      logprobs=[-0.5] * n, coach_reward=reward, coach_ok=True, end_reward=end_reward,
                      outcome_reward=0.0, episode_id=prompt if episode is None else episode, action_index=index,
                      turn_index=index, task_id="t", finish_reason=finish, judged_tokens=judged)


def run_update(transitions, *overrides, offset=0.0):
    learner = Recorder({(t.prompt_ids[0],): t.logprobs for t in transitions}, offset)
    cfg = load_config(None, list(overrides))
    return update(cfg, {"shared": learner}, {"verifier": "shared"}, transitions, lr=1e-5), learner


def test_length_cut_actions_are_masked_by_default_and_counted():
    ts = [transition(1, 4), transition(2, 6, finish="length"), transition(3, 3)]
    metrics, learner = run_update(ts)
    assert metrics["length_cut"] == 1
    assert metrics["actions"] == 2
    assert [s.prompt_ids for s in learner.trained] == [[1], [3]]
    metrics, learner = run_update(ts, "algo.mask_length_cut=false")  # configurable: trained like any other
    assert metrics["length_cut"] == 1
    assert metrics["actions"] == 3
    assert len(learner.trained) == 3


def test_excused_actions_are_masked_by_default_and_counted():
    """An action the env excused (its inputs broken upstream) is not trained on; configurable."""
    ts = [transition(1, 4), transition(2, 5, reward=0.0), transition(3, 3)]
    ts[1].excused = True
    metrics, learner = run_update(ts)
    assert (metrics["excused"], metrics["actions"]) == (1, 2)
    assert [s.prompt_ids for s in learner.trained] == [[1], [3]]
    metrics, learner = run_update(ts, "algo.mask_excused=false")
    assert (metrics["excused"], metrics["actions"]) == (1, 3)


def test_a_masked_actions_rewards_still_reach_the_earlier_actions_returns():
    def first_advantages(end_reward):
        ts = [transition(1, 3, episode=0, index=0), transition(2, 3, finish="length", episode=0, index=1,
                                                               end_reward=end_reward), transition(3, 3, episode=1)]
        _, learner = run_update(ts, "algo.scope=agent")
        assert [s.prompt_ids for s in learner.trained] == [[1], [3]]  # the cut action is not trained on
        return learner.trained[0].advantages

    assert not torch.allclose(first_advantages(0.0), first_advantages(10.0))  # its end bonus counts upstream


def test_env_cut_actions_train_on_the_judged_tokens_only():
    ts = [transition(1, 8, judged=5), transition(2, 4), transition(3, 6, judged=0)]
    metrics, learner = run_update(ts)
    assert metrics["env_cut"] == 2
    assert metrics["actions"] == 2  # judged_tokens=0: nothing to learn from
    first, second = learner.trained
    assert first.action_ids == list(range(10, 15))
    assert len(first.old_logp) == len(first.advantages) == 5
    assert second.action_ids == list(range(10, 14))


def test_the_logprob_gap_is_logged_and_warns_above_the_threshold():
    ts = [transition(1, 4), transition(2, 6)]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        metrics, _ = run_update(ts, offset=1e-3)  # a healthy gap: no warning
    assert metrics["logprob_gap_mean"] == pytest.approx(1e-3, rel=1e-3)
    assert metrics["logprob_gap_max"] == pytest.approx(1e-3, rel=1e-3)
    with pytest.warns(UserWarning, match="log-probs differ by 0.5000 on average"):
        metrics, _ = run_update(ts, offset=0.5)  # e.g. the generator never got the new weights
    assert metrics["logprob_gap_mean"] == pytest.approx(0.5)


def test_with_the_generators_old_logprobs_the_gap_is_read_from_the_update_without_a_pass():
    ts = [transition(1, 4), transition(2, 6)]
    metrics, learner = run_update(ts, offset=1e-3)
    assert learner.passes == ["reference", "old"]
    metrics, learner = run_update(ts, "algo.old_logprobs=generator", offset=1e-3)
    assert learner.passes == ["reference"]  # the learner's no-grad pass is saved
    assert metrics["logprob_gap_mean"] == pytest.approx(1e-3, rel=1e-3)
    assert all(torch.equal(s.old_logp, torch.full((len(s.action_ids),), -0.5)) for s in learner.trained)
    with pytest.warns(UserWarning, match="log-probs differ by 0.5000 on average"):
        run_update(ts, "algo.old_logprobs=generator", offset=0.5)


class LongWriter:
    """Every action is the same long text: longer than the env's max_action_chars."""

    def __init__(self, tok):
        self.tokenizer = tok

    def generate(self, prompts, params):
        ids = self.tokenizer.encode("The answer is 42. " * 12, add_special_tokens=False) + [self.tokenizer.eos_token_id]
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return [Generation(ids, [0.0] * len(ids), text, "stop") for _ in prompts]

    def load_weights(self, named_tensors):
        raise NotImplementedError


def test_the_rollout_records_how_many_ids_the_env_judged():
    tok = family_tokenizer("smollm2")
    sandbox = make_sandbox("local", pool_size=1, preimport=(), timeout_s=20)
    env = mappa_envs.make("MathChat-v0", tasks=[Task(id="t", prompt="What is 6 times 7?", answer="42")],
                          sandbox=sandbox, limits=EpisodeLimits(max_action_chars=100))
    try:
        rollout = collect([env], LongWriter(tok), SamplingParams(), [{"seed": 0, "options": {"task_id": "t"}}])
        records = env.episode.actions
    finally:
        env.close()
        sandbox.close()
    assert rollout.transitions
    assert all("cut to max_action_chars=100" in (r.input_error or "") for r in records)
    for t, record in zip(rollout.transitions, records):
        kept = tok.decode(t.action_ids[:t.judged_tokens], skip_special_tokens=True)
        assert len(kept) <= 100
        assert record.text.startswith(kept)  # within what the sandbox and the coach saw
        assert len(tok.decode(t.action_ids[:t.judged_tokens + 1], skip_special_tokens=True)) > 100


class Idler(LongWriter):
    """Every action is the same short text with no code: nothing is ever handed on."""

    def generate(self, prompts, params):
        ids = self.tokenizer.encode("Nothing to do.", add_special_tokens=False) + [self.tokenizer.eos_token_id]
        return [Generation(ids, [0.0] * len(ids), "Nothing to do.", "stop") for _ in prompts]


def test_the_rollout_marks_actions_whose_inputs_were_broken_upstream():
    """DSBench: an engineer that writes no files leaves the modeler and the analyst excused."""
    from mappa_envs.dsbench import builtin_tasks

    sandbox = make_sandbox("local", pool_size=1, timeout_s=60)
    env = mappa_envs.make("DSBench-v0", tasks=builtin_tasks()[:1], sandbox=sandbox, max_actions=1)
    try:
        rollout = collect([env], Idler(family_tokenizer("smollm2")), SamplingParams(), [{"seed": 0}])
    finally:
        env.close()
        sandbox.close()
    assert [(t.role, t.excused) for t in rollout.transitions] == [
        ("data_engineer", False), ("modeler", True), ("analyst", True)]


def test_a_step_whose_scores_are_all_equal_trains_on_the_kl_alone_and_says_so():
    """Every verifier action scored 2: no reward spread, so the advantages the learner gets are the KL
    term at its own size, not KL noise whitened to unit variance; the step counts the role as having
    no spread. Old log-probs are the generator's, 0.1 below the reference's: k1 KL = −0.1 per token,
    so with β = 0.01 the returns of a 3-token action are the reward + 0.003, 0.002, 0.001."""
    ts = [transition(i, 3, reward=2.0) for i in range(1, 5)]
    metrics, learner = run_update(ts, "algo.old_logprobs=generator", offset=0.1)
    assert metrics["no_spread_roles"] == 1
    for s in learner.trained:  # the reward taken away, the KL left uncentred, not divided by σ ≈ 8e-4 (±1.22)
        assert torch.allclose(s.advantages, torch.tensor([0.003, 0.002, 0.001]), atol=1e-6)
    metrics, learner = run_update([transition(1, 3, reward=2.0), transition(2, 3, reward=9.0)])
    assert metrics["no_spread_roles"] == 0
    assert learner.trained[0].advantages.mean() < 0 < learner.trained[1].advantages.mean()
