"""Labels, the split by task, and the prompt/reply format a trained judge learns."""
from __future__ import annotations

import pytest

from mappa_envs.coach.judge import prompt_messages, target_reply
from mappa_envs.coach.parse import parse_reply
from mappa_envs.coach.prompts import coach_messages, load_template
from mappa_train.coach_training.examples import LabelError, from_labels, from_transcripts, split_by_task
from mappa_train.coach_training.train import heldout_dataset
from tests.train.coach_training.conftest import chain_examples


@pytest.mark.parametrize("reply", ["json", "text"])
@pytest.mark.parametrize("score", [0.0, 1.5, 7.0, 10.0])
def test_the_target_reply_parses_back_to_its_score(reply, score):
    verdict = parse_reply(target_reply(score, 'a "quoted" rationale\nSCORE: 3', reply))
    assert verdict.score == score
    assert verdict.problem is None


def test_the_prompt_is_the_llm_coachs_own():
    request = chain_examples(1)[0].request
    assert prompt_messages(request, "json") == coach_messages(load_template("Chain-v0"), request, 8000, True)
    assert prompt_messages(request, "text") == coach_messages(load_template("Chain-v0"), request, 8000, False)


def test_no_task_lands_on_both_sides_of_the_split():
    examples = chain_examples(60)
    train, held = split_by_task(examples, 0.3, seed=1)
    assert {e.task_key for e in train}.isdisjoint({e.task_key for e in held})
    assert 0.1 < len(held) / len(examples) < 0.5
    assert len(train) + len(held) == len(examples)
    assert split_by_task(examples, 0.3, seed=1)[1] == held  # seeded: the same held-out tasks every time
    assert split_by_task(examples, 0.3, seed=2)[1] != held
    with pytest.raises(LabelError, match="fraction"):
        split_by_task(examples, 1.0)


def test_transcripts_are_labelled_by_the_rule_coach_from_their_checks(chain_transcripts):
    examples = from_transcripts([chain_transcripts.parent])
    assert len(examples) == 12
    assert sorted({(e.request.checks["step_correct"], e.score) for e in examples}) == [(False, 1.5), (True, 8.5)]
    assert all(e.request.context.startswith("Start at") and e.source == "rule" for e in examples)
    with pytest.raises(LabelError, match="no transcripts"):
        from_transcripts([_empty(chain_transcripts)])


def _empty(path):
    empty = path.parent / "empty"
    empty.mkdir()
    return empty


def test_heldout_actions_become_a_labels_dataset_that_reads_back(tmp_path):
    examples = chain_examples(3)
    heldout_dataset(examples).save_to_disk(str(tmp_path / "heldout"))
    back = from_labels(tmp_path / "heldout")
    assert [(b.request.action, b.request.checks, b.score) for b in back] == \
        [(e.request.action, e.request.checks, e.score) for e in examples]
    with pytest.raises(LabelError, match="not a labels dataset"):
        from_labels(tmp_path / "missing")
