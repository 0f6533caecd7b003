"""The driver end to end on a tiny model: experience -> update -> sync -> eval -> checkpoint -> outputs."""
from __future__ import annotations

import json

import pytest
import torch

from mappa_train.checkpoints import latest_checkpoint
from mappa_train.config import load_config
from mappa_train.learner import Sample
from mappa_train.runlog import read_metrics
from mappa_train.train import tasks_for_step

TINY = ["model.path=tiny", "env.kwargs={task_source: synthetic, num_tasks: 16, executor_max_actions: 2}",
        "env.eval_sets={heldout: {split: eval, num_tasks: 4}}", "env.sandbox=local",
        "env.sandbox_kwargs={preimport: []}", "generation.max_new_tokens=12", "generation.max_prompt_tokens=1024",
        "rollout.num_envs=2", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=1",
        "eval_episodes=2", "learner.lr=1e-3", "log.progress=false",
        "algo.mask_length_cut=false",  # a random tiny model rarely stops within 12 tokens: train on cut actions too
        "model.dtype=float32"]  # generator and learner log-probs are compared to 1e-4; bf16 rounding gives ~5e-4
# A random model's actions all score 0 under the rule coach (no answer, no code), so every advantage is 0
# and the first step (policy = reference, KL 0) has no gradient. Tests of the plumbing that need a step
# to change the weights draw each score uniformly from [0, 10] instead.
SPREAD_SCORES = "env.coach=rule:noise=1.0,mode=random"


def test_episode_logs_keep_the_extracted_answer(tmp_path):
    """Training and eval episode lines carry the answer the env judged (clipped when absurdly long)."""
    from mappa_train.rollout import EpisodeStats
    from mappa_train.runlog import ANSWER_LOG_CHARS, append_eval_episodes, append_train_episodes

    episodes = [EpisodeStats(0, "t0", 1.0, True, 4, 0, False, answer="31"),
                EpisodeStats(1, "t1", 0.0, False, 4, 0, False, answer="4 \\cdot 7 + 3"),
                EpisodeStats(2, "t2", 0.0, False, 4, 0, False, answer="9" * 50_000),
                EpisodeStats(3, "t3", None, None, 1, 0, False, error="boom")]
    append_train_episodes(tmp_path, 3, episodes)
    append_eval_episodes(tmp_path, 3, "heldout", episodes, samples=1)
    for name in ("train_episodes.jsonl", "eval_episodes.jsonl"):
        rows = read_metrics(tmp_path / name)
        assert [r["answer"] for r in rows][:2] == ["31", "4 \\cdot 7 + 3"]
        assert len(rows[2]["answer"]) <= ANSWER_LOG_CHARS + 10
        assert rows[3]["answer"] is None
    assert read_metrics(tmp_path / "train_episodes.jsonl")[3]["error"] == "boom"


def test_tasks_for_step_covers_each_task_once_per_pass():
    cfg = load_config(None, ["rollout.prompts_per_step=3", "rollout.samples_per_prompt=2"])
    ids = [f"t{i}" for i in range(6)]
    first_pass = tasks_for_step(ids, 0, cfg) + tasks_for_step(ids, 1, cfg)
    assert sorted(first_pass[::2]) == ids
    assert first_pass[0] == first_pass[1]  # each task, samples_per_prompt times
    assert tasks_for_step(ids, 2, cfg) == tasks_for_step(ids, 2, cfg)


def test_local_experience_is_an_experience_source(tmp_path):
    """The loop sees experience through the `ExperienceSource` Protocol only."""
    from mappa_train.experience import ExperienceSource
    from mappa_train.factories import local_experience, resolve_model

    cfg = load_config(None, TINY + [f"out_dir={tmp_path}"])
    experience = local_experience(cfg, resolve_model(cfg))
    try:
        assert isinstance(experience, ExperienceSource)
        assert experience.eval_tasks.keys() == {"heldout"}
        assert len(experience.train_tasks) == 16
    finally:
        experience.close()


