"""Ray mode: rollout workers and learner ranks as Ray actors, placed by their resource requests.

The driver loop is `mappa_train.train.train`, unchanged; this module only swaps where its two halves
run. `ray.address=""` starts Ray on this machine; on a cluster run `ray start --head` / `ray start
--address=...` on each node and set `ray.address=auto`.

- `RolloutWorker` actors each own `rollout.num_envs` envs and a generator per policy; a step's tasks
  are split across them in order, and episode seeds are the same as in local mode, so results do
  not depend on the number of workers (up to the sampling seed of each generate call).
- Each policy gets `ray.learner_ranks` `LearnerRank` actors forming one DeepSpeed world; its
  rendezvous is rank 0's node IP (as Ray sees it) and a port free on that node, so the ranks may sit
  on different machines. `LearnerGroup` shards samples over them and is one `learner.Learner`.
- After each update every rank takes part in gathering the weights (collective under ZeRO-3), but
  only rank 0 puts them in the object store, once; the driver passes the reference on and each
  rollout worker reads the one copy (the driver never holds the weights).

On a cluster, `model.path` and `out_dir` must be visible to every node (a shared filesystem): actors
load the starting weights from it and every rank writes its share of each checkpoint there.
"""
from __future__ import annotations

import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path

from mappa_train.config import TrainConfig
from mappa_train.learner import PolicyLearner, Sample
from mappa_train.rollout import Rollout


def _ray():
    try:
        import ray
    except ImportError as e:
        raise ImportError("Ray mode needs ray: pip install 'mappa[ray]'") from e
    return ray


def _resolve(weights: Mapping[str, object]) -> dict[str, dict]:
    """{policy: state dict or ObjectRef} -> {policy: state dict}."""
    ray = _ray()
    return {k: ray.get(v) if isinstance(v, ray.ObjectRef) else v for k, v in weights.items()}


class RolloutWorkerImpl:
    """Envs and generators in a Ray actor; `collect` runs a slice of a step's episodes."""

    def __init__(self, cfg: TrainConfig, model_path: str):
        from mappa_train.factories import local_experience

        self.local = local_experience(cfg, model_path)

    def info(self) -> tuple[list[str], dict[str, list[str]], dict[str, str]]:
        return self.local.train_tasks, self.local.eval_tasks, self.local.policy_of

    def collect(self, task_ids: list[str], seed: int, eval_set: str | None, offset: int) -> Rollout:
        return self.local.collect(task_ids, seed, eval_set, offset)

    def load_weights(self, weights: dict[str, object]) -> None:
        self.local.sync(_resolve(weights))

    def close(self) -> None:
        self.local.close()


class LearnerRankImpl:
    """One DeepSpeed rank of one policy's learner, in a Ray actor: `rendezvous` on rank 0, then `start`."""

    def __init__(self, rank: int, world: int, model_path: str, cfg: TrainConfig, pad_id: int):
        self.rank, self.world, self.model_path, self.cfg, self.pad_id = rank, world, model_path, cfg, pad_id
        self.learner: PolicyLearner | None = None

    def rendezvous(self) -> tuple[str, int]:
        """This actor's node IP and a port free on it: where the other ranks find rank 0."""
        return _ray().util.get_node_ip_address(), _free_port()

    def start(self, master_addr: str, master_port: int) -> None:
        os.environ.update(RANK=str(self.rank), LOCAL_RANK="0", WORLD_SIZE=str(self.world), LOCAL_WORLD_SIZE="1",
                          MASTER_ADDR=master_addr, MASTER_PORT=str(master_port))
        from mappa_train.learner import build_learner

        self.learner = build_learner(self.cfg, self.model_path, self.pad_id)

    def logprobs(self, samples: list[Sample], reference: bool) -> list:
        return self.learner.logprobs(samples, reference)

    def train(self, samples: list[Sample], lr: float) -> tuple[dict[str, float], list]:
        """The metrics, and the first-step log-probs the learner kept on these copies of the samples."""
        return self.learner.train(samples, lr), [s.first_logp for s in samples]

    def weights_ref(self):
        """Gather the weights (every rank: collective); rank 0 puts them in the object store, once."""
        state = self.learner.state_dict()
        return _ray().put(state) if self.rank == 0 else None

    def save_checkpoint(self, ckpt_dir: str) -> None:
        self.learner.save_checkpoint(ckpt_dir)

    def load_checkpoint(self, ckpt_dir: str) -> None:
        self.learner.load_checkpoint(ckpt_dir)

    def save_pretrained(self, out_dir: str) -> None:
        self.learner.save_pretrained(out_dir)


