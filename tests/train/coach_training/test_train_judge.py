"""A judge trained on labelled actions ranks held-out actions better than the untrained one, loads as a
served coach through `make_coach`, and its replies parse with the coach's own parse."""
from __future__ import annotations

import json
import random

import pytest

from mappa_envs.coach import make_coach
from mappa_envs.coach.judge import LocalJudge, auroc_of
from mappa_train.coach_training.examples import LabelError, from_labels, split_by_task
from mappa_train.coach_training.train import HELDOUT_DIR, RECORD, JudgeTrainConfig, sampler, train_judge
from mappa_train.export import ExportError
from tests.openai_stub import StubServer
from tests.train.coach_training.conftest import chain_examples

# 96 tokens keep the end of the coach's prompt (the checks and the reply format): cheap on a loaded CPU
CONFIG = dict(steps=60, batch_size=8, lr=2e-3, lora=False, rationale_chars=0, max_tokens=96, seed=0)


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    train, held = split_by_task(chain_examples(20), 0.3, seed=0)
    out = tmp_path_factory.mktemp("judge") / "judge"
    record = train_judge(train, held, out, JudgeTrainConfig(model=tiny_model_dir, **CONFIG), say=lambda _: None)
    return out, held, record


@pytest.mark.slow
def test_training_moves_heldout_auroc_above_the_untrained_judge(trained, tiny_model_dir):
    out, held, record = trained
    requests, labels = [e.request for e in held], [e.score >= 5 for e in held]
    assert record["heldout_tasks"] >= 3
    assert record["loss_last"] < record["loss_first"]
    before, _ = auroc_of(LocalJudge(tiny_model_dir, max_new_tokens=24), requests, labels)
    after, unscored = auroc_of(LocalJudge(out, max_new_tokens=24), requests, labels)
    assert unscored == 0
    assert after >= 0.9
    assert after > before


@pytest.mark.slow
def test_the_trained_folder_is_a_served_coach_whose_replies_parse(trained):
    out, held, _ = trained
    judge = LocalJudge(out, max_new_tokens=24)
    with StubServer(respond=lambda body: judge.answer(body["messages"])) as stub:  # stands in for vLLM
        coach = make_coach(f"judge@{stub.url}", {"structured_output": "true", "max_tokens": "24"})
        verdicts = [coach.score(e.request) for e in held[:4]]
    assert [v.score for v in verdicts] == [e.score for e in held[:4]]
    assert stub.requests[0]["response_format"]["json_schema"]["name"] == "coach_verdict"


@pytest.mark.slow
def test_the_folder_holds_its_record_and_its_heldout_tasks(trained):
    out, held, record = trained
    assert (out / "config.json").is_file()
    assert json.loads((out / RECORD).read_text())["config"]["seed"] == 0
    back = from_labels(out / HELDOUT_DIR)
    assert [b.request.task for b in back] == [e.request.task for e in held]
    with pytest.raises(ExportError, match="not an empty folder"):
        train_judge(held, [], out, JudgeTrainConfig(model=str(out), **CONFIG))


def test_balance_draws_right_and_wrong_actions_in_turn():
    scores = [9.0] * 18 + [2.0, 0.0]  # 90 % right, as rule labels mostly are
    plain = sampler(scores, False, random.Random(0))
    assert sorted(plain() for _ in range(20)) == list(range(20))  # one shuffled pass over all of them
    balanced = sampler(scores, True, random.Random(0))
    drawn = [scores[balanced()] >= 5 for _ in range(20)]
    assert sum(drawn) == 10
    assert all(a != b for a, b in zip(drawn, drawn[1:]))


def test_balance_needs_right_and_wrong_actions():
    with pytest.raises(LabelError, match="--balance needs right .* all right"):
        sampler([9.0, 8.5], True, random.Random(0))


def test_top_layers_trains_only_the_top_layers(tiny_model_dir, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    with pytest.raises(LabelError, match="--top-layers N"):
        JudgeTrainConfig(top_layers=1).check()  # LoRA is the default
    with pytest.raises(LabelError, match="more than the model's 2 layers"):
        train_judge(chain_examples(2), [], tmp_path / "x", JudgeTrainConfig(model=tiny_model_dir, lora=False,
                                                                            top_layers=3, max_tokens=96))
    train, _ = split_by_task(chain_examples(4), 0.0)
    cfg = JudgeTrainConfig(model=tiny_model_dir, lora=False, top_layers=1, steps=2, batch_size=2, lr=1e-2,
                           rationale_chars=0, max_tokens=96, balance=True)
    train_judge(train, [], tmp_path / "judge", cfg, say=lambda _: None)
    before = AutoModelForCausalLM.from_pretrained(tiny_model_dir).state_dict()
    after = AutoModelForCausalLM.from_pretrained(tmp_path / "judge").state_dict()
    changed = {k for k in before if not torch.equal(before[k], after[k])}
    assert changed
    assert all(k.startswith(("model.layers.1.", "model.norm.")) for k in changed), sorted(changed)


@pytest.mark.slow
def test_expected_readout_ranks_heldout_actions_and_reads_their_scores(trained, tiny_model_dir):
    out, held, _ = trained
    requests, labels = [e.request for e in held], [e.score >= 5 for e in held]
    judge = LocalJudge(out, readout="expected")
    after, unscored = auroc_of(judge, requests, labels)
    assert unscored == 0
    assert after >= 0.9
    values = [judge.score(r).score for r in requests]
    # labels are 8.5 and 1.5: the integer part is read, and a "1" before "." is not taken for 10
    assert all((7.0 <= v <= 9.0) if y else (0.5 <= v <= 2.5) for v, y in zip(values, labels)), values
    untrained = LocalJudge(tiny_model_dir, readout="expected")  # never writes the format, still read
    assert all(0.0 <= untrained.score(r).score <= 9.9 for r in requests[:2])


@pytest.mark.slow
def test_judge_folder_is_a_coach_a_training_run_trains_against(trained, tmp_path):
    """`judge:FOLDER` is the expected readout in-process; a Chain-v0 step is scored by it and trains."""
    from mappa_train.config import load_config
    from mappa_train.runlog import read_metrics
    from mappa_train.train import train

    out, held, _ = trained
    coach = make_coach(f"judge:{out}")
    reference = LocalJudge(out, readout="expected")
    assert [coach.score(e.request).score for e in held[:3]] == [reference.score(e.request).score for e in held[:3]]
    chain = ["model.path=tiny", "steps=1", "eval_every=0", "generation.max_new_tokens=12",
             "algo.mask_length_cut=false", "env.kwargs={depth: 2, num_tasks: 4, max_actions: 1}",
             "rollout.num_envs=2", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=1",
             "log.progress=false", f"env.coach=judge:{out}", f"out_dir={tmp_path}"]
    train(load_config("configs/chain.yaml", chain))
    (row,) = [r for r in read_metrics(tmp_path / "metrics.jsonl") if r["kind"] == "train"]
    assert row["actions"] > 0
    assert row["coach_failures"] == 0
    assert 0.0 <= row["score"] <= 10.0


def test_judge_spec_refuses_a_missing_folder_and_settings(tmp_path):
    from mappa_envs.coach import CoachConfigError

    with pytest.raises(CoachConfigError, match=r"no model folder there .*mappa coach-train"):
        make_coach(f"judge:{tmp_path / 'nothing'}")
    with pytest.raises(CoachConfigError, match="names no folder"):
        make_coach("judge: ")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(CoachConfigError, match="has no settings"):
        make_coach(f"judge:{tmp_path}", {"max_tokens": "24"})
