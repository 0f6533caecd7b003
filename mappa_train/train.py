"""The MAPPA driver: rollout; update; sync weights into the generator; evaluate every N; checkpoint.

    for step in range(start, cfg.steps):
        evaluate (every eval_every steps)
        transitions = rollout(tasks of this step)             # B envs, batched generation
        metrics = update(learners, transitions)               # KL, token rewards, returns, whitening, PPO
        sync generator weights from the learners
        log metrics; checkpoint

Determinism and resume: everything random in step N (its tasks, env seeds, sampling seeds) derives
from (cfg.seed, N), and a checkpoint holds the learners' model and optimizer states. A run killed
at any point and restarted with the same out_dir resumes after its last checkpoint: it neither
skips nor repeats a step's experience, and (on CPU, seeded) logs the same metrics the uninterrupted
run would have.
"""
from __future__ import annotations

import json
import random
import shutil
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer

from mappa_envs.coach.stateful import coach_metrics, load_coach_state, plot_run_corrections, save_coach_state
from mappa_train import algo
from mappa_train.config import ConfigError, TrainConfig, to_dict
from mappa_train.health import EmptySteps, logprob_gap, no_spread_roles, use_available_cpus
from mappa_train.learner import PolicyLearner, Sample, lr_at
from mappa_train.runlog import (
    METRICS_FILE,
    MetricsLogger,
    append_eval_episodes,
    append_train_episodes,
    cpu_seconds,
    plot_curves,
)

SHARED = "shared"


# ---- set-up ----------------------------------------------------------------------------------------

def resolve_model(cfg: TrainConfig) -> Path:
    """The starting checkpoint as a local directory (mappa_train.model_source); 'tiny' is built under out_dir."""
    from mappa_train.model_source import resolve_model as resolve

    return resolve(cfg.model.path, tiny_dir=Path(cfg.out_dir) / "tiny_model", seed=cfg.seed)


def policy_paths(cfg: TrainConfig, names: Iterable[str], default: Path | str) -> dict[str, Path]:
    """policy -> its starting checkpoint: `model.role_paths` for the roles it names (per_role: a policy is
    a role), the resolved `model.path` (`default`) for the rest."""
    from mappa_train.model_source import resolve_model as resolve

    paths = cfg.model.role_paths
    return {n: resolve(paths[n], tiny_dir=Path(cfg.out_dir) / "tiny_model", seed=cfg.seed) if n in paths
            else Path(default) for n in names}


def check_template(cfg: TrainConfig, model_path: Path | str):
    """Refuse, before anything starts, a chat template the rollout cannot prompt token-exactly."""
    from mappa_train.chat_tokens import ChatFormat

    return ChatFormat.of(AutoTokenizer.from_pretrained(model_path), cfg.generation.continuation)


def dry_run(cfg: TrainConfig) -> int:
    """`mappa train --dry-run`: resolve the model, check its template, print the placement plan (placement.py)."""
    from mappa_train.placement import dry_run as check

    return check(cfg)


def make_coach(cfg: TrainConfig):
    """The configured coach, through the one factory training and `mappa eval` share."""
    from mappa_envs.coach import make_coach as build

    return build(cfg.env.coach, cfg.env.coach_kwargs, cfg.env.coach_cache)


def make_envs(cfg: TrainConfig, n: int, overrides: Mapping[str, Any] | None = None, sandbox: Any = None) -> list:
    """`n` envs as configured; they share one coach and (when given) one sandbox."""
    import mappa_envs

    coach = make_coach(cfg)
    kwargs = {**cfg.env.kwargs, **(overrides or {})}
    return [mappa_envs.make(cfg.env.id, coach=coach, sandbox=sandbox or cfg.env.sandbox, **kwargs) for _ in range(n)]


def policy_map(cfg: TrainConfig, roles: Sequence[str]) -> dict[str, str]:
    """role -> policy name: one shared policy, one per role (the paper), or one LoRA adapter per role or group."""
    if cfg.model.policies == "lora":
        from mappa_train.adapters import adapter_map

        return adapter_map(cfg, roles)
    unknown = sorted(set(cfg.model.role_paths) - set(roles))
    if unknown:
        raise ConfigError(f"model.role_paths names roles {unknown} that {cfg.env.id} does not have; "
                          f"its roles: {list(roles)}")
    return {r: (SHARED if cfg.model.policies == "shared" else r) for r in roles}