class LearnerGroup:
    """A policy's learner ranks, one `learner.Learner` to the driver: samples are sharded over the ranks."""

    rank = 0
    frozen = False

    def __init__(self, ranks: list):
        self.ranks = ranks
        self.master: tuple[str, int] | None = None  # rank 0's (node IP, port), set by start_learners

    def _shards(self, samples: list[Sample]) -> list[list[Sample]]:
        return [samples[i::len(self.ranks)] for i in range(len(self.ranks))]

    def logprobs(self, samples: list[Sample], reference: bool = False) -> list:
        parts = _ray().get([r.logprobs.remote(s, reference) for r, s in zip(self.ranks, self._shards(samples))])
        out = [None] * len(samples)
        for i, part in enumerate(parts):
            out[i::len(self.ranks)] = part
        return out

    def train(self, samples: list[Sample], lr: float) -> dict[str, float]:
        shards = self._shards(samples)
        parts = _ray().get([r.train.remote(s, lr) for r, s in zip(self.ranks, shards)])
        for shard, (_, firsts) in zip(shards, parts):  # the ranks trained on copies: bring back what they kept
            for s, first in zip(shard, firsts):
                s.first_logp = first
        return parts[0][0]  # metrics are already reduced over ranks

    def state_dict(self):
        """An ObjectRef to the full weights (one copy in the object store), for `RayExperience.sync`."""
        return _ray().get([r.weights_ref.remote() for r in self.ranks])[0]

    def save_checkpoint(self, ckpt_dir) -> None:
        _ray().get([r.save_checkpoint.remote(str(ckpt_dir)) for r in self.ranks])

    def load_checkpoint(self, ckpt_dir) -> None:
        _ray().get([r.load_checkpoint.remote(str(ckpt_dir)) for r in self.ranks])

    def save_pretrained(self, out_dir) -> None:
        _ray().get([r.save_pretrained.remote(str(out_dir)) for r in self.ranks])


def start_learners(groups: Mapping[str, LearnerGroup]) -> None:
    """Every group's ranks rendezvous at their rank 0's node and start their engines, all groups at once."""
    ray = _ray()
    masters = ray.get([g.ranks[0].rendezvous.remote() for g in groups.values()])
    for group, master in zip(groups.values(), masters):
        group.master = master
    ray.get([r.start.remote(*g.master) for g in groups.values() for r in g.ranks])


class RayExperience:
    """`experience.ExperienceSource` over Ray rollout workers: each gets a contiguous slice of the episodes."""

    coach = None  # each worker's envs have their own coach: none is checkpointed

    def __init__(self, workers: list):
        self.workers = workers
        self.train_tasks, self.eval_tasks, self.policy_of = _ray().get(workers[0].info.remote())

    def collect(self, task_ids: Sequence[str], seed: int, eval_set: str | None, offset: int = 0) -> Rollout:
        n = len(self.workers)
        bounds = [len(task_ids) * i // n for i in range(n + 1)]
        return Rollout.merge(_ray().get([
            w.collect.remote(list(task_ids[bounds[i]:bounds[i + 1]]), seed, eval_set, offset + bounds[i])
            for i, w in enumerate(self.workers) if bounds[i + 1] > bounds[i]]))

    def sync(self, weights: Mapping[str, object]) -> None:
        """Weights as ObjectRefs (LearnerGroup.state_dict) or dicts (put once here); every worker reads the copy."""
        ray = _ray()
        refs = {k: v if isinstance(v, ray.ObjectRef) else ray.put(v) for k, v in weights.items()}
        ray.get([w.load_weights.remote(refs) for w in self.workers])

    def close(self) -> None:
        _ray().get([w.close.remote() for w in self.workers])


def train_with_ray(cfg: TrainConfig) -> Path:
    """`train.train` with rollout workers and learner ranks as Ray actors."""
    ray = _ray()

    from mappa_train.factories import resolve_checked_model
    from mappa_train.policy_layout import pad_id, policy_layout
    from mappa_train.train import train

    model_path = str(resolve_checked_model(cfg))  # before any actor starts
    if not ray.is_initialized():
        ray.init(address=cfg.ray.address or None, include_dashboard=False, log_to_driver=True)
    env_vars = {k: os.environ[k] for k in ("DS_ACCELERATOR", "OMP_NUM_THREADS") if k in os.environ}
    options = dict(num_cpus=cfg.ray.cpus_per_worker, num_gpus=cfg.ray.gpus_per_worker,
                   runtime_env={"env_vars": env_vars})
    Worker = ray.remote(RolloutWorkerImpl).options(**options)
    Rank = ray.remote(LearnerRankImpl).options(**options)
    workers = [Worker.remote(cfg, model_path) for _ in range(cfg.ray.rollout_workers)]
    experience = RayExperience(workers)
    names = sorted(set(experience.policy_of.values()))
    paths = {name: str(path) for name, path in policy_layout(cfg).starts(names, model_path).items()}
    learners = {name: LearnerGroup([Rank.remote(r, cfg.ray.learner_ranks, paths[name], cfg, pad_id(paths[name]))
                                    for r in range(cfg.ray.learner_ranks)])
                for name in names}
    start_learners(learners)
    try:
        return train(cfg, experience=experience, learners=learners)
    finally:
        for actor in workers + [r for g in learners.values() for r in g.ranks]:
            ray.kill(actor)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))  # any interface: the other ranks connect from other machines
        return s.getsockname()[1]
