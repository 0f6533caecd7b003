"""`mappa export pairs`: DPO pairs and SFT rows, and one DPOTrainer step on the tiny model."""
from __future__ import annotations

import pytest

from mappa_train.coach_training.examples import LabelError
from mappa_train.coach_training.pairs import export_pairs, judged_actions, pairs_and_sft
from mappa_train.export import ExportError
from mappa_train.review.verdicts import Verdict, VerdictStore


def test_actions_of_one_role_on_one_state_that_differ_in_verdict_become_pairs(chain_transcripts):
    pairs, sft = pairs_and_sft(judged_actions(chain_transcripts))
    assert len(pairs) == 6  # one per task: the right action (8.5) over the wrong one (1.5)
    assert all(p["chosen_score"] == 8.5 and p["rejected_score"] == 1.5 and p["why"] == "same-state" for p in pairs)
    assert all(p["prompt"].startswith("Start at") and p["chosen"] != p["rejected"] for p in pairs)
    assert [s["completion"] for s in sft] == [p["chosen"] for p in pairs]


def test_a_human_verdict_overrules_the_recorded_coach(chain_transcripts):
    db = chain_transcripts.parent / "review.sqlite"
    store = VerdictStore(db)
    about = {"env_id": "Chain-v0", "task_id": "t0", "role": "adder", "request": {}}
    store.add(chain_transcripts, 2, 0, Verdict(9.0, None, "", "ann"), about)  # task 0's wrong action: called right
    store.close()
    actions = judged_actions(chain_transcripts.parent)
    assert [(a.verdict, a.by) for a in actions[:2]] == [(8.5, "recorded"), (9.0, "human")]
    pairs, sft = pairs_and_sft(actions)
    assert len(pairs) == 5  # task 0's two actions no longer differ
    assert sft[-1]["why"] == "overruled:human"
    assert sft[-1]["completion"] == "The value is 9."
    with pytest.raises(LabelError, match="does not exist"):
        judged_actions(chain_transcripts, db=chain_transcripts.parent / "other.sqlite")


def test_export_writes_trl_columns_and_never_into_a_non_empty_folder(chain_transcripts, tmp_path):
    import datasets

    (tmp_path / "out.partial").mkdir()  # a user's folder that only looks like a leftover
    (tmp_path / "out.partial" / "mine.txt").write_text("keep")
    assert export_pairs(chain_transcripts, tmp_path / "out") == (6, 6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.partial", "run"]  # nothing left aside
    assert (tmp_path / "out.partial" / "mine.txt").read_text() == "keep"
    pairs = datasets.load_from_disk(str(tmp_path / "out" / "pairs"))
    sft = datasets.load_from_disk(str(tmp_path / "out" / "sft"))
    assert {"prompt", "chosen", "rejected"} <= set(pairs.column_names)
    assert {"prompt", "completion"} <= set(sft.column_names)
    with pytest.raises(ExportError, match="already exists"):
        export_pairs(chain_transcripts, tmp_path / "out")
    with pytest.raises(LabelError, match=r"no two actions .* \(0 of 12 actions carry no verdict\)"):
        export_pairs(chain_transcripts, tmp_path / "none", margin=10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "out.partial", "run"]


@pytest.mark.slow
def test_dpo_trainer_takes_a_step_on_the_pairs(chain_transcripts, tmp_path, tiny_model_dir):
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    export_pairs(chain_transcripts, tmp_path / "out")
    pairs = datasets.load_from_disk(str(tmp_path / "out" / "pairs")).select_columns(["prompt", "chosen", "rejected"])
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    before = [p.detach().clone() for p in model.parameters()]
    args = DPOConfig(output_dir=str(tmp_path / "dpo"), max_steps=1, per_device_train_batch_size=2, report_to=[],
                     use_cpu=True, save_strategy="no", logging_steps=1, learning_rate=1e-3)
    trainer = DPOTrainer(model=model, args=args, train_dataset=pairs,
                         processing_class=AutoTokenizer.from_pretrained(tiny_model_dir))
    result = trainer.train()
    assert result.global_step == 1
    assert torch.isfinite(torch.tensor(result.training_loss))
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