@pytest.mark.slow
def test_tiny_end_to_end(tmp_path):
    from mappa_train.factories import local_experience, resolve_model
    from mappa_train.train import train

    cfg = load_config(None, TINY + [f"out_dir={tmp_path}", "steps=2", "eval_every=1", "checkpoint_every=1"])
    out = train(cfg)
    rows = read_metrics(out / "metrics.jsonl")
    assert [r["step"] for r in rows if r["kind"] == "train"] == [1, 2]
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [0, 1, 2]
    step = [r for r in rows if r["kind"] == "train"][0]
    assert step["actions"] >= 2
    assert step["tokens"] > 0
    assert "coach/problem_solver" in step
    assert step["kl"] == pytest.approx(0, abs=1e-5)
    assert "heldout/accuracy" in rows[0]
    assert latest_checkpoint(out)[0] == 2
    assert len(list((out / "checkpoints").glob("step_*"))) == 2
    assert (out / "final" / "shared" / "config.json").exists()
    assert (out / "curves.png").stat().st_size > 0
    assert (out / "tb").is_dir()
    assert json.loads((out / "config.json").read_text())["steps"] == 2
    trained = read_metrics(out / "train_episodes.jsonl")  # what each training episode's reward counted
    assert sorted({r["step"] for r in trained}) == [1, 2]
    assert all("answer" in r and "correct" in r for r in trained)
    assert all("answer" in r for r in read_metrics(out / "eval_episodes.jsonl"))

    # token-exact: the learner, synced to the generator, scores the sampled ids as the generator did
    from mappa_train.learner import PolicyLearner

    experience = local_experience(cfg, out / "final" / "shared")
    try:
        result = experience.collect(tasks_for_step(experience.train_tasks, 0, cfg), 123, None)
    finally:
        experience.close()
    learner = PolicyLearner(out / "final" / "shared", cfg.learner, cfg.algo)
    multi = [t for t in result.transitions if t.turn_index > 0]
    samples = [Sample(t.prompt_ids, t.action_ids) for t in result.transitions]
    for t, lp in zip(result.transitions, learner.logprobs(samples)):
        assert torch.allclose(lp, torch.tensor(t.logprobs), atol=1e-4)
    assert len(result.transitions) >= 6
    assert resolve_model(cfg).exists()
    assert all(t.prompt_ids[:len(p.prompt_ids) + len(p.action_ids)] == p.prompt_ids + p.action_ids
               for t in multi for p in result.transitions
               if p.episode_id == t.episode_id and p.role == t.role and p.turn_index == t.turn_index - 1)


@pytest.mark.slow
def test_one_policy_per_role(tmp_path):
    """The paper's setting: each role trains its own model; advantages are still whitened globally.
    checkpoint_every=0 keeps final/ and writes no resume state."""
    from mappa_train.train import train

    cfg = load_config(None, TINY + [f"out_dir={tmp_path}", "steps=1", "eval_every=0", "model.policies=per_role",
                                    "checkpoint_every=0", "log.tensorboard=false", "log.plot=false"])
    out = train(cfg)
    step = [r for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "train"][0]
    roles = ("problem_solver", "code_executor", "verifier")
    assert all(step[f"tokens/{r}"] > 0 for r in roles)
    assert "loss" in step
    assert sorted(p.name for p in (out / "final").iterdir()) == sorted(roles)
    assert latest_checkpoint(out) == (0, None)


@pytest.mark.vllm
@pytest.mark.slow
def test_vllm_generator_stays_in_sync_with_the_learner(tmp_path, monkeypatch):
    """With vLLM-CPU sampling and its logprobs used as PPO's old log-probs, the learner's log-probs of
    the sampled tokens match vLLM's before the first update and again after a weight sync."""
    pytest.importorskip("vllm")
    from mappa_train.train import train

    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    cfg = load_config(None, TINY + [f"out_dir={tmp_path}", "steps=2", "eval_every=0", "generation.backend=vllm",
                                    "algo.old_logprobs=generator", "log.tensorboard=false", "log.plot=false"])
    rows = [r for r in read_metrics(train(cfg) / "metrics.jsonl") if r["kind"] == "train"]
    assert abs(rows[0]["kl"]) < 1e-4  # vLLM's logprobs vs the (identical) reference model
    assert abs(rows[1]["approx_kl"]) < 1e-4
    assert rows[1]["clip_frac"] == 0.0  # after the sync: ratio 1


@pytest.mark.slow
def test_roles_with_their_own_base_models(tmp_path):
    """model.role_paths: the verifier starts from a different (smaller, other-tokenizer) model than the
    others; each policy samples and trains with its own model and tokenizer, token-exactly."""
    from transformers import AutoTokenizer

    from mappa_train.tiny_model import build_tiny_model
    from mappa_train.train import train

    small = build_tiny_model(tmp_path / "small", vocab_size=1024, hidden_size=64, heads=2, kv_heads=1)
    cfg = load_config(None, TINY + [f"out_dir={tmp_path / 'run'}", "steps=2", "eval_every=0", "model.policies=per_role",
                                    f"model.role_paths={{verifier: {small}}}", "log.tensorboard=false",
                                    "log.plot=false"])
    out = train(cfg)
    rows = [r for r in read_metrics(out / "metrics.jsonl") if r["kind"] == "train"]
    assert rows[1]["tokens/verifier"] > 0
    assert rows[1]["logprob_gap_max"] < 1e-4  # both models' generators synced to their own learners
    sizes = {r: json.loads((out / "final" / r / "config.json").read_text())["hidden_size"]
             for r in ("problem_solver", "code_executor", "verifier")}
    assert sizes == {"problem_solver": 128, "code_executor": 128, "verifier": 64}
    vocab = {r: len(AutoTokenizer.from_pretrained(out / "final" / r)) for r in ("problem_solver", "verifier")}
    assert vocab["verifier"] == len(AutoTokenizer.from_pretrained(small)) != vocab["problem_solver"]


