"""`mappa quickstart`: watch MAPPA train a team on a laptop CPU, offline, in under 10 minutes.

1. Build a tiny Qwen2 model and tokenizer offline (`mappa_train.tiny_model`).
2. Warm-start it with a few hundred supervised steps on MathChat transcripts played by the scripted
   team (`mappa_envs.mathchat.scripted`) on synthetic problems: a random model never writes a
   ```python block or a \\boxed{} answer, so RL would have nothing to reinforce.
3. Train with MAPPA (configs/quickstart.yaml): one policy shared by the three roles, the rule coach,
   the local sandbox, synthetic problems; held-out accuracy is measured before the first update and
   after the last.
4. Write report.md and curves.png next to the metrics.

What it shows is what it measures: the report prints the numbers as they came out, including when
held-out accuracy did not move. A model this small learns the team's formats quickly; how much it
improves its answers in a few minutes of CPU RL depends on the seed.
"""
from __future__ import annotations

import argparse
import json
import random
import time
from pathlib import Path

PRESET = Path(__file__).resolve().parent.parent / "configs" / "quickstart.yaml"


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", default="runs/quickstart", help="output directory (reused: an existing run resumes)")
    parser.add_argument("--config", default=str(PRESET), help="the training preset")
    parser.add_argument("--sft-episodes", type=int, default=160, help="scripted episodes for the warm start")
    parser.add_argument("--sft-steps", type=int, default=100, help="supervised steps of the warm start (batch 16)")
    parser.add_argument("--sft-skill", type=float, default=0.5,
                        help="how often the scripted Problem Solver is right (the executor and verifier then fix it)")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="training config overrides (see mappa train --help)")


def run(args: argparse.Namespace) -> int:
    from mappa_train.config import ConfigError, load_config

    out = Path(args.out)
    try:
        cfg = load_config(args.config, [f"out_dir={out}", *args.overrides])
    except ConfigError as e:
        print(f"mappa quickstart: {e}")
        return 2
    started = time.perf_counter()
    from mappa_train.tiny_model import build_tiny_model

    print("1/4 building a tiny model and tokenizer offline ...", flush=True)
    base = build_tiny_model(out / "tiny_model", seed=cfg.seed)
    print(f"2/4 warm start: {args.sft_steps} supervised steps on {args.sft_episodes} scripted MathChat episodes ...", flush=True)
    sft_dir = out / "sft_model"
    t0 = time.perf_counter()
    sft_loss = warm_start(cfg, base, sft_dir, args.sft_episodes, args.sft_steps, args.sft_skill)
    print(f"    warm start done in {time.perf_counter() - t0:.0f} s: loss {sft_loss['first_loss']:.2f} -> {sft_loss['last_loss']:.2f}", flush=True)
    print(f"3/4 MAPPA training: {cfg.steps} steps x {cfg.rollout.prompts_per_step * cfg.rollout.samples_per_prompt} episodes ...", flush=True)
    from mappa_train.config import load_config as _load
    from mappa_train.train import train

    cfg = _load(args.config, [f"out_dir={out}", f"model.path={sft_dir}", *args.overrides])
    train(cfg)
    print("4/4 writing the report ...", flush=True)
    report = write_report(out, sft_loss, time.perf_counter() - started)
    print(report)
    return 0


# ---- the warm start ------------------------------------------------------------------------------

def scripted_pairs(cfg, episodes: int, skill: float) -> list[tuple[list[dict], str]]:
    """(conversation, action) pairs from the scripted MathChat team on the training tasks."""
    from mappa_envs.mathchat.scripted import ScriptedMathPolicy
    from mappa_envs.sandbox import make_sandbox
    from mappa_envs.wrappers import VectorRunner
    from mappa_train.train import make_envs

    sandbox = make_sandbox(cfg.env.sandbox, **cfg.env.sandbox_kwargs)
    envs = make_envs(cfg, cfg.rollout.num_envs, sandbox=sandbox)
    try:
        policy = ScriptedMathPolicy(envs[0].unwrapped.scenario.tasks(), skill=skill, seed=cfg.seed)
        results = VectorRunner(envs, policy).run(episodes=episodes, seed=cfg.seed + 10_000)
    finally:
        for env in envs:
            env.close()
        sandbox.close()
    return [(turn.messages, turn.action) for r in results for turn in r.turns]


