"""TRL's GRPOTrainer with a multi-turn MAPPA rollout: train one role through its whole turn, while a
trained team (not the scripted oracle) plays the other roles.

`examples/trl_grpo.py` scores one completion per episode and lets the env's scripted team, which
reads the gold answer, finish the episode. Here TRL's `rollout_func` plays each episode itself:

- the trained role (default: MathChat's Code Executor) acts with the trainer's model, every action of
  its turn: it writes a cell, sees the sandbox's output, writes the next, as in the env;
- the other roles are played by `--team` (any `mappa eval` team spec: `run:DIR` for a finished `mappa
  train` run, `hf:MODEL`, `openai:MODEL@URL`, ...; default: the starting model itself, `hf:MODEL`);
- the completion TRL trains on is the role's whole turn, token-exact (`mappa_train.chat_tokens`): its
  sampled tokens with their log-probs, and the tool output between them with `env_mask` 0, so only
  the role's own tokens are trained on;
- its reward is what the env paid the role over the turn (the coach's process rewards summed).

Runs on a CPU with the offline tiny model:  python examples/trl_rollout.py --max-steps 1
With a trained team:  python examples/trl_rollout.py --model runs/mappa/final/code_executor --team run:runs/mappa
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path

import mappa_envs
from mappa_envs.sandbox import make_sandbox


class TeamRollout:
    """A TRL `rollout_func`: one env episode per completion; `role` sampled from the trainer's model."""

    def __init__(self, env, team, role: str, tokenizer, max_new_tokens: int):
        from mappa_envs.policy import TextPolicy
        from mappa_train.chat_tokens import ChatFormat

        if role not in env.possible_agents:
            raise ValueError(f"--role {role!r} is not a role of {env.unwrapped.env_id}: {env.possible_agents}")
        self.env, self.role, self.tokenizer = env, role, tokenizer
        self.team = team if isinstance(team, TextPolicy) else team(env)  # a builder: scripted or module:factory
        self.fmt = ChatFormat.of(tokenizer, "append")
        self.max_new_tokens = max_new_tokens
        self.task_of = {t.prompt: t.id for t in env.unwrapped.tasks}
        self.episodes: list[dict] = []

    def __call__(self, prompts: list, trainer) -> dict:
        # TRL's sampler already repeats each prompt num_generations times: one episode per prompt given
        out = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": [], "role_reward": []}
        for prompt in prompts:
            episode = self.play(self.task_of[prompt], trainer.model)
            for key in out:
                out[key].append(episode[key])
        return out

    def play(self, task_id: str, model) -> dict:
        env, fmt = self.env, self.fmt
        env.reset(options={"task_id": task_id})
        prompt_ids: list[int] = []
        completion: list[int] = []
        logprobs: list[float] = []
        mask: list[int] = []
        previous: list[int] | None = None  # the role's last prompt + what it sampled
        seen = stop = None
        reward, outcome = 0.0, {}
        for agent in env.agent_iter():
            _, _, terminated, truncated, info = env.last()
            if terminated or truncated:
                outcome = info.get("outcome", outcome)
                env.step(None)
                continue
            if agent != self.role:
                env.step(self.team.respond([info["messages"]], [agent])[0])
                continue
            messages = info["messages"]
            if previous is None:  # the turn's first action: its prompt is the episode's prompt for TRL
                ids = fmt.prompt_ids(messages)
                prompt_ids = ids
            else:  # later actions: the tool output the env appended, token-exact, not trained on
                ids = fmt.next_prompt_ids(previous, messages, seen, stop)
                feedback = ids[len(previous):]
                completion += feedback
                logprobs += [0.0] * len(feedback)
                mask += [0] * len(feedback)
            sampled, sampled_logprobs = self.sample(model, ids)
            completion += sampled
            logprobs += sampled_logprobs
            mask += [1] * len(sampled)
            stop = sampled[-1] if sampled and sampled[-1] in fmt.stop_token_ids else None
            previous, seen = ids + sampled, len(messages)
            env.step(self.tokenizer.decode(sampled, skip_special_tokens=True))
            reward += float(env.rewards[agent])
        self.episodes.append({"task_id": task_id, "role_reward": reward, "actions_tokens": sum(mask),
                              "correct": outcome.get("correct")})
        return {"prompt_ids": prompt_ids, "completion_ids": completion, "logprobs": logprobs, "env_mask": mask,
                "role_reward": reward}

    def sample(self, model, ids: list[int]) -> tuple[list[int], list[float]]:
        """Sample one action (temperature 1) and the log-prob of each sampled token."""
        import torch

        with torch.no_grad():
            out = model.generate(torch.tensor([ids], device=model.device), do_sample=True, temperature=1.0,
                                 max_new_tokens=self.max_new_tokens, eos_token_id=list(self.fmt.stop_token_ids),
                                 pad_token_id=self.tokenizer.pad_token_id or self.fmt.stop_token_ids[0],
                                 output_scores=True, return_dict_in_generate=True)
            scores = model.compute_transition_scores(out.sequences, out.scores, normalize_logits=True)[0]
        sampled = out.sequences[0, len(ids):].tolist()
        n = len(sampled)
        for i, token in enumerate(sampled):  # nothing after the token that ended the action
            if token in self.fmt.stop_token_ids:
                n = i + 1
                break
        return sampled[:n], [float(x) for x in scores[:n]]