def tasks_for_step(task_ids: Sequence[str], step: int, cfg: TrainConfig) -> list[str]:
    """The step's tasks: consecutive slices of per-pass seeded shuffles, so every task is used once
    per pass, in an order fixed by the seed; each is repeated samples_per_prompt times."""
    n, per_step = len(task_ids), cfg.rollout.prompts_per_step
    out = []
    for i in range(step * per_step, (step + 1) * per_step):
        order = list(task_ids)
        random.Random(cfg.seed * 1_000_003 + i // n).shuffle(order)
        out.append(order[i % n])
    return [t for t in out for _ in range(cfg.rollout.samples_per_prompt)]


# ---- the update --------------------------------------------------------------------------------------

def update(cfg: TrainConfig, learners: Mapping[str, Any], policy_of: Mapping[str, str], transitions: Sequence,
           lr: float) -> dict[str, float]:
    """One REINFORCE++ update from a step's transitions (see mappa_train.algo); returns metrics."""
    kept = [t for t in transitions if t.coach_ok]  # a failed coach call has no reward to learn from
    env_cut = sum(t.judged_tokens is not None for t in kept)
    kept = [t for t in kept if t.judged_tokens != 0]  # the env kept none of its text
    # an action cut at max_new_tokens has no natural end, so its coach score says little about its
    # tokens: it stays out of the loss, but its rewards still reach earlier actions' returns
    # an action whose inputs an upstream role broke could not succeed: its low score is not its own
    # to learn from (with scope "episode" it still reaches the upstream actions' returns)
    trained = [not (cfg.algo.mask_length_cut and t.finish_reason == "length")
               and not (cfg.algo.mask_excused and t.excused) for t in kept]
    metrics: dict[str, float] = {"actions": float(sum(trained)), "env_cut": float(env_cut),
                                 "length_cut": float(sum(t.finish_reason == "length" for t in kept)),
                                 "excused": float(sum(t.excused for t in kept))}
    if not any(trained):
        return metrics
    # an action the env cut is trained on the ids the sandbox and the coach saw, no more
    judged = [len(t.action_ids) if t.judged_tokens is None else t.judged_tokens for t in kept]
    samples = [Sample(list(t.prompt_ids), list(t.action_ids[:n])) for t, n in zip(kept, judged)]
    gen_lp = [torch.tensor(t.logprobs[:n], dtype=torch.float32) for t, n in zip(kept, judged)]
    ref, learner_lp = [None] * len(kept), [None] * len(kept)
    for name, learner in learners.items():
        idx = [i for i, t in enumerate(kept) if policy_of[t.role] == name]
        if not idx:
            continue
        mine = [samples[i] for i in idx]
        for i, lp in zip(idx, learner.logprobs(mine, reference=True)):
            ref[i] = lp
        for i, lp in zip(idx, learner.logprobs(mine)):  # π_θ_old as the learner sees it
            learner_lp[i] = lp
    old = gen_lp if cfg.algo.old_logprobs == "generator" else learner_lp
    metrics.update(logprob_gap(gen_lp, learner_lp, cfg.algo.logprob_gap_warn))
    # [N, A] tensors over action tokens only: the advantage math never looks at prompts
    mask = torch.nn.utils.rnn.pad_sequence([torch.ones(len(s.action_ids)) for s in samples], batch_first=True)
    old_t = torch.nn.utils.rnn.pad_sequence(old, batch_first=True)
    ref_t = torch.nn.utils.rnn.pad_sequence(ref, batch_first=True)
    reward = torch.tensor([cfg.algo.reward_scale * (t.coach_reward + t.end_reward) for t in kept])
    roles = sorted({t.role for t in kept})
    episodes = {e: i for i, e in enumerate(sorted({str(t.episode_id) for t in kept}))}
    role_id = torch.tensor([roles.index(t.role) for t in kept])
    metrics["no_spread_roles"] = no_spread_roles(reward, role_id, cfg.algo.std_floor)
    task_index = {task: i for i, task in enumerate(sorted({t.task_id for t in kept}))}
    advantages = algo.advantages(
        old_t, ref_t, mask, reward, beta=cfg.algo.beta, kl_in_loss=cfg.algo.kl_in_loss, scope=cfg.algo.scope,
        episode=torch.tensor([episodes[str(t.episode_id)] for t in kept]), agent=role_id,
        order=torch.tensor([t.action_index for t in kept]), normalization=cfg.algo.whiten,
        turn=torch.tensor([t.turn_index for t in kept]), task=torch.tensor([task_index[t.task_id] for t in kept]),
        std_floor=cfg.algo.std_floor)
    for i, s in enumerate(samples):
        n = len(s.action_ids)
        s.old_logp, s.ref_logp, s.advantages = old_t[i, :n], ref_t[i, :n], advantages[i, :n]
    tokens = 0.0
    for name, learner in learners.items():
        mine = [s for s, t, train in zip(samples, kept, trained) if train and policy_of[t.role] == name]
        if mine:
            m = learner.train(mine, lr)
            tokens += m["tokens"]
            for k, v in m.items():
                metrics[k if len(learners) == 1 else f"{k}/{name}"] = v
    kl = algo.kl_k1(old_t, ref_t)
    metrics.update(kl=float((kl * mask).sum() / mask.sum()), reward=float(reward.mean()),
                   action_tokens=float(mask.sum()), lr=lr)
    if len(learners) > 1:  # a token-weighted loss over policies, for the plot
        weighted = (metrics[f"loss/{n}"] * metrics[f"tokens/{n}"] for n in learners if f"loss/{n}" in metrics)
        metrics["loss"] = sum(weighted) / tokens
    return metrics


# ---- checkpoints ---------------------------------------------------------------------------------

def latest_checkpoint(out_dir: Path) -> tuple[int, Path | None]:
    """(finished steps, directory) of the newest complete checkpoint, or (0, None)."""
    done = [(json.loads((d / "state.json").read_text())["step"], d)
            for d in (out_dir / "checkpoints").glob("step_*") if (d / "state.json").exists()]
    return max(done, default=(0, None))


def save_checkpoint(out_dir: Path, step: int, learners: Mapping[str, Any], keep: int, coach: Any = None) -> None:
    ckpt = out_dir / "checkpoints" / f"step_{step:06d}"
    for name, learner in learners.items():
        learner.save_checkpoint(ckpt / name)
    save_coach_state(coach, ckpt)  # a stateful coach's running statistics and corrections (else nothing)
    (ckpt / "state.json").write_text(json.dumps({"step": step}))  # written last: marks it complete
    for old in sorted((out_dir / "checkpoints").glob("step_*"))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)


