"""`mappa quickstart` end to end at a reduced size: tiny model, warm start, MAPPA, report and plot."""
import pytest

from mappa_cli.main import main

pytestmark = pytest.mark.slow


def test_quickstart_small(tmp_path):
    out = tmp_path / "qs"
    rc = main(["quickstart", "--out", str(out), "--sft-episodes", "4", "--sft-steps", "3", "steps=1", "eval_every=1",
               "eval_episodes=2", "rollout.num_envs=2", "rollout.prompts_per_step=2", "rollout.samples_per_prompt=1",
               "generation.max_new_tokens=16", "log.progress=false"])
    assert rc == 0
    report = (out / "report.md").read_text()
    assert "| heldout/accuracy |" in report and "Warm start: 3 supervised steps" in report
    assert (out / "curves.png").exists() and (out / "sft_model" / "warm_start.json").exists()
    assert (out / "final" / "shared" / "tokenizer.json").exists()