def role_reward(prompts, completions, role_reward, **kwargs) -> list[float]:
    """The reward TRL logs and optimizes: what the env paid the role over its turn (from the rollout)."""
    return [float(r) for r in role_reward]


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", type=Path, help="the trained role's causal LM (default: build the offline tiny model)")
    p.add_argument("--team", help="team spec for the other roles, as `mappa eval --team` (default: hf:MODEL)")
    p.add_argument("--role", default="code_executor", help="the role trained with TRL")
    p.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "mappa_trl_rollout")
    p.add_argument("--max-steps", type=int, default=2)
    p.add_argument("--prompts", type=int, default=4, help="distinct tasks in the training set")
    p.add_argument("--generations", type=int, default=2, help="episodes per task (GRPO's group)")
    p.add_argument("--max-new-tokens", type=int, default=48, help="most tokens per action")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from mappa_train.evaluation.teams import make_team
    from mappa_train.generation import SamplingParams

    if args.model is None:
        from mappa_train.tiny_model import build_tiny_model

        args.model = build_tiny_model(args.out / "tiny_model")
    sandbox = make_sandbox("local", preimport=())  # MathChat's code needs only the standard library
    env = mappa_envs.make("MathChat-v0", tasks="synthetic", num_tasks=args.prompts, sandbox=sandbox)
    team = make_team(args.team or f"hf:{args.model}", args.seed,
                     SamplingParams(temperature=0.6, max_new_tokens=args.max_new_tokens))
    tokenizer = AutoTokenizer.from_pretrained(args.model, padding_side="left")
    rollout = TeamRollout(env, team, args.role, tokenizer, args.max_new_tokens)
    config = GRPOConfig(
        output_dir=str(args.out / "run"), max_steps=args.max_steps, learning_rate=args.lr, seed=args.seed,
        per_device_train_batch_size=args.generations, num_generations=args.generations,
        max_completion_length=args.max_new_tokens * env.unwrapped.roles[args.role].max_actions * 8, beta=0.0,
        use_cpu=True, bf16=False, logging_steps=1, save_strategy="no", report_to="none",
    )
    dataset = Dataset.from_list([{"prompt": t.prompt} for t in env.unwrapped.tasks])
    trainer = GRPOTrainer(model=str(args.model), reward_funcs=role_reward, args=config, train_dataset=dataset,
                          processing_class=tokenizer, rollout_func=rollout)
    trainer.train()
    env.close()
    sandbox.close()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    summary = {"steps": trainer.state.global_step, "episodes": len(rollout.episodes), "role": args.role,
               "team": args.team or f"hf:{args.model}", "mean_reward": [round(h["reward"], 3) for h in logs]}
    print(json.dumps(summary))
    return {**summary, "episodes_log": rollout.episodes}


if __name__ == "__main__":
    main()