@pytest.mark.slow
def test_every_evaluation_plays_the_same_dice(tmp_path):
    """Held-out episodes get the same env and sampling seeds at every evaluation: the same weights
    evaluated at step 0 and at step 8 sample the very same tokens, so a change between two
    evaluations of a run is the policy's, not the dice's."""
    from mappa_train.evaluation.heldout import eval_seed, heldout_metrics
    from mappa_train.factories import local_experience, resolve_model

    cfg = load_config(None, TINY + [f"out_dir={tmp_path}", "generation.eval_temperature=1.0"])
    experience = local_experience(cfg, resolve_model(cfg))
    seen = []
    play = experience.collect

    def recording(tasks, seed, eval_set, offset=0):
        result = play(tasks, seed, eval_set, offset)
        seen.append((seed, [t.action_ids for t in result.transitions]))
        return result

    experience.collect = recording
    try:
        heldout_metrics(cfg, experience, 0)
        heldout_metrics(cfg, experience, 8)
        other = load_config(None, TINY + [f"out_dir={tmp_path}", "seed=1"])
        assert eval_seed(other) != eval_seed(cfg)  # a training seed does move the dice, once for all evaluations
    finally:
        experience.close()
    (s0, ids0), (s8, ids8) = seen
    assert s0 == s8 == eval_seed(cfg)
    assert ids0 == ids8
    assert ids0


def _quickstart_on_a_random_model(tmp_path, *extra):
    """`mappa train --config configs/mathchat_tiny.yaml` on a random tiny model (no warm start), made small:
    at 4 new tokens every action is cut at max_new_tokens, so with mask_length_cut nothing trains."""
    from mappa_cli.main import main

    return main(["train", "--config", "configs/mathchat_tiny.yaml", f"out_dir={tmp_path}", "eval_every=0",
                 "rollout.num_envs=2", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=1",
                 "generation.max_new_tokens=4", "log.progress=false", "log.plot=false", *extra])


@pytest.mark.slow
def test_a_run_that_trains_on_nothing_stops_with_the_cause_and_the_fix(tmp_path, capsys):
    with pytest.warns(UserWarning, match=r"step 1 trained on nothing: trained on 0 of \d+ actions \(\d+ cut at "
                                         r"generation.max_new_tokens=4\); raise generation.max_new_tokens"):
        rc = _quickstart_on_a_random_model(tmp_path, "steps=3")  # max_empty_steps: 3 by default
    assert rc != 0
    err = capsys.readouterr().err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]  # one line, after the model loaders' progress bars
    assert "3 steps in a row trained on nothing" in last
    assert "raise generation.max_new_tokens" in last
    rows = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert [(r["step"], r["actions"]) for r in rows] == [(1, 0.0), (2, 0.0), (3, 0.0)]
    assert all(r["length_cut"] > 0 for r in rows)
    assert not (tmp_path / "final").exists()  # no "done" model


@pytest.mark.slow
def test_max_empty_steps_zero_warns_every_step_and_finishes(tmp_path):
    with pytest.warns(UserWarning, match="trained on nothing") as caught:
        assert _quickstart_on_a_random_model(tmp_path, "steps=2", "max_empty_steps=0") == 0
    assert sorted({str(w.message).split(" trained")[0] for w in caught if "trained on nothing" in str(w.message)}) \
        == ["step 1", "step 2"]


@pytest.mark.slow
def test_actions_lost_to_the_coach_are_warned_with_its_error(tmp_path):
    """A judge that fails on some actions (here every step_2 action, over real HTTP) thins the update; the
    step says how many were lost and the coach's own error, and a step that loses them all stops with it."""
    from mappa_train.health import NothingTrained
    from mappa_train.train import train
    from tests.openai_stub import StubServer

    def respond(body: dict) -> str:
        return "I would rather not say." if "You are step_2" in json.dumps(body) else "SCORE: 7"

    chain = ["model.path=tiny", "steps=1", "eval_every=0", "generation.max_new_tokens=12", "algo.mask_length_cut=false",
             "env.kwargs={depth: 2, num_tasks: 4, max_actions: 1}", "rollout.num_envs=2",
             "rollout.prompts_per_step=2", "rollout.samples_per_prompt=1", "log.progress=false", "max_empty_steps=1"]
    with StubServer(respond=respond) as stub:
        coach = [f"env.coach=judge@{stub.url}", "env.coach_kwargs={max_retries: 0}"]
        with pytest.warns(UserWarning, match=r"step 1: 2 actions lost to coach failures were left out of the update "
                                             r"\(first error: .*score"):
            train(load_config("configs/chain.yaml", [*chain, *coach, f"out_dir={tmp_path / 'some'}"]))
        stub.respond = lambda body: "I would rather not say."
        with pytest.raises(NothingTrained, match=r"4 lost to coach failures: first error: .*score"):
            train(load_config("configs/chain.yaml", [*chain, *coach, f"out_dir={tmp_path / 'all'}"]))