def warm_start(cfg, base: Path, out_dir: Path, episodes: int, steps: int, skill: float) -> dict:
    """Supervised steps on scripted transcripts (loss on action tokens only); reuses a finished one."""
    done = out_dir / "warm_start.json"
    if done.exists():
        return json.loads(done.read_text())
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mappa_train.generation import chat_prompt_ids

    tok = AutoTokenizer.from_pretrained(base)
    data = []
    for messages, action in scripted_pairs(cfg, episodes, skill):
        prompt = chat_prompt_ids(tok, messages)
        data.append((prompt, tok.encode(action, add_special_tokens=False) + [tok.eos_token_id]))
    torch.manual_seed(cfg.seed)
    model = AutoModelForCausalLM.from_pretrained(base)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    from tqdm.auto import tqdm

    rng, batch_size, losses = random.Random(cfg.seed), 16, []
    for step in tqdm(range(steps), desc="warm start", unit="step", disable=not cfg.log.progress):
        batch = rng.sample(data, min(batch_size, len(data)))
        width = max(len(p) + len(a) for p, a in batch)
        ids = torch.full((len(batch), width), tok.pad_token_id)
        labels = torch.full((len(batch), width), -100)
        attention = torch.zeros((len(batch), width), dtype=torch.long)
        for i, (p, a) in enumerate(batch):
            ids[i, :len(p) + len(a)] = torch.tensor(p + a)
            labels[i, len(p):len(p) + len(a)] = torch.tensor(a)
            attention[i, :len(p) + len(a)] = 1
        for group in opt.param_groups:  # linear decay to 10%
            group["lr"] = 3e-3 * (1 - 0.9 * step / steps)
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    summary = {"pairs": len(data), "steps": steps, "first_loss": sum(losses[:10]) / len(losses[:10]),
               "last_loss": sum(losses[-10:]) / len(losses[-10:])}
    done.write_text(json.dumps(summary))
    return summary


# ---- the report ----------------------------------------------------------------------------------

def write_report(out: Path, sft: dict, seconds: float) -> str:
    from mappa_train.metrics import METRICS_FILE, read_metrics

    rows = read_metrics(out / METRICS_FILE)
    evals = [r for r in rows if r["kind"] == "eval"]
    train = [r for r in rows if r["kind"] == "train"]
    before, after = evals[0], evals[-1]
    lines = [f"# MAPPA quickstart ({seconds / 60:.1f} min)", "",
             f"Warm start: {sft['steps']} supervised steps on {sft['pairs']} scripted actions, "
             f"loss {sft['first_loss']:.2f} -> {sft['last_loss']:.2f}.", "",
             f"MAPPA: {len(train)} training steps; held-out evaluation before step 1 and after step {after['step']}.", "",
             "| metric | before RL | after RL |", "|---|---|---|"]
    for key in sorted(k for k in before if k not in ("kind", "step") and not k.endswith("episodes")):
        lines.append(f"| {key} | {before[key]:.3f} | {after.get(key, float('nan')):.3f} |")
    if train:
        first, last = train[0], train[-1]
        lines += ["", "Training episodes (sampled at temperature 1), first step -> last step:", ""]
        for key in sorted(k for k in first if k.startswith("coach/") or k in ("accuracy", "reward", "kl")):
            lines.append(f"- {key}: {first[key]:.3f} -> {last.get(key, float('nan')):.3f}")
    acc_keys = [k for k in before if k.endswith("accuracy")]
    moved = [k for k in acc_keys if after.get(k, 0) > before[k]]
    lines += ["", ("Held-out accuracy went up." if moved else
                   "Held-out accuracy did not go up in this run; the coach scores above show what the "
                   "process rewards did move."), "", "Curves: curves.png; every number: metrics.jsonl."]
    text = "\n".join(lines) + "\n"
    (out / "report.md").write_text(text)
    return text
