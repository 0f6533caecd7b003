"""TRL's GRPOTrainer with a MAPPA env as its reward source: train MathChat-v0's Problem Solver.

GRPO samples a group of completions per prompt and wants one scalar reward per completion. Here a
prompt is the Problem Solver's opening conversation (from `env.reset`), a completion is one Problem
Solver action, and `EnvReward` scores it by stepping it through the real env — sandbox, coach and
all — then lets the env's scripted team play the remaining roles so the episode reaches its outcome.

    --reward action   the coach's process reward for the completion's own action (per action: the
                      shape MAPPA itself trains on, for this one role)
    --reward episode  everything the env paid the team in that episode, summed (what a trainer with
                      one reward per trajectory sees; see docs/plugins.md for what that loses)

Runs on a CPU with the offline tiny model:  python examples/trl_grpo.py --max-steps 2
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import mappa_envs
from mappa_envs.registration import load_callable
from mappa_envs.sandbox import make_sandbox


class EnvReward:
    """A TRL reward function backed by a MAPPA env: one env episode per completion."""

    def __init__(self, env, shape: str = "action"):
        if shape not in ("action", "episode"):
            raise ValueError(f"reward shape must be 'action' or 'episode', got {shape!r}")
        self.env, self.shape = env, shape
        self.first_role = env.possible_agents[0]
        self.team = load_callable(mappa_envs.spec(env.metadata["name"]).scripted_policy)(env)
        self.__name__ = f"mappa_{shape}_reward"  # TRL logs each reward function under its name
        self.episodes: list[dict] = []  # what each call saw, for logs and tests

    def __call__(self, prompts, completions, task_id, **kwargs) -> list[float]:
        return [self.score(tid, _text(c)) for tid, c in zip(task_id, completions)]

    def score(self, task_id: str, text: str) -> float:
        env = self.env
        env.reset(options={"task_id": task_id})
        env.step(text)  # the completion is the first role's action
        action_reward = float(env.rewards[self.first_role])
        team_total, outcome = sum(env.rewards.values()), {}
        for agent in env.agent_iter():  # the scripted team plays the remaining roles
            _, _, terminated, truncated, info = env.last()
            if terminated or truncated:
                outcome = info.get("outcome", outcome)
                env.step(None)
                continue
            env.step(self.team.respond([info["messages"]], [agent])[0])
            team_total += sum(env.rewards.values())
        self.episodes.append({"task_id": task_id, "action_reward": action_reward, "team_total": team_total,
                              "correct": outcome.get("correct")})
        return action_reward if self.shape == "action" else team_total


def _text(completion) -> str:
    """TRL passes conversational completions as [{"role": "assistant", "content": ...}]."""
    return completion if isinstance(completion, str) else completion[-1]["content"]


def prompt_dataset(env, num_prompts: int):
    """One row per task: the first role's opening messages and the task id the reward replays."""
    from datasets import Dataset

    rows = []
    for i in range(num_prompts):
        env.reset(options={"task_index": i % len(env.unwrapped.tasks)})  # cycle: the env refuses an index past its end
        first = env.agent_selection
        rows.append({"prompt": env.infos[first]["messages"], "task_id": env.infos[first]["task_id"]})
    return Dataset.from_list(rows)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="a causal LM directory (default: build the offline tiny model)")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "mappa_trl_grpo")
    p.add_argument("--reward", choices=["action", "episode"], default="action")
    p.add_argument("--max-steps", type=int, default=2)
    p.add_argument("--prompts", type=int, default=8, help="distinct tasks in the training set")
    p.add_argument("--generations", type=int, default=4, help="completions per prompt (GRPO's group)")
    p.add_argument("--max-completion-length", type=int, default=24)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    if args.model is None:
        from mappa_train.tiny_model import build_tiny_model

        args.model = build_tiny_model(args.out / "tiny_model")
    # MathChat's code needs only the standard library: skip the sandbox's default numpy/pandas/sklearn preimport.
    sandbox = make_sandbox("local", preimport=())
    env = mappa_envs.make("MathChat-v0", task_source="synthetic", num_tasks=args.prompts, sandbox=sandbox)
    reward = EnvReward(env, args.reward)
    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    config = GRPOConfig(
        output_dir=str(args.out / "run"), max_steps=args.max_steps, learning_rate=args.lr, seed=args.seed,
        per_device_train_batch_size=args.generations, num_generations=args.generations,
        max_completion_length=args.max_completion_length, temperature=1.0, beta=0.0,
        use_cpu=True, bf16=False, logging_steps=1, save_strategy="no", report_to="none",
    )
    trainer = GRPOTrainer(model=str(args.model), reward_funcs=reward, args=config,
                          train_dataset=prompt_dataset(env, args.prompts), processing_class=tokenizer)
    trainer.train()
    env.close()
    sandbox.close()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    summary = {"steps": trainer.state.global_step, "episodes": len(reward.episodes),
               "mean_reward": [round(h["reward"], 3) for h in logs], "reward_shape": args.reward}
    print(json.dumps(summary))
    return {**summary, "reward_log": reward.episodes}


if __name__ == "__main__":
    main()