# ---- the loop -------------------------------------------------------------------------------------

@dataclass
class ExperienceSource:
    """Where experience comes from: local envs (below) or Ray rollout workers (mappa_train.ray_mode)."""

    collect: Callable[..., Any]  # (task ids, seed, eval set or None, offset=0) -> rollout.Rollout
    sync: Callable[[Mapping[str, dict]], None]  # {policy: state_dict}: load new weights into the generators
    train_tasks: list[str]
    eval_tasks: dict[str, list[str]]
    policy_of: dict[str, str]  # role -> policy name
    close: Callable[[], None] = lambda: None
    coach: Any = None  # the training envs' coach: checkpointed with the learners when it keeps state


def sampling_params(cfg: TrainConfig, evaluation: bool):
    from mappa_train.generation import SamplingParams

    g = cfg.generation
    return SamplingParams(max_new_tokens=g.max_new_tokens,
                          temperature=g.eval_temperature if evaluation else g.temperature,
                          top_p=1.0 if evaluation else g.top_p)


def make_generators(cfg: TrainConfig, model_path: Path | str, names: Sequence[str]) -> dict[str, Any]:
    from transformers import AutoConfig

    from mappa_train.generation import make_generator

    g = cfg.generation
    paths = policy_paths(cfg, names, model_path)
    for path in sorted(set(paths.values())):
        limit = getattr(AutoConfig.from_pretrained(path), "max_position_embeddings", None)
        if limit and g.max_prompt_tokens + g.max_new_tokens > limit:
            raise ValueError(f"generation.max_prompt_tokens + max_new_tokens = {g.max_prompt_tokens + g.max_new_tokens}"
                             f" exceeds the context of {path} ({limit}); lower generation.max_prompt_tokens")
    if g.backend == "hf":
        kwargs: dict = {"dtype": torch.bfloat16 if cfg.model.dtype == "bfloat16" else torch.float32}
    else:  # one GPU holds this process's engines: they share vllm_gpu_memory_utilization (vLLM checks the sum)
        kwargs = {"dtype": cfg.model.dtype, "max_model_len": g.max_prompt_tokens + g.max_new_tokens,
                  "gpu_memory_utilization": g.vllm_gpu_memory_utilization / len(names), "seed": cfg.seed}
    if cfg.model.policies == "lora":  # one engine, every adapter: the memory of one policy, not len(names)
        from mappa_train.adapters import lora_generators

        if g.backend == "vllm":
            kwargs["gpu_memory_utilization"] = g.vllm_gpu_memory_utilization
        return lora_generators(cfg, model_path, names, **kwargs)
    return {name: make_generator(g.backend, str(paths[name]), **kwargs) for name in names}


