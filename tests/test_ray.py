"""Ray mode smoke run on CPU: 2 rollout workers and 2 learner ranks (one DeepSpeed world) as actors."""
from __future__ import annotations

import pytest

from mappa_train.config import load_config
from mappa_train.metrics import read_metrics
from tests.test_train import TINY

pytestmark = pytest.mark.slow


def test_ray_mode_trains_and_matches_the_episode_count(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from mappa_train.ray_mode import train_with_ray

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        cfg = load_config(None, TINY + [f"out_dir={tmp_path}", "steps=1", "eval_every=1", "ray.enabled=true",
                                        "ray.rollout_workers=2", "ray.learner_ranks=2", "ray.cpus_per_worker=1",
                                        "rollout.prompts_per_step=3", "log.tensorboard=false"])
        out = train_with_ray(cfg)
    finally:
        ray.shutdown()
    rows = read_metrics(out / "metrics.jsonl")
    train = [r for r in rows if r["kind"] == "train"]
    assert len(train) == 1 and train[0]["episodes"] == 3 and train[0]["tokens"] > 0 and train[0]["grad_norm"] > 0
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [0, 1]
    assert (out / "final" / "shared" / "model.safetensors").exists()
