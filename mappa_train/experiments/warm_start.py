"""The warm start every quickstart and ablation arm begins from: a model imitating a noisy scripted team.

`build_start` takes the config's model (`model.path`: `tiny` builds a tiny Qwen2 model and tokenizer
offline with `mappa_train.tiny_model`; anything else, e.g. the built-in `smollm2-135m`, is resolved
by `mappa_train.model_source`) and trains it with supervised steps on transcripts of a *noisy*
scripted team (the env's registered scripted policy: MathChat's with its `code_skill`, Chain's with
its per-agent `skill`), loss on the action tokens only. Imitation inherits the team's habits, its
broken code or slipped steps included: that is what RL then has to fix. A finished start is reused
(`warm_start.json`). `recipe_for` gives the recipe per kind of model: a random tiny model needs
hundreds of steps at a high rate before it copies at all; a pretrained one learns the team's format
in a few dozen steps at a fine-tuning rate.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path

from mappa_train.config import doc


@dataclass
class StartConfig:
    """The start: a tiny model and its warm start on a noisy scripted team (shared with `mappa ablate`)."""

    hidden_size: int = doc(128, "tiny model width")
    layers: int = doc(2, "tiny model depth")
    sft_episodes: int = doc(800, "scripted episodes for the warm start")
    sft_short_steps: int = doc(450, "first supervised steps, on the conversations without their system prompts")
    sft_steps: int = doc(150, "then supervised steps on the conversations exactly as the agents see them")
    sft_batch: int = doc(16, "conversations per supervised step (the warm start's cost is about linear in it)")
    sft_lr: float = doc(3e-3, "peak learning rate of the warm start (warm-up over a quarter of the steps, at most 20; "
                                  "linear decay to 10%)")
    solver_skill: float = doc(0.0, "how often the teacher's Problem Solver is right")
    code_skill: float = doc(0.5, "how often the teacher's code runs (else it raises NameError)")
    teacher: dict = doc({}, "keyword arguments of the env's registered scripted team, e.g. {skill: 0.7, code_rate: "
                            "1.0} for Chain-v0; empty: MathChat-v0's, from solver_skill and code_skill")


def teacher_kwargs(cfg, spec: StartConfig) -> dict:
    """The scripted team's arguments: `spec.teacher`, or for MathChat-v0 its solver and code skills."""
    from mappa_train.config import ConfigError

    if spec.teacher:
        return dict(spec.teacher)
    if cfg.env.id != "MathChat-v0":
        raise ConfigError(f"start.teacher is empty: give the arguments of {cfg.env.id}'s scripted team, e.g. "
                          "start: {teacher: {skill: 0.7, code_rate: 1.0}} for Chain-v0")
    return {"skill": spec.solver_skill, "code_skill": spec.code_skill}


# ---- the start -----------------------------------------------------------------------------------

# A pretrained model's recipe: few steps, mostly on the cheap conversations without their system
# prompts, at a fine-tuning rate (at the tiny model's 3e-3 a pretrained model forgets its language).
PRETRAINED = dict(sft_episodes=160, sft_short_steps=16, sft_steps=4, sft_batch=8, sft_lr=2e-4)


def recipe_for(model_path: str, **overrides) -> StartConfig:
    """The warm-start recipe for `model.path`: StartConfig's defaults for `tiny`, PRETRAINED otherwise;
    `overrides` (None values ignored) on top."""
    base = {} if model_path == "tiny" else PRETRAINED
    return StartConfig(**{**base, **{k: v for k, v in overrides.items() if v is not None}})