def make_learners(cfg: TrainConfig, model_path: Path | str, names: Sequence[str]) -> dict[str, Any]:
    """policy name -> its learner; in LoRA mode one base model's adapters, each behind the same interface."""
    if cfg.model.policies == "lora":
        from mappa_train.adapters import lora_learners

        return lora_learners(cfg, model_path, names, pad_id(model_path))
    paths = policy_paths(cfg, names, model_path)
    return {name: PolicyLearner(paths[name], cfg.learner, cfg.algo, dtype=cfg.model.dtype, seed=cfg.seed,
                                attn_implementation=cfg.model.attn_implementation,
                                temperature=cfg.generation.temperature, pad_id=pad_id(paths[name]))
            for name in names}


def pad_id(model_path: Path | str) -> int:
    return AutoTokenizer.from_pretrained(model_path).pad_token_id or 0


def local_experience(cfg: TrainConfig, model_path: Path | str) -> ExperienceSource:
    """Envs and generators in this process; `collect` drives B = rollout.num_envs envs at once."""
    from mappa_envs.sandbox import make_sandbox
    from mappa_train.rollout import collect

    sandbox = make_sandbox(cfg.env.sandbox, **cfg.env.sandbox_kwargs)
    envs = {None: make_envs(cfg, cfg.rollout.num_envs, sandbox=sandbox)}
    for name, overrides in cfg.env.eval_sets.items():
        envs[name] = make_envs(cfg, cfg.rollout.num_envs, overrides, sandbox=sandbox)
    policy_of = policy_map(cfg, envs[None][0].possible_agents)
    generators = make_generators(cfg, model_path, sorted(set(policy_of.values())))
    doomed = stop_rule(cfg.rollout.stop_below, envs[None][0].possible_agents)

    def run(task_ids: list[str], seed: int, eval_set: str | None, offset: int = 0):
        """Episodes offset+i get env seed seed+offset+i: a slice of a step plays as in the whole step."""
        episodes = [{"seed": seed + offset + i, "options": {"task_id": t}} for i, t in enumerate(task_ids)]
        return collect(envs[eval_set], generators, sampling_params(cfg, eval_set is not None), episodes,
                       role_policy=policy_of, seed=seed + offset, first_episode_id=offset,
                       max_prompt_tokens=cfg.generation.max_prompt_tokens, workers=cfg.rollout.step_workers,
                       continuation=cfg.generation.continuation, stop=doomed if eval_set is None else None)

    def sync(weights: Mapping[str, dict]) -> None:
        for name, gen in generators.items():
            gen.load_weights(weights[name].items())

    def close() -> None:
        for group in envs.values():
            for env in group:
                env.close()
        sandbox.close()

    eval_tasks = {k: task_ids(v[0]) for k, v in envs.items() if k}
    return ExperienceSource(run, sync, task_ids(envs[None][0]), eval_tasks, policy_of, close,
                            envs[None][0].unwrapped.coach)


