"""Finding the checkpoint a run resumes from (mappa_train/checkpoints.py)."""
from __future__ import annotations

import json

import pytest

from mappa_train.checkpoints import latest_checkpoint

pytestmark = pytest.mark.unit


def test_the_newest_readable_checkpoint_is_the_one_to_resume_from(tmp_path):
    """A state.json cut short (a run killed while writing it) or one without a step marks no checkpoint;
    a step folder without one is still being written."""
    ckpts = tmp_path / "checkpoints"
    for step, state in [(1, {"step": 1}), (2, {"step": 2}), (3, None), (4, "{\"st"), (5, {"stage": 5})]:
        (ckpts / f"step_{step:06d}").mkdir(parents=True)
        if state is not None:
            text = state if isinstance(state, str) else json.dumps(state)
            (ckpts / f"step_{step:06d}" / "state.json").write_text(text)
    assert latest_checkpoint(tmp_path) == (2, ckpts / "step_000002")
    assert latest_checkpoint(tmp_path / "elsewhere") == (0, None)
