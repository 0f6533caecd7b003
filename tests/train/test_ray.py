"""Ray mode on CPU: a smoke run (2 rollout workers, 2 learner ranks as actors), and learner ranks on two
Ray nodes rendezvousing at rank 0's node address and shipping weights once through the object store."""
from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from mappa_train.config import load_config
from mappa_train.runlog import read_metrics
from tests.train.test_train import SPREAD_SCORES, TINY

pytestmark = pytest.mark.slow


def test_ray_mode_trains_and_matches_the_episode_count(tmp_path, monkeypatch):
    ray = pytest.importorskip("ray")
    from mappa_train.ray_mode import train_with_ray

    monkeypatch.setenv("DS_ACCELERATOR", "cpu")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    # address="local": a fresh cluster of our own, never one another process left running on this machine
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        cfg = load_config(None, TINY + [SPREAD_SCORES, f"out_dir={tmp_path}", "steps=1", "eval_every=1",
                                        "ray.enabled=true", "ray.rollout_workers=2", "ray.learner_ranks=2",
                                        "ray.cpus_per_worker=1", "rollout.prompts_per_step=3", "log.tensorboard=false"])
        out = train_with_ray(cfg)
    finally:
        ray.shutdown()
    rows = read_metrics(out / "metrics.jsonl")
    train = [r for r in rows if r["kind"] == "train"]
    assert len(train) == 1
    assert train[0]["episodes"] == 3
    assert train[0]["tokens"] > 0
    assert train[0]["grad_norm"] > 0
    assert [r["step"] for r in rows if r["kind"] == "eval"] == [0, 1]
    assert (out / "final" / "shared" / "model.safetensors").exists()


def test_learner_ranks_on_two_nodes_meet_at_rank_zeros_node_and_put_weights_once(tmp_path):
    """Two Ray nodes (ray.cluster_utils.Cluster), one learner rank on each: the rendezvous is rank 0's
    node address from the cluster, not loopback, and only rank 0 puts the weights in the object store."""
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    from mappa_train.ray_mode import LearnerGroup, LearnerRankImpl, start_learners
    from mappa_train.tiny_model import build_tiny_model
    from tests.train.test_learner import make_samples

    model = str(build_tiny_model(tmp_path / "m", vocab_size=512, hidden_size=64, layers=2, heads=2, kv_heads=1))
    cfg = load_config(None, [f"out_dir={tmp_path}", "learner.micro_batch_size=2", "learner.lr=1e-3"])
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    try:
        env = {"DS_ACCELERATOR": "cpu", "OMP_NUM_THREADS": "1"}
        Rank = ray.remote(LearnerRankImpl).options(num_cpus=1, runtime_env={"env_vars": env})  # one per node
        group = LearnerGroup([Rank.remote(r, 2, model, cfg, 0) for r in range(2)])
        start_learners({"shared": group})
        addresses = [ray.get(r.rendezvous.remote())[0] for r in group.ranks]
        assert group.master[0] == addresses[0] == ray.util.get_node_ip_address() != "127.0.0.1"
        assert len({n["NodeID"] for n in ray.nodes() if n["Alive"]}) == 2
        samples = make_samples(4)
        for s, lp in zip(samples, group.logprobs(samples)):
            s.old_logp, s.advantages = lp, torch.ones(len(s.action_ids))
        assert group.train(samples, lr=1e-3)["grad_norm"] > 0  # one DeepSpeed world across the two nodes
        # each rank trained on copies: the first step's log-probs come back to the driver's samples
        assert all(torch.allclose(s.first_logp, s.old_logp, atol=1e-5) for s in samples)
        refs = ray.get([r.weights_ref.remote() for r in group.ranks])
        assert isinstance(refs[0], ray.ObjectRef)
        assert refs[1] is None  # one copy, from rank 0
        ref = group.state_dict()
        assert isinstance(ref, ray.ObjectRef)  # the driver passes a reference, never the tensors
        trained, start = ray.get(ref), AutoModelForCausalLM.from_pretrained(model).state_dict()
        assert set(start) <= set(trained)
        assert not torch.equal(trained["lm_head.weight"], start["lm_head.weight"])
    finally:
        ray.shutdown()
        cluster.shutdown()