def stop_rule(stop_below: Mapping[str, float], roles: Sequence[str]) -> Callable | None:
    """`rollout.stop_below` as the driver's stop rule: an action of a listed role scored below its threshold."""
    if not stop_below:
        return None
    unknown = sorted(set(stop_below) - set(roles))
    if unknown:
        raise ConfigError(f"rollout.stop_below names roles {unknown} that the env does not have; "
                          f"its roles: {list(roles)}")

    def doomed(result, turn) -> str | None:
        limit = stop_below.get(turn.role)
        score = turn.record.reward
        return f"{turn.role} scored {score:g} < {limit:g}" if limit is not None and score < limit else None

    return doomed


def task_ids(env) -> list[str]:
    return [t.id for t in env.unwrapped.tasks]


def train(cfg: TrainConfig, experience: ExperienceSource | None = None,
          learners: Mapping[str, Any] | None = None) -> Path:
    """Run (or resume) training as configured; returns the output directory."""
    from mappa_train.resume import prepare_out_dir

    out = Path(cfg.out_dir)
    prepare_out_dir(cfg)  # refuses a config the run in out_dir cannot resume with, before anything is written
    use_available_cpus()
    torch.manual_seed(cfg.seed)
    model_path = resolve_model(cfg)
    for path in {model_path, *policy_paths(cfg, cfg.model.role_paths, model_path).values()}:
        check_template(cfg, path)
    experience = experience or local_experience(cfg, model_path)
    policy_of = experience.policy_of
    if learners is None:
        learners = make_learners(cfg, model_path, sorted(set(policy_of.values())))
    start, ckpt = latest_checkpoint(out)
    if ckpt is not None:
        for name, learner in learners.items():
            learner.load_checkpoint(ckpt / name)
        load_coach_state(experience.coach, ckpt)
    if ckpt is not None or cfg.model.policies == "lora":  # fresh adapters are random too (A; B = 0)
        experience.sync(_weights(learners))
    log = MetricsLogger(out, cfg.log, resume_step=start, run_config=to_dict(cfg))
    progress = _progress(cfg, start)
    empty = EmptySteps(cfg)
    for step in range(start, cfg.steps):
        if cfg.eval_every and step % cfg.eval_every == 0:
            log.log("eval", step, heldout_metrics(cfg, experience, step, out))
        t0, c0 = time.perf_counter(), cpu_seconds()
        result = experience.collect(tasks_for_step(experience.train_tasks, step, cfg), _seed(cfg, step), None)
        t1, c1 = time.perf_counter(), cpu_seconds()
        metrics = update(cfg, learners, policy_of, result.transitions, lr_at(step, cfg.learner, cfg.steps))
        t2, c2 = time.perf_counter(), cpu_seconds()
        weights = _weights({n: learner for n, learner in learners.items() if not getattr(learner, "frozen", False)})
        experience.sync(weights)
        t3, c3 = time.perf_counter(), cpu_seconds()
        if all(isinstance(w, Mapping) for w in weights.values()):  # Ray passes object refs: not sized here
            metrics["sync_bytes"] = float(sum(t.nbytes for w in weights.values() for t in w.values()))
        metrics.update(_episode_metrics(result), coach_failures=float(result.dropped),
                       prompt_overflows=float(result.overflow), episode_failures=float(result.failed),
                       env_actions=float(sum(e.actions for e in result.episodes)),
                       stopped_episodes=float(sum(e.stopped is not None for e in result.episodes)),
                       time_rollout_s=t1 - t0, time_update_s=t2 - t1, time_sync_s=t3 - t2,
                       cpu_rollout_s=c1 - c0, cpu_update_s=c2 - c1, cpu_sync_s=c3 - c2)
        metrics.update({f"time_{k}": v for k, v in result.timing().items()}, **coach_metrics(experience.coach))
        log.log("train", step + 1, metrics)
        append_train_episodes(out, step + 1, result.episodes)
        empty.check(step + 1, metrics, result, before_stop=lambda: (progress.close(), log.close(), experience.close()))
        if (step + 1) % cfg.checkpoint_every == 0 or step + 1 == cfg.steps:
            save_checkpoint(out, step + 1, learners, cfg.keep_checkpoints, experience.coach)
        progress.update(1)
        progress.set_postfix(reward=f"{metrics.get('reward', float('nan')):.2f}", kl=f"{metrics.get('kl', 0):.4f}")
    progress.close()
    if cfg.eval_every and (start < cfg.steps or not _has_eval(out, cfg.steps)):
        log.log("eval", cfg.steps, heldout_metrics(cfg, experience, cfg.steps, out))
    log.close()
    experience.close()
    paths = policy_paths(cfg, learners, model_path)
    for name, learner in learners.items():
        learner.save_pretrained(out / "final" / name)
        if learner.rank == 0:
            AutoTokenizer.from_pretrained(paths[name]).save_pretrained(out / "final" / name)
    if cfg.model.policies == "lora":
        from mappa_train.adapters import export_merged, write_manifest

        write_manifest(out / "final", Path(model_path).resolve(), policy_of)
        if cfg.lora.export_merged:
            export_merged(out / "final", out / "final" / "merged")
    if cfg.log.plot:
        plot_curves(out / METRICS_FILE, out / "curves.png", title=f"MAPPA on {cfg.env.id}")
        plot_run_corrections(experience.coach, out)  # the stateful coach's offsets over the run (else nothing)
    return out