def build_start(cfg, spec: StartConfig, out_dir: Path, teachers: list | None = None) -> Path:
    """`model.path` warm-started on the noisy team's training episodes; a finished one is reused.
    `teachers`: the training configs whose teams it imitates, `sft_episodes` split evenly between them
    (e.g. one Chain-v0 depth each: one start for every depth); default `[cfg]`."""
    if cfg.model.path == "tiny":
        from mappa_train.tiny_model import build_tiny_model

        base = build_tiny_model(out_dir / "base", hidden_size=spec.hidden_size, layers=spec.layers,
                                heads=max(1, spec.hidden_size // 32), kv_heads=max(1, spec.hidden_size // 64),
                                seed=cfg.seed)
    else:
        from mappa_train.model_source import resolve_model

        base = resolve_model(cfg.model.path)
    warm_start(cfg, spec, base, out_dir / "model", teachers)
    return out_dir / "model"


def scripted_pairs(cfg, spec: StartConfig, episodes: int | None = None) -> list[tuple[list[dict], str]]:
    """(conversation, action) pairs of the noisy scripted team (the env's registered `scripted_policy`) on
    the training problems."""
    import importlib

    import mappa_envs
    from mappa_envs.sandbox import make_sandbox
    from mappa_envs.wrappers import VectorRunner
    from mappa_train.factories import make_envs

    module, _, name = mappa_envs.spec(cfg.env.id).scripted_policy.partition(":")
    team = getattr(importlib.import_module(module), name)
    sandbox = make_sandbox(cfg.env.sandbox, **cfg.env.sandbox_kwargs)
    envs = make_envs(cfg, cfg.rollout.num_envs, sandbox=sandbox)
    try:
        policy = team(envs[0], seed=cfg.seed, **teacher_kwargs(cfg, spec))
        results = VectorRunner(envs, policy).run(episodes=episodes or spec.sft_episodes, seed=cfg.seed + 10_000)
    finally:
        for env in envs:
            env.close()
        sandbox.close()
    return [(turn.messages, turn.action) for r in results for turn in r.turns]


def warm_start(cfg, spec: StartConfig, base: Path, out_dir: Path, teachers: list | None = None) -> dict:
    """Supervised steps on the scripted transcripts (loss on action tokens only); reuses a finished one.

    The first `sft_short_steps` drop each conversation's system prompt: it is the same for every
    problem, so those steps teach the copies the team makes (problem -> code, printed value ->
    answer) for less; the last `sft_steps` see the prompts exactly as the agents will. Each batch
    holds one role's actions (the roles take turns): a role's conversations have about the same
    length, so the Problem Solver's short ones are not padded to the Verifier's. A random model
    needs a few hundred steps before it copies at all. With `model.dtype: bfloat16` the matmuls run
    under bf16 autocast (the weights and AdamW stay fp32).
    """
    done = out_dir / "warm_start.json"
    if done.exists():
        return json.loads(done.read_text())
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mappa_train.generation import chat_prompt_ids

    tok = AutoTokenizer.from_pretrained(base)
    full, short = {}, {}  # role (its system prompt) -> (prompt ids, action ids)
    teachers = teachers or [cfg]
    print(f"warm start: playing {spec.sft_episodes} episodes of the scripted team, then "
          f"{spec.sft_short_steps + spec.sft_steps} supervised steps", flush=True)
    pairs = [p for t in teachers for p in scripted_pairs(t, spec, max(1, spec.sft_episodes // len(teachers)))]
    for messages, action in pairs:
        action_ids = tok.encode(action, add_special_tokens=False) + [tok.eos_token_id]
        role = messages[0]["content"]
        full.setdefault(role, []).append((chat_prompt_ids(tok, messages), action_ids))
        short.setdefault(role, []).append((chat_prompt_ids(tok, [m for m in messages if m["role"] != "system"]),
                                           action_ids))
    roles = sorted(full)
    torch.manual_seed(cfg.seed)
    model = AutoModelForCausalLM.from_pretrained(base)
    opt = torch.optim.AdamW(model.parameters(), lr=spec.sft_lr, fused=True)  # the per-tensor loop: ~4 s/step
    from tqdm.auto import tqdm

    rng, losses, total = random.Random(cfg.seed), [], spec.sft_short_steps + spec.sft_steps
    warmup = max(1, min(20, total // 4))  # a few dozen steps must reach the peak rate too
    for step in tqdm(range(total), desc="warm start", unit="step", disable=not cfg.log.progress):
        data = (short if step < spec.sft_short_steps else full)[roles[step % len(roles)]]
        batch = rng.sample(data, min(spec.sft_batch, len(data)))
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((len(batch), width), tok.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (p, a) in enumerate(batch):
            ids[i, :len(p) + len(a)] = torch.tensor(p + a)
            labels[i, len(p):len(p) + len(a)] = torch.tensor(a)
            attention[i, :len(p) + len(a)] = 1
        for group in opt.param_groups:
            group["lr"] = spec.sft_lr * min(1.0, (step + 1) / warmup) * (1 - 0.9 * step / total)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=cfg.model.dtype == "bfloat16"):
            loss = _action_loss(model, ids, attention, labels)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
        if not cfg.log.progress and (step + 1) % 100 == 0:  # no bar (ablate): a line now and then, not silence
            print(f"warm start: step {step + 1}/{total}, loss {sum(losses[-10:]) / len(losses[-10:]):.3f}",
                  flush=True)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    summary = {"pairs": sum(map(len, full.values())), "steps": total, "first_loss": sum(losses[:10]) / len(losses[:10]),
               "last_loss": sum(losses[-10:]) / len(losses[-10:]),
               "parameters": sum(p.numel() for p in model.parameters())}
    done.write_text(json.dumps(summary))
    return summary


def _action_loss(model, ids, attention, labels):
    """Next-token loss on the labelled (action) tokens only: the output head runs on those positions
    alone, not on the whole prompt, which is most of a supervised step's cost for a model this small."""
    import torch

    hidden = model.model(input_ids=ids, attention_mask=attention).last_hidden_state[:, :-1]
    targets = labels[:, 1:]
    keep = targets != -100
    return torch.nn.functional.cross_entropy(model.lm_head(hidden[keep]), targets[keep])


