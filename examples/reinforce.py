"""Bring your own algorithm: plain REINFORCE on MathChat-v0 through the PettingZoo AEC API only.

One causal LM plays every role. Each action's reward is read the AEC way: `env.last()` reports what
an agent earned since it last acted, so it is credited to that agent's previous action. An action's
return is everything the team earns from it to the end of the episode (gamma = 1); returns are
normalised over the batch (the baseline) and weight the action's summed token log-probs.
Swap in your own loss, advantage or model; the env side is the loop in `play`.

Runs on a CPU with the offline tiny model:  python examples/reinforce.py --iterations 2
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import mappa_envs
from mappa_envs.sandbox import make_sandbox


@torch.no_grad()
def sample(model, tok, messages: list[dict], args) -> tuple[torch.Tensor, torch.Tensor, str]:
    """Prompt ids (left-cut to --max-prompt-tokens), sampled action ids, and the action's text."""
    text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    prompt = tok(text, return_tensors="pt").input_ids[:, -args.max_prompt_tokens:]
    out = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=True,
                         max_new_tokens=args.max_new_tokens, pad_token_id=tok.pad_token_id)
    action = out[0, prompt.shape[1]:]
    return prompt[0], action, tok.decode(action, skip_special_tokens=True)


def play(env, model, tok, seed: int, args) -> tuple[list[dict], dict]:
    """One episode. Returns its actions [{prompt, action, reward}] in order, and the outcome."""
    env.reset(seed=seed)
    steps: list[dict] = []
    latest: dict[str, dict] = {}  # agent -> its most recent action, which last() rewards are credited to
    outcome: dict = {}
    for agent in env.agent_iter():
        _, reward, terminated, truncated, info = env.last()
        if agent in latest:
            latest[agent]["reward"] += reward
        if terminated or truncated:
            outcome = info.get("outcome", outcome)
            env.step(None)  # AEC: a finished agent is stepped out with None
            continue
        prompt, action, text = sample(model, tok, info["messages"], args)
        latest[agent] = {"agent": agent, "prompt": prompt, "action": action, "reward": 0.0}
        steps.append(latest[agent])
        env.step(text)
    return steps, outcome


def action_logprob(model, prompt: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
    """Sum of log pi(action tokens | prompt, earlier action tokens)."""
    ids = torch.cat([prompt, action]).unsqueeze(0)
    logits = model(ids).logits[0, prompt.numel() - 1:-1]
    return torch.log_softmax(logits.float(), -1).gather(-1, action.unsqueeze(-1)).sum()


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="a causal LM directory (default: build the offline tiny model)")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "mappa_reinforce")
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--episodes", type=int, default=2, help="episodes per iteration (the batch)")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--max-prompt-tokens", type=int, default=512)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--reward-mode", default="process", choices=["process", "outcome", "process+outcome"])
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    torch.manual_seed(args.seed)
    if args.model is None:
        from mappa_train.tiny_model import build_tiny_model

        args.model = build_tiny_model(args.out / "tiny_model")
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    # MathChat's code needs only the standard library: skip the sandbox's default numpy/pandas/sklearn preimport.
    sandbox = make_sandbox("local", preimport=())
    env = mappa_envs.make("MathChat-v0", task_source="synthetic", reward_mode=args.reward_mode, sandbox=sandbox)
    history = []
    for it in range(args.iterations):
        model.eval()
        batch, returns, correct = [], [], []
        for e in range(args.episodes):
            steps, outcome = play(env, model, tok, seed=args.seed + it * args.episodes + e, args=args)
            to_go = 0.0
            for step in reversed(steps):  # return-to-go over the team's actions, gamma = 1
                to_go += step["reward"]
                step["return"] = to_go
            batch += steps
            returns.append(to_go)
            correct.append(bool(outcome.get("correct")))
        g = torch.tensor([s["return"] for s in batch])
        advantages = (g - g.mean()) / (g.std() + 1e-6) if len(batch) > 1 else g - g.mean()
        model.train()
        loss = -sum(a * action_logprob(model, s["prompt"], s["action"]) for a, s in zip(advantages, batch)) / len(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        history.append({"iteration": it, "actions": len(batch), "mean_return": sum(returns) / len(returns),
                        "correct": sum(correct) / len(correct), "loss": loss.item(),
                        "rewards": [s["reward"] for s in batch], "roles": [s["agent"] for s in batch]})
        print(json.dumps({k: v for k, v in history[-1].items() if k not in ("rewards", "roles")}))
    env.close()
    sandbox.close()
    return {"history": history}


if __name__ == "__main__":
    main()