def heldout_metrics(cfg: TrainConfig, experience: ExperienceSource, step: int,
                    out_dir: Path | None = None) -> dict[str, float]:
    """Accuracy (mean outcome) and coach scores on every eval set, at eval temperature. With `out_dir`,
    each episode's outcome also goes to its eval_episodes.jsonl, for paired comparisons of steps."""
    out: dict[str, float] = {}
    t0, c0 = time.perf_counter(), cpu_seconds()
    for name, tasks in experience.eval_tasks.items():
        chosen = [t for t in tasks[:cfg.eval_episodes] for _ in range(cfg.eval_samples)]
        result = experience.collect(chosen, eval_seed(cfg), name)
        for k, v in _episode_metrics(result).items():
            out[f"{name}/{k}"] = v
        if out_dir is not None:
            append_eval_episodes(out_dir, step, name, result.episodes, cfg.eval_samples)
    out.update(time_eval_s=time.perf_counter() - t0, cpu_eval_s=cpu_seconds() - c0)
    return out


def _episode_metrics(result) -> dict[str, float]:
    """Accuracy (episodes judged correct) and mean outcome score over a rollout's episodes."""
    episodes = result.episodes
    if not episodes:
        return {}
    out = {"accuracy": sum(bool(e.correct) for e in episodes) / len(episodes),
           "score": sum(e.score or 0.0 for e in episodes) / len(episodes), "episodes": float(len(episodes))}
    for role in sorted({t.role for t in result.transitions}):
        mine = [t.coach_reward for t in result.transitions if t.role == role]
        out[f"coach/{role}"] = sum(mine) / len(mine)
    return out


def _weights(learners: Mapping[str, Any]) -> dict[str, dict]:
    return {name: learner.state_dict() for name, learner in learners.items()}


def _seed(cfg: TrainConfig, step: int) -> int:
    return (cfg.seed * 1_000_003 + step * 7919) % (2**31)


def eval_seed(cfg: TrainConfig) -> int:
    """The held-out episodes' seed (env and sampling seeds derive from it): the same at every evaluation,
    so two evaluations of a run differ by the policy only, not by the dice."""
    return _seed(cfg, 0) + 7


def _has_eval(out: Path, step: int) -> bool:
    from mappa_train.runlog import read_metrics

    return any(r["kind"] == "eval" and r["step"] == step for r in read_metrics(out / METRICS_FILE))


def _progress(cfg: TrainConfig, start: int):
    from tqdm.auto import tqdm

    return tqdm(total=cfg.steps, initial=start, desc="mappa train", disable=not cfg.log.progress, unit="step")
