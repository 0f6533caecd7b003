"""Labelled actions a tiny judge can learn in a few dozen steps: the verdict follows one check."""
from __future__ import annotations

import json
import random

import pytest

from mappa_envs.coach import CoachRequest
from mappa_train.coach_training.examples import Labelled

RIGHT, WRONG = 8.5, 1.5  # the rule coach's verdicts with step_correct True / False and nothing else


def chain_examples(tasks: int, seed: int = 0) -> list[Labelled]:
    """Two actions per task, one right and one wrong, labelled as the rule coach labels them."""
    rng, out = random.Random(seed), []
    for _ in range(tasks):
        start, step = rng.randrange(2, 40), rng.randrange(1, 9)
        for right in (True, False):
            value = start + step + (0 if right else rng.randrange(1, 5))
            request = CoachRequest(env_id="Chain-v0", role="adder", role_duties="Add your step to the value handed "
                                   "to you.", task=f"Start at {start}; add {step}.", action=f"The value is {value}.",
                                   checks={"step_correct": right})
            out.append(Labelled(request, RIGHT if right else WRONG, f"step_correct={right}", "rule"))
    return out


@pytest.fixture
def chain_transcripts(tmp_path):
    """A `mappa run`-shaped transcripts file: per task one episode with a right and one with a wrong action."""
    path = tmp_path / "run" / "transcripts.jsonl"
    path.parent.mkdir()
    lines = []
    for t in range(6):
        for right in (True, False):
            action = {"role": "adder", "text": f"The value is {t + 3 if right else t + 9}.", "seen": f"Start at {t}; "
                      "add 3.", "checks": {"step_correct": right}, "tool_results": [], "index": 0,
                      "coach": {"score": 8.5 if right else 1.5, "ok": True, "rationale": "rule"}}
            lines.append({"env_id": "Chain-v0", "task_id": f"t{t}", "task": f"Start at {t}; add 3.", "seed": t,
                          "sample": int(not right), "actions": [action], "outcome": {"correct": right}})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path
