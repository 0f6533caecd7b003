"""`mappa envs` and `mappa run`: list environments; play episodes and write transcripts."""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import mappa_envs
from mappa_envs.registration import load_callable


def configure_envs(parser: argparse.ArgumentParser) -> None:
    pass


def run_envs(args: argparse.Namespace) -> int:
    width = max(map(len, mappa_envs.registry))
    for env_id, spec in sorted(mappa_envs.registry.items()):
        print(f"{env_id:<{width}}  {spec.description}")
    return 0


def configure_run(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("env_id", help="a registered id (see `mappa envs`)")
    parser.add_argument("--episodes", type=int, default=4, help="episodes to play")
    parser.add_argument("--policy", default="scripted",
                        help="'scripted' (the env's built-in team), 'random' (samples the action space), "
                             "or 'module:factory' called as factory(env) -> TextPolicy")
    parser.add_argument("--skill", type=float, default=0.8, help="scripted team: rate of correct first answers")
    parser.add_argument("--seed", type=int, default=0, help="seed of the first episode (then +1 each)")
    parser.add_argument("--sandbox", default="local", choices=["auto", "docker", "local"])
    parser.add_argument("--reward-mode", default="process", choices=["process", "outcome", "process+outcome"])
    parser.add_argument("--out", type=Path, default=Path("runs/transcripts.jsonl"), help="JSON-lines output")
    parser.add_argument("--render", action="store_true", help="print each transcript")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="extra env kwargs, JSON-typed values (e.g. split=\"eval\", num_tasks=16)")


def _env_kwargs(pairs: list[str]) -> dict:
    kwargs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"--env-arg {pair!r}: expected KEY=VALUE, e.g. --env-arg num_tasks=16")
        try:
            kwargs[key] = json.loads(value)
        except json.JSONDecodeError:
            kwargs[key] = value  # a bare string
    return kwargs


def _policy(env, args: argparse.Namespace):
    spec = mappa_envs.spec(args.env_id)
    if args.policy == "random":
        return lambda conversations, roles: [env.action_space(r).sample() for r in roles]
    if args.policy == "scripted":
        if spec.scripted_policy is None:
            raise SystemExit(f"{args.env_id} has no scripted policy; use --policy random or module:factory")
        return load_callable(spec.scripted_policy)(env, skill=args.skill, seed=args.seed).respond
    return load_callable(args.policy)(env).respond


def run_run(args: argparse.Namespace) -> int:
    if args.episodes < 1:
        raise SystemExit(f"--episodes must be >= 1, got {args.episodes}")
    env = mappa_envs.make(args.env_id, sandbox=args.sandbox, reward_mode=args.reward_mode,
                          **_env_kwargs(args.env_arg))
    respond = _policy(env, args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    scores, correct = [], []
    with args.out.open("w", encoding="utf-8") as out:
        for episode in range(args.episodes):
            started = time.monotonic()
            env.reset(seed=args.seed + episode)
            returns = {a: 0.0 for a in env.possible_agents}
            for agent in env.agent_iter():
                _, reward, terminated, truncated, info = env.last()
                returns[agent] += reward
                if terminated or truncated:
                    env.step(None)
                    continue
                env.step(respond([info["messages"]], [agent])[0])
            record = {"episode": episode, "seed": args.seed + episode, **env.unwrapped.transcript(),
                      "returns": returns, "wall_s": round(time.monotonic() - started, 3)}
            out.write(json.dumps(record, default=str) + "\n")
            outcome = record["outcome"] or {}
            scores.append(outcome.get("score", 0.0))
            correct.append(bool(outcome.get("correct")))
            if args.render:
                print(env.unwrapped.render() if env.unwrapped.render_mode is None else "")
            print(f"episode {episode}: task {record['task_id']} outcome={outcome.get('score')} "
                  f"returns={ {a: round(r, 2) for a, r in returns.items()} }", file=sys.stderr)
    env.close()
    print(f"{args.episodes} episodes of {args.env_id}: mean outcome {sum(scores) / len(scores):.3f}, "
          f"correct {sum(correct)}/{len(correct)}; transcripts in {args.out}")
    return 0
